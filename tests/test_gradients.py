"""amp_lab.gradients against autograd itself (retain_grad, .backward(), float64)."""

import math

import pytest
import torch
from torch import nn

from amp_lab import gradients as G
from amp_lab import range_counts as R
from amp_lab.models import make_mlp


@pytest.fixture(scope="module")
def digits_record():
    # the notebook's default configuration: trained for 300 steps, gradients of 512 examples
    return G.digits_gradients()


def small_batch(n=32, features=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, features, generator=gen), torch.randint(0, 10, (n,), generator=gen)


def manual_pass(model, X, y, scale=1.0):
    """The oracle: run the Sequential by hand, retain every Linear output's grad, call backward."""
    outputs = {}
    h = X
    for name, layer in model.named_children():
        h = layer(h)
        if isinstance(layer, nn.Linear):
            h.retain_grad()
            outputs[name] = h
    loss = nn.functional.cross_entropy(h, y)
    model.zero_grad(set_to_none=True)
    (loss * scale).backward()
    acts = {k: v.grad for k, v in outputs.items()}
    weights = {name: layer.weight.grad.clone() for name, layer in model.named_children() if isinstance(layer, nn.Linear)}
    model.zero_grad(set_to_none=True)
    return loss.item(), acts, weights, {k: v.detach() for k, v in outputs.items()}


def test_collect_gradients_matches_autograd():
    model = make_mlp(hidden=16, depth=3, seed=3)
    X, y = small_batch()
    loss, acts, weights, outs = manual_pass(model, X, y)
    rec = G.collect_gradients(model, X, y)
    assert rec.names == list(acts) == ["0", "2", "4", "6"]
    assert rec.loss == pytest.approx(loss, rel=1e-6)
    # same float32 arithmetic up to summation order (thread count): a few eps of the largest value
    def close(a, b):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * b.abs().max().item())

    for name in acts:
        close(rec.activation_grads[name], acts[name])
        close(rec.weight_grads[name], weights[name])
        close(rec.outputs[name], outs[name])


def test_collect_gradients_close_to_float64():
    model = make_mlp(hidden=16, depth=2, seed=1)
    X, y = small_batch(seed=1)
    rec = G.collect_gradients(model, X, y)
    model64 = make_mlp(hidden=16, depth=2, seed=1).double()
    rec64 = G.collect_gradients(model64, X.double(), y)
    for name in rec.names:
        torch.testing.assert_close(rec.weight_grads[name].double(), rec64.weight_grads[name], rtol=1e-4, atol=1e-9)


def test_loss_scale_multiplies_every_gradient_exactly():
    model = make_mlp(hidden=16, depth=2)
    X, y = small_batch()
    rec = G.collect_gradients(model, X, y)
    scaled = G.collect_gradients(model, X, y, loss_scale=1024.0)
    assert scaled.loss == rec.loss and scaled.loss_scale == 1024.0
    for name in rec.names:  # a power-of-two scale is exact in float32
        assert torch.equal(scaled.activation_grads[name], rec.activation_grads[name] * 1024)
        assert torch.equal(scaled.weight_grads[name], rec.weight_grads[name] * 1024)


def test_collect_gradients_leaves_the_model_alone():
    model = make_mlp(hidden=8, depth=2)
    X, y = small_batch()
    G.collect_gradients(model, X, y)
    assert all(p.grad is None for p in model.parameters())
    assert all(not m._forward_hooks for m in model.modules())
    with pytest.raises(ValueError, match="class label 99"):
        G.collect_gradients(model, X, torch.full_like(y, 99))  # a bad target is refused mid-pass ...
    assert all(not m._forward_hooks for m in model.modules())  # ... and the hooks are still removed

    def failing_loss(out, target):
        raise RuntimeError("a loss that fails inside torch")

    with pytest.raises(RuntimeError, match="fails inside torch"):
        G.collect_gradients(model, X, y, loss_fn=failing_loss)
    assert all(not m._forward_hooks for m in model.modules())


def test_thread_count_is_restored_and_results_do_not_depend_on_it():
    before = torch.get_num_threads()
    model = make_mlp(hidden=16, depth=2)
    X, y = small_batch()
    G.train_steps(model, (X, y), num_steps=3)
    rec = G.collect_gradients(model, X, y)
    assert torch.get_num_threads() == before
    torch.set_num_threads(max(2, before))
    try:
        again = G.collect_gradients(model, X, y)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(rec.weight_grads[n], again.weight_grads[n]) for n in rec.names)


def test_flat_concatenates_layers():
    model = make_mlp(hidden=8, depth=2)
    X, y = small_batch(n=5)
    rec = G.collect_gradients(model, X, y)
    assert rec.flat("activation").shape == (5 * (8 + 8 + 10),)
    assert rec.flat("weight").numel() == 64 * 8 + 8 * 8 + 8 * 10
    assert rec.flat("output").dtype == torch.float32
    with pytest.raises(ValueError, match="kind"):
        rec.flat("gradients")


def test_autocast_fp16_really_computes_in_fp16():
    model = make_mlp(hidden=16, depth=2)
    X, y = small_batch()
    rec = G.collect_gradients(model, X, y, autocast_dtype="fp16")
    assert all(t.dtype == torch.float16 for t in rec.activation_grads.values())
    assert all(t.dtype == torch.float16 for t in rec.outputs.values())
    assert all(t.dtype == torch.float32 for t in rec.weight_grads.values())
    ref = G.collect_gradients(model, X, y)
    assert rec.loss == pytest.approx(ref.loss, rel=1e-2)


def test_train_steps_learns():
    from amp_lab.data import load_digits

    data = load_digits()
    model = make_mlp(hidden=32, depth=2)
    losses = G.train_steps(model, data.train, num_steps=60, lr=3e-3)
    assert len(losses) == 60
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10
    assert G.train_steps(model, (data.train.X, data.train.y), num_steps=0) == []


def test_bad_arguments_raise():
    model = make_mlp(hidden=4, depth=1)
    X, y = small_batch(n=4)
    with pytest.raises(ValueError, match="loss_scale"):
        G.collect_gradients(model, X, y, loss_scale=0.0)
    with pytest.raises(ValueError, match="loss_scale"):
        G.collect_gradients(model, X, y, loss_scale=float("nan"))
    with pytest.raises(ValueError, match="autocast_dtype"):
        G.collect_gradients(model, X, y, autocast_dtype="fp8")
    with pytest.raises(ValueError, match="layer_types"):
        G.collect_gradients(model, X, y, layer_types=(nn.Conv2d,))
    with pytest.raises(ValueError, match="layer_types"):
        G.collect_gradients(model, X, y, layer_types=[nn.Linear])
    with pytest.raises(ValueError, match="data"):
        G.train_steps(model, X, num_steps=1)
    with pytest.raises(ValueError, match="device"):
        G.collect_gradients(model, X, y, device="tpu")


def test_the_scale_slider_over_03s_gradients_reaches_real_overflow(digits_record):
    """03's slider stopped at 2^24, where 0.001% of these gradients overflowed: now most of them do at its top."""
    from amp_lab.ranges import scale_explorer

    ex = scale_explorer(digits_record.activation_grads, "fp16")
    assert R.range_report(digits_record.activation_grads, "fp16", 2.0**ex.slider.max).overflow > 0.5


def test_a_scale_safe_for_activation_gradients_alone_overflows_weight_gradients(digits_record):
    """03 c19-20: the real FP16 backward at the scale safe for the activation gradients alone makes some weight
    gradients inf; at the scale safe for all of them (activation and weight) every gradient is finite."""
    rec = digits_record
    k_act = R.suggest_log2_scale(rec.activation_grads, "fp16")
    k_all = R.suggest_log2_scale([*rec.activation_grads.values(), *rec.weight_grads.values()], "fp16")
    assert k_all < k_act
    train = G.load_digits().train
    for k, weight_inf in [(k_all, False), (k_act, True)]:
        half = G.collect_gradients(rec.model, train.X[:512], train.y[:512], autocast_dtype=torch.float16, loss_scale=2.0**k)
        assert torch.isfinite(half.flat("activation")).all()
        assert bool((~torch.isfinite(half.flat("weight"))).any()) is weight_inf


def test_digits_gradients_really_underflow_in_fp16(digits_record):
    """The point of the model: a sizeable share of its activation gradients are zero in FP16.

    Oracle: torch's own float16 cast of the FP32 gradients, and a real FP16 backward pass.
    """
    rec = digits_record
    assert rec.model is not None and len(rec.names) == 8
    assert rec.loss < 0.2  # trained: confident on most examples
    g = rec.flat("activation")
    nz = g[g != 0]
    cast_zero = (nz.half() == 0).double().mean().item()
    assert cast_zero > 0.15
    assert R.range_report(rec.activation_grads, "fp16").underflow == pytest.approx(cast_zero, abs=0)
    assert R.range_report(rec.activation_grads, "bf16").underflow < 1e-4  # BF16 has FP32's range
    # run the same backward in FP16 under autocast: gradients really vanish
    from amp_lab.data import load_digits

    data = load_digits()
    X, y = data.train.X[:512], data.train.y[:512]
    fp16 = G.collect_gradients(rec.model, X, y, autocast_dtype="fp16")
    zeros32 = (g == 0).double().mean().item()
    zeros16 = (fp16.flat("activation") == 0).double().mean().item()
    assert zeros16 > zeros32 + 0.1
    # loss scaling rescues them: at the suggested scale almost nothing is lost
    k = R.suggest_log2_scale(rec.activation_grads, "fp16")
    assert k >= 10
    assert R.range_report(rec.activation_grads, "fp16", 2.0**k).underflow < 0.05


# --------------------------------------------------------------------------------------------
# the one MLP builder gives 03's and 04's network the weights it always had (stored outputs stay put)
# --------------------------------------------------------------------------------------------


def old_make_mlp(seed, depth, width, num_features=64, num_classes=10):
    """The construction 03 and 04 always used (depth Linear layers): reseed torch, then build."""
    torch.manual_seed(seed)
    layers, fan_in = [], num_features
    for _ in range(depth - 1):
        layers += [nn.Linear(fan_in, width), nn.ReLU()]
        fan_in = width
    layers.append(nn.Linear(fan_in, num_classes))
    return nn.Sequential(*layers)


@pytest.mark.parametrize("seed, depth, width", [(0, 8, 64), (7, 5, 32), (1, 18, 16), (123, 2, 3)])
def test_models_make_mlp_builds_the_weights_of_the_old_construction(seed, depth, width):
    state = torch.random.get_rng_state()
    try:
        want = old_make_mlp(seed, depth, width)
    finally:
        torch.random.set_rng_state(state)
    got = make_mlp(hidden=width, depth=depth - 1, seed=seed, device="cpu")
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(got.parameters(), want.parameters(), strict=True))


# ---- every bad input gets a clear error, no call hangs, nothing is half-changed ----


from amp_lab._checks import MAX_STEPS  # noqa: E402

BAD_XY = [
    (lambda X, y: (X[:, :10], y), ValueError, "takes 64 features"),
    (lambda X, y: (X, y.int()), TypeError, "int64"),
    (lambda X, y: (X, y.float()), TypeError, "class labels"),
    (lambda X, y: (X, y[:3]), ValueError, "one class label per example"),
    (lambda X, y: (X, y - 20), ValueError, "negative"),
    (lambda X, y: (X, y + 10), ValueError, "class label"),
    (lambda X, y: (X.numpy(), y), TypeError, "X must be a torch.Tensor"),
    (lambda X, y: (X.to(torch.complex64), y), TypeError, "floating-point"),
    (lambda X, y: (X.long(), y), TypeError, "floating-point"),
    (lambda X, y: (X[:0], y[:0]), ValueError, "at least one example"),
]


@pytest.mark.parametrize("make,err,words", BAD_XY)
def test_collect_gradients_checks_X_and_y_against_the_model(make, err, words):
    model = make_mlp(hidden=8, depth=2)
    X, y = make(*small_batch())
    with pytest.raises(err, match=words):
        G.collect_gradients(model, X, y)
    assert all(not m._forward_hooks for m in model.modules())


@pytest.mark.parametrize("make,err,words", BAD_XY)
def test_train_steps_checks_data_before_changing_the_model(make, err, words):
    model = make_mlp(hidden=8, depth=2)
    before = [p.detach().clone() for p in model.parameters()]
    X, y = make(*small_batch())
    with pytest.raises(err, match=words):
        G.train_steps(model, (X, y), num_steps=2)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize(
    "kwargs,err,words",
    [
        ({"num_steps": MAX_STEPS + 1}, ValueError, "num_steps"),
        ({"seed": 2**40}, ValueError, "seed"),
        ({"lr": math.inf}, ValueError, "lr"),
    ],
)
def test_train_steps_bounds(kwargs, err, words):
    with pytest.raises(err, match=words):
        G.train_steps(make_mlp(hidden=4, depth=1), small_batch(), **kwargs)


def test_collect_gradients_other_arguments():
    model = make_mlp(hidden=4, depth=1)
    X, y = small_batch()
    with pytest.raises(TypeError, match="model"):
        G.collect_gradients("model", X, y)
    with pytest.raises(TypeError, match="loss_scale"):
        G.collect_gradients(model, X, y, loss_scale=True)
    with pytest.raises(ValueError, match="loss_scale"):
        G.collect_gradients(model, X, y, loss_scale=2.0**130)  # beyond float32: the other scale checks' rule
    with pytest.raises(TypeError, match="loss_fn"):
        G.collect_gradients(model, X, y, loss_fn="mse")
    with pytest.raises(TypeError, match="layer_types"):
        G.collect_gradients(model, X, y, layer_types=(int,))
    # float class probabilities stay accepted, as cross_entropy accepts them
    probs = torch.softmax(torch.randn(len(y), 10, generator=torch.Generator().manual_seed(1)), dim=1)
    assert G.collect_gradients(model, X, probs).loss > 0


# ---- the fuzz suite's findings ----

def test_zero_steps_are_allowed_and_train_nothing():
    # documented: num_steps=0 gives the untrained model's gradients (digits_gradients) or [] (train_steps)
    record = G.digits_gradients(hidden=8, depth=1, num_steps=0, batch_size=16)
    fresh = make_mlp(hidden=8, depth=1)
    assert all(torch.equal(p, q) for p, q in zip(record.model.parameters(), fresh.parameters(), strict=True))


@pytest.mark.parametrize(
    "loss_fn,err,words",
    [
        (lambda out, y: None, TypeError, "loss_fn must return the loss as a scalar tensor"),
        (lambda out, y: 1.0, TypeError, "loss_fn must return the loss as a scalar tensor"),
        (lambda out, y: out.sum(dim=1), TypeError, "shape"),
        (lambda out, y: (out.sum() > 0), TypeError, "floating-point"),
        (lambda out, y: torch.tensor(1.0), ValueError, "loss_fn returned a tensor that does not depend"),
    ],
)
def test_collect_gradients_checks_what_loss_fn_returns(loss_fn, err, words):
    model = make_mlp(hidden=4, depth=1)
    X, y = small_batch(n=4)
    with pytest.raises(err, match=words):
        G.collect_gradients(model, X, y, loss_fn=loss_fn)
    assert all(p.grad is None for p in model.parameters())


def test_collect_gradients_takes_a_custom_scalar_loss():
    model = make_mlp(hidden=4, depth=1)
    X, y = small_batch(n=4)
    record = G.collect_gradients(model, X, y, loss_fn=lambda out, y: out.float().pow(2).mean())
    assert record.loss > 0 and len(record.layers) == 2
