"""Real gradients to look at: a deep MLP on the digits data, and hooks that collect them.

Taught in ``03_underflow_and_overflow`` (and reused by the loss-scaling notebook).  The seed
problem of mixed precision is that gradients are tiny.  To see it on gradients a learner made
themselves, this module

* builds a plain deep MLP with PyTorch's *default* initialisation (:func:`make_mlp`),
* trains it for a few hundred cheap steps on scikit-learn's digits (:func:`train_steps`),
* and runs one forward/backward pass with hooks that record, per layer, the forward output,
  the *activation gradient* dL/d(output) and the weight and bias gradients
  (:func:`collect_gradients`).

Why these gradients are small enough for FP16 to lose them:

1. Cross-entropy's gradient with respect to the logits is ``softmax(z) - onehot(y)``.  Once the
   model classifies an example confidently, the wrong classes' probabilities are ~1e-4..1e-8,
   and so are their gradients.
2. ``reduction="mean"`` divides every example's gradient by the batch size (1/512 = 2^-9).
3. Backpropagation multiplies by the transposed weights (entries ~ 1/sqrt(fan_in) with the
   default init) and by ReLU's 0/1 mask at every layer: products of small factors.

Everything is computed in float32 unless ``autocast_dtype`` is given; the FP32 values are the
"true" gradients whose fate in a narrower format :mod:`amp_lab.ranges` reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ._checks import check_choice, check_float, check_int
from .device import get_device, parse_dtype, seeded, torch_threads

KINDS = ("activation", "weight", "bias", "output")


@dataclass
class LayerGradients:
    """What one layer produced in one forward/backward pass (all tensors detached).

    ``output`` is the layer's forward output (before the nonlinearity that follows it),
    ``activation_grad`` is dL/d``output`` (same shape), ``weight_grad`` and ``bias_grad`` are
    dL/dW and dL/db (``bias_grad`` is None for a layer without bias).  Tensors keep the dtype
    autograd produced them in: float32, or the autocast dtype for ``output``/``activation_grad``
    when :func:`collect_gradients` ran under autocast.
    """

    name: str
    kind: str
    output: torch.Tensor
    activation_grad: torch.Tensor
    weight_grad: torch.Tensor | None
    bias_grad: torch.Tensor | None


@dataclass
class GradientRecord:
    """Per-layer gradients of one batch, in forward order; returned by :func:`collect_gradients`.

    ``loss`` is the *unscaled* loss value; ``loss_scale`` the factor the loss was multiplied
    by before backward (every gradient here is that many times the true gradient).
    ``model`` is set by :func:`digits_gradients` so the trained model can be reused.
    """

    layers: list[LayerGradients]
    loss: float
    loss_scale: float = 1.0
    autocast_dtype: torch.dtype | None = None
    model: nn.Module | None = field(default=None, repr=False)

    @property
    def names(self) -> list[str]:
        return [layer.name for layer in self.layers]

    def _by_name(self, attr: str) -> dict[str, torch.Tensor]:
        return {layer.name: getattr(layer, attr) for layer in self.layers if getattr(layer, attr) is not None}

    @property
    def activation_grads(self) -> dict[str, torch.Tensor]:
        """``{layer name: dL/d(layer output)}`` in forward order."""
        return self._by_name("activation_grad")

    @property
    def weight_grads(self) -> dict[str, torch.Tensor]:
        """``{layer name: dL/dW}`` in forward order."""
        return self._by_name("weight_grad")

    @property
    def bias_grads(self) -> dict[str, torch.Tensor]:
        return self._by_name("bias_grad")

    @property
    def outputs(self) -> dict[str, torch.Tensor]:
        """``{layer name: forward output}``: the activations whose *overflow* matters."""
        return self._by_name("output")

    def flat(self, kind: str = "activation") -> torch.Tensor:
        """All layers' tensors of one ``kind`` ('activation', 'weight', 'bias', 'output') as one
        1-D float32 tensor (float16/bfloat16 values convert to float32 exactly)."""
        check_choice("kind", kind, KINDS)
        attr = {"activation": "activation_grad", "weight": "weight_grad", "bias": "bias_grad", "output": "output"}[kind]
        parts = [t.detach().reshape(-1).float() for t in self._by_name(attr).values()]
        if not parts:
            return torch.empty(0)
        return torch.cat(parts)




def make_mlp(
    *,
    num_features: int = 64,
    num_classes: int = 10,
    depth: int = 8,
    width: int = 64,
    seed: int = 0,
    device=None,
) -> nn.Sequential:
    """A plain ReLU MLP with ``depth`` Linear layers and PyTorch's default initialisation.

    No normalisation layers, no special init: ``nn.Linear``'s default (uniform with bound
    1/sqrt(fan_in)) shrinks the signal at every layer, forward and backward, which is part of
    why its gradients are small.  The learner's generators are left untouched: ``seed`` seeds a
    fork of the CPU's and every CUDA device's (:func:`amp_lab.device.seeded`).
    """
    num_features = check_int("num_features", num_features, minimum=1)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    depth = check_int("depth", depth, minimum=1, maximum=64)
    width = check_int("width", width, minimum=1, maximum=4096)
    seed = check_int("seed", seed, minimum=0)
    dev = get_device(device)
    with seeded(seed):
        layers: list[nn.Module] = []
        fan_in = num_features
        for _ in range(depth - 1):
            layers += [nn.Linear(fan_in, width), nn.ReLU()]
            fan_in = width
        layers.append(nn.Linear(fan_in, num_classes))
        model = nn.Sequential(*layers)
    return model.to(dev)


def _split_xy(data):
    if hasattr(data, "X") and hasattr(data, "y"):
        return data.X, data.y
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return data[0], data[1]
    raise ValueError(f"data must be a Split (with .X and .y) or an (X, y) pair, got {type(data).__name__}")


def train_steps(
    model: nn.Module,
    data,
    *,
    num_steps: int = 300,
    lr: float = 1e-3,
    batch_size: int = 64,
    seed: int = 0,
    device=None,
) -> list[float]:
    """Train ``model`` in place with Adam on random mini-batches of ``data`` (a ``Split`` or
    ``(X, y)``) for ``num_steps`` steps of cross-entropy; returns the losses.

    Mini-batches are drawn by a generator seeded with ``seed``, so a call is reproducible.
    A fresh Adam is made on every call (this is a warm-up for looking at gradients, not a
    training recipe).
    """
    num_steps = check_int("num_steps", num_steps, minimum=0)
    lr = check_float("lr", lr, gt=0.0)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    X, y = _split_xy(data)
    dev = get_device(device)
    model.to(dev)
    X, y = X.to(dev), y.to(dev)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    with torch_threads(1, dev):
        for _ in range(num_steps):
            idx = torch.randint(0, len(y), (min(batch_size, len(y)),), generator=gen).to(dev)
            loss = nn.functional.cross_entropy(model(X[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def collect_gradients(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    loss_fn=None,
    loss_scale: float = 1.0,
    autocast_dtype=None,
    layer_types: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv1d, nn.Conv2d),
    device=None,
) -> GradientRecord:
    """One forward and backward pass of ``model`` on ``(X, y)``, recording every layer's gradients.

    Parameters
    ----------
    model, X, y
        The network (moved to ``device``), inputs and targets.
    loss_fn
        ``loss_fn(output, y) -> scalar``; default ``nn.functional.cross_entropy`` (mean over the
        batch, which is one reason gradients are small).
    loss_scale
        Multiply the loss by this before backward, as loss scaling does: every recorded
        gradient is then ``loss_scale`` times the true one.  Must be finite and > 0.
    autocast_dtype
        ``None`` (default) runs in float32.  ``torch.float16``/``torch.bfloat16`` (or "fp16",
        "bf16") runs the forward pass under ``torch.autocast`` on ``device``, so activations and
        activation gradients really are computed and stored in that dtype (weight gradients
        are float32, as autocast accumulates them into the FP32 parameters).
    layer_types
        Modules of these types are recorded (default: Linear and Conv layers).

    Returns a :class:`GradientRecord`: ``record.layers[i]`` has ``name``, ``output``,
    ``activation_grad`` (dL/d``output``), ``weight_grad``, ``bias_grad``; dict views
    ``record.activation_grads`` / ``record.weight_grads`` / ``record.outputs``; and
    ``record.flat("activation")`` concatenates all layers for :func:`amp_lab.ranges.range_report`.

    The model's own ``.grad`` fields are not touched: gradients are taken with
    ``torch.autograd.grad`` and the hooks are removed afterwards, even on error.  On the CPU the
    pass runs with one thread (restored afterwards), so results do not depend on the core count.
    """
    loss_scale = check_float("loss_scale", loss_scale, gt=0.0)
    if autocast_dtype is not None:
        autocast_dtype = parse_dtype(autocast_dtype, name="autocast_dtype")
    if not isinstance(layer_types, tuple) or not all(isinstance(t, type) for t in layer_types):
        raise ValueError(f"layer_types must be a tuple of nn.Module classes, got {layer_types!r}")
    dev = get_device(device)
    model.to(dev)
    X, y = X.to(dev), y.to(dev)
    loss_fn = nn.functional.cross_entropy if loss_fn is None else loss_fn

    records: dict[str, dict] = {}
    modules: dict[str, nn.Module] = {}
    handles = []

    def make_hook(name: str):
        def forward_hook(module, inputs, output):
            if not isinstance(output, torch.Tensor):
                return
            key = name if name not in records else f"{name}#{sum(k.split('#')[0] == name for k in records) + 1}"
            entry = {"output": output.detach().clone(), "activation_grad": None}
            records[key] = entry
            modules[key] = module
            if output.requires_grad:

                def grad_hook(grad):
                    entry["activation_grad"] = grad.detach().clone()

                output.register_hook(grad_hook)

        return forward_hook

    for name, module in model.named_modules():
        if layer_types and isinstance(module, layer_types):
            handles.append(module.register_forward_hook(make_hook(name or type(module).__name__)))
    if not handles:
        raise ValueError(f"model has no layers of layer_types={tuple(t.__name__ for t in layer_types)}")

    params = [p for p in model.parameters() if p.requires_grad]
    try:
        with torch_threads(1, dev):
            if autocast_dtype is not None:
                with torch.autocast(device_type=dev.type, dtype=autocast_dtype):
                    out = model(X)
                    loss = loss_fn(out, y)
            else:
                out = model(X)
                loss = loss_fn(out, y)
            grads = torch.autograd.grad(loss.float() * loss_scale, params, allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    grad_of = {id(p): g for p, g in zip(params, grads, strict=True)}

    layers = []
    for key, entry in records.items():
        module = modules[key]
        weight = getattr(module, "weight", None)
        bias = getattr(module, "bias", None)
        wg = grad_of.get(id(weight)) if isinstance(weight, torch.Tensor) else None
        bg = grad_of.get(id(bias)) if isinstance(bias, torch.Tensor) else None
        act = entry["activation_grad"]
        if act is None:
            act = torch.zeros_like(entry["output"])
        layers.append(
            LayerGradients(
                name=key,
                kind=type(module).__name__,
                output=entry["output"],
                activation_grad=act,
                weight_grad=None if wg is None else wg.detach(),
                bias_grad=None if bg is None else bg.detach(),
            )
        )
    return GradientRecord(layers=layers, loss=float(loss.detach().float()), loss_scale=loss_scale, autocast_dtype=autocast_dtype)


def digits_gradients(
    *,
    depth: int = 8,
    width: int = 64,
    num_steps: int = 300,
    batch_size: int = 512,
    lr: float = 1e-3,
    seed: int = 0,
    device=None,
) -> GradientRecord:
    """The notebook's gradients in one call: load the digits, build :func:`make_mlp`, train it
    for ``num_steps`` Adam steps (mini-batches of 64), then :func:`collect_gradients` on the
    first ``batch_size`` training examples.  The trained model is in ``record.model``.

    Takes about a second on a 2-core CPU with the defaults.
    """
    from .data import load_digits

    batch_size = check_int("batch_size", batch_size, minimum=1)
    dev = get_device(device)
    data = load_digits(device=dev)
    model = make_mlp(
        num_features=data.num_features, num_classes=data.num_classes, depth=depth, width=width, seed=seed, device=dev
    )
    train_steps(model, data.train, num_steps=num_steps, lr=lr, seed=seed, device=dev)
    n = min(batch_size, len(data.train))
    record = collect_gradients(model, data.train.X[:n], data.train.y[:n], device=dev)
    record.model = model
    return record

