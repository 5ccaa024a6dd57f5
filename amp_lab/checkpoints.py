"""Checkpoints that resume a mixed-precision run bit for bit (taught in ``07_amp_training_recipe``).

:func:`save_checkpoint` stores the model, the optimizer, the GradScaler (its scale and growth tracker),
the lr scheduler, the step number and the RNG state, written whole or not at all; :func:`load_checkpoint`
validates the whole file against what it will be loaded into, then changes it (a refused load changes
nothing), reading with ``weights_only=True``.
"""

from __future__ import annotations

import math
import os
import pickle
import warnings
from collections.abc import Mapping
from numbers import Integral, Real
from pathlib import Path

import numpy as np
import torch

from ._checks import ArgumentTypeError, check_instance, check_int
from .device import get_device
from .recipe import MAX_STEP_NUMBER
from .recipe_checks import check_opt, check_scaler, check_scheduler, model_params

_CHECKPOINT_KEYS = ("step", "model", "optimizer", "scaler", "scheduler", "rng_cpu", "rng_cuda", "extra")
_EXTRA_DEPTH = 32  # how deeply extra's lists and dicts may nest (a list that holds itself never ends)
_EXTRA_ALLOWED = (
    "None, bool, int, float, str, tensors, and lists, tuples and dicts (with string keys) of those"
)


class _MissingCheckpoint(FileNotFoundError, ValueError):
    """No file at a checkpoint's path: a FileNotFoundError, and a ValueError like every refused argument."""


def _check_path(path) -> Path:
    check_instance("path", path, (str, os.PathLike), "a file path (a str or a pathlib.Path)")
    path = Path(path)
    if path.is_dir():
        raise ValueError(
            f"path={str(path)!r} is a directory, not a checkpoint file: name a file, e.g. 'ckpt.pt'"
        )
    return path


def _checkpoint_value(name: str, value, depth: int = 0):
    """``value`` as what ``torch.load(weights_only=True)`` reads back: plain Python types (numpy scalars
    and subclasses such as IntEnum or namedtuples become plain ints, floats, tuples...) and plain tensors."""
    if depth > _EXTRA_DEPTH:
        shown = name if len(name) <= 60 else name[:60] + "..."
        raise ValueError(
            f"{shown} nests more than {_EXTRA_DEPTH} levels deep (does a list or dict hold itself?)"
        )
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_quantized or value.is_meta:
            raise ValueError(
                f"{name} is a {value.layout} tensor{' (quantized)' if value.is_quantized else ''}"
                f"{' on the meta device' if value.is_meta else ''}: save a dense tensor (e.g. .to_dense())"
            )
        return value.detach().as_subclass(torch.Tensor)
    if isinstance(value, (list, tuple)):
        items = [_checkpoint_value(f"{name}[{i}]", v, depth + 1) for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, Mapping):
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise ArgumentTypeError(
                    f"{name} has the key {key!r}: a checkpoint's extra takes string keys only"
                )
            out[str.__str__(key)] = _checkpoint_value(f"{name}[{key!r}]", v, depth + 1)
        return out
    raise ArgumentTypeError(
        f"{name} is a {type(value).__name__} ({value!r:.60}), which a checkpoint loaded with weights_only=True "
        f"cannot read back; allowed: {_EXTRA_ALLOWED}"
    )


def save_checkpoint(
    path, model, opt, scaler, *, step: int, scheduler=None, extra: dict | None = None
) -> Path:
    """Save everything a resumed run needs to continue identically.

    Model and optimizer state (Adam's moments and step counts), the GradScaler's state (its
    current scale and growth tracker: forget it and a resumed float16 run restarts from the
    initial scale, skipping steps the first run already got past), the lr scheduler, the
    step number, and the RNG state (for anything random, e.g. dropout).

    ``extra`` is None or a dict (string keys) of what :func:`load_checkpoint`'s ``weights_only=True``
    can read back: None, bool, int, float, str, tensors, and lists, tuples and dicts of those (numpy
    scalars are saved as Python numbers).  Everything is checked before the file is written, and the
    file is written whole or not at all (to a temporary file, then renamed), so a checkpoint this
    function writes always loads.
    """
    path = _check_path(path)
    step = check_int("step", step, minimum=0, maximum=MAX_STEP_NUMBER)
    params = model_params("model", model)
    check_opt(opt, params)
    check_scaler(scaler)
    check_scheduler(scheduler, opt, stepped_by_train=False)
    if extra is not None and not isinstance(extra, Mapping):
        raise ArgumentTypeError(f"extra must be None or a dict, got {type(extra).__name__}: {extra!r:.80}")
    extra = _checkpoint_value("extra", extra or {})
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scaler": scaler.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng_cpu": torch.random.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "extra": extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        torch.save(state, partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _listed(items, limit: int = 4) -> str:
    items = [str(i) for i in items]
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _int_value(value, *, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _check_model_state(saved, model, where: str) -> None:
    if not isinstance(saved, Mapping):
        raise ValueError(f"{where}: its model state is a {type(saved).__name__}, not a state dict")
    own = model.state_dict()
    missing, unknown = [k for k in own if k not in saved], [k for k in saved if k not in own]
    if missing or unknown:
        raise ValueError(
            f"{where} holds the weights of another model: "
            + "; ".join(
                part
                for part in (
                    f"the model has {_listed(missing)}, which the checkpoint lacks" if missing else "",
                    f"the checkpoint has {_listed(unknown)}, which the model lacks" if unknown else "",
                )
                if part
            )
            + ": build the model as the saved run did (same num_features, hidden, depth, num_classes)"
        )
    for key, mine in own.items():
        theirs = saved[key]
        if not isinstance(theirs, torch.Tensor) or tuple(theirs.shape) != tuple(mine.shape):
            shape = tuple(theirs.shape) if isinstance(theirs, torch.Tensor) else type(theirs).__name__
            raise ValueError(
                f"{where} holds the weights of another model: {key} is {shape} there and {tuple(mine.shape)} in the "
                "model: build the model as the saved run did (same num_features, hidden, depth, num_classes)"
            )


# Hyperparameter flags torch's optimizers have gained over versions (each filled with a default when absent),
# and the initial_lr an lr scheduler adds: a group may have or lack them and still load.
_OPTIONAL_GROUP_KEYS = {"foreach", "maximize", "capturable", "differentiable", "fused", "decoupled_weight_decay",
                        "initial_lr"}  # fmt: skip


def _check_optimizer_state(saved, opt, where: str) -> None:
    kind = type(opt).__name__
    if not isinstance(saved, Mapping) or set(saved) != {"state", "param_groups"}:
        raise ValueError(
            f"{where}: its optimizer state is not an optimizer's state dict (state and param_groups)"
        )
    groups, state = saved["param_groups"], saved["state"]
    if not isinstance(groups, (list, tuple)) or not isinstance(state, Mapping):
        raise ValueError(
            f"{where}: its optimizer state is not an optimizer's state dict (state and param_groups)"
        )
    if len(groups) != len(opt.param_groups):
        raise ValueError(
            f"{where} holds {len(groups)} optimizer parameter group(s), but opt has {len(opt.param_groups)}"
        )
    ids, params = [], []
    for i, (theirs, mine) in enumerate(zip(groups, opt.param_groups, strict=True)):
        if not isinstance(theirs, Mapping) or not isinstance(theirs.get("params"), (list, tuple)):
            raise ValueError(f"{where}: its optimizer's param_groups[{i}] is not a parameter group")
        if len(theirs["params"]) != len(mine["params"]):
            raise ValueError(
                f"{where}: its optimizer's group {i} holds {len(theirs['params'])} parameters, opt's "
                f"{len(mine['params'])}: build the optimizer as the saved run did, from the same model"
            )
        lacking = set(mine) - set(theirs) - _OPTIONAL_GROUP_KEYS
        foreign = set(theirs) - set(mine) - _OPTIONAL_GROUP_KEYS
        if lacking or foreign:
            raise ValueError(
                f"{where} was saved from another kind of optimizer than opt ({kind}): its hyperparameters "
                + ", ".join(
                    part
                    for part in (
                        f"lack {_listed(sorted(lacking))}" if lacking else "",
                        f"include {_listed(sorted(foreign))}" if foreign else "",
                    )
                    if part
                )
                + "; build opt as the saved run did"
            )
        ids += list(theirs["params"])
        params += list(mine["params"])
    if len(set(map(repr, ids))) != len(ids):
        raise ValueError(f"{where}: its optimizer's param_groups name a parameter twice")
    by_id = dict(zip(ids, params, strict=True))
    for key, entry in state.items():
        if key not in by_id or not isinstance(entry, Mapping):
            raise ValueError(
                f"{where}: its optimizer state has an entry ({key!r}) for no parameter of its groups"
            )
        shape = tuple(by_id[key].shape)
        for name, value in entry.items():
            if isinstance(value, torch.Tensor) and value.ndim > 0 and tuple(value.shape) != shape:
                raise ValueError(
                    f"{where}: its optimizer state {name!r} has shape {tuple(value.shape)}, but the parameter it "
                    f"belongs to has shape {shape}: build the model and optimizer as the saved run did"
                )


_SCALER_KEYS = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}


def _check_scaler_state(saved, scaler, where: str) -> None:
    if not isinstance(saved, Mapping):
        raise ValueError(
            f"{where}: its scaler state is a {type(saved).__name__}, not a GradScaler's state dict"
        )
    if not scaler.is_enabled():
        return  # a disabled GradScaler ignores whatever it is given (as torch's load_state_dict does)
    if not saved:
        raise ValueError(
            f"{where} holds no loss-scale state (it was saved with a disabled scaler: a bfloat16 or float32 run), "
            "but scaler is enabled (float16): pass recipe.make_scaler(dtype, device) for the saved run's dtype"
        )
    if set(saved) != _SCALER_KEYS:
        raise ValueError(
            f"{where}: its scaler state has {_listed(sorted(saved))}, not a GradScaler's {_listed(sorted(_SCALER_KEYS))}"
        )
    scale, growth, backoff = saved["scale"], saved["growth_factor"], saved["backoff_factor"]
    for name, value in (("scale", scale), ("growth_factor", growth), ("backoff_factor", backoff)):
        if isinstance(value, bool) or not isinstance(value, Real) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"{where}: its scaler's {name} is {value!r}, not a finite number > 0")
    if not _int_value(saved["growth_interval"], minimum=1) or not _int_value(
        saved["_growth_tracker"], minimum=0
    ):
        raise ValueError(
            f"{where}: its scaler's growth_interval ({saved['growth_interval']!r}) or growth tracker "
            f"({saved['_growth_tracker']!r}) is not a count"
        )


def _check_scheduler_state(saved, scheduler, opt, where: str) -> None:
    if scheduler is None:
        if saved is not None:
            raise ValueError(
                f"{where} holds lr-scheduler state, but no scheduler was given: pass scheduler= (built as the saved "
                "run's was), or the resumed run's learning rates differ from the uninterrupted run's"
            )
        return
    if saved is None:
        raise ValueError("scheduler was given, but the checkpoint holds no scheduler state")
    own = scheduler.state_dict()
    if not isinstance(saved, Mapping) or set(saved) != set(own):
        raise ValueError(
            f"{where} holds the state of another kind of lr scheduler than {type(scheduler).__name__}: build the "
            "scheduler as the saved run did"
        )
    lrs = saved.get("base_lrs")
    if lrs is not None and (not isinstance(lrs, (list, tuple)) or len(lrs) != len(opt.param_groups)):
        raise ValueError(
            f"{where}: its scheduler's base_lrs do not match opt's {len(opt.param_groups)} parameter group(s)"
        )


def _check_rng_states(cpu, cuda, where: str) -> None:
    own = torch.random.get_rng_state()
    if not isinstance(cpu, torch.Tensor) or cpu.dtype != torch.uint8 or tuple(cpu.shape) != tuple(own.shape):
        raise ValueError(
            f"{where}: its CPU random-generator state is not one (a uint8 tensor of {own.numel()} bytes)"
        )
    if cuda is None:
        return
    if not isinstance(cuda, (list, tuple)) or not all(
        isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.ndim == 1 for t in cuda
    ):
        raise ValueError(f"{where}: its CUDA random-generator states are not a list of uint8 tensors")


def _check_checkpoint(state, where: str, model, opt, scaler, scheduler) -> None:
    """Everything :func:`load_checkpoint` will load, checked against what it will be loaded into."""
    if not isinstance(state, dict):
        raise ValueError(
            f"{where} holds a {type(state).__name__}, not the dict checkpoints.save_checkpoint writes"
        )
    missing = [k for k in _CHECKPOINT_KEYS if k not in state]
    unknown = [k for k in state if k not in _CHECKPOINT_KEYS]
    if missing or unknown:
        raise ValueError(
            f"{where} is not a checkpoint checkpoints.save_checkpoint wrote: "
            + "; ".join(
                part
                for part in (
                    f"it lacks {_listed(missing)}" if missing else "",
                    f"it has unknown entries {_listed(map(repr, unknown))}" if unknown else "",
                )  # fmt: skip
                if part
            )
            + f" (a checkpoint holds {', '.join(_CHECKPOINT_KEYS)})"
        )
    if not _int_value(state["step"], minimum=0):
        raise ValueError(f"{where}: its step is {state['step']!r}, not a step number")
    _check_model_state(state["model"], model, where)
    _check_optimizer_state(state["optimizer"], opt, where)
    _check_scaler_state(state["scaler"], scaler, where)
    _check_scheduler_state(state["scheduler"], scheduler, opt, where)
    _check_rng_states(state["rng_cpu"], state["rng_cuda"], where)
    if not isinstance(state["extra"], dict):
        raise ValueError(f"{where}: its extra is a {type(state['extra']).__name__}, not a dict")


def load_checkpoint(path, model, opt, scaler, *, scheduler=None, device=None) -> int:
    """Restore what :func:`save_checkpoint` saved into existing objects; returns the step to resume at.

    Loaded with ``weights_only=True``: a checkpoint is data, and unpickling arbitrary objects
    from a file can run code.

    Validate, then change: the whole checkpoint is checked first (every entry present and no other,
    the weights' names and shapes against ``model``, the optimizer state against ``opt``, the loss-scale
    state against ``scaler``, scheduler state present exactly when ``scheduler`` is given), and a refused
    load changes nothing: not the weights, the optimizer, the scaler, the scheduler or the RNG.  A file
    that is not a checkpoint (junk, empty, another torch file, a foreign pickle) raises ValueError naming
    the path; a missing file raises FileNotFoundError, which is also a ValueError.
    """
    path = _check_path(path)
    params = model_params("model", model)
    check_opt(opt, params)
    check_scaler(scaler)
    check_scheduler(scheduler, opt, stepped_by_train=False)
    dev = get_device(device)
    if not path.exists():
        raise _MissingCheckpoint(
            2, f"no checkpoint file at path={str(path)!r} (checkpoints.save_checkpoint writes one)"
        )
    if not path.is_file():
        raise ValueError(f"path={str(path)!r} is not a checkpoint file")
    where = f"the checkpoint at path={str(path)!r}"
    try:
        with warnings.catch_warnings():
            # A foreign pickle makes torch warn about its protocol before it refuses the file.
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            state = torch.load(path, map_location=dev, weights_only=True)
    except Exception as err:  # junk, an empty file, a foreign pickle: torch's errors differ for each
        if isinstance(err, EOFError):
            reason = "the file is empty or cut short"
        elif isinstance(err, pickle.UnpicklingError):
            reason = "it holds Python objects that are neither tensors nor plain values (a foreign pickle?)"
        else:
            reason = f"it is not a file torch.save wrote ({type(err).__name__})"
        raise ValueError(
            f"path={str(path)!r} is not a checkpoint checkpoints.save_checkpoint wrote: torch.load(weights_only=True) "
            f"cannot read it: {reason}"
        ) from None
    _check_checkpoint(state, where, model, opt, scaler, scheduler)

    # Checked above; should torch refuse anyway, put back what was already changed.
    before = (
        {k: v.detach().clone() for k, v in model.state_dict().items()},
        opt.state_dict(),  # load_state_dict replaces the state tensors, never writes into them
        scaler.state_dict(),
        scheduler.state_dict() if scheduler is not None else None,
        torch.random.get_rng_state(),
    )
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        torch.random.set_rng_state(state["rng_cpu"].cpu())
        if state["rng_cuda"] is not None and torch.cuda.is_available():
            # A checkpoint from a machine with more GPUs restores the generators of the GPUs this one has.
            for i, rng in enumerate(state["rng_cuda"][: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(rng.cpu(), i)
    except Exception as err:
        model.load_state_dict(before[0])
        opt.load_state_dict(before[1])
        if scaler.is_enabled() and before[2]:
            scaler.load_state_dict(before[2])
        if scheduler is not None:
            scheduler.load_state_dict(before[3])
        torch.random.set_rng_state(before[4])
        raise ValueError(
            f"{where} could not be loaded, and nothing was changed: {type(err).__name__}: {err}"
        ) from err
    return state["step"]
