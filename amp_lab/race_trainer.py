"""The race's training step and its memory (``06_timing_race``): one contestant's model, Adam and step,
and the peak memory of a step, measured on CUDA and estimated from what autograd saves elsewhere."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
import torch.nn.functional as F


class Trainer:
    """One contestant: its own copy of the model, its optimizer, and a ``step()``."""

    def __init__(self, model, X, y, dev, dtype: torch.dtype | None):
        self.model = copy.deepcopy(model).to(dev)
        # Fused Adam on CUDA: one kernel for the whole update, and with a GradScaler it reads the inf/NaN
        # flag on the GPU; the default (foreach) Adam makes GradScaler.step call found_inf.item(), a host
        # sync in every float16 step that the FP32 and bfloat16 steps do not pay.
        self.opt = torch.optim.Adam(
            self.model.parameters(), lr=1e-3, **({"fused": True} if dev.type == "cuda" else {})
        )
        self.X, self.y, self.dtype, self.dev = X, y, dtype, dev
        # float16 needs loss scaling to keep small gradients; bfloat16 has FP32's range and does not.
        self.scaler = torch.amp.GradScaler(dev.type) if dtype == torch.float16 else None

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(
            self.dev.type, dtype=self.dtype or torch.bfloat16, enabled=self.dtype is not None
        ):
            loss = F.cross_entropy(self.model(self.X), self.y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()
        return loss

    def static_bytes(self) -> int:
        tensors = [p for p in self.model.parameters()]
        tensors += [p.grad for p in self.model.parameters() if p.grad is not None]
        for state in self.opt.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
        return _unique_storage_bytes(tensors)


def _storage_key(t: torch.Tensor):
    st = t.untyped_storage()
    return st.data_ptr(), st.nbytes()


def _unique_storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    seen = {}
    for t in tensors:
        ptr, nbytes = _storage_key(t)
        seen[ptr] = max(nbytes, seen.get(ptr, 0))
    return sum(seen.values())


def saved_for_backward_bytes(trainer: Trainer, exclude: Iterable[torch.Tensor]) -> int:
    """Bytes of new tensors autograd keeps for backward during one step (inputs and parameters,
    which exist anyway, are not counted; each storage is counted once)."""
    seen = {_storage_key(t)[0] for t in exclude}
    total = 0

    def pack(t):
        nonlocal total
        ptr, nbytes = _storage_key(t)
        if ptr not in seen:
            seen.add(ptr)
            total += nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        trainer.step()
    return total


def measure_memory(make: dict, dev: torch.device, shared: list[torch.Tensor]) -> dict:
    """Peak memory of one training step per contestant, each measured alone."""
    memory = {}
    if dev.type == "cuda":
        for build in make.values():  # first steps create cuBLAS workspaces; keep them out of the numbers
            with build.context():
                build.fn().step()
        torch.cuda.synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        for name, build in make.items():
            with build.context():
                trainer = build.fn()
                trainer.step()  # creates gradients and Adam's state
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
                trainer.step()
                torch.cuda.synchronize(dev)
                memory[name] = int(torch.cuda.max_memory_allocated(dev) - base)
            del trainer
        memory["method"] = "measured: torch.cuda.max_memory_allocated during one step, reset per contestant"
    else:
        for name, build in make.items():
            with build.context():
                trainer = build.fn()
                trainer.step()
                exclude = shared + list(trainer.model.parameters())
                memory[name] = trainer.static_bytes() + saved_for_backward_bytes(trainer, exclude)
        memory["method"] = (
            f"estimate ({dev.type} has no peak-memory counter): parameters, gradients, "
            "Adam state and tensors saved for backward"
        )
    return memory
