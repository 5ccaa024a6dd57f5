"""amp_lab.data: the digits data set, standardised with the training split's statistics."""

import pytest
import torch
from sklearn.datasets import load_digits as sk_load_digits

from amp_lab.data import load_digits


def test_shapes_and_split():
    data = load_digits()
    assert data.num_features == 64 and data.num_classes == 10
    assert len(data.train) + len(data.test) == 1797
    assert len(data.test) == round(1797 * 0.25)
    assert data.train.X.dtype == torch.float32 and data.train.y.dtype == torch.int64


def test_standardised_from_training_split_only():
    data = load_digits()
    raw = torch.tensor(sk_load_digits().data, dtype=torch.float32)
    mean, std = data.train.X.mean(0), data.train.X.std(0)
    varying = raw.std(0) > 0
    # Training features: mean 0, and std 1 wherever the pixel varies in the training split.
    assert torch.allclose(mean, torch.zeros(64), atol=1e-5)
    varies_in_train = std > 0
    assert torch.allclose(std[varies_in_train], torch.ones(int(varies_in_train.sum())), atol=1e-4)
    assert varying.any()


def test_test_split_has_no_exploding_features():
    # A pixel blank in all training images must not be divided by a tiny std.
    data = load_digits()
    assert data.test.X.abs().max() < 100


def test_seeded_split_is_reproducible():
    a, b = load_digits(seed=3), load_digits(seed=3)
    assert torch.equal(a.test.y, b.test.y)
    assert not torch.equal(load_digits(seed=4).test.y, a.test.y)


@pytest.mark.parametrize("bad", [0, 1, -0.5, 1.5])
def test_bad_test_fraction(bad):
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits(test_fraction=bad)


# --------------------------------------------------------------------------------------------
# every bad input gets a clear error
# --------------------------------------------------------------------------------------------

N = len(sk_load_digits().target)  # 1797: the bounds below come from the data set's size, not from amp_lab


@pytest.mark.parametrize("fraction, empty", [(0.9999, "training"), (0.0001, "test"), ((N - 0.4) / N, "training"),
                                             (0.4 / N, "test")])  # fmt: skip
def test_a_test_fraction_that_empties_a_split_is_refused_with_the_bounds(fraction, empty):
    with pytest.raises(
        ValueError, match=rf"test_fraction={fraction!r} leaves the {empty} split empty"
    ) as err:
        load_digits(test_fraction=fraction)
    assert f"1/{N}" in str(err.value) and f"{N - 1}/{N}" in str(err.value)


@pytest.mark.parametrize("fraction", [1 / N, (N - 1) / N])
def test_the_bounds_the_message_gives_are_allowed(fraction):
    data = load_digits(test_fraction=fraction)
    assert min(len(data.train), len(data.test)) == 1 and len(data.train) + len(data.test) == N
    assert torch.isfinite(data.train.X).all() and torch.isfinite(data.test.X).all()


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        (dict(seed=1.5), TypeError, "seed"),
        (dict(seed="0"), TypeError, "seed"),
        (dict(seed=True), TypeError, "seed"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(seed=2**32), ValueError, "seed"),
        (dict(test_fraction="0.25"), TypeError, "test_fraction"),
        (dict(test_fraction=None), TypeError, "test_fraction"),
        (dict(test_fraction=True), TypeError, "test_fraction"),
        (dict(test_fraction=float("nan")), ValueError, "test_fraction"),
        (dict(test_fraction=float("inf")), ValueError, "test_fraction"),
        (dict(device="tpu"), ValueError, "device"),
    ],
)
def test_bad_load_digits_arguments(kwargs, error, name):
    with pytest.raises(error, match=name):
        load_digits(**kwargs)


def test_numpy_scalars_are_numbers():
    np = pytest.importorskip("numpy")
    a = load_digits(test_fraction=np.float32(0.25), seed=np.int64(3))
    b = load_digits(test_fraction=0.25, seed=3)
    assert torch.equal(a.test.y, b.test.y) and torch.equal(a.train.X, b.train.X)


@pytest.mark.parametrize(
    "X, y, error, match",
    [
        ("X", torch.zeros(3, dtype=torch.long), TypeError, "X must be"),
        (torch.zeros(3, 4), [0, 1, 2], TypeError, "y must be"),
        (torch.zeros(3), torch.zeros(3, dtype=torch.long), ValueError, "2-D"),
        (torch.zeros(3, 4, dtype=torch.long), torch.zeros(3, dtype=torch.long), ValueError, "floating-point"),
        (torch.zeros(3, 4), torch.zeros(3), ValueError, "int64"),
        (torch.zeros(3, 4), torch.zeros(3, 1, dtype=torch.long), ValueError, "1-D"),
        (torch.zeros(3, 4), torch.zeros(2, dtype=torch.long), ValueError, "3 rows but y has 2 labels"),
    ],
)
def test_a_split_is_checked_when_built(X, y, error, match):
    from amp_lab.data import Split

    with pytest.raises(error, match=match):
        Split(X, y)
