"""The batched anonymizer interface.

An anonymizer turns a batch of aligned face crops ``[B, S, S, 3]`` uint8 BGR
into a batch of the same shape and dtype; the caller pastes the result back
into the frame through a soft mask. ``contexts[i]`` says which track/frame crop
``i`` belongs to (and its key, for reversible methods).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ..types import FaceContext


@runtime_checkable
class Anonymizer(Protocol):
    name: str

    def __call__(self, crops: np.ndarray, contexts: Sequence[FaceContext]) -> np.ndarray:
        """``crops`` [B, S, S, 3] uint8 -> new crops [B, S, S, 3] uint8 (a new array)."""
        ...


def check_batch(crops: np.ndarray, contexts: Sequence[FaceContext] | None = None) -> np.ndarray:
    """Validate a crop batch (a single [S, S, 3] crop is promoted to [1, S, S, 3])."""
    crops = np.asarray(crops)
    if crops.ndim == 3:
        crops = crops[None]
    if crops.ndim != 4 or crops.shape[3] != 3 or crops.shape[1] != crops.shape[2] or crops.dtype != np.uint8:
        raise ValueError(f"expected uint8 crops [B, S, S, 3], got {crops.dtype} {crops.shape}")
    if contexts is not None and len(contexts) != len(crops):
        raise ValueError(f"{len(crops)} crops but {len(contexts)} contexts")
    return crops
