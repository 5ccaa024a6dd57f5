"""Real data that needs no download.

The course trains on scikit-learn's handwritten digits (1,797 real 8x8 scans of digits
written by 43 people, UCI ML repository), which ship inside the installed ``scikit-learn``
package: nothing is fetched at run time.  Used from ``03_underflow_and_overflow`` on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .device import get_device


@dataclass(frozen=True)
class Split:
    """Tensors of one split: ``X`` (float32 features) and ``y`` (int64 class labels)."""

    X: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class Dataset:
    train: Split
    test: Split
    num_features: int
    num_classes: int
    name: str


def load_digits(*, device=None, test_fraction: float = 0.25, seed: int = 0) -> Dataset:
    """The digits data set as standardised float32 tensors on ``device``.

    The split is a seeded permutation; features are standardised with the training split's
    mean and standard deviation (pixels blank in every training image are only centred).
    """
    from sklearn.datasets import load_digits as _sk_load_digits

    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    dev = get_device(device)
    raw = _sk_load_digits()
    X = torch.tensor(raw.data, dtype=torch.float32)
    y = torch.tensor(raw.target, dtype=torch.int64)
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(y), generator=gen)
    n_test = int(round(len(y) * float(test_fraction)))
    test_idx, train_idx = order[:n_test], order[n_test:]
    mean = X[train_idx].mean(0)
    std = X[train_idx].std(0)
    # A pixel that is blank in every training image keeps its raw scale: dividing by a tiny std
    # would turn an occasional ink dot in a test image into a feature of a million.
    std = torch.where(std > 0, std, torch.ones_like(std))
    X = (X - mean) / std
    return Dataset(
        train=Split(X[train_idx].to(dev), y[train_idx].to(dev)),
        test=Split(X[test_idx].to(dev), y[test_idx].to(dev)),
        num_features=X.shape[1],
        num_classes=10,
        name="scikit-learn digits (8x8)",
    )
