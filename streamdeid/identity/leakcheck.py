"""Privacy check of a finished video: is any face of the original still recognisable?

Every face YuNet finds in the *original* frames at full resolution is compared
(SFace cosine similarity, same landmarks) with the same place in the output
frame. A similarity at or above the match threshold is a leak. Used by the
end-to-end tests and by ``benchmarks/quality.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import av
import numpy as np

from ..config import DetectConfig
from ..detect import create_detector
from .sface import SFACE_MATCH_THRESHOLD, SFace, align_for_sface, cosine


@dataclass
class FaceCheck:
    frame: int
    box: tuple[float, float, float, float]
    similarity: float


@dataclass
class LeakReport:
    frames: int = 0
    checks: list[FaceCheck] = field(default_factory=list)
    threshold: float = SFACE_MATCH_THRESHOLD

    @property
    def faces(self) -> int:
        return len(self.checks)

    @property
    def leaks(self) -> list[FaceCheck]:
        return [c for c in self.checks if c.similarity >= self.threshold]

    @property
    def max_similarity(self) -> float:
        return max((c.similarity for c in self.checks), default=float("nan"))


def _frames(path: str):
    with av.open(path) as container:
        for frame in container.decode(video=0):
            yield frame.to_ndarray(format="bgr24")


def check_video(original: str, output: str, *, score_threshold: float = 0.6,
                sface: SFace | None = None) -> LeakReport:
    """Compare ``output`` against ``original`` frame by frame (same frame count expected)."""
    detector = create_detector(DetectConfig(input_size=0, score_threshold=score_threshold))
    sface = sface or SFace()
    report = LeakReport()
    for index, (src, out) in enumerate(zip(_frames(original), _frames(output), strict=True)):
        report.frames += 1
        dets = detector.detect(src)
        if not len(dets):
            continue
        a = np.stack([align_for_sface(src, lm) for lm in dets.landmarks])  # [N, 112, 112, 3]
        b = np.stack([align_for_sface(out, lm) for lm in dets.landmarks])
        sims = cosine(sface.embed(a), sface.embed(b))
        for box, sim in zip(dets.boxes, np.atleast_1d(sims)):
            report.checks.append(FaceCheck(index, tuple(float(v) for v in box), float(sim)))
    return report
