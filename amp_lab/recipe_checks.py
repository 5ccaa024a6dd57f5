"""Argument checks of the recipe's learner-facing names (``recipe``, ``checkpoints``, ``clipping``,
``compare``): models, optimizers, scalers, schedulers, batches and splits, checked before anything changes,
so that torch's shape and dtype errors never reach the learner."""

from __future__ import annotations

import torch
from torch import nn

from ._checks import MAX_STEPS, ArgumentTypeError, bounded_list, check_float, check_instance, check_int
from .cost import MAX_SIZE
from .data import Split
from .device import get_device
from .dtypes import dtype_name, parse_dtype

PRECISIONS = (torch.float32, torch.bfloat16, torch.float16)


def precision(dtype, name: str = "dtype") -> torch.dtype:
    """``dtype`` (a torch dtype or a short name such as ``"bf16"``) as one of :data:`PRECISIONS`."""
    return torch.float32 if dtype is None else parse_dtype(dtype, allowed=PRECISIONS, name=name)


def check_per_step(batch_size, accumulation_steps, n: int) -> tuple[int, int, int]:
    """``batch_size``, ``accumulation_steps`` and their product, at most the ``n`` examples."""
    batch_size = check_int("batch_size", batch_size, minimum=1, maximum=MAX_SIZE)
    accumulation_steps = check_int("accumulation_steps", accumulation_steps, minimum=1, maximum=MAX_SIZE)
    per_step = batch_size * accumulation_steps
    if per_step > n:
        raise ValueError(
            f"batch_size * accumulation_steps = {batch_size} * {accumulation_steps} = {per_step} must be <= the "
            f"number of examples ({n})"
        )
    return batch_size, accumulation_steps, per_step


def check_split(name: str, split) -> Split:
    return check_instance(name, split, Split, "a data.Split (e.g. data.train from data.load_digits())")


def model_params(name: str, model) -> list[torch.Tensor]:
    check_instance(name, model, nn.Module, "a torch.nn.Module (e.g. from models.make_mlp)")
    params = list(model.parameters())
    if not params:
        raise ValueError(f"{name} has no parameters: there is nothing to train, evaluate or restore")
    devices = sorted({str(p.device) for p in params})
    if len(devices) > 1:
        raise ValueError(f"{name}'s parameters are spread over {', '.join(devices)}: move it to one device")
    return params


def check_model(name: str, model, dev: torch.device, *, trainable: bool) -> list[torch.Tensor]:
    """The parameters of ``model``: float32 (the master weights), on ``dev``, and for training at least one
    that requires a gradient."""
    params = model_params(name, model)
    wrong = next((p for p in params if p.dtype != torch.float32), None)
    if wrong is not None:
        raise ValueError(
            f"{name} has {dtype_name(wrong.dtype)} parameters, but the recipe keeps float32 weights (autocast makes "
            f"the low-precision copies, and GradScaler cannot unscale 16-bit gradients): use {name}.float()"
        )
    check_on(name, params[0].device, dev)
    if trainable and not any(p.requires_grad for p in params):
        raise ValueError(f"no parameter of {name} requires a gradient: there is nothing to train")
    return params


def check_on(name: str, actual: torch.device, dev: torch.device) -> None:
    if actual.type != dev.type or (dev.index is not None and actual.index != dev.index):
        raise ValueError(f"{name} is on {actual}, but device={str(dev)!r}: move it with .to(device)")


def check_opt(opt, params: list[torch.Tensor]) -> None:
    check_instance("opt", opt, torch.optim.Optimizer, "a torch.optim.Optimizer (e.g. torch.optim.Adam(...))")
    held = [p for group in opt.param_groups for p in group["params"]]
    own = {id(p) for p in params}
    if not held or any(id(p) not in own for p in held):
        raise ValueError("opt holds parameters that are not the model's: build it from model.parameters()")


def check_scaler(scaler, dev: torch.device | None = None) -> None:
    check_instance("scaler", scaler, torch.amp.GradScaler, "a torch.amp.GradScaler (e.g. recipe.make_scaler)")
    made_for = getattr(scaler, "_device", None)
    if dev is not None and scaler.is_enabled() and isinstance(made_for, str) and made_for != dev.type:
        raise ValueError(
            f"scaler was made for {made_for!r}, not device={str(dev)!r}: use make_scaler(dtype, device)"
        )


_SCHEDULERS = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def check_scheduler(scheduler, opt, *, stepped_by_train: bool) -> None:
    if scheduler is None:
        return
    check_instance("scheduler", scheduler, _SCHEDULERS, "None or a torch.optim.lr_scheduler scheduler")
    if getattr(scheduler, "optimizer", None) is not opt:
        raise ValueError("scheduler belongs to another optimizer: build it on opt")
    if stepped_by_train and isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise ValueError(
            "scheduler=ReduceLROnPlateau needs a metric in every step(), and train steps its scheduler without one: "
            "use a schedule such as CosineAnnealingLR"
        )


def check_max_grad_norm(max_grad_norm) -> float | None:
    """None (no clipping) or a finite number > 0 (negative reverses the updates, NaN poisons, 0 freezes)."""
    return None if max_grad_norm is None else check_float("max_grad_norm", max_grad_norm, gt=0)


def linear_ends(model) -> tuple[nn.Linear | None, nn.Linear | None]:
    """The first and last layers of a plain stack (nested ``nn.Sequential``s, or one layer) where they are
    Linear, read without running it; None where a model with its own ``forward`` hides their order."""
    modules = list(model.modules())
    if not all(isinstance(m, nn.Sequential) for m in modules if next(m.children(), None) is not None):
        return None, None
    leaves = [m for m in modules if next(m.children(), None) is None] or [None]
    return tuple(m if isinstance(m, nn.Linear) else None for m in (leaves[0], leaves[-1]))


def check_examples(xname: str, yname: str, X, y, model, device: torch.device) -> None:
    """One batch (or split) of examples for ``model``, checked by shape, dtype and device alone."""
    check_instance(xname, X, torch.Tensor, "a tensor of features")
    check_instance(yname, y, torch.Tensor, "a tensor of class labels")
    if X.dtype != torch.float32 or X.ndim != 2:
        raise ValueError(f"{xname} must be a 2-D float32 tensor, got {X.dtype} of shape {tuple(X.shape)}")
    first, _ = linear_ends(model)
    if first is not None and X.shape[1] != first.in_features:
        raise ValueError(
            f"{xname} has {X.shape[1]} features per example, but the model takes {first.in_features}"
        )
    if y.dtype != torch.int64 or y.ndim != 1 or len(X) != len(y) or len(X) == 0:
        raise ValueError(
            f"{yname} must be a 1-D int64 tensor of labels (use y.long()), one per example of {xname} (at least "
            f"one), got {y.dtype} of shape {tuple(y.shape)} for {len(X)} examples"
        )
    for name, t in ((xname, X), (yname, y)):
        if t.device != device:
            raise ValueError(f"{name} is on {t.device}, but the model is on {device}: use .to(device)")


def check_example_values(pairs, model, where: str) -> None:
    """Labels within the model's outputs and finite features, read once (one host sync): a label out of range
    fails inside torch (on a GPU, as a device-side assert) and a NaN feature writes NaN into the weights."""
    _, last = linear_ends(model)
    num_classes = None if last is None else last.out_features
    low, high, finite = torch.stack(
        [
            torch.stack([y.min() for _, y in pairs]).min(),
            torch.stack([y.max() for _, y in pairs]).max(),
            torch.stack([torch.isfinite(X).all() for X, _ in pairs]).all().long(),
        ]
    ).tolist()
    if low < 0 or (num_classes is not None and high >= num_classes):
        allowed = f"0 to {num_classes - 1}" if num_classes is not None else "0 or more"
        raise ValueError(
            f"{where} holds class labels from {low} to {high}, but the model's labels are {allowed}"
        )
    if not finite:
        raise ValueError(f"{where} holds NaN or inf features: a step would write NaN into the weights")


def check_split_for(name: str, split, model, device: torch.device) -> None:
    check_split(name, split)
    check_examples(f"{name}.X", f"{name}.y", split.X, split.y, model, device)
    check_example_values([(split.X, split.y)], model, name)


def check_step(model, opt, scaler, batches, dtype, max_grad_norm, device, *, read_values: bool):
    """A step's arguments; on a GPU the sync-free step does not read the labels' values (a host sync)."""
    dev = get_device(device)
    dtype = precision(dtype)
    max_grad_norm = check_max_grad_norm(max_grad_norm)
    params = check_model("model", model, dev, trainable=True)
    check_opt(opt, params)
    check_scaler(scaler, dev)
    what = "a non-empty list of (X, y) micro-batches (e.g. from recipe.micro_batches)"
    if isinstance(batches, torch.Tensor):
        raise ArgumentTypeError(f"batches must be {what}, got a tensor")
    pairs = bounded_list("batches", batches, MAX_STEPS, what)
    if not pairs:
        raise ValueError(f"batches must be {what}, got an empty one")
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ArgumentTypeError(f"batches[{i}] must be an (X, y) pair, got {type(pair).__name__}")
        check_examples(f"batches[{i}] X", f"batches[{i}] y", *pair, model, params[0].device)
    if read_values or params[0].device.type == "cpu":
        check_example_values(pairs, model, "batches")
    return pairs, dtype, max_grad_norm, dev
