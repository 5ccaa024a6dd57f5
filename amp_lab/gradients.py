"""Real gradients to look at (03, 04): :func:`train_steps` trains the course's MLP on the digits, and
:func:`collect_gradients` records per layer the forward output and the activation and weight gradients."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ._checks import (
    MAX_STEPS,
    ArgumentTypeError,
    check_callable,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_scale,
    check_seed,
)
from .data import load_digits
from .device import get_device, torch_threads
from .dtypes import parse_dtype
from .models import make_mlp
from .progress import progress
from .recipe import train_loop
from .recipe_checks import linear_ends
from .timing import PROGRESS_AFTER_S, training_seconds


@dataclass
class LayerGradients:
    """One layer's forward ``output``, ``activation_grad`` (dL/d``output``) and ``weight_grad``, detached, in the
    dtypes autograd produced them in."""

    name: str
    output: torch.Tensor
    activation_grad: torch.Tensor
    weight_grad: torch.Tensor | None


@dataclass
class GradientRecord:
    """Per-layer gradients of one batch, in forward order (from :func:`collect_gradients`): every gradient is
    ``loss_scale`` times the true one; ``loss`` is unscaled; :func:`digits_gradients` sets ``model``."""

    layers: list[LayerGradients]
    loss: float
    loss_scale: float = 1.0
    model: nn.Module | None = field(default=None, repr=False)

    @property
    def names(self) -> list[str]:
        return [layer.name for layer in self.layers]

    def _by_name(self, attr: str) -> dict[str, torch.Tensor]:
        return {layer.name: getattr(layer, attr) for layer in self.layers if getattr(layer, attr) is not None}

    @property
    def activation_grads(self) -> dict[str, torch.Tensor]:
        return self._by_name("activation_grad")

    @property
    def weight_grads(self) -> dict[str, torch.Tensor]:
        return self._by_name("weight_grad")

    @property
    def outputs(self) -> dict[str, torch.Tensor]:
        """The forward activations, whose *overflow* matters."""
        return self._by_name("output")

    def flat(self, kind: str = "activation") -> torch.Tensor:
        """All layers' tensors of one kind ('activation', 'weight', 'output') as one float32 tensor."""
        attr = check_choice("kind", kind, ("activation", "weight", "output"))
        attr = attr if attr == "output" else f"{attr}_grad"
        parts = [t.detach().reshape(-1).float() for t in self._by_name(attr).values()]
        return torch.cat(parts) if parts else torch.empty(0)


def _check_xy(model: nn.Module, X, y, *, class_labels: bool = True) -> None:
    """``X`` and ``y`` against ``model``, before anything runs or moves, with the fix in the message."""
    check_instance("X", X, torch.Tensor, "a torch.Tensor of inputs (torch.as_tensor(X, dtype=torch.float32))")
    check_instance("y", y, torch.Tensor, "a torch.Tensor of targets (torch.as_tensor(y))")
    if not X.is_floating_point():
        raise ArgumentTypeError(f"X must be a floating-point tensor, got dtype {X.dtype}; use X.float()")
    if X.dim() == 0 or X.shape[0] == 0:
        raise ValueError(f"X must hold at least one example (rows), got shape {tuple(X.shape)}")
    first, last = linear_ends(model)
    if first is not None and (X.dim() < 2 or X.shape[-1] != first.in_features):
        raise ValueError(
            f"X has shape {tuple(X.shape)}, but the model's first layer takes {first.in_features} features: "
            f"X must have shape (batch, {first.in_features})"
        )
    if not class_labels or (y.is_floating_point() and y.dim() == 2 and y.shape[0] == X.shape[0]):
        return  # a custom loss's targets, or class probabilities as cross_entropy takes them
    if y.dtype != torch.int64:
        raise ArgumentTypeError(
            f"y must hold class labels as int64 (torch.long), got dtype {y.dtype}; use y.long()"
        )
    if y.dim() != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(
            f"y must have one class label per example, shape ({X.shape[0]},), got {tuple(y.shape)}"
        )
    low, high = (int(v) for v in torch.stack([y.min(), y.max()]).tolist())
    if low < 0:
        raise ValueError(f"y holds a negative class label ({low}); labels are 0 .. num_classes - 1")
    if last is not None and high >= last.out_features:
        raise ValueError(f"y holds the class label {high}, but the model has {last.out_features} outputs")


def train_steps(
    model: nn.Module,
    data,
    *,
    num_steps: int = 300,
    lr: float = 1e-3,
    batch_size: int = 64,
    seed: int = 0,
    device=None,
    budget_s: float | None = None,
) -> list[float]:
    """Train ``model`` in place with a fresh Adam, ``num_steps`` (0 to ``MAX_STEPS``) steps of cross-entropy on
    mini-batches of ``data`` (a ``Split`` or ``(X, y)``) drawn with ``seed``; returns the losses.  A run
    estimated past ``budget_s`` (default 30 s) is refused before it starts; one past a few seconds shows progress."""
    check_instance("model", model, nn.Module, "a torch.nn.Module (e.g. from make_mlp)")
    num_steps = check_int("num_steps", num_steps, minimum=0, maximum=MAX_STEPS)
    lr = check_float("lr", lr, gt=0.0)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    seed = check_seed("seed", seed)
    if hasattr(data, "X") and hasattr(data, "y"):
        X, y = data.X, data.y
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        X, y = data
    else:
        raise ArgumentTypeError(f"data must be a Split or an (X, y) pair, got {type(data).__name__}")
    _check_xy(model, X, y)
    if y.is_floating_point():
        raise ArgumentTypeError(f"y must hold class labels as int64, got dtype {y.dtype}; use y.long()")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("model has no trainable parameters: there is nothing to train")
    dev = get_device(device)
    what = f"train_steps(num_steps={num_steps}, batch_size={batch_size})"
    planned = training_seconds(what, model, min(batch_size, len(y)), num_steps, dev, None, budget_s, 1)
    model.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    batches = random_batches(X.to(dev), y.to(dev), batch_size, seed)
    steps = progress(range(num_steps), desc="training", disable=planned <= PROGRESS_AFTER_S, leave=False)
    with torch_threads(1, dev):
        return [r.loss for r in train_loop(model, opt, None, batches, steps, sync_free=False)]


def random_batches(X: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int):
    """``batches_of(step)`` for :func:`~amp_lab.recipe.train_loop`: one random mini-batch per call, drawn by a
    generator seeded with ``seed`` (03's and 04's batches)."""
    gen = torch.Generator().manual_seed(seed)

    def batches_of(_step):
        idx = torch.randint(0, len(y), (min(batch_size, len(y)),), generator=gen).to(X.device)
        return [(X[idx], y[idx])]

    return batches_of


def _check_labels_fit(y: torch.Tensor, out: torch.Tensor) -> None:
    """Class labels must index the model's outputs (checked before the loss is computed)."""
    if not y.is_floating_point() and out.dim() == 2 and int(y.max()) >= out.shape[1]:
        raise ValueError(f"y holds the class label {int(y.max())}, but the model has {out.shape[1]} outputs")


def _check_loss(loss) -> None:
    """A custom ``loss_fn``'s result must be a one-element floating tensor autograd can differentiate."""
    if not isinstance(loss, torch.Tensor):
        raise ArgumentTypeError(f"loss_fn must return the loss as a scalar tensor, got {type(loss).__name__}")
    if loss.numel() != 1 or not loss.is_floating_point():
        raise ArgumentTypeError(
            f"loss_fn must return a one-element floating-point tensor, got {loss.dtype} of shape {tuple(loss.shape)}"
        )
    if not loss.requires_grad:
        raise ValueError("loss_fn returned a tensor that does not depend on the model's output (no grad_fn)")


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
    """One forward and backward pass of ``model`` on ``(X, y)`` (``loss_fn(output, y)``, cross-entropy by
    default, times ``loss_scale``; under autocast with ``autocast_dtype``), recording every module of
    ``layer_types``.  The model's ``.grad`` fields are untouched; on the CPU it runs on one thread."""
    check_instance("model", model, nn.Module, "a torch.nn.Module (e.g. from make_mlp)")
    loss_scale = check_scale("loss_scale", loss_scale)
    if autocast_dtype is not None:
        autocast_dtype = parse_dtype(autocast_dtype, name="autocast_dtype")
    if not isinstance(layer_types, tuple) or not all(
        isinstance(t, type) and issubclass(t, nn.Module) for t in layer_types
    ):
        raise ArgumentTypeError(f"layer_types must be a tuple of nn.Module classes, got {layer_types!r:.80}")
    check_callable("loss_fn", loss_fn, optional=True)
    _check_xy(model, X, y, class_labels=loss_fn is None)
    dev = get_device(device)
    model.to(dev)
    X, y = X.to(dev), y.to(dev)

    records: dict[str, dict] = {}

    def make_hook(name: str):
        def forward_hook(module, inputs, output):
            if not isinstance(output, torch.Tensor):
                return
            key = (
                name if name not in records else f"{name}#{sum(k.split('#')[0] == name for k in records) + 1}"
            )
            entry = records[key] = {"module": module, "output": output.detach().clone(), "grad": None}
            if output.requires_grad:
                output.register_hook(lambda grad: entry.update(grad=grad.detach().clone()))

        return forward_hook

    handles = [
        module.register_forward_hook(make_hook(name or type(module).__name__))
        for name, module in model.named_modules()
        if layer_types and isinstance(module, layer_types)
    ]
    if not handles:
        raise ValueError(f"model has no layers of layer_types={tuple(t.__name__ for t in layer_types)}")
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        with torch_threads(1, dev):
            with torch.autocast(dev.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                out = model(X)
                if loss_fn is None:
                    _check_labels_fit(y, out)
                    loss = nn.functional.cross_entropy(out, y)
                else:
                    loss = loss_fn(out, y)
                    _check_loss(loss)
            grads = torch.autograd.grad(loss.float() * loss_scale, params, allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    grad_of = {id(p): g for p, g in zip(params, grads, strict=True)}  # autograd.grad's are detached
    layers = [
        LayerGradients(
            name=key,
            output=e["output"],
            activation_grad=e["grad"] if e["grad"] is not None else torch.zeros_like(e["output"]),
            weight_grad=grad_of.get(id(getattr(e["module"], "weight", None))),
        )
        for key, e in records.items()
    ]
    return GradientRecord(layers, float(loss.detach().float()), loss_scale)


def digits_gradients(
    *,
    hidden: int = 64,
    depth: int = 7,
    num_steps: int = 300,
    batch_size: int = 512,
    device=None,
) -> GradientRecord:
    """03's gradients in one call: the digits, :func:`~amp_lab.models.make_mlp` trained ``num_steps`` Adam
    steps (0: untrained), then :func:`collect_gradients` on the first ``batch_size`` training examples;
    the trained model is in ``record.model``."""
    dev = get_device(device)
    data = load_digits(device=dev)
    model = make_mlp(data.num_features, data.num_classes, hidden=hidden, depth=depth, device=dev)
    train_steps(model, data.train, num_steps=num_steps, device=dev)
    n = min(batch_size, len(data.train))
    record = collect_gradients(model, data.train.X[:n], data.train.y[:n], device=dev)
    record.model = model
    return record
