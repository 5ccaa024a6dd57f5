"""The course's one MLP builder: ``num_features -> hidden (x depth, ReLU) -> num_classes``, seeded."""

from __future__ import annotations

from itertools import pairwise

from torch import nn

from ._checks import check_seed
from .cost import mlp_sizes, num_parameters
from .device import check_fits, get_device, seeded


def make_mlp(
    num_features: int = 64,
    num_classes: int = 10,
    *,
    hidden: int = 64,
    depth: int = 2,
    seed: int = 0,
    device=None,
) -> nn.Sequential:
    """An MLP ``num_features -> hidden (x depth, ReLU) -> num_classes`` of float32 parameters, initialised as
    after ``torch.manual_seed(seed)`` but leaving the learner's generators as they were; ``depth`` is at most
    ``cost.MAX_DEPTH``, and the parameters' bytes are checked against free memory before any is allocated."""
    num_features, num_classes, hidden, depth = mlp_sizes(num_features, num_classes, hidden, depth)
    seed = check_seed("seed", seed)
    dev = get_device(device)
    needed = 4 * num_parameters(num_features, num_classes, hidden, depth)  # float32
    hint = "choose a smaller hidden, depth, num_features or num_classes"
    what = f"make_mlp({num_features}, {num_classes}, hidden={hidden}, depth={depth})"
    check_fits(needed, "cpu", what, hint)  # the layers are built on the CPU, then moved
    if dev.type != "cpu":
        check_fits(needed, dev, what, hint)
    with seeded(seed):
        pairs = pairwise([num_features] + [hidden] * depth)
        hidden_layers = [m for a, b in pairs for m in (nn.Linear(a, b), nn.ReLU())]
        model = nn.Sequential(*hidden_layers, nn.Linear(hidden, num_classes))
    return model.to(dev)
