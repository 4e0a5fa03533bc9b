"""Leak guard: does a generated face still carry the person's identity?

Used by :class:`~streamdeid.render.FrameRenderer` for anonymizers that declare
``needs_leak_guard`` (dbaf); blur, mosaic and solid skip it (they are
irreversible by construction and must stay fast). For the first
``leak_first_frames`` frames of each track and then every ``leak_every``
frames (by default every frame), the original frame and the rendered frame are
compared at the face's landmarks, like the offline check in
:mod:`streamdeid.identity.leakcheck` but stricter by default (see
``AnonymizeConfig``):

* faces SFace can judge (plausible landmarks, at least ``MIN_SFACE_HEIGHT`` px
  tall): SFace cosine of the 112 px ArcFace crops, original vs rendered. A
  leak is a cosine >= ``leak_threshold`` (default 0.25; SFace's published
  threshold is 0.363) that also beats, by ``leak_margin``, the cosine of the original
  with its own face blanked: the match must come from the face, not from hair
  and background, which anonymization keeps (a solid fill "matches" 5 % of
  small video faces on context alone; ``leak_margin=0`` uses the threshold
  alone);
* smaller faces, or faces without usable landmarks: the inner face region must
  have changed (at least half its pixels).

The renderer switches a leaking track to solid fill for the rest of the run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .align import landmarks_usable
from .config import AnonymizeConfig
from .identity.compare import MIN_SFACE_HEIGHT, blank_face, changed_share
from .identity.sface import SFACE_MATCH_THRESHOLD, SFace, align_for_sface, cosine, shared_sface
from .types import StreamdeidError, TrackedFace

log = logging.getLogger(__name__)

MIN_CHANGED = 0.5  # share of the inner face region a small face must have changed


@dataclass
class GuardVerdict:
    index: int  # position in the faces passed to ``find_leaks``
    leaked: bool
    similarity: float | None  # SFace cosine original vs rendered (None: pixel check)
    # SFace cosine original vs original with the face blanked (None: pixel check, or a
    # similarity under the threshold, for which it is not computed)
    reference: float | None
    changed: float | None  # share of the inner face region that changed (pixel check)

    def describe(self) -> str:
        if self.similarity is not None and self.reference is None:
            return f"SFace similarity {self.similarity:.2f}, under the threshold"
        if self.similarity is not None:
            return f"SFace similarity {self.similarity:.2f} (face-blanked reference {self.reference:.2f})"
        return f"only {self.changed:.0%} of the face changed"


class LeakGuard:
    """Per-track schedule and the SFace / pixel comparison (see the module docstring)."""

    def __init__(self, cfg: AnonymizeConfig | None = None, *, sface: SFace | None = None) -> None:
        cfg = cfg or AnonymizeConfig()
        self.first = int(cfg.leak_first_frames)
        self.every = int(cfg.leak_every)
        self.threshold = float(cfg.leak_threshold)
        self.margin = float(cfg.leak_margin)
        if self.first < 0 or self.every < 1:
            raise StreamdeidError(f"leak guard schedule needs first >= 0 and every >= 1, got {self.first}, "
                                  f"{self.every}")
        if not 0.0 < self.threshold <= 1.0 or self.margin < 0:
            raise StreamdeidError(f"leak guard threshold must be in (0, 1] and margin >= 0, got {self.threshold}, "
                                  f"{self.margin}")
        if self.threshold > SFACE_MATCH_THRESHOLD:
            log.warning("leak guard threshold %.3f is laxer than SFace's %.3f", self.threshold,
                        SFACE_MATCH_THRESHOLD)
        # No SFace, no guard, no generated faces: the caller refuses to run (fail closed). Two threads (the
        # shared one): the guard runs on the render thread beside detection, and still gains (hamilton,
        # composite, two alternating pairs on 2 cores: 23.3 and 23.3 fps against 22.1 and 21.9 with one).
        self.sface = sface if sface is not None else shared_sface()
        self._seen: dict[int, int] = {}
        self.checks = 0  # faces compared so far

    def due(self, track_id: int, measured: bool = True) -> bool:
        """Count one rendered frame of ``track_id``; True when this one is to be checked. A sampling guard
        (``every`` > 1, which lets the detector skip frames) counts only frames where the face was detected
        (``measured`` landmarks): a check due on a held or back-filled face waits for the next detection."""
        if self.every > 1 and not measured:
            return False
        n = self._seen.get(track_id, 0)
        self._seen[track_id] = n + 1
        return n < self.first or (n - self.first) % self.every == self.every - 1

    def find_leaks(self, before: np.ndarray, after: np.ndarray, faces: Sequence[TrackedFace]) -> list[GuardVerdict]:
        """Compare each face of ``before`` (original frame) with ``after`` (rendered frame)."""
        verdicts: list[GuardVerdict | None] = [None] * len(faces)
        sface_idx, orig, anon = [], [], []
        for i, face in enumerate(faces):
            lm = np.asarray(face.landmarks, dtype=np.float64)
            height = float(face.box[3] - face.box[1])
            crops = None
            if height >= MIN_SFACE_HEIGHT and landmarks_usable(face.landmarks, face.box):
                try:
                    crops = align_for_sface(before, lm), align_for_sface(after, lm)
                except ValueError:  # degenerate landmarks
                    crops = None
            if crops is None:
                changed = changed_share(before, after, _inner_points(face))
                verdicts[i] = GuardVerdict(i, changed < MIN_CHANGED, None, None, changed)
                continue
            sface_idx.append(i)
            orig.append(crops[0])
            anon.append(crops[1])
        if sface_idx:
            for v in self._judge(sface_idx, np.stack(orig), np.stack(anon)):
                verdicts[v.index] = v
        self.checks += len(faces)
        return [v for v in verdicts if v is not None]

    def _judge(self, index: list[int], orig: np.ndarray, anon: np.ndarray) -> list[GuardVerdict]:
        """SFace verdicts for aligned 112 px crops ``orig`` / ``anon`` ([N, 112, 112, 3] each).

        The face-blanked reference only matters for faces already over the threshold,
        so it is embedded for those alone: the same verdicts for two embeddings per face
        instead of three (SFace is nearly all of the guard's cost).
        """
        n = len(index)
        emb = self.sface.embed(np.concatenate([orig, anon]))  # [2N, 128]
        sims = np.atleast_1d(cosine(emb[:n], emb[n:]))
        refs: list[float | None] = [None] * n
        over = [k for k in range(n) if sims[k] >= self.threshold]
        if over:
            e_blank = self.sface.embed(np.stack([blank_face(orig[k]) for k in over]))
            for k, r in zip(over, np.atleast_1d(cosine(emb[over], e_blank))):
                refs[k] = float(r)
        return [GuardVerdict(i, bool(ref is not None and sim - ref >= self.margin), float(sim), ref, None)
                for i, sim, ref in zip(index, sims, refs)]


def _inner_points(face: TrackedFace) -> np.ndarray:
    """Landmarks when plausible, else the middle half of the box (eyes-to-mouth area)."""
    if landmarks_usable(face.landmarks, face.box):
        return np.asarray(face.landmarks, dtype=np.float64)
    x0, y0, x1, y1 = (float(v) for v in face.box)
    w, h = x1 - x0, y1 - y0
    return np.array([[x0 + w / 4, y0 + h / 4], [x1 - w / 4, y1 - h / 4]])
