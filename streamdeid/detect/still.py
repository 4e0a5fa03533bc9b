"""The passes a still image gets: a photo has no second frame, so it leans to recall.

A video carries a face the detector missed on one frame through the tracker and
the next detector run; a still gets one look. ``StillFinder`` spends that look on
the faces one YuNet pass scores low: it runs the pipeline's own passes (fast and
small-face scan, see finder.py) and four more at the scan's size, each aimed at
one way the synthetic crowds of ``benchmarks/recall.py`` hide faces:

* a larger scan (x1.5, capped at MAX_SCAN_SIDE): the smallest faces;
* CLAHE on the luma: a dark face on a bright background, which the frame-wide
  gamma of finder.brighten leaves dark because the frame's mean is bright;
* the mirror image: YuNet is not symmetric, and scores some faces only one way round;
* an unsharp mask: defocused and motion-blurred faces.

and a pass of a second, independently trained detector, CenterFace (detect/centerface.py), at
native resolution: it finds dark, soft faces every YuNet pass scores low (see CENTERFACE_THRESHOLD).

The fused YuNet boxes (NMS over every pass) are then sorted by how sure they are. A
box the pipeline's own passes score SURE_SCORE or more is kept as it is. Any other
box (one only the extra passes found, or one the own passes scored under
SURE_SCORE; every pass goes down to WEAK_FRACTION of the threshold) must survive a
closer look (detect/closer.py): the crop around it, scaled so the face is 96 px tall, scored
again as it is and after CLAHE, at the run's threshold; when that finds nothing on
the face and some pass boxed the same face taller (a box around part of a face
frames a look that blows the face past its crop), a second look is framed around
the tallest such box (up to MAX_WINDOW_GROWTH times taller). The passes also find
buttons, watches and chandelier lamps in high-resolution photos (obama.jpg: 45
boxes for one face); the closer look removes most of those and few faces. CenterFace's boxes
skip the closer look (YuNet's closer look cannot confirm the faces only CenterFace finds): one it
puts where no YuNet box is, is added as it is.
Measured in docs/recall.md and by benchmarks/still_passes.py.
Candidates down to a third of the threshold rather than a half: 12-16 px faces
93% -> 95-96%, 3.7 s -> 5.5 s a 1280x720 still (most of it the closer look).
"""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np

from streamdeid.config import DetectConfig
from streamdeid.detect.base import Detector
from streamdeid.detect.centerface import CenterFaceDetector
from streamdeid.detect.closer import CloserLook, local_contrast
from streamdeid.detect.finder import MAX_SCAN_SIDE, SCAN_FACE_PX, FaceFinder, brighten, merge, odd_boxes
from streamdeid.detect.turns import ACTIVATE_SCORE, TURNS, outscored, own_faces, turned, turned_back
from streamdeid.track.matching import iou_matrix
from streamdeid.types import Detections

# Every pass keeps boxes down to this share of the run's threshold: candidates for the closer look.
WEAK_FRACTION = 0.33
# A box the pipeline's own passes (fast, scan) score this much is kept without a closer look. Nine
# synthetic crowds (seeds 0-8, candidates down to half the threshold): at 0.3 (the threshold), 42 false
# boxes; at 0.5, 23 and one face fewer of 1,345 >= 16 px; obama.jpg: 5 boxes -> 1.
SURE_SCORE = 0.5
# Two boxes are the same face from this IoU (as the finder's NMS threshold).
AGREE_IOU = 0.3
EXTRA_SCALE = 1.5
# The second look's box: at most this many times the candidate's height (a taller box holds more than its
# face). Nine held-out crowds (seeds 20-28): one face more of 957 >= 24 px and two more under 12 px, 0.3
# false boxes a still more, 0.1 s a still.
MAX_WINDOW_GROWTH = 1.8
# CenterFace's pass: boxes it scores this much are kept. On synthetic crowds (benchmarks/still_passes.py)
# it added, to the YuNet passes, 4 of the 5 faces >= 24 px they missed (seeds 0-8) and 2 of 3 plus one
# 16-24 px face (held-out seeds 20-28), with no false box, 0.4-0.6 s a 1280x720 still; at 0.3, one face
# fewer on each. On the shared photos and clip frames it put no box where the YuNet passes had none.
# That is at the default --threshold (DetectConfig.score_threshold, 0.3); another run threshold scales it
# (--threshold 0.6: 0.4), so a user who asks for fewer, surer boxes gets them from both detectors.
CENTERFACE_THRESHOLD = 0.2
# A photo larger than MAX_SCAN_SIDE is scanned below its own resolution (a 6000 x 4000 photo at 0.64: faces
# from 38 px). It gets one more pass, at its own resolution, over tiles of TILE_SIDE that overlap by
# TILE_OVERLAP (a face up to that tall lies whole in one of them; larger ones the scan finds): faces from
# SCAN_FACE_PX. On a 6000 x 4000 photo of UTKFace faces (a red-team check) the scan alone left 12 of 726
# faces of 40-48 px and 59 of 363 of 32 px uncovered.
TILE_SIDE = 1920
TILE_OVERLAP = 160
# YuNet's landmarks: right eye, left eye, nose tip, right and left mouth corner (the subject's).
# A mirrored image swaps the subject's sides.
MIRROR_LANDMARKS = [1, 0, 2, 4, 3]


def mirrored(dets: Detections, width: int) -> Detections:
    """Detections found on ``image[:, ::-1]`` in the original image's coordinates."""
    if not len(dets):
        return dets
    boxes = dets.boxes.copy()
    boxes[:, [0, 2]] = width - dets.boxes[:, [2, 0]]
    landmarks = dets.landmarks[:, MIRROR_LANDMARKS].copy()
    landmarks[..., 0] = width - landmarks[..., 0]
    return Detections(boxes, dets.scores.copy(), landmarks)


def sharpened(image: np.ndarray) -> np.ndarray:
    """Unsharp mask (sigma 2 px, amount 1): gives soft faces back some edges."""
    return cv2.addWeighted(image, 2.0, cv2.GaussianBlur(image, (0, 0), 2.0), -1.0, 0)


def _largest_agreeing(boxes: np.ndarray, passes: list[Detections]) -> np.ndarray:
    """[N, 4]: for each box, the tallest box any pass put on the same face (IoU >= AGREE_IOU; itself at
    least). The closer look is framed around it: framed around a pass's box that holds only part of the
    face, the look blows the face past its crop (synthetic_crowd_2.png: a 37 px face boxed at 25 px)."""
    every = [p.boxes for p in passes if len(p)]
    if not len(boxes) or not every:
        return boxes
    every = np.concatenate(every)
    height, every_height = boxes[:, 3] - boxes[:, 1], every[:, 3] - every[:, 1]
    agree = iou_matrix(boxes, every) >= AGREE_IOU  # [N, M]
    # ... and at most MAX_WINDOW_GROWTH times as tall: a taller one holds more than this face
    agree &= every_height[None, :] <= MAX_WINDOW_GROWTH * height[:, None]
    tall = np.where(agree, every_height[None, :], -1.0)
    best = every[tall.argmax(axis=1)]
    own = height >= tall.max(axis=1)
    return np.where(own[:, None], boxes, best)


class StillFinder:
    """Every pass over one still image; built around the run's ``FaceFinder`` (same config)."""

    def __init__(self, finder: FaceFinder) -> None:
        self.finder = finder
        cfg = finder.cfg
        self.threshold = float(cfg.score_threshold)
        self.weak = self.threshold * WEAK_FRACTION
        self.centerface_threshold = min(0.95, CENTERFACE_THRESHOLD * self.threshold / DetectConfig.score_threshold)
        self._detectors: dict[int, Detector] = {}
        self._closer: CloserLook | None = None
        self._centerface: dict[int, Detector] = {}  # by input side (0: native)

    def _detector(self, side: int) -> Detector:
        """A weak-threshold detector whose input's longest side is ``side``."""
        if side not in self._detectors:
            cfg = self.finder.cfg
            self._detectors[side] = self.finder.detector(replace(cfg, input_size=side, score_threshold=self.weak))
        return self._detectors[side]

    def find(self, image: np.ndarray) -> Detections:
        """Faces in one BGR still, from every pass, fused (see the module docstring), turned faces too."""
        h, w = image.shape[:2]
        if not h or not w:
            return Detections.empty()
        bright = brighten(image)
        found = self._find_upright(image, bright)
        if not self.finder.cfg.look_turned:
            return found
        taken = self._turned(image, bright, found)
        # a face the upright passes boxed with a landmark pattern of an upright face, which a turn finds surer,
        # is the turned one: its landmarks turn the cover with the face (two_people.jpg a quarter turned: the
        # upright box scored 0.56 and left mouth and chin bare, the turned one 0.93)
        outdone = outscored(found, taken)
        return merge([found[~outdone], *taken], AGREE_IOU)

    def _turned(self, image: np.ndarray, bright: np.ndarray, found: Detections) -> list[Detections]:
        """Faces turned in the still (detect/turns.py: sideways, upside down, diagonal) that the upright
        passes (``found``) did not box. Each turn is probed by the fast pass and the scan, which keep their sure faces
        (ACTIVATE_SCORE) of their own: someone lying down, a face reflected in a table. A turn that finds
        more sure faces than ``found`` holds is how the photo stands (stored sideways): it gets every
        pass of ``find``, weak faces too. Every pass on every turn of an upright photo would add the weak
        boxes those passes find on any picture (group_meeting.jpg: 14 more, none a face). ``bright``:
        brighten(image)."""
        upright_sure = int((found.scores >= ACTIVATE_SCORE).sum())
        taken = []
        for angle in TURNS:
            view = turned(bright, angle)
            vw, vh = view.image.shape[1::-1]
            fast_side = self.finder.fast_side(vw, vh)
            passes = [self._detector(fast_side).detect(view.image),
                      self._detector(self.finder.scan_side(vw, vh) or fast_side).detect(view.image)]
            probe = turned_back(merge(passes, AGREE_IOU), view.back)
            own, confident = own_faces(probe, [found]), probe.scores >= ACTIVATE_SCORE
            sure = own & confident
            if sure.sum() > upright_sure:
                whole = turned(image, angle)
                dets = turned_back(self._find_upright(whole.image, brighten(whole.image)), whole.back)
                taken.append(dets[own_faces(dets, [found])])
            elif sure.any():
                taken.append(self._unless_odd(image, probe[sure], found, angle))
            surer = ~own & confident
            if surer.any():  # on faces the upright passes boxed: outscored() decides in find()
                taken.append(probe[surer])
        return taken

    def _unless_odd(self, image: np.ndarray, turned_faces: Detections, found: Detections, angle: int) -> Detections:
        """``turned_faces`` less those far larger than the faces around them (finder.odd_boxes) that a closer
        look, turned the same way, does not find sure (ACTIVATE_SCORE): on a synthetic crowd of 20-40 px faces
        the 45-degree probe boxed a table's cross-shaped foot at 0.8 and more, a cover 110 px wide."""
        h, w = image.shape[:2]
        odd = odd_boxes(np.concatenate([found.boxes, turned_faces.boxes]), w, h)[len(found):]
        if not odd.any():
            return turned_faces
        if self._closer is None:
            self._closer = CloserLook(self.finder)
        keep = ~odd
        for k in np.flatnonzero(odd):
            look = self._closer.look(image, turned_faces.boxes[k], bright=True, turns=(angle,))
            keep[k] = look is not None and float(look.scores[0]) >= ACTIVATE_SCORE
        return turned_faces[keep]

    def _find_upright(self, image: np.ndarray, bright: np.ndarray) -> Detections:
        """Faces in one BGR still as it stands, from every pass, fused (``bright``: brighten(image))."""
        h, w = image.shape[:2]
        fast_side = self.finder.fast_side(w, h)
        side = self.finder.scan_side(w, h) or fast_side
        larger = min(round(side * EXTRA_SCALE), MAX_SCAN_SIDE)
        scan = self._detector(side)
        own = [self._detector(fast_side).detect(bright), scan.detect(bright)]
        extra = [scan.detect(local_contrast(bright)), mirrored(scan.detect(np.ascontiguousarray(bright[:, ::-1])), w),
                 scan.detect(sharpened(bright))]
        if larger > side * 1.1:
            extra.append(self._detector(larger).detect(bright))
        if max(w, h) > side:  # scanned below its own resolution: tiles at it
            extra.append(self._tiled(bright))
        if side != fast_side:
            own[1], *extra = [self.finder.scan_trusted(p, w, h) for p in [own[1], *extra]]
        found = merge(own + extra, AGREE_IOU)  # NMS over every pass, the best-scored box of each face
        if not len(found):
            return found
        sure = self._sure(found, own)
        weak = found[~sure]
        yunet = merge([found[sure], self.zoomed(bright, weak, _largest_agreeing(weak.boxes, own + extra))],
                      AGREE_IOU)
        return self._with_centerface(yunet, image)

    def smallest_face(self, width: int, height: int) -> float:
        """Face height (source pixels) these passes look for in a still of this size."""
        floor = self.finder.smallest_face(width, height)
        scanned = self.finder.scan_side(width, height) or self.finder.fast_side(width, height)
        return min(floor, float(SCAN_FACE_PX)) if max(width, height) > scanned else floor

    def _tiled(self, image: np.ndarray) -> Detections:
        """YuNet at the image's own resolution over overlapping tiles (TILE_SIDE), in image coordinates."""
        h, w = image.shape[:2]
        (xs, tw), (ys, th) = _tile_starts(w), _tile_starts(h)
        detector = self._detector(max(tw, th))
        found = []
        for y in ys:
            for x in xs:
                d = detector.detect(np.ascontiguousarray(image[y:y + th, x:x + tw]))
                if len(d):
                    found.append(Detections(d.boxes + np.array([x, y, x, y], d.boxes.dtype), d.scores,
                                            d.landmarks + np.array([x, y], d.landmarks.dtype)))
        return merge(found, AGREE_IOU) if found else Detections.empty()

    def _with_centerface(self, yunet: Detections, image: np.ndarray) -> Detections:
        """``yunet`` plus CenterFace's boxes on faces it has no box on (IoU < AGREE_IOU with all of them)."""
        side = 0 if max(image.shape[:2]) <= MAX_SCAN_SIDE else MAX_SCAN_SIDE
        if side not in self._centerface:
            self._centerface[side] = CenterFaceDetector(DetectConfig(
                backend="centerface", input_size=side, score_threshold=self.centerface_threshold))
        other = self._centerface[side].detect(image)
        if len(other) and len(yunet):
            other = other[iou_matrix(other.boxes, yunet.boxes).max(axis=1) < AGREE_IOU]
        return merge([yunet, other], AGREE_IOU)

    @staticmethod
    def _sure(kept: Detections, own: list[Detections]) -> np.ndarray:
        """[N] bool: the kept boxes the pipeline's own passes found with a score of SURE_SCORE or more."""
        strong = [p.boxes[p.scores >= SURE_SCORE] for p in own if len(p)]
        strong = np.concatenate(strong) if strong else np.zeros((0, 4))
        if not len(strong):
            return np.zeros(len(kept), bool)
        return iou_matrix(kept.boxes, strong).max(axis=1) >= AGREE_IOU

    def zoomed(self, image: np.ndarray, candidates: Detections, windows: np.ndarray | None = None) -> Detections:
        """The candidates a closer look confirms (score >= the run's threshold), with the closer look's box
        and landmarks. ``windows`` ([N, 4]): a second box to frame the look around when the look around
        the candidate's own box finds nothing there (see _largest_agreeing)."""
        if self._closer is None:
            self._closer = CloserLook(self.finder)
        found = []
        for k, box in enumerate(candidates.boxes):
            frames = [box] if windows is None or np.array_equal(windows[k], box) else [box, windows[k]]
            for frame in frames:
                confirmed = self._closer.look(image, box, frame)
                if confirmed is not None:
                    found.append(confirmed)
                    break
        return merge(found, AGREE_IOU)


def _tile_starts(length: int) -> tuple[list[int], int]:
    """Where equal tiles of at most TILE_SIDE px start along a side of ``length`` px, overlapping by at least
    TILE_OVERLAP, and their size."""
    if length <= TILE_SIDE:
        return [0], length
    n = int(np.ceil((length - TILE_OVERLAP) / (TILE_SIDE - TILE_OVERLAP)))
    size = int(np.ceil((length + (n - 1) * TILE_OVERLAP) / n))
    step = (length - size) / (n - 1)
    return [int(round(i * step)) for i in range(n)], size
