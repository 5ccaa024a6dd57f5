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
