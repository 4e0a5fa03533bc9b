"""The pipeline's detection policy: the passes it takes to find every face a person would see.

One backend call at one scale misses faces that are dark, soft or small
(measured with ``benchmarks/recall.py`` against references the pipeline does
not run; figures in docs/recall.md). ``FaceFinder`` adds three cheap remedies:

* **Exposure**: a dark frame is brightened with a gamma curve before detection
  (one LUT). YuNet scores under-exposed faces low: on short_hamilton_clip.mp4's
  dark audience shots it found 609 of 662 CenterFace faces as is, 629 after a
  gamma curve to mean luma 0.45, 658 with that and threshold 0.3. Too strong a
  curve shrinks its boxes on well-lit faces in the same frame (TARGET_LUMA).
* **Fast pass** at ``DetectConfig.input_size`` on every detector run.
* **Small-face scan**: when the fast pass sees a ``min_face`` face smaller than
  ``SCAN_FACE_PX``, an upscaled pass finds it. It costs several fast passes, so
  the pipeline runs it periodically (``DetectConfig.scan_every``; tracks carry
  the faces in between) and on scene cuts and stills. Upscaling alone is no
  substitute for the fast pass: YuNet at 2x on hamilton found 447 of 662
  faces (large faces grow past what it finds well), so the two are merged by NMS.
"""

from __future__ import annotations

import math
from dataclasses import replace

import cv2
import numpy as np

from streamdeid.config import DetectConfig
from streamdeid.detect.base import Detector, nms, scaled_size
from streamdeid.detect.turns import ACTIVATE_SCORE, TurnWatch, own_faces, pooled, replaces, turned, turned_back
from streamdeid.track.matching import intersection_matrix
from streamdeid.types import Detections, StreamdeidError, longest_sides

# Face height (px, at the detector input) from which YuNet finds faces reliably. On synthetic crowds
# (evaluation.crowd, 400 faces, threshold 0.3) it found 96% of 24-40 px faces and 74% of 16-24 px.
SCAN_FACE_PX = 24
# Upscaling cap of the scan (longest side of its input), so a 4K frame does not become 8K: the run
# then looks for faces of SCAN_FACE_PX / scale and says so (FaceFinder.smallest_face).
MAX_SCAN_SIDE = 3840
# Exposure: frames whose mean luma is under this (0-1) are brightened to it with a gamma curve.
# Measured on short_hamilton_clip.mp4 (default run; hand labels with solid fill, and YuNet-found faces
# checked with SFace): 0.40 covered 73 of 74 clear hand-labelled faces but shrank YuNet's box on a 80 px
# face until 3 frames of it leaked; 0.30: 73/74, 1 leak; 0.25: 74/74, none; no brightening: 67/74.
TARGET_LUMA = 0.25
MIN_GAMMA = 0.4  # the strongest brightening (gamma < 1 lifts shadows, keeps highlights)
# ... and a brightened frame this noisy (noise_level, grey levels) is smoothed (a Gaussian of DENOISE_SIGMA
# px) before detection. Brightening a dark, noisy picture (a night camera) lifts its noise with it, and YuNet
# scores the faces under the threshold: a red team's walking clip darkened (gamma 3) with sensor noise
# (sigma 10) left faces of 51-64 px bare; on its frames YuNet scored 21 of 47 dlib faces 0.3 or more as
# brightened, 43 smoothed at 1 px, 46 at 1.5 px; on the same frames without the noise, 47 either way
# (median score 0.91, 0.90 and 0.89). Whole runs (docs/recall.md, "Dark, noisy footage") left fewer bare at
# 1.5 px than at 1. The shared clips measure 0.5-2.9 after brightening, the store aisle's shelves 5.0, the
# noisy copies 6-20.
NOISY_SIGMA = 5.5
DENOISE_SIGMA = 1.5
# A box lying in a larger one (this share of its area inside, its centre within NESTED_CENTRE of the
# larger box's half-sizes from its centre) is the same face boxed twice, at two scales: NMS keeps both
# (their IoU is under 0.3 when one is twice the other's height), and each would start a track. On a
# crowd pan 37 of 4,791 boxes were such, the larger box covers the smaller, and the run kept 10 fewer tracks.
NESTED_INSIDE = 0.8
NESTED_CENTRE = 0.5


def exposure_gamma(image: np.ndarray) -> float:
    """Gamma that brings the mean luma of ``image`` (BGR) up to TARGET_LUMA; 1.0 for a bright enough frame."""
    small = cv2.resize(image, (64, 36), interpolation=cv2.INTER_AREA) if image.shape[1] > 64 else image
    mean = float(cv2.cvtColor(small, cv2.COLOR_BGR2GRAY).mean()) / 255.0
    if mean >= TARGET_LUMA or mean <= 0.0:
        return 1.0
    return float(np.clip(math.log(TARGET_LUMA) / math.log(mean), MIN_GAMMA, 1.0))


def noise_level(image: np.ndarray) -> float:
    """The noise's standard deviation in grey levels (Immerkaer's fast estimate: the mean absolute
    response to a Laplacian-difference mask that cancels smooth gradients). Texture counts too: the store
    aisle's shelves give 4.8-5.0, clean clips 0.5-2.9. Frames over 1280 px are read at every other pixel,
    which keeps white noise's statistics."""
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    if max(grey.shape) > 1280:
        grey = grey[::2, ::2]
    response = np.abs(cv2.filter2D(grey.astype(np.float32), -1, _NOISE_MASK))[1:-1, 1:-1]
    if response.size == 0:  # a frame of 1 or 2 px a side has no inner pixel: no noise to speak of
        return 0.0
    return float(math.sqrt(math.pi / 2) * response.mean() / 6)


_NOISE_MASK = np.array([[1, -2, 1], [-2, 4, -2], [1, -2, 1]], np.float32)


def brighten(image: np.ndarray) -> np.ndarray:
    """``image`` with its exposure corrected for detection (the same array when nothing to do), and
    smoothed where the brightening left it noisy (NOISY_SIGMA)."""
    gamma = exposure_gamma(image)
    if gamma >= 0.999:
        return image
    lut = np.round(255.0 * (np.arange(256) / 255.0) ** gamma).astype(np.uint8)
    bright = cv2.LUT(image, lut)
    return cv2.GaussianBlur(bright, (0, 0), DENOISE_SIGMA) if noise_level(bright) >= NOISY_SIGMA else bright


def concat(parts: list[Detections]) -> Detections:
    """Several passes' detections as one, in order, nothing removed."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return Detections.empty()
    if len(parts) == 1:
        return parts[0]
    return Detections(np.concatenate([p.boxes for p in parts]), np.concatenate([p.scores for p in parts]),
                      np.concatenate([p.landmarks for p in parts]))


def merge(parts: list[Detections], iou_threshold: float) -> Detections:
    """Union of several passes' detections, duplicates removed by NMS (best score kept)."""
    parts = [p for p in parts if len(p)]
    if len(parts) <= 1:
        return concat(parts)
    dets = concat(parts)
    keep = nms(dets.boxes, dets.scores, iou_threshold)
    return Detections(dets.boxes[keep], dets.scores[keep], dets.landmarks[keep])


def drop_nested(dets: Detections) -> Detections:
    """``dets`` less the boxes nested in a larger box (NESTED_INSIDE, NESTED_CENTRE): O(N^2) over
    [N, N] matrices, a crowd's few hundred boxes."""
    if len(dets) < 2:
        return dets
    b = dets.boxes.astype(np.float64)
    w, h = np.maximum(b[:, 2] - b[:, 0], 1e-3), np.maximum(b[:, 3] - b[:, 1], 1e-3)
    cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
    # [i, j]: box i's centre from box j's, in j's half-sizes
    off = np.hypot((cx[:, None] - cx[None, :]) / (w[None, :] / 2), (cy[:, None] - cy[None, :]) / (h[None, :] / 2))
    area = w * h
    nested = (intersection_matrix(b, b) >= NESTED_INSIDE * area[:, None]) & (area[:, None] < area[None, :]) & (off <= NESTED_CENTRE)
    drop = nested.any(axis=1)
    return dets[~drop] if drop.any() else dets


def holds_a_centre(boxes: np.ndarray) -> np.ndarray:
    """[N] bool: the boxes ([N, 4] x1 y1 x2 y2) with another box's centre inside. A face's box holds no
    other face's centre (the faces would hide each other), so such a box lies over several faces, or is
    one face boxed twice (drop_nested keeps the larger)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
    inside = ((cx[None, :] > b[:, 0:1]) & (cx[None, :] < b[:, 2:3])
              & (cy[None, :] > b[:, 1:2]) & (cy[None, :] < b[:, 3:4]))  # [i, j]: box j's centre in box i
    np.fill_diagonal(inside, False)
    return inside.any(axis=1)


# A box this many times larger (longest side) than the median of the boxes around it is unlike a face
# among faces (a crowd's faces are of a size, a body or an instrument boxed as a "face" is not): on the
# marching band's pan a cymbal boxed at 121 px among 24 px faces, a body at 53 px among 35 px ones.
ODD_SIZE_RATIO = 1.4
# ... judged only where at least this many boxes are within (3 left the store aisle's false box on a
# brown jacket, 61 px beside two faces of 26-28 px, to be held and back-filled 13 frames)
ODD_NEIGHBOURS = 2
ODD_REACH = 4.0  # ... this many of the box's sizes of its centre
ODD_EDGE = 0.01  # share of the frame's longer side: a box this near an edge is cut by it
# ... and then odd from this many times the typical size (its side along the edge; a face cut by the edge
# is boxed less surely): the suit at hamilton's right edge (194 px among 76 px faces) is, the dark face
# leaving at its left edge (65 px among 44 px faces) is not.
ODD_EDGE_RATIO = 2.0


def typical_sizes(boxes: np.ndarray) -> np.ndarray:
    """[N] float: for each box ([N, 4] x1 y1 x2 y2), the median size (longest side) of the other boxes
    within ODD_REACH of its size of its centre, where there are at least ODD_NEIGHBOURS of them (else NaN)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    size = np.maximum(longest_sides(b), 1e-3)
    centre = (b[:, :2] + b[:, 2:]) / 2
    dist = np.hypot(*(centre[:, None, :] - centre[None, :, :]).transpose(2, 0, 1))  # [N, N]
    near = dist < ODD_REACH * size[:, None]
    np.fill_diagonal(near, False)
    typical = np.full(len(b), np.nan)
    for i in np.flatnonzero(near.sum(axis=1) >= ODD_NEIGHBOURS):
        typical[i] = np.median(size[near[i]])
    return typical


def odd_boxes(boxes: np.ndarray, width: int, height: int, typical: np.ndarray | None = None) -> np.ndarray:
    """[N] bool: boxes ([N, 4] x1 y1 x2 y2 in a ``width`` x ``height`` frame) unlike a face among faces:
    ODD_SIZE_RATIO times their typical_sizes. A box the frame's edge cuts (within ODD_EDGE of it) is
    judged by its side along that edge, the one the cut leaves whole, against ODD_EDGE_RATIO: a face half
    out of the picture is boxed oddly (a dark face leaving at hamilton's left edge, boxed 65 px tall among
    44 px faces). A box two edges cut (a corner) is never odd: hamilton's performer in profile at the
    top right, hand-labelled, is boxed 280 px tall. ``typical``: typical_sizes(boxes), when the caller
    has it already."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    w, h = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    typical = np.nan_to_num(typical_sizes(b) if typical is None else typical, nan=np.inf)
    m = ODD_EDGE * max(width, height)
    cut_x = (b[:, 0] <= m) | (b[:, 2] >= width - m)  # by the left or right edge: its height is whole
    cut_y = (b[:, 1] <= m) | (b[:, 3] >= height - m)  # by the top or bottom edge: its width is whole
    whole = ~cut_x & ~cut_y
    return ((whole & (longest_sides(b) >= ODD_SIZE_RATIO * typical))
            | (cut_x & ~cut_y & (h >= ODD_EDGE_RATIO * typical))
            | (cut_y & ~cut_x & (w >= ODD_EDGE_RATIO * typical)))


def _turned_instead(found: list[Detections], upright: int, surer: list[Detections]) -> list[Detections]:
    """``found`` (the upright passes' detections, holding ``upright`` boxes, then the turned passes') with each
    upright box a sure turned box outscores (turns.outscored: a sideways face boxed with upright landmarks, whose
    cover left mouth and chin bare) replaced by that turned box."""
    pool, ups = pooled(surer), pooled(found)
    if pool is None or ups is None or not upright:
        return found
    swap = replaces(ups[:upright], pool)  # [upright, M]
    if not swap.any():
        return found
    keep = np.ones(len(ups), bool)
    keep[:upright] = ~swap.any(axis=1)
    return [ups[keep], pool[swap.any(axis=0)]]


def min_face_over_picture(min_face: int, width: int, height: int, smallest: float, what: str) -> str | None:
    """What to say when --min-face is taller than the picture (``what``: "video", "photo"): no face in it can
    be that tall, so the value means nothing and the passes look for faces from ``smallest`` px, as for any
    value they see without a scan. None when it fits."""
    if min_face <= height:
        return None
    return (f"{width}x{height} {what}: --min-face {min_face} is taller than the picture ({height} px); "
            f"looked for faces from {smallest:.0f} px")


class FaceFinder:
    """Runs the passes of one detector backend over frames of any size."""

    def __init__(self, cfg: DetectConfig | None = None) -> None:
        from streamdeid.detect import create_detector  # the registry imports this module's siblings

        self.cfg = cfg or DetectConfig()
        if self.cfg.min_face < 0:
            raise StreamdeidError(f"--min-face must be >= 0, got {self.cfg.min_face}")
        self._create = create_detector
        self.fast: Detector = create_detector(self.cfg)  # at cfg.input_size
        # input side -> a detector built for it: the scan's, and the fast pass's for frames it sees at
        # more than cfg.input_size (fast_share). A video needs one or two; a live feed that changes size more.
        self._sized: dict[int, Detector] = {}

    def scan_side(self, width: int, height: int) -> int | None:
        """Longest side of the small-face scan's input for a frame of this size, or None if not needed."""
        if self.cfg.min_face <= 0:
            return None
        longest = max(width, height)
        fast = self.fast_side(width, height)
        if self.cfg.min_face * fast / longest >= SCAN_FACE_PX:
            return None  # the fast pass already sees min_face faces large enough
        side = min(round(longest * SCAN_FACE_PX / self.cfg.min_face), MAX_SCAN_SIDE)
        return side if side > fast * 1.1 else None

    def smallest_face(self, width: int, height: int) -> float:
        """Face height (source pixels) the passes look for in a frame of this size."""
        longest = max(width, height)
        side = self.scan_side(width, height) or self.fast_side(width, height)
        return SCAN_FACE_PX * longest / side

    def fast_floor(self, width: int, height: int) -> float:
        """Face height (source pixels) under which the fast pass is unreliable: it finds such faces
        but also "faces" between them; the small-face scan sees them well."""
        return SCAN_FACE_PX * max(width, height) / self.fast_side(width, height)

    def _input_side(self, width: int, height: int) -> int:
        """Longest side of a frame of this size scaled to DetectConfig.input_size (``self.fast``'s input)."""
        return max(scaled_size(width, height, self.cfg.input_size))

    def fast_side(self, width: int, height: int) -> int:
        """Longest side of the fast pass's input for a frame of this size: DetectConfig.input_size, or the
        frame's longest side times DetectConfig.fast_share when that is more (never more than native)."""
        longest = max(width, height)
        return max(self._input_side(width, height), min(longest, round(longest * self.cfg.fast_share)))

    def _fast_for(self, width: int, height: int) -> Detector:
        side = self.fast_side(width, height)
        return self.fast if side == self._input_side(width, height) else self._sized_detector(side)

    def detector(self, cfg: DetectConfig) -> Detector:
        """A detector of this finder's backend with ``cfg`` (another input size or threshold: the scan,
        and the still passes of detect/still.py)."""
        return self._create(cfg)

    def _sized_detector(self, side: int) -> Detector:
        """A detector of this finder's settings whose input's longest side is ``side`` (built once)."""
        if side not in self._sized:
            self._sized[side] = self.detector(replace(self.cfg, input_size=side))
        return self._sized[side]

    def find(self, image: np.ndarray, *, scan: bool, turns: TurnWatch | None = None, cut: bool = False) -> Detections:
        """Faces in one BGR frame; ``scan``: also run the small-face scan (when the frame needs one).
        ``turns``: the video's TurnWatch, to look at the frame turned as well (detect/turns.py; ``cut``: the
        frame starts a shot)."""
        bright = brighten(image)
        h, w = image.shape[:2]
        found = self._passes(bright, scan)
        if turns is not None and h and w:
            upright = sum(len(f) for f in found)
            active = turns.active
            surer = []  # sure turned boxes on faces the upright passes boxed: they may stand for them (outscored)
            for angle in turns.due(scan=scan, cut=cut):
                view = turned(bright, angle)
                if angle in active:
                    passes = self._passes(view.image, scan and turns.whole(angle))
                else:
                    passes = [self._probe_for(w, h, view.image).detect(view.image)]
                dets = turned_back(merge(passes, self.cfg.nms_threshold), view.back)
                own = own_faces(dets, found)
                found.append(dets[turns.take(angle, dets.scores, own, upright)])
                surer.append(dets[~own & (dets.scores >= ACTIVATE_SCORE)])
            found = _turned_instead(found, upright, surer)
        return drop_nested(merge(found, self.cfg.nms_threshold))

    def _probe_for(self, width: int, height: int, view: np.ndarray) -> Detector:
        """The detector that probes a turned ``view`` of a ``width`` x ``height`` frame (detect/turns.py): the
        fast pass's, at no more input pixels than the upright fast pass's. A diagonal's canvas holds the
        whole frame and black corners, and at the fast pass's size it took twice its time (13.7-15.5 ms
        against 6.7 on hamilton). (Half the pixels took a probe from 9 to 6 ms but left a 40 px face turned
        135 degrees bare on 20 frames instead of 4 after it came into a clip.)"""
        vh, vw = view.shape[:2]
        fw, fh = scaled_size(width, height, self.fast_side(width, height))
        side = round(math.sqrt(fw * fh * max(vw, vh) / max(min(vw, vh), 1)))
        return self._fast_for(vw, vh) if side >= self.fast_side(vw, vh) else self._sized_detector(side)

    def _passes(self, bright: np.ndarray, scan: bool) -> list[Detections]:
        """The fast pass, and with ``scan`` the small-face scan, on one (brightened) frame."""
        h, w = bright.shape[:2]
        found = [self._fast_for(w, h).detect(bright)]
        side = self.scan_side(w, h) if scan and h and w else None
        if side is not None:
            found.append(self.scan_trusted(self._sized_detector(side).detect(bright), w, h))
        return found

    def scan_trusted(self, dets: Detections, width: int, height: int) -> Detections:
        """An upscaled pass's boxes on a frame of this size, less those it is not trusted for. Each pass is
        trusted for the sizes it sees well: a face the fast pass sees at twice its floor is the fast pass's
        to find; an upscaled pass's larger boxes are upscaling artefacts (a 115 px "face" on obama.jpg's
        tie) or duplicates."""
        if not len(dets):
            return dets
        return dets[(dets.boxes[:, 3] - dets.boxes[:, 1]) < 2 * self.fast_floor(width, height)]
