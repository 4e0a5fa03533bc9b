"""The batched anonymizer interface.

An anonymizer turns a batch of aligned face crops ``[B, S, S, 3]`` uint8 BGR
into a batch of the same shape and dtype; the caller pastes the result back
into the frame through a soft mask. ``contexts[i]`` says which track/frame crop
``i`` belongs to (and its key, for reversible methods).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from ..types import FaceContext

if TYPE_CHECKING:
    from ..config import AnonymizeConfig


@runtime_checkable
class Anonymizer(Protocol):
    """Everything the renderer, the pipeline, the vault glue and recovery read of an anonymizer.

    Implementations subclass ``AnonymizerBase`` for the defaults and set what differs.
    """

    name: str  # the method's name: CLI choice, ``PastedFace.method``, the vault header
    # The same look at any crop size: the renderer gives small faces small crops (render.py _crop_sides).
    scale_free: bool
    color_match: bool  # pasting matches the crop's colours to the frame (a generated face)
    needs_leak_guard: bool  # the renderer checks the output with SFace (leakguard.py; AnonymizeConfig.leak_guard)
    # The leak guard's cadence after a track's first frames: every this many frames at least (None: every
    # AnonymizeConfig.leak_every frames). A method whose faces do not change frame to frame may ask for less.
    guard_every: int | None
    # A track whose batch failed stays on solid fill for the rest of the run instead of flickering.
    persistent_fallback: bool
    reversible: bool  # G(G(x, P), P) = x: ``recover --mode model`` applies (the vault marks its faces)
    # It draws a face at fixed crop coordinates and wants FaceContext.steady (align/steady.py), so that what
    # it draws does not tremble with each frame's landmarks.
    steadied: bool
    # A weak track's crop (FaceContext.sure False) is blurred, no face drawn: the leak guard, there for drawn
    # faces, skips it (blur runs without one).
    blurs_weak: bool
    batch_frames: int  # frames leaving the look-ahead rendered in one call (a generator's batch)
    model_path: Path | None  # the weights file, for the vault header (None: no model)
    backend_name: str | None  # what runs the model (None: no model)

    def __call__(self, crops: np.ndarray, contexts: Sequence[FaceContext]) -> np.ndarray:
        """``crops`` [B, S, S, 3] uint8 -> new crops [B, S, S, 3] uint8 (a new array)."""
        ...


class AnonymizerBase:
    """The defaults of every ``Anonymizer`` member but ``name`` and ``__call__``: a classic, irreversible,
    unbatched method without a model."""

    scale_free = False
    color_match = False
    needs_leak_guard = False
    guard_every: int | None = None
    reversible = False
    steadied = False
    blurs_weak = False
    batch_frames = 1
    model_path: Path | None = None
    backend_name: str | None = None

    @property
    def persistent_fallback(self) -> bool:
        """By default, what ``needs_leak_guard`` says: a guarded generator that failed once is not trusted again."""
        return self.needs_leak_guard


def reversible_method(anonymizer: Anonymizer) -> str | None:
    """The name the vault marks model-recoverable faces with (``VaultRecorder``); None: irreversible."""
    return anonymizer.name if anonymizer.reversible else None


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


def guard_every(anonymize: "AnonymizeConfig", anonymizer) -> int | None:
    """Frames between the leak guard's checks of a track after its first ones (leakguard.py), for an
    anonymizer (instance or class, see anonymizers.anonymizer_type) run with ``anonymize``; None: no guard.
    1 means every frame, which needs measured landmarks on every frame: the detector's default cadence
    follows it (config.detect_cadence), in a run (pipeline.py) and in the review's replay of one
    (review/tracks.py)."""
    if not (anonymizer.needs_leak_guard and anonymize.leak_guard):
        return None
    return max(int(anonymize.leak_every), anonymizer.guard_every or 1)
