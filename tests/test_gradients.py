"""amp_lab.gradients against autograd itself (retain_grad, .backward(), float64)."""

import math

import pytest
import torch
from torch import nn

from amp_lab import gradients as G
from amp_lab import ranges as R


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
    model = G.make_mlp(depth=4, width=16, seed=3)
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
    assert [layer.kind for layer in rec.layers] == ["Linear"] * 4
    assert rec.bias_grads["0"].shape == (16,)


def test_collect_gradients_close_to_float64():
    model = G.make_mlp(depth=3, width=16, seed=1)
    X, y = small_batch(seed=1)
    rec = G.collect_gradients(model, X, y)
    model64 = G.make_mlp(depth=3, width=16, seed=1).double()
    rec64 = G.collect_gradients(model64, X.double(), y)
    for name in rec.names:
        torch.testing.assert_close(rec.weight_grads[name].double(), rec64.weight_grads[name], rtol=1e-4, atol=1e-9)


def test_loss_scale_multiplies_every_gradient_exactly():
    model = G.make_mlp(depth=3, width=16)
    X, y = small_batch()
    rec = G.collect_gradients(model, X, y)
    scaled = G.collect_gradients(model, X, y, loss_scale=1024.0)
    assert scaled.loss == rec.loss and scaled.loss_scale == 1024.0
    for name in rec.names:  # a power-of-two scale is exact in float32
        assert torch.equal(scaled.activation_grads[name], rec.activation_grads[name] * 1024)
        assert torch.equal(scaled.weight_grads[name], rec.weight_grads[name] * 1024)


def test_collect_gradients_leaves_the_model_alone():
    model = G.make_mlp(depth=3, width=8)
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
    model = G.make_mlp(depth=3, width=16)
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
    model = G.make_mlp(depth=3, width=8)
    X, y = small_batch(n=5)
    rec = G.collect_gradients(model, X, y)
    assert rec.flat("activation").shape == (5 * (8 + 8 + 10),)
    assert rec.flat("weight").numel() == 64 * 8 + 8 * 8 + 8 * 10
    assert rec.flat("bias").numel() == 8 + 8 + 10
    assert rec.flat("output").dtype == torch.float32
    with pytest.raises(ValueError, match="kind"):
        rec.flat("gradients")


def test_autocast_fp16_really_computes_in_fp16():
    model = G.make_mlp(depth=3, width=16)
    X, y = small_batch()
    rec = G.collect_gradients(model, X, y, autocast_dtype="fp16")
    assert rec.autocast_dtype == torch.float16
    assert all(t.dtype == torch.float16 for t in rec.activation_grads.values())
    assert all(t.dtype == torch.float16 for t in rec.outputs.values())
    assert all(t.dtype == torch.float32 for t in rec.weight_grads.values())
    ref = G.collect_gradients(model, X, y)
    assert rec.loss == pytest.approx(ref.loss, rel=1e-2)


def test_make_mlp_default_init_and_seeding():
    state = torch.random.get_rng_state()
    a = G.make_mlp(depth=5, width=32, seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is not consumed
    b = G.make_mlp(depth=5, width=32, seed=7)
    linears = [m for m in a if isinstance(m, nn.Linear)]
    assert len(linears) == 5 and sum(isinstance(m, nn.ReLU) for m in a) == 4
    assert linears[0].in_features == 64 and linears[-1].out_features == 10
    for m in linears:  # nn.Linear's default: uniform in +-1/sqrt(fan_in)
        assert m.weight.abs().max() <= m.in_features**-0.5
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_train_steps_learns():
    from amp_lab.data import load_digits

    data = load_digits()
    model = G.make_mlp(depth=3, width=32)
    losses = G.train_steps(model, data.train, num_steps=60, lr=3e-3)
    assert len(losses) == 60
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10
    assert G.train_steps(model, (data.train.X, data.train.y), num_steps=0) == []


def test_bad_arguments_raise():
    model = G.make_mlp(depth=2, width=4)
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
    with pytest.raises(ValueError, match="depth"):
        G.make_mlp(depth=0)
    with pytest.raises(ValueError, match="data"):
        G.train_steps(model, X, num_steps=1)
    with pytest.raises(ValueError, match="device"):
        G.collect_gradients(model, X, y, device="tpu")


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
# make_mlp leaves every generator of the learner as it was (issue 13, item 9)
# --------------------------------------------------------------------------------------------


def old_make_mlp(seed, depth, width, num_features=64, num_classes=10):
    """The construction make_mlp always used: reseed torch, then build (the weights must not change)."""
    torch.manual_seed(seed)
    layers, fan_in = [], num_features
    for _ in range(depth - 1):
        layers += [nn.Linear(fan_in, width), nn.ReLU()]
        fan_in = width
    layers.append(nn.Linear(fan_in, num_classes))
    return nn.Sequential(*layers)


@pytest.mark.parametrize("seed, depth, width", [(0, 8, 64), (7, 5, 32), (123, 1, 3)])
def test_make_mlp_weights_are_those_of_manual_seed(seed, depth, width):
    state = torch.random.get_rng_state()
    try:
        want = old_make_mlp(seed, depth, width)
    finally:
        torch.random.set_rng_state(state)
    got = G.make_mlp(depth=depth, width=width, seed=seed, device="cpu")
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(got.parameters(), want.parameters(), strict=True))


def test_make_mlp_gives_the_learners_gpu_generators_back(monkeypatch):
    # torch.manual_seed reseeds every CUDA generator too; make_mlp must restore them, not only the
    # CPU's.  Two pretend GPUs whose generator states are plain values:
    states = {0: torch.tensor([11], dtype=torch.uint8), 1: torch.tensor([22], dtype=torch.uint8)}

    def index(device):
        return device if isinstance(device, int) else torch.device(device).index

    def seed_all(seed):
        for i in states:
            states[i] = torch.tensor([seed % 256], dtype=torch.uint8)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "manual_seed_all", seed_all)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda:0": states[index(device)].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda:0": states.update({index(device): state}))
    cpu = torch.random.get_rng_state()
    G.make_mlp(depth=2, width=4, seed=5, device="cpu")
    assert {i: int(s) for i, s in states.items()} == {0: 11, 1: 22}
    assert torch.equal(torch.random.get_rng_state(), cpu)


# ---- issue 14: every bad input gets a clear error, no call hangs, nothing is half-changed ----

import time  # noqa: E402

from amp_lab._checks import MAX_STEPS  # noqa: E402


@pytest.mark.parametrize(
    "kwargs,err,words",
    [
        ({"num_features": 10**9}, ValueError, "num_features must be <="),
        ({"num_features": 10**6, "width": 4096, "depth": 64}, ValueError, "parameters"),
        ({"num_classes": 1}, ValueError, "num_classes"),
        ({"depth": True}, TypeError, "depth"),
        ({"width": 1.5}, TypeError, "width"),
        ({"seed": 2**40}, ValueError, "seed"),
        ({"seed": -1}, ValueError, "seed"),
    ],
)
def test_make_mlp_refuses_before_allocating(kwargs, err, words):
    t0 = time.perf_counter()
    with pytest.raises(err, match=words):
        G.make_mlp(**kwargs)
    assert time.perf_counter() - t0 < 1.0


def test_make_mlp_parameter_count_is_exact():
    for shape in [(64, 10, 8, 64), (5, 3, 1, 7), (5, 3, 2, 7)]:
        model = G.make_mlp(num_features=shape[0], num_classes=shape[1], depth=shape[2], width=shape[3])
        assert G.mlp_parameter_count(*shape) == sum(p.numel() for p in model.parameters())


def test_make_mlp_checks_memory(monkeypatch):
    from amp_lab import device as D

    monkeypatch.setattr(D, "available_bytes", lambda device=None: 1000)
    with pytest.raises(ValueError, match="refused before allocating"):
        G.make_mlp()


def test_digits_gradients_bounds_num_steps_before_loading():
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=f"num_steps must be <= {MAX_STEPS}"):
        G.digits_gradients(num_steps=10**9)
    with pytest.raises(TypeError, match="lr"):
        G.digits_gradients(lr="0.1")
    assert time.perf_counter() - t0 < 1.0


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
    model = G.make_mlp(depth=3, width=8)
    X, y = make(*small_batch())
    with pytest.raises(err, match=words):
        G.collect_gradients(model, X, y)
    assert all(not m._forward_hooks for m in model.modules())


@pytest.mark.parametrize("make,err,words", BAD_XY)
def test_train_steps_checks_data_before_changing_the_model(make, err, words):
    model = G.make_mlp(depth=3, width=8)
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
        G.train_steps(G.make_mlp(depth=2, width=4), small_batch(), **kwargs)


def test_collect_gradients_other_arguments():
    model = G.make_mlp(depth=2, width=4)
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


# ---- issue 14, second pass: the fuzz suite's findings ----

_SHAPE = {"num_features": 64, "num_classes": 10, "depth": 3, "width": 8}


@pytest.mark.parametrize(
    "key,value,err",
    [
        ("num_features", 0, ValueError),
        ("num_features", -5, ValueError),
        ("num_features", 1.5, TypeError),
        ("num_features", math.nan, TypeError),
        ("num_features", True, TypeError),
        ("num_features", None, TypeError),
        ("num_features", "64", TypeError),
        ("num_features", torch.tensor(1.0), TypeError),
        ("num_classes", 1, ValueError),
        ("num_classes", -(2**2000), ValueError),
        ("depth", 0, ValueError),
        ("depth", 65, ValueError),
        ("depth", 1 + 0j, TypeError),
        ("width", 0, ValueError),
        ("width", 4097, ValueError),
        ("width", [], TypeError),
    ],
)
def test_mlp_parameter_count_checks_like_make_mlp(key, value, err):
    with pytest.raises(err, match=key):
        G.mlp_parameter_count(**{**_SHAPE, key: value})
    with pytest.raises(err, match=key):
        G.make_mlp(**{**_SHAPE, key: value})


def test_mlp_parameter_count_is_an_int_and_counts_make_mlps_parameters():
    import numpy as np

    n = G.mlp_parameter_count(np.int64(64), np.int32(10), np.int64(3), 8)
    assert type(n) is int
    assert n == sum(p.numel() for p in G.make_mlp(**_SHAPE).parameters())
    assert G.mlp_parameter_count(64, 10, 1, 8) == 64 * 10 + 10


def test_zero_steps_are_allowed_and_train_nothing():
    # documented: num_steps=0 gives the untrained model's gradients (digits_gradients) or [] (train_steps)
    record = G.digits_gradients(depth=2, width=8, num_steps=0, batch_size=16)
    fresh = G.make_mlp(depth=2, width=8)
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
    model = G.make_mlp(depth=2, width=4)
    X, y = small_batch(n=4)
    with pytest.raises(err, match=words):
        G.collect_gradients(model, X, y, loss_fn=loss_fn)
    assert all(p.grad is None for p in model.parameters())


def test_collect_gradients_takes_a_custom_scalar_loss():
    model = G.make_mlp(depth=2, width=4)
    X, y = small_batch(n=4)
    record = G.collect_gradients(model, X, y, loss_fn=lambda out, y: out.float().pow(2).mean())
    assert record.loss > 0 and len(record.layers) == 2
