"""Privacy check of a finished video: is any face of the original still recognisable?

Every face YuNet finds in the *original* frames at full resolution is compared
(SFace cosine similarity, same landmarks, 112 px ArcFace crops) with the same
place in the output frame.

SFace's 0.363 threshold was set on clean, aligned faces. On small, dark video
faces it also "matches" crops whose face is gone entirely, because hair,
clothes and background (which anonymization deliberately keeps) fill the rest
of the 112 px crop: on the shared clips a solid fill still matches 5 % of
faces. So a face counts as leaked only when SFace matches it *and* the match
exceeds, by ``EXCESS_MARGIN``, the similarity of the original crop with its
own face blanked (an ellipse over brows to chin filled with its mean colour):
the match must come from the face, not from its surroundings. Measured on 376
faces of the shared media: identity 100 % leaked, blur sigma 0.02 79 %,
0.05 11 %, the default blur, mosaic and solid 0 %. Both figures are reported.
Faces too small for SFace (``MIN_SFACE_HEIGHT``) are checked by pixels.

``check_video(..., faces=...)`` checks given reference faces instead (boxes from
detectors the pipeline does not run, or hand labels: see evaluation.recall),
so the pipeline's detector does not choose the faces it is graded on; YuNet then
only places each reference face's landmarks for SFace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import av
import cv2
import numpy as np

from ..config import DetectConfig
from ..detect import create_detector
from ..track.matching import iou_matrix
from .compare import MIN_SFACE_HEIGHT, blank_face, changed_share
from .sface import SFACE_MATCH_THRESHOLD, SFace, align_for_sface, cosine

EXCESS_MARGIN = 0.15  # cosine by which a leak must beat the blanked-face reference
LOCATE_FACE_PX = 96  # a reference face is resized to this height to place its landmarks


@dataclass
class FaceCheck:
    frame: int
    box: tuple[float, float, float, float]
    similarity: float  # SFace cosine, original vs output
    reference: float  # SFace cosine, original vs original with the face blanked
    changed: float  # share of the eyes-to-mouth region that changed in the output

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]

    def leaked(self, threshold: float = SFACE_MATCH_THRESHOLD) -> bool:
        if self.height < MIN_SFACE_HEIGHT:
            return self.changed < 0.5
        return self.similarity >= threshold and self.similarity - self.reference >= EXCESS_MARGIN


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
        return [c for c in self.checks if c.leaked(self.threshold)]

    @property
    def plain_matches(self) -> int:
        """Faces SFace matches at the threshold alone (context included)."""
        return sum(c.similarity >= self.threshold for c in self.checks)

    @property
    def max_similarity(self) -> float:
        return max((c.similarity for c in self.checks), default=float("nan"))


def _frames(path: str):
    with av.open(path) as container:
        for frame in container.decode(video=0):
            yield frame.to_ndarray(format="bgr24")


# Where YuNet puts the 5 landmarks in its own box (fractions of width, height; image-left eye first):
# medians over 343 faces scoring >= 0.8 on every third frame of the five shared clips.
BOX_LANDMARKS = np.array([[0.23, 0.36], [0.68, 0.37], [0.45, 0.56], [0.29, 0.72], [0.64, 0.73]])


def landmarks_in_box(image: np.ndarray, box: np.ndarray, locator) -> np.ndarray:
    """5 landmarks [5, 2] of the face in ``box`` (a reference box from another detector or a person).
    ``locator`` (a YuNet at a low threshold) places them when it finds a face overlapping the box;
    otherwise (a dark or defocused face) they are BOX_LANDMARKS placed in the box. YuNet only places
    landmarks here; which faces are checked was decided without it."""
    found = _located_landmarks(image, box, locator)
    if found is not None:
        return found
    x1, y1, x2, y2 = (float(v) for v in box)
    return BOX_LANDMARKS * (x2 - x1, y2 - y1) + (x1, y1)


def _located_landmarks(image: np.ndarray, box: np.ndarray, locator) -> np.ndarray | None:
    x1, y1, x2, y2 = (float(v) for v in box)
    bw, bh = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
    h, w = image.shape[:2]
    cx0, cy0 = max(int(x1 - bw / 2), 0), max(int(y1 - bh / 2), 0)
    cx1, cy1 = min(int(x2 + bw / 2) + 1, w), min(int(y2 + bh / 2) + 1, h)
    if cx1 - cx0 < 2 or cy1 - cy0 < 2:
        return None
    scale = LOCATE_FACE_PX / bh  # the face at a size YuNet sees well
    crop = cv2.resize(image[cy0:cy1, cx0:cx1], None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
    dets = locator.detect(crop)
    if not len(dets):
        return None
    target = (np.array([x1, y1, x2, y2]) - (cx0, cy0, cx0, cy0)) * scale
    ious = iou_matrix(dets.boxes, target[None])[:, 0]
    best = int(ious.argmax())
    if ious[best] < 0.3:
        return None
    return dets.landmarks[best] / scale + (cx0, cy0)


def check_video(original: str, output: str, *, score_threshold: float = 0.6,
                sface: SFace | None = None, faces: Mapping[int, np.ndarray] | None = None) -> LeakReport:
    """Compare ``output`` against ``original`` frame by frame (same frame count expected).

    ``faces``: reference boxes per frame index ([N, 4], from detectors the pipeline does not run or
    from hand labels) to check instead of YuNet's detections; only those frames are checked (see
    landmarks_in_box for how their landmarks are placed)."""
    detector = create_detector(DetectConfig(input_size=0, score_threshold=score_threshold))
    locator = create_detector(DetectConfig(input_size=0, score_threshold=0.2)) if faces is not None else None
    sface = sface or SFace()
    report = LeakReport()
    for index, (src, out) in enumerate(zip(_frames(original), _frames(output), strict=True)):
        report.frames += 1
        if faces is None:
            dets = detector.detect(src)
            boxes, marks = list(dets.boxes), list(dets.landmarks)
        else:
            boxes = list(np.asarray(faces.get(index, np.zeros((0, 4))), np.float64).reshape(-1, 4))
            marks = [landmarks_in_box(src, b, locator) for b in boxes]
        located = list(zip(boxes, marks))
        if not located:
            continue
        a = np.stack([align_for_sface(src, lm) for _, lm in located])  # [N, 112, 112, 3]
        b = np.stack([align_for_sface(out, lm) for _, lm in located])
        ea = sface.embed(a)
        sims = np.atleast_1d(cosine(ea, sface.embed(b)))
        refs = np.atleast_1d(cosine(ea, sface.embed(np.stack([blank_face(c) for c in a]))))
        for (box, lm), sim, ref in zip(located, sims, refs):
            report.checks.append(FaceCheck(index, tuple(float(v) for v in box), float(sim), float(ref),
                                           changed_share(src, out, lm)))
    return report
