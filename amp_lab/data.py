"""Real data that needs no download: scikit-learn's handwritten digits (1,797 8x8 scans by 43 people, UCI ML
repository), shipped inside ``scikit-learn``.  Used from ``03_underflow_and_overflow`` on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._checks import check_float, check_instance, check_seed
from .device import get_device


@dataclass(frozen=True)
class Split:
    """One split, checked when built: ``X`` a 2-D floating-point tensor (examples, features), ``y`` a 1-D int64
    tensor of one class label per row, both on one device."""

    X: torch.Tensor
    y: torch.Tensor

    def __post_init__(self):
        check_instance("X", self.X, torch.Tensor, "a tensor of features")
        check_instance("y", self.y, torch.Tensor, "a tensor of class labels")
        if self.X.ndim != 2 or not self.X.is_floating_point():
            raise ValueError(
                f"X must be a 2-D floating-point tensor (examples, features), got {self.X.dtype} of shape {tuple(self.X.shape)}"
            )
        if self.y.ndim != 1 or self.y.dtype != torch.int64:
            raise ValueError(
                f"y must be a 1-D int64 tensor of class labels (use y.long()), got {self.y.dtype} of shape {tuple(self.y.shape)}"
            )
        if len(self.X) != len(self.y):
            raise ValueError(
                f"X has {len(self.X)} rows but y has {len(self.y)} labels: one label per example"
            )
        if self.X.device != self.y.device:
            raise ValueError(f"X is on {self.X.device} but y is on {self.y.device}: put both on one device")

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class Dataset:
    """Two :class:`Split` objects and what describes them (what :func:`load_digits` returns)."""

    train: Split
    test: Split
    num_features: int
    num_classes: int
    name: str


def load_digits(*, device=None, test_fraction: float = 0.25, seed: int = 0) -> Dataset:
    """The digits as float32 tensors on ``device``, split by a seeded permutation (``round(1797 * test_fraction)``
    test examples; both splits non-empty) and standardised with the training split's mean and spread."""
    test_fraction = check_float("test_fraction", test_fraction, gt=0.0, lt=1.0)
    seed = check_seed("seed", seed)
    dev = get_device(device)
    from sklearn.datasets import load_digits as _sk_load_digits

    raw = _sk_load_digits()
    n = len(raw.target)
    n_test = int(round(n * test_fraction))
    n_train = n - n_test
    if n_test < 1 or n_train < 1:
        empty = "test" if n_test < 1 else "training"
        raise ValueError(
            f"test_fraction={test_fraction!r} leaves the {empty} split empty; choose it from 1/{n} ({1 / n:.6f}) "
            f"to {n - 1}/{n} ({(n - 1) / n:.6f})"
        )
    X = torch.tensor(raw.data, dtype=torch.float32)
    y = torch.tensor(raw.target, dtype=torch.int64)
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(y), generator=gen)
    test_idx, train_idx = order[:n_test], order[n_test:]
    mean = X[train_idx].mean(0)
    std = X[train_idx].std(0) if n_train > 1 else torch.zeros(X.shape[1])  # one example has no spread
    # A pixel blank in every training image keeps its scale: a tiny std would blow up a test image's ink dot.
    std = torch.where(std > 0, std, torch.ones_like(std))
    X = (X - mean) / std
    return Dataset(
        train=Split(X[train_idx].to(dev), y[train_idx].to(dev)),
        test=Split(X[test_idx].to(dev), y[test_idx].to(dev)),
        num_features=X.shape[1],
        num_classes=10,
        name="scikit-learn digits (8x8)",
    )
