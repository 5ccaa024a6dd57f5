"""Checkpoints that resume a mixed-precision run bit for bit (07): :func:`save_checkpoint` writes everything
a resumed run needs, whole or not at all; :func:`load_checkpoint` reads it with ``weights_only=True``,
validates it by loading it into copies first, then changes the learner's objects."""

from __future__ import annotations

import copy
import io
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from ._checks import ArgumentTypeError, check_instance, check_int
from .device import get_device
from .recipe import MAX_STEP_NUMBER
from .recipe_checks import check_opt, check_scaler, check_scheduler, model_params

_KEYS = ("step", "model", "optimizer", "scaler", "scheduler", "rng_cpu", "rng_cuda", "extra")
# Hyperparameter flags torch's optimizers gained over versions, and the initial_lr a scheduler adds: a
# parameter group may have or lack them and still load.
_OPTIONAL_GROUP_KEYS = {"foreach", "maximize", "capturable", "differentiable", "fused"}
_OPTIONAL_GROUP_KEYS |= {"decoupled_weight_decay", "initial_lr"}


class _MissingCheckpoint(FileNotFoundError, ValueError):
    """No file at a checkpoint's path: a FileNotFoundError, and a ValueError like every refused argument."""


def _check_path(path) -> Path:
    check_instance("path", path, (str, os.PathLike), "a file path (a str or a pathlib.Path)")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"path={str(path)!r} is a directory, not a checkpoint file (e.g. 'ckpt.pt')")
    return path


def _check_objects(model, opt, scaler, scheduler) -> None:
    check_opt(opt, model_params("model", model))
    check_scaler(scaler)
    check_scheduler(scheduler, opt, stepped_by_train=False)


def _plain(value):
    """``value`` as ``torch.load(weights_only=True)`` reads it back: numpy scalars as Python numbers, plain
    tensors; lists, tuples and dicts (string keys) of those."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor):
        return value.detach().as_subclass(torch.Tensor)
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise ArgumentTypeError("extra takes string keys only (in every dict it holds)")
        return {key: _plain(v) for key, v in value.items()}
    return value


def _checked_extra(extra) -> dict:
    """``extra`` as it will be saved, refused unless ``weights_only=True`` reads it back (checked by doing so)."""
    if extra is not None and not isinstance(extra, Mapping):
        raise ArgumentTypeError(f"extra must be None or a dict, got {type(extra).__name__}: {extra!r:.80}")
    if not extra:
        return {}
    try:
        extra = _plain(extra)
        buffer = io.BytesIO()
        torch.save(extra, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except RecursionError:
        raise ValueError("extra nests too deeply (does a list or dict hold itself?)") from None
    except ArgumentTypeError:
        raise
    except Exception as err:
        raise ArgumentTypeError(
            f"extra holds what a checkpoint loaded with weights_only=True cannot read back ({type(err).__name__}); "
            "allowed: None, bool, int, float, str, dense tensors, and lists, tuples and dicts of those"
        ) from None
    return extra


def save_checkpoint(
    path, model, opt, scaler, *, step: int, scheduler=None, extra: dict | None = None
) -> Path:
    """Save everything a resumed run needs to continue identically: model, optimizer, the GradScaler's state
    (forget it and a resumed float16 run restarts from the initial scale), scheduler, step and RNG state, and
    ``extra`` (None or a dict of plain values and tensors).  Checked first, written whole or not at all."""
    path = _check_path(path)
    step = check_int("step", step, minimum=0, maximum=MAX_STEP_NUMBER)
    _check_objects(model, opt, scaler, scheduler)
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scaler": scaler.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng_cpu": torch.random.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "extra": _checked_extra(extra),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        torch.save(state, partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _check_optimizer_state(saved, opt) -> None:
    """What ``opt.load_state_dict`` does not check: each group's hyperparameters (another kind of
    optimizer) and the state's shapes against the parameters'."""
    for theirs, mine in zip(saved["param_groups"], opt.param_groups, strict=False):
        if (set(theirs) ^ set(mine)) - _OPTIONAL_GROUP_KEYS:
            raise ValueError(f"it was saved from another kind of optimizer than opt ({type(opt).__name__})")
    params = [p for group in opt.param_groups for p in group["params"]]
    ids = [i for group in saved["param_groups"] for i in group["params"]]
    shapes = dict(zip(ids, (tuple(p.shape) for p in params), strict=False))
    for key, entry in saved["state"].items():
        for name, value in entry.items():
            if isinstance(value, torch.Tensor) and value.ndim > 0 and tuple(value.shape) != shapes.get(key):
                raise ValueError(
                    f"its optimizer state {name!r} has shape {tuple(value.shape)}, not the parameter's"
                )


def _check_scaler_state(saved, scaler) -> None:
    if not scaler.is_enabled():
        return  # a disabled GradScaler ignores whatever it is given (as torch's load_state_dict does)
    if not saved:
        raise ValueError(
            "it holds no loss-scale state (saved with a disabled scaler: a bfloat16 or float32 run), but scaler is "
            "enabled (float16): pass recipe.make_scaler(dtype, device) for the saved run's dtype"
        )
    own = scaler.state_dict()
    if set(saved) != set(own):
        raise ValueError(f"its scaler state has {sorted(saved)}, not a GradScaler's {sorted(own)}")
    for name in ("scale", "growth_factor", "backoff_factor"):  # type(): a bool is no scale
        if type(saved[name]) not in (int, float) or not (math.isfinite(saved[name]) and saved[name] > 0):
            raise ValueError(f"its scaler's {name} is {saved[name]!r}, not a finite number > 0")
    for name, least in (("growth_interval", 1), ("_growth_tracker", 0)):
        if type(saved[name]) is not int or saved[name] < least:
            raise ValueError(f"its scaler's {name} is {saved[name]!r}, not a count")


def _validate(state, model, opt, scaler, scheduler) -> None:
    """Everything :func:`load_checkpoint` will load, checked against what it will be loaded into: each part is
    loaded into a copy of its object first, so torch's own checks run on nothing the learner holds."""
    if not isinstance(state, dict):
        raise ValueError(f"it holds a {type(state).__name__}, not the dict save_checkpoint writes")
    missing, unknown = [k for k in _KEYS if k not in state], [k for k in state if k not in _KEYS]
    if missing or unknown:
        raise ValueError(f"it is not a checkpoint save_checkpoint wrote: it lacks {missing}, has {unknown}")
    step, rng_cpu, rng_cuda = state["step"], state["rng_cpu"], state["rng_cuda"]
    if type(step) is not int or step < 0:
        raise ValueError(f"its step is {step!r}, not a step number")
    own = torch.random.get_rng_state()
    if not isinstance(rng_cpu, torch.Tensor) or rng_cpu.dtype != torch.uint8 or rng_cpu.shape != own.shape:
        raise ValueError("its CPU random-generator state is not one")
    if rng_cuda is not None and not all(
        isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in rng_cuda
    ):
        raise ValueError("its CUDA random-generator states are not a list of uint8 tensors")
    if not isinstance(state["extra"], dict):
        raise ValueError(f"its extra is a {type(state['extra']).__name__}, not a dict")
    if (state["scheduler"] is None) != (scheduler is None):
        raise ValueError(
            "it holds no scheduler state, but scheduler was given"
            if scheduler is not None
            else "it holds lr-scheduler state, but no scheduler was given: pass scheduler= built as the saved run's"
        )
    if scheduler is not None and set(state["scheduler"]) != set(scheduler.state_dict()):
        raise ValueError(
            f"it holds the state of another kind of lr scheduler than {type(scheduler).__name__}"
        )
    try:
        copy.deepcopy(model).load_state_dict(state["model"])
    except Exception as err:
        raise ValueError(f"it holds the weights of another model: {err}") from None
    try:
        copy.deepcopy(opt).load_state_dict(state["optimizer"])
    except Exception as err:
        raise ValueError(f"its optimizer state does not fit opt: {err}") from None
    _check_optimizer_state(state["optimizer"], opt)
    _check_scaler_state(state["scaler"], scaler)


def load_checkpoint(path, model, opt, scaler, *, scheduler=None, device=None) -> int:
    """Restore what :func:`save_checkpoint` saved into existing objects, read with ``weights_only=True``
    (unpickling can run code); returns the step to resume at.  A checkpoint that does not fit changes nothing
    and raises ValueError naming the path (a missing file: FileNotFoundError, also a ValueError)."""
    path = _check_path(path)
    _check_objects(model, opt, scaler, scheduler)
    dev = get_device(device)
    if not path.exists():
        raise _MissingCheckpoint(
            2, f"no checkpoint file at path={str(path)!r} (checkpoints.save_checkpoint writes one)"
        )
    where = f"the checkpoint at path={str(path)!r}"
    try:
        with warnings.catch_warnings():
            # A foreign pickle makes torch warn about its protocol before it refuses the file.
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            state = torch.load(path, map_location=dev, weights_only=True)
    except Exception as err:  # junk, an empty file, a foreign pickle: torch's errors differ for each
        raise ValueError(
            f"{where} is not a checkpoint save_checkpoint wrote: torch.load(weights_only=True) cannot read it "
            f"({type(err).__name__})"
        ) from None
    try:
        _validate(state, model, opt, scaler, scheduler)
    except ValueError as err:
        raise ValueError(f"{where} cannot be loaded: {err}") from None
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
    return state["step"]
