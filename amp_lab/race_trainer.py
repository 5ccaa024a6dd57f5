"""The race's training step and its memory (``06_timing_race``): one contestant's model, Adam and a step of
the course's one loop (``recipe.train_loop``), and the peak memory of a step, measured on CUDA and
estimated from what autograd saves elsewhere."""

from __future__ import annotations

import copy
import itertools

import torch

from .memory import saved_tensors
from .recipe import train_loop


class Trainer:
    """One contestant: its own copy of the model, its optimizer, and a ``step()`` that reads nothing back."""

    def __init__(self, model, X, y, dev, dtype: torch.dtype | None):
        self.model = copy.deepcopy(model).to(dev)
        # Fused Adam on CUDA: GradScaler hands it the inf/NaN flag on the GPU (else a found_inf.item() sync).
        self.opt = torch.optim.Adam(
            self.model.parameters(), lr=1e-3, **({"fused": True} if dev.type == "cuda" else {})
        )
        # float16 needs loss scaling to keep small gradients; bfloat16 has FP32's range and does not.
        self.scaler = torch.amp.GradScaler(dev.type) if dtype == torch.float16 else None
        self.X, self.y = X, y
        self._steps = train_loop(
            self.model, self.opt, self.scaler, lambda _: [(X, y)], itertools.count(), dtype=dtype
        )

    def step(self) -> torch.Tensor:
        """One training step (the loss stays on the device)."""
        return next(self._steps).loss

    def static_bytes(self) -> int:
        tensors = [*self.model.parameters()]
        tensors += [p.grad for p in self.model.parameters() if p.grad is not None]
        tensors += [v for state in self.opt.state.values() for v in state.values() if torch.is_tensor(v)]
        sizes = {}
        for t in tensors:
            st = t.untyped_storage()
            sizes[st.data_ptr()] = max(st.nbytes(), sizes.get(st.data_ptr(), 0))
        return sum(sizes.values())


def saved_bytes(run, exclude=()) -> int:
    """Bytes autograd keeps for backward while ``run()`` runs, each storage once, ``exclude``'s not."""
    return sum(row.nbytes for row in saved_tensors(run, exclude=exclude)[0])


def saved_for_backward_bytes(trainer: Trainer, exclude) -> int:
    """What autograd keeps for backward during one of ``trainer``'s steps (``exclude`` not counted)."""
    return saved_bytes(trainer.step, exclude)


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
