"""Clipping scaled gradients, measured with Adam and with SGD (07): :func:`compare_clipping` clips after
``scaler.unscale_`` (right) or before it (the mistake), and :meth:`ClippingComparison.reading` says what the
mistake did, as reason codes and numbers."""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import MAX_STEPS, check_float, check_instance, check_int, check_scale, check_seed
from .cost import mlp_sizes
from .data import Dataset
from .device import get_device
from .models import make_mlp
from .recipe import MAX_GROWTH_INTERVAL, MAX_LR, step_batches
from .recipe_checks import check_on, check_per_step, check_split_for, precision
from .text import Reading

MAX_CLIPPING_STEPS = MAX_STEPS // 4  # compare_clipping trains four runs
OPTIMIZERS = ("Adam", "SGD")


@dataclass(frozen=True)
class ClippingRun:
    """One run of :func:`compare_clipping`: whether ``clip_grad_norm_`` saw the ``scaled`` gradients (the
    mistake), and per step the norm it saw, the true norm, whether it ``clipped``, whether GradScaler
    ``skipped`` and the norm of the step's change to the parameters."""

    optimizer: str
    scaled: bool
    scale: float
    max_norm: float
    seen_norms: tuple[float, ...]
    true_norms: tuple[float, ...]
    clipped: tuple[bool, ...]
    skipped: tuple[bool, ...]
    update_norms: tuple[float, ...]

    @property
    def num_steps(self) -> int:
        return len(self.clipped)

    @property
    def num_clipped(self) -> int:
        return sum(self.clipped)

    @property
    def effective_max_norm(self) -> float:
        """The threshold in true gradient units."""
        return self.max_norm / self.scale if self.scaled else self.max_norm

    @property
    def mean_update_norm(self) -> float:
        return statistics.fmean(self.update_norms) if self.update_norms else math.nan


@dataclass(frozen=True)
class ClippingComparison:
    """:func:`compare_clipping`'s runs; :meth:`reading` reads them, ``str()`` is its sentences."""

    runs: tuple[ClippingRun, ...]

    def run(self, optimizer: str, *, scaled: bool) -> ClippingRun:
        return next(r for r in self.runs if r.optimizer == optimizer and r.scaled == scaled)

    def update_ratio(self, optimizer: str) -> float:
        """Mean update with the scaled gradients clipped over the correct run's (1: the mistake changes nothing)."""
        right, wrong = self.run(optimizer, scaled=False), self.run(optimizer, scaled=True)
        return wrong.mean_update_norm / right.mean_update_norm if right.mean_update_norm > 0 else math.nan

    def reading(self) -> Reading:
        """Outcome ``"clip.threshold"``, then per optimizer ``"clip.<opt>_little"``, ``_shrank`` or ``_grew``
        (its update ratio) and ``"clip.<opt>_why"``."""
        first = self.run(OPTIMIZERS[0], scaled=True)
        facts = dict(max_norm=first.max_norm, scale=first.scale, effective=first.effective_max_norm)
        facts["num_steps"] = first.num_steps
        reasons = []
        for o in OPTIMIZERS:
            key, ratio = o.lower(), self.update_ratio(o)
            facts[f"{key}_scaled_clipped"] = self.run(o, scaled=True).num_clipped
            facts[f"{key}_true_clipped"] = self.run(o, scaled=False).num_clipped
            facts[f"{key}_ratio"] = ratio
            size = "little" if 0.8 <= ratio <= 1.25 else "shrank" if ratio < 1 else "grew"
            reasons += [f"clip.{key}_{size}", f"clip.{key}_why"]
        return Reading("clip.threshold", tuple(reasons), facts)

    def __str__(self) -> str:
        return "\n".join(self.reading().sentences())


def compare_clipping(
    data,
    *,
    scale: float = 2.0**16,
    max_norm: float = 1.0,
    num_steps: int = 10,
    batch_size: int = 64,
    hidden: int = 64,
    depth: int = 2,
    lr: float = 1e-2,
    dtype=torch.float16,
    seed: int = 0,
    device=None,
) -> ClippingComparison:
    """Clip after ``unscale_`` (right) and before it (wrong), with Adam and with SGD: four runs of
    ``num_steps`` from the same seeded model on the same batches, with a GradScaler at ``scale`` that never
    grows.  Clipping the scaled gradients clips at ``max_norm / scale`` in true units, so it fires on almost every
    step: SGD's steps shrink, Adam's barely change.  Everything is checked before anything is built."""
    check_instance("data", data, Dataset, "a data.Dataset (e.g. data.load_digits())")
    scale = check_scale("scale", scale)
    max_norm = check_float("max_norm", max_norm, gt=0)
    num_steps = check_int("num_steps", num_steps, minimum=1, maximum=MAX_CLIPPING_STEPS)
    lr = check_float("lr", lr, gt=0, le=MAX_LR)
    dtype = precision(dtype)
    seed = check_seed("seed", seed)
    dev = get_device(device)
    mlp_sizes(data.num_features, data.num_classes, hidden, depth)
    batch_size, _, per_step = check_per_step(batch_size, 1, len(data.train))
    check_on("data.train", data.train.X.device, dev)
    model = make_mlp(data.num_features, data.num_classes, hidden=hidden, depth=depth, seed=seed, device=dev)
    check_split_for("data.train", data.train, model, dev)
    batches = [step_batches(data.train, batch_size, per_step, seed, k)[0] for k in range(num_steps)]
    runs = (  # each from a copy of the same seeded model
        _clipping_run(copy.deepcopy(model), optimizer, scaled, batches, scale, max_norm, lr, dtype, dev)
        for optimizer in OPTIMIZERS
        for scaled in (False, True)
    )
    return ClippingComparison(tuple(runs))


def _clipping_run(model, optimizer, scaled, batches, scale, max_norm, lr, dtype, dev) -> ClippingRun:
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=lr) if optimizer == "Adam" else torch.optim.SGD(params, lr=lr)
    scaler = torch.amp.GradScaler(dev.type, init_scale=scale, growth_interval=MAX_GROWTH_INTERVAL)
    wide = torch.float32 if dev.type == "mps" else torch.float64  # Apple GPUs have no float64
    rows = []  # per step, on the device: seen norm, true norm, skipped, update norm
    for X, y in batches:
        before = [p.detach().clone() for p in params]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = F.cross_entropy(model(X), y)
        scaler.scale(loss).backward()
        if scaled:
            seen = nn.utils.clip_grad_norm_(params, max_norm)  # the mistake: the gradients are still x scale
            scaler.unscale_(opt)
            true = seen / scaler.get_scale()
        else:
            scaler.unscale_(opt)
            seen = true = nn.utils.clip_grad_norm_(params, max_norm)
        scaler.step(opt)
        scaler.update()
        update = nn.utils.get_total_norm([p.detach() - b for p, b in zip(params, before, strict=True)])
        skipped = ~torch.isfinite(seen)  # GradScaler skips exactly when a gradient is inf or NaN
        rows.append(torch.stack([seen, true, skipped.to(seen.dtype), update]).to(wide))
    seen, true, skipped, update = zip(*torch.stack(rows).tolist(), strict=True)  # one read for the whole run
    clipped = tuple(max_norm / (n + 1e-6) < 1 for n in seen)  # as clip_grad_norm_ decides
    skipped = tuple(s != 0 for s in skipped)
    return ClippingRun(optimizer, scaled, scale, max_norm, seen, true, clipped, skipped, update)
