"""A closer look: is there a face at this box? YuNet on the crop around it, at a scale it sees well.

Used where one pass's word is not enough:

* the still passes keep a weak candidate only when a closer look confirms it (detect/still.py): the crop
  reaches ZOOM_CONTEXT face heights around the box, scaled so the face is ZOOM_FACE_PX tall;
* in a video, a weak box that would start a track is reported at once only when a closer look (the
  still passes' kind) confirms it, else from its second detector run (stages.FaceStage, look_at_weak);
* in a video, a held face (a reported track a detector run missed) stays covered only while closer
  looks still find it there (GuessCheck, track/tracker.py): GUESS_CONTEXT face heights at the frame's
  own scale (never enlarged: a dark 50 px face enlarged to 96 px is lost to YuNet more often).

YuNet runs on the crop at its native size as it is and after CLAHE (a dark face on a bright background
needs the second), at the run's threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import cv2
import numpy as np

from streamdeid.detect.base import Detector
from streamdeid.detect.finder import ODD_SIZE_RATIO, brighten, merge
from streamdeid.detect.turns import turned, turned_back
from streamdeid.track.matching import iou_matrix
from streamdeid.types import Detections, longest_sides

# The crop around a box (ZOOM_CONTEXT times its size) scaled so the face is ZOOM_FACE_PX tall, YuNet's
# comfortable size. Measured on nine synthetic crowds: of the 1,102 weak candidates no two passes agreed
# on, the zoomed look scored 43 on faces >= 0.3 and none on background.
ZOOM_CONTEXT = 3.0
ZOOM_FACE_PX = 96
# A detection of the look is on the same face as the box from this IoU (the finder's NMS threshold).
AGREE_IOU = 0.3
# A guess's look (GuessCheck) reaches this many face heights around it, at the frame's own scale. On
# hamilton's dark audience (frames 50-65, four hand-labelled 50 px faces): enlarged to 96 px with 3
# heights around, YuNet found 3 of 16; at the frame's scale with 5 heights, 13 (with 3 heights, 8).
GUESS_CONTEXT = 5.0
# ... and a larger face is brought down to this height, so a look costs at most one YuNet run on a
# 320 px crop (two when the first finds nothing): 2-6 ms here.
GUESS_FACE_PX = 64


def local_contrast(image: np.ndarray) -> np.ndarray:
    """CLAHE on the L channel of ``image`` (BGR): lifts dark faces on bright backgrounds."""
    lab = cv2.cvtColor(image, cv2.COLOR_BGR2LAB)
    clahe = cv2.createCLAHE(clipLimit=3.0, tileGridSize=(16, 16))
    lab[..., 0] = clahe.apply(lab[..., 0])
    return cv2.cvtColor(lab, cv2.COLOR_LAB2BGR)


def zoom_window(box: np.ndarray, width: int, height: int, context: float = ZOOM_CONTEXT,
                upscale: bool = True, face_px: float = ZOOM_FACE_PX) -> tuple[int, int, int, int, float]:
    """(x0, y0, x1, y1, scale): ``context`` face heights around ``box``, scaled so the face is ``face_px``
    (``upscale`` False: never enlarged, only a larger face brought down to it)."""
    size = max(box[2] - box[0], box[3] - box[1], 1.0)
    cx, cy, half = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2, size * context / 2
    x0, y0 = int(max(0, cx - half)), int(max(0, cy - half))
    x1, y1 = int(min(width, cx + half)), int(min(height, cy + half))
    scale = face_px / size
    return x0, y0, x1, y1, scale if upscale else min(1.0, scale)


class CloserLook:
    """``look(image, box)``: the best detection on the face at ``box``, or None. One YuNet of its own
    (native input size, ``finder``'s threshold): the finder's detectors keep their input sizes.
    ``context`` and ``upscale``: see zoom_window. ``first``: stop at the first pass (as it is, then after
    CLAHE) that finds the face, instead of taking the best of both (GuessCheck: a yes is all it needs,
    and the second YuNet run is half a look's cost)."""

    def __init__(self, finder, *, context: float = ZOOM_CONTEXT, upscale: bool = True, first: bool = False,
                 face_px: float = ZOOM_FACE_PX) -> None:
        self._yunet: Detector = finder.detector(replace(finder.cfg, input_size=0))
        self.context, self.upscale, self.first, self.face_px = context, upscale, first, face_px
        self.looks = 0  # crops looked at (the cost: two YuNet runs on a ~290 px crop each)

    def look(self, image: np.ndarray, box: np.ndarray, frame: np.ndarray | None = None, *,
             bright: bool = False, turns: Sequence[int] = ()) -> Detections | None:
        """The closer look at ``box`` ([4] x1 y1 x2 y2 in ``image``, [H, W, 3] uint8 BGR), framed around
        ``frame`` (default: ``box``): its best-scored detection on the same face (IoU > AGREE_IOU with
        ``box`` or ``frame``), in image coordinates, or None. ``bright``: brighten the crop first, as the
        finder brightens a dark frame (an image the still passes brightened already need not). ``turns``:
        angles (detect/turns.py) to look at the crop turned by where it finds no upright face: a face
        lying down is no face upright."""
        box = np.asarray(box, np.float64)
        frame = box if frame is None else np.asarray(frame, np.float64)
        h, w = image.shape[:2]
        x0, y0, x1, y1, scale = zoom_window(frame, w, h, self.context, self.upscale, self.face_px)
        if x1 <= x0 or y1 <= y0:
            return None
        crop = image[y0:y1, x0:x1]
        size = (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale)))
        shrink = scale < 1 and not self.upscale  # the still passes' look keeps its cubic resize either way
        zoomed = cv2.resize(crop, size, interpolation=cv2.INTER_AREA if shrink else cv2.INTER_CUBIC) \
            if scale != 1 else crop
        if bright:
            zoomed = brighten(zoomed)
        for angle in (0, *turns):  # the crop is cut, sized and brightened once, and turned for each angle
            self.looks += 1
            found = self._look_at(zoomed, angle, box, frame, x0, y0, scale)
            if found is not None:
                return found
        return None

    def _look_at(self, zoomed: np.ndarray, angle: int, box: np.ndarray, frame: np.ndarray, x0: int, y0: int,
                 scale: float) -> Detections | None:
        """``look``'s detection on the ``zoomed`` crop (taken at ``x0``, ``y0``, resized by ``scale``) turned
        ``angle`` degrees (0: as it is)."""
        view = turned(zoomed, angle) if angle else None

        def detect(crop: np.ndarray) -> Detections:  # in the zoomed crop's pixels, whatever the turn
            dets = self._yunet.detect(crop)
            return turned_back(dets, view.back) if view is not None else dets

        seen = view.image if view is not None else zoomed
        if self.first:
            found = self._on_face(detect(seen), box, frame, x0, y0, scale)
            return found if found is not None else \
                self._on_face(detect(local_contrast(seen)), box, frame, x0, y0, scale)
        dets = merge([detect(seen), detect(local_contrast(seen))], AGREE_IOU)
        return self._on_face(dets, box, frame, x0, y0, scale)

    def faces_in(self, image: np.ndarray, box: np.ndarray, face_size: float) -> Detections:
        """The faces about ``face_size`` px (longest side) tall inside ``box`` ([4], a box far larger than
        the faces around it): YuNet on the box and a quarter of it around, as it is and after CLAHE, with
        faces brought down to at most ``self.face_px`` (never enlarged). Only detections whose centre lies
        in ``box`` and that are under ODD_SIZE_RATIO times ``face_size`` count, in image coordinates."""
        box = np.asarray(box, np.float64)
        h, w = image.shape[:2]
        pad = 0.25 * max(box[2] - box[0], box[3] - box[1])
        x0, y0 = int(max(0, box[0] - pad)), int(max(0, box[1] - pad))
        x1, y1 = int(min(w, box[2] + pad)), int(min(h, box[3] + pad))
        if x1 <= x0 or y1 <= y0:
            return Detections.empty()
        self.looks += 1
        scale = min(1.0, self.face_px / max(face_size, 1.0))
        crop = image[y0:y1, x0:x1]
        if scale < 1:
            crop = cv2.resize(crop, (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale))),
                              interpolation=cv2.INTER_AREA)
        crop = brighten(crop)
        dets = merge([self._yunet.detect(crop), self._yunet.detect(local_contrast(crop))], AGREE_IOU)
        if not len(dets):
            return dets
        dets = _to_image(dets, x0, y0, scale)
        cx, cy = (dets.boxes[:, 0] + dets.boxes[:, 2]) / 2, (dets.boxes[:, 1] + dets.boxes[:, 3]) / 2
        inside = (cx > box[0]) & (cx < box[2]) & (cy > box[1]) & (cy < box[3]) \
            & (longest_sides(dets.boxes) < ODD_SIZE_RATIO * face_size)
        return dets[inside]

    @staticmethod
    def _on_face(dets: Detections, box: np.ndarray, frame: np.ndarray, x0: int, y0: int,
                 scale: float) -> Detections | None:
        """The best-scored of ``dets`` (crop pixels) on the face of ``box`` or ``frame``, in image pixels."""
        if not len(dets):
            return None
        dets = _to_image(dets, x0, y0, scale)
        same = np.maximum(iou_matrix(box[None], dets.boxes)[0], iou_matrix(frame[None], dets.boxes)[0]) > AGREE_IOU
        if not same.any():
            return None
        best = int(np.argmax(np.where(same, dets.scores, -1.0)))
        return dets[best:best + 1]


def _to_image(dets: Detections, x0: int, y0: int, scale: float) -> Detections:
    """``dets`` found on a crop taken at (``x0``, ``y0``) and resized by ``scale``, in image pixels."""
    return Detections(dets.boxes / scale + (x0, y0, x0, y0), dets.scores, dets.landmarks / scale + (x0, y0))


def frame_scale_look(finder) -> CloserLook:
    """The look at the frame's own scale (GUESS_CONTEXT face heights around, never enlarged, faces brought
    down to GUESS_FACE_PX, the first pass that finds a face answers): GuessCheck's, and the odd boxes'
    (stages.FaceStage._without_odd)."""
    return CloserLook(finder, context=GUESS_CONTEXT, upscale=False, first=True, face_px=GUESS_FACE_PX)


class GuessCheck:
    """Is a held face (a reported track a detector run missed) still there? ``check(image, box)`` gives
    (looked, found): a box under the fast pass's reliable face size (``finder.fast_floor``: 24 px at
    640x360, 48 px at 1280x720), or cut by the frame's edge, is not looked at (looked False: the guess
    stands as before; a smaller face would be enlarged to be looked at, which loses dark faces, and a look
    at a face the edge cuts cannot frame it: hamilton's performer, hand-labelled at the right edge, was
    uncovered so), otherwise ``found`` is the closer look's detection on it (GUESS_CONTEXT face heights
    at the frame's own scale, never enlarged), or None when the look finds no face there.

    On short_hamilton_clip.mp4 most of the frame changed where no reference face is came from held
    faces kept half a second after the face had gone (benchmarks/precision.py --split: held 4.5% of
    the frame): the performer's head after he turned away, dark audience heads."""

    def __init__(self, finder, turns: Callable[[], Sequence[int]] = tuple) -> None:
        """``turns``: the angles a video's detector runs look at on every run (TurnWatch.active): a held
        face is looked at turned by them too where it shows no upright face."""
        self.closer = frame_scale_look(finder)
        self._floor = finder.fast_floor
        self._turns = turns

    def __call__(self, image: np.ndarray, box: np.ndarray) -> tuple[bool, Detections | None]:
        h, w = image.shape[:2]
        if box[3] - box[1] < self._floor(w, h) or box[0] < 0 or box[1] < 0 or box[2] > w or box[3] > h:
            return False, None  # too small, or cut by the frame's edge (the look cannot frame the face)
        return True, self.closer.look(image, box, bright=True, turns=self._turns())
