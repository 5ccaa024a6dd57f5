"""Real gradients to look at: a deep MLP on the digits data, and hooks that collect them.

Taught in ``03_underflow_and_overflow`` (and reused by the loss-scaling notebook).  The seed
problem of mixed precision is that gradients are tiny.  To see it on gradients a learner made
themselves, this module

* uses the course's plain MLP with PyTorch's *default* initialisation (:func:`amp_lab.models.make_mlp`),
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

from ._checks import (
    MAX_STEPS,
    ArgumentTypeError,
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
        attr = {
            "activation": "activation_grad",
            "weight": "weight_grad",
            "bias": "bias_grad",
            "output": "output",
        }[kind]
        parts = [t.detach().reshape(-1).float() for t in self._by_name(attr).values()]
        if not parts:
            return torch.empty(0)
        return torch.cat(parts)


def _split_xy(data):
    if hasattr(data, "X") and hasattr(data, "y"):
        return data.X, data.y
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return data[0], data[1]
    raise ArgumentTypeError(
        f"data must be a Split (with .X and .y) or an (X, y) pair, got {type(data).__name__}"
    )


_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def _leaves(model: nn.Module) -> list[nn.Module] | None:
    """The layers of a plain stack (an ``nn.Sequential``, possibly nested, or one layer) in order;
    None for a model with its own ``forward``, whose order of layers cannot be read off."""
    if not isinstance(model, nn.Sequential):
        return None if list(model.children()) else [model]
    out = []
    for m in model.children():
        inner = _leaves(m)
        if inner is None:
            return None
        out += inner
    return out


def _first_linear(model: nn.Module) -> nn.Linear | None:
    """The model's first layer if it is an ``nn.Linear`` (its ``in_features`` is X's width), else None."""
    leaves = _leaves(model)
    return leaves[0] if leaves and isinstance(leaves[0], nn.Linear) else None


def _last_linear(model: nn.Module) -> nn.Linear | None:
    """The model's last layer if it is an ``nn.Linear`` (its ``out_features`` is the number of classes)."""
    leaves = _leaves(model)
    return leaves[-1] if leaves and isinstance(leaves[-1], nn.Linear) else None


def _check_xy(model: nn.Module, X, y, *, class_labels: bool = True) -> None:
    """Check ``X`` and ``y`` against ``model`` before anything runs or moves, with the fix in the message.

    ``X`` must be a real floating tensor with at least one example; when the model starts with an
    ``nn.Linear``, its last dimension must be that layer's ``in_features``.  With ``class_labels``
    (the default cross-entropy loss) ``y`` must be int64 class indices, one per example (or float
    class probabilities of X's batch size)."""
    check_instance("X", X, torch.Tensor, "a torch.Tensor of inputs (torch.as_tensor(X, dtype=torch.float32))")
    check_instance("y", y, torch.Tensor, "a torch.Tensor of targets (torch.as_tensor(y))")
    if not X.is_floating_point():
        raise ArgumentTypeError(
            f"X must be a floating-point tensor (the network's inputs), got dtype {X.dtype}; use X.float()"
        )
    if X.dim() == 0 or X.shape[0] == 0:
        raise ValueError(f"X must hold at least one example (rows), got shape {tuple(X.shape)}")
    first = _first_linear(model)
    if first is not None and (X.dim() < 2 or X.shape[-1] != first.in_features):
        raise ValueError(
            f"X has shape {tuple(X.shape)}, but the model's first layer takes {first.in_features} features: "
            f"X must have shape (batch, {first.in_features})"
        )
    if not class_labels:
        return
    if y.is_floating_point():
        if y.dim() == 2 and y.shape[0] == X.shape[0]:
            return  # class probabilities, as cross_entropy accepts them
        raise ArgumentTypeError(
            f"y must hold class labels as integers (int64), got dtype {y.dtype} and shape {tuple(y.shape)}; "
            "use y.long()"
        )
    if y.dtype != torch.int64:
        raise ArgumentTypeError(
            f"y must hold class labels as int64 (torch.long), got dtype {y.dtype}; use y.long()"
        )
    if y.dim() != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(
            f"y must have one class label per example, shape ({X.shape[0]},), got shape {tuple(y.shape)}"
        )
    if y.numel() and int(y.min()) < 0:
        raise ValueError(f"y holds a negative class label ({int(y.min())}); labels are 0 .. num_classes - 1")


def _check_labels_fit(y: torch.Tensor, out: torch.Tensor) -> None:
    """Class labels must index the model's outputs (checked before the loss is computed)."""
    if not y.is_floating_point() and out.dim() == 2 and y.numel() and int(y.max()) >= out.shape[1]:
        raise ValueError(
            f"y holds the class label {int(y.max())}, but the model has {out.shape[1]} outputs "
            f"(labels 0 .. {out.shape[1] - 1})"
        )


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
    training recipe).  ``num_steps=0`` is allowed (0 to ``MAX_STEPS``): it trains nothing and
    returns ``[]``, so a loop over step counts can start from the untrained model.
    """
    check_instance("model", model, nn.Module, "a torch.nn.Module (e.g. from make_mlp)")
    num_steps = check_int("num_steps", num_steps, minimum=0, maximum=MAX_STEPS)
    lr = check_float("lr", lr, gt=0.0)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    seed = check_seed("seed", seed)
    X, y = _split_xy(data)
    _check_xy(model, X, y)
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("model has no trainable parameters: there is nothing to train")
    if y.is_floating_point():
        raise ArgumentTypeError(f"y must hold class labels as int64, got dtype {y.dtype}; use y.long()")
    dev = get_device(device)
    last = _last_linear(model)
    if last is not None and int(y.max()) >= last.out_features:
        raise ValueError(
            f"y holds the class label {int(y.max())}, but the model's last layer has {last.out_features} "
            f"outputs (labels 0 .. {last.out_features - 1})"
        )
    model.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    with torch_threads(1, dev):
        return train_loop(model, opt, X.to(dev), y.to(dev), gen, num_steps=num_steps, batch_size=batch_size)


def gradient_zero_fraction(parameters) -> float:
    """Fraction of the elements of all ``.grad`` tensors of ``parameters`` that are exactly zero (None counts as zero)."""
    zeros, total = 0, 0
    for p in parameters:
        total += p.numel()
        zeros += p.numel() if p.grad is None else int((p.grad == 0).sum())
    return zeros / total if total else 0.0


def train_loop(
    model, opt, X, y, gen, *, num_steps, batch_size, dtype=None, scaler=None, max_grad_norm=None, log=None
) -> list[float]:
    """The course's one training loop (03's :func:`train_steps`, 04's ``training.train_digits``).

    Each step draws a mini-batch with ``gen``, runs the forward pass under ``torch.autocast`` when
    ``dtype`` is given, and takes the cross-entropy step: plain (``scaler=None``: an inf/NaN gradient
    goes into the weights) or through any object with GradScaler's methods, clipping to
    ``max_grad_norm`` after ``unscale_``.  With ``log`` (a ``training.TrainingRun``) it also records,
    per step, the scale used, the fraction of exactly-zero gradients and whether the optimizer
    stepped.  Returns the unscaled losses.  Internal: its callers check the arguments.
    """
    params = list(model.parameters())
    dev = X.device
    losses, calls = [], []
    # whether the optimizer stepped, whatever the scaler (GradScaler, ours, a learner's): a step hook sees it
    hook = opt.register_step_post_hook(lambda *_: calls.append(1)) if log is not None else None
    try:
        for _ in range(num_steps):
            idx = torch.randint(0, len(y), (min(batch_size, len(y)),), generator=gen).to(dev)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                logits = model(X[idx])
            loss = nn.functional.cross_entropy(logits.float(), y[idx])
            if scaler is None:
                loss.backward()
            else:
                scaler.scale(loss).backward()
                scale = float(scaler.get_scale())  # the scale this step used
                scaler.unscale_(opt)
            if max_grad_norm is not None:
                nn.utils.clip_grad_norm_(params, max_grad_norm)
            if log is not None:
                log.scales.append(1.0 if scaler is None else scale)
                log.zero_fraction.append(gradient_zero_fraction(params))
            before = len(calls)
            if scaler is None:
                opt.step()  # no scaler, no protection: inf/NaN gradients go into the weights
            else:
                scaler.step(opt)  # a dynamic scaler skips the step on inf/NaN
                scaler.update()
            if log is not None:
                log.stepped.append(len(calls) > before)
            losses.append(float(loss.detach()))
    finally:
        if hook is not None:
            hook.remove()
    return losses


def _check_loss(loss, *, custom: bool) -> None:
    """``loss_fn``'s result must be a one-element floating tensor that autograd can differentiate."""
    if not custom:
        return
    if not isinstance(loss, torch.Tensor):
        raise ArgumentTypeError(
            f"loss_fn must return the loss as a scalar tensor (e.g. nn.functional.mse_loss(output, y)), "
            f"got {type(loss).__name__}: {loss!r:.80}"
        )
    if loss.numel() != 1 or not loss.is_floating_point():
        raise ArgumentTypeError(
            f"loss_fn must return a scalar floating-point tensor (one number), got a {loss.dtype} tensor of "
            f"shape {tuple(loss.shape)}; reduce it, e.g. with .mean()"
        )
    if not loss.requires_grad:
        raise ValueError(
            "loss_fn returned a tensor that does not depend on the model's output (it has no grad_fn): "
            "compute the loss from loss_fn's first argument"
        )


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
    ``record.flat("activation")`` concatenates all layers for :func:`amp_lab.range_counts.range_report`.

    The model's own ``.grad`` fields are not touched: gradients are taken with
    ``torch.autograd.grad`` and the hooks are removed afterwards, even on error.  On the CPU the
    pass runs with one thread (restored afterwards), so results do not depend on the core count.
    """
    check_instance("model", model, nn.Module, "a torch.nn.Module (e.g. from make_mlp)")
    loss_scale = check_scale("loss_scale", loss_scale)
    if autocast_dtype is not None:
        autocast_dtype = parse_dtype(autocast_dtype, name="autocast_dtype")
    if not isinstance(layer_types, tuple) or not all(
        isinstance(t, type) and issubclass(t, nn.Module) for t in layer_types
    ):
        raise ArgumentTypeError(f"layer_types must be a tuple of nn.Module classes, got {layer_types!r:.80}")
    if loss_fn is not None and not callable(loss_fn):
        raise ArgumentTypeError(
            f"loss_fn must be a function loss_fn(output, y) or None, got {type(loss_fn).__name__}"
        )
    _check_xy(model, X, y, class_labels=loss_fn is None)
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
            key = (
                name if name not in records else f"{name}#{sum(k.split('#')[0] == name for k in records) + 1}"
            )
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
                    if loss_fn is nn.functional.cross_entropy:
                        _check_labels_fit(y, out)
                    loss = loss_fn(out, y)
            else:
                out = model(X)
                if loss_fn is nn.functional.cross_entropy:
                    _check_labels_fit(y, out)
                loss = loss_fn(out, y)
            _check_loss(loss, custom=loss_fn is not nn.functional.cross_entropy)
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
    return GradientRecord(
        layers=layers, loss=float(loss.detach().float()), loss_scale=loss_scale, autocast_dtype=autocast_dtype
    )


def digits_gradients(
    *,
    hidden: int = 64,
    depth: int = 7,
    num_steps: int = 300,
    batch_size: int = 512,
    lr: float = 1e-3,
    seed: int = 0,
    device=None,
) -> GradientRecord:
    """The notebook's gradients in one call: load the digits, build :func:`~amp_lab.models.make_mlp` (``depth`` hidden layers), train it
    for ``num_steps`` Adam steps (mini-batches of 64), then :func:`collect_gradients` on the
    first ``batch_size`` training examples.  The trained model is in ``record.model``.

    ``num_steps=0`` is allowed: the gradients of the freshly initialised, untrained model, the
    baseline the trained model's (smaller) gradients are compared with.

    Takes about a second on a 2-core CPU with the defaults.
    """
    dev = get_device(device)
    data = load_digits(device=dev)
    model = make_mlp(data.num_features, data.num_classes, hidden=hidden, depth=depth, seed=seed, device=dev)
    train_steps(model, data.train, num_steps=num_steps, lr=lr, seed=seed, device=dev)
    n = min(batch_size, len(data.train))
    record = collect_gradients(model, data.train.X[:n], data.train.y[:n], device=dev)
    record.model = model
    return record
