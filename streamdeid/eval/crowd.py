"""A synthetic crowd with exact ground truth, for measuring a face detector's recall.

Aligned UTKFace crops (200x200, crop_part1) are pasted onto a face-free
background at random positions and sizes: a soft head-shaped alpha mask (no
square patch edge), a small in-plane tilt, a horizontal flip, and optionally a
Gaussian blur (defocus / motion) and a darkening (poor light). Because the crops
are aligned, the face box inside a crop is a constant (:data:`FACE_BOX`), so
each pasted face's box is known exactly: it is that box carried through the
same scale, tilt and offset. Boxes follow YuNet's convention (forehead to chin,
cheek to cheek), so a detector's boxes can be matched at IoU >= 0.5.

    faces = face_pool(UTK, limit=1000)
    crowd = make_crowd(faces, read_frame("one-by-one-person-detection.mp4"), count=200)
    crowd.boxes  # [200, 4] x1, y1, x2, y2
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ..video.images import IMAGE_EXTENSIONS, is_image
from .recall import read_frames
from .recognizers import box_iou

# Face box inside an aligned UTKFace crop, as fractions of the crop side
# (x1, y1, x2, y2). Measured with YuNet at native resolution
# (DetectConfig(input_size=0), see crop_face_box) on 300 random crops
# (default_rng(0).choice(9780, 300)), each rendered the way make_crowd pastes
# it (forehead painted back, head mask, 1:1 scale, grey surround): the
# per-coordinate median. The crops are tight, the forehead cut off, so the box
# starts above the crop (y1 < 0). Spread over the 300 (interquartile range, crop
# fractions): x1 0.06, y1 0.06, x2 0.09, y2 0.04; IoU of a crop's own box with
# this one: 10th percentile 0.75, median 0.87, about 5% below 0.7 (face_pool can drop
# those). On the bare crops framed in black the median is 0.051, -0.146, 0.933,
# 0.966: YuNet puts the top of the box higher when it sees the painted forehead.
FACE_BOX = (0.059, -0.232, 0.922, 0.970)

# The size buckets (face box height, px) a recall benchmark reports.
# Largest blur sigma as a fraction of face height: defocus or motion a person still reads as a face.
# At 0.15 (tried first) the faces were featureless blobs that neither a person nor any detector finds.
MAX_BLUR = 0.06
SIZE_BUCKETS = ((0, 16), (16, 24), (24, 40), (40, 80))

# Extension of a crop before pasting (fractions of its side): the forehead and
# the top of the head above the crop, the chin and neck below, the sides.
_PAD_TOP, _PAD_BOTTOM, _PAD_SIDE = 0.45, 0.15, 0.12
# Head ellipse in crop fractions (centre x, y, semi-axes x, y): cheek to cheek,
# from above the hairline (y -0.37) to just past the chin. Fixed in crop
# coordinates, so FACE_BOX (measured on faces pasted with it) does not feed back.
_HEAD = (0.49, 0.33, 0.51, 0.70)
_FEATHER = 0.055  # Gaussian feather of the head mask, in crop sides


@dataclass
class CrowdImage:
    image: np.ndarray  # [H, W, 3] uint8 BGR
    boxes: np.ndarray  # [N, 4] float64 x1, y1, x2, y2: each pasted face's box (YuNet convention)
    sources: list[str]  # [N] file name of each face ("array[i]" for faces given as arrays)
    angles: np.ndarray  # [N] in-plane tilt, degrees (positive: counter-clockwise on screen)
    flipped: np.ndarray  # [N] bool, mirrored horizontally
    blur_sigma: np.ndarray  # [N] Gaussian blur sigma in px (0: sharp)
    light: np.ndarray  # [N] mean brightness of the face after / before darkening (1: untouched)

    def __len__(self) -> int:
        return len(self.boxes)

    @property
    def heights(self) -> np.ndarray:
        """[N] face box heights in px."""
        return self.boxes[:, 3] - self.boxes[:, 1]


def face_pool(folder: str | Path, *, limit: int | None = None, seed: int = 0,
              detector=None, min_iou: float = 0.7) -> list[Path]:
    """The face crops in ``folder`` in a seeded random order, at most ``limit``.

    With a ``detector`` (e.g. ``create_detector(DetectConfig(input_size=0))``)
    crops whose own face box is far from :data:`FACE_BOX` (IoU < ``min_iou``;
    about 2% of UTKFace) are left out, so that every ground-truth box is
    accurate. That runs the detector once per crop kept or dropped (~35 ms), so
    use it with a ``limit`` of hundreds, not on all 9,780."""
    with os.scandir(folder) as it:  # scandir: no stat per file (9,780 of them)
        names = sorted(e.name for e in it if e.is_file() and os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS)
    files = [Path(folder) / n for n in names]
    order = np.random.default_rng(seed).permutation(len(files))
    pool: list[Path] = []
    for i in order:
        if limit is not None and len(pool) >= limit:
            break
        if detector is None or _crop_box_iou(cv2.imread(str(files[i]), cv2.IMREAD_COLOR), detector) >= min_iou:
            pool.append(files[i])
    return pool


def crowd_pool(folder: str | Path, *, limit: int = 400, seed: int = 0) -> list[Path]:
    """The pool the recall benchmark and test draw crowds from: ``limit`` crops whose own face box
    agrees with FACE_BOX. Unfiltered, a crowd had a white crop with a number on it and other
    non-faces among its ground truth."""
    from ..config import DetectConfig
    from ..detect import create_detector

    return face_pool(folder, limit=limit, seed=seed,
                     detector=create_detector(DetectConfig(input_size=0, score_threshold=0.5)))


def crop_face_box(crop: np.ndarray, detector) -> np.ndarray | None:
    """The detector's face box in an aligned crop as crop fractions [4], seen as make_crowd pastes it
    (1:1 scale, grey surround); None when it finds no face. Used to measure :data:`FACE_BOX`."""
    h, w = crop.shape[:2]
    box_px = _box_in_crop(w, h, False)
    canvas = np.full((int(2.2 * h), int(2.2 * w), 3), 128, np.uint8)
    centre = (canvas.shape[1] / 2, canvas.shape[0] / 2)
    _paste(canvas, crop, False, box_px[3] - box_px[1], centre, 0.0, 0.0, None)
    dets = detector.detect(canvas)
    if not len(dets):
        return None
    j = int(np.argmax((dets.boxes[:, 2] - dets.boxes[:, 0]) * (dets.boxes[:, 3] - dets.boxes[:, 1])))
    offset = np.array([centre[0] - (box_px[0] + box_px[2]) / 2, centre[1] - (box_px[1] + box_px[3]) / 2] * 2)
    return (dets.boxes[j] - offset) / np.array([w, h, w, h], np.float64)


def _crop_box_iou(crop: np.ndarray | None, detector) -> float:
    if crop is None:
        return 0.0
    box = crop_face_box(crop, detector)
    return 0.0 if box is None else float(box_iou(box[None], np.array([FACE_BOX]))[0, 0])


def fit_background(background: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Scale ``background`` [h, w, 3] to cover ``size`` (W, H) and crop the centre: [H, W, 3] uint8."""
    W, H = size
    h, w = background.shape[:2]
    s = max(W / w, H / h)
    nw, nh = max(W, round(w * s)), max(H, round(h * s))
    img = cv2.resize(background, (nw, nh), interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
    x, y = (nw - W) // 2, (nh - H) // 2
    return np.ascontiguousarray(img[y:y + H, x:x + W, :3])


def read_frame(video: str | Path, index: int = 0) -> np.ndarray:
    """Frame ``index`` of a video as [H, W, 3] uint8 BGR (a face-free background)."""
    for _, frame in read_frames(video, {index}):
        return frame
    raise ValueError(f"{video} has no frame {index}")


BACKGROUND_CLIP = "one-by-one-person-detection.mp4"  # its frame 0 is an empty shop: checked by eye, no face


def default_background(media: str | Path) -> np.ndarray:
    """The shared media's face-free background (frame 0 of ``BACKGROUND_CLIP``)."""
    return read_frame(Path(media) / BACKGROUND_CLIP, 0)


def make_crowd(faces: Sequence[Path | str | np.ndarray], background: np.ndarray, *,
               size: tuple[int, int] = (1280, 720), count: int = 200, face_px: tuple[float, float] = (10, 60),
               blur: float = 0.5, darken: float = 0.5, max_angle: float = 15.0, overlap: float = 0.1,
               seed: int = 0) -> CrowdImage:
    """Paste ``count`` faces onto ``background`` (resized and cropped to ``size`` = (W, H)).

    Face box heights are log-uniform in ``face_px`` (so the buckets of
    :data:`SIZE_BUCKETS` are all well populated). With probability ``blur`` a
    face is blurred (sigma up to ``MAX_BLUR`` of its height), with probability
    ``darken`` it is darkened (gain, gamma, lower contrast). A face's box lies
    inside the canvas and no other face (its box or its head around it) covers
    more than ``overlap`` of it, so pairwise box IoU < ``overlap``. Faces are
    used in a seeded random order (cycled when ``count`` exceeds them).
    Raises ValueError when the canvas cannot hold ``count`` faces."""
    if not len(faces):
        raise ValueError("no faces given")
    lo, hi = float(face_px[0]), float(face_px[1])
    if not 0 < lo <= hi:
        raise ValueError(f"face_px must be 0 < low <= high, got {face_px}")
    W, H = size
    rng = np.random.default_rng(seed)
    canvas = fit_background(background, size)

    # Per-face draws, all up front (deterministic for the seed).
    which = np.concatenate([rng.permutation(len(faces)) for _ in range(-(-count // len(faces)))])[:count]
    heights = np.sort(np.exp(rng.uniform(math.log(lo), math.log(hi), count)))[::-1]  # large first: packs better
    angles = rng.uniform(-max_angle, max_angle, count)
    flipped = rng.random(count) < 0.5
    sigma = np.where(rng.random(count) < blur, rng.uniform(0.02, MAX_BLUR, count) * heights, 0.0)
    dark = rng.random(count) < darken
    gain, gamma, contrast = rng.uniform(0.35, 0.8, count), rng.uniform(1.0, 1.6, count), rng.uniform(0.5, 0.9, count)

    boxes = _place(heights, angles, (W, H), overlap, rng)
    light = np.ones(count)
    cache: dict[int, np.ndarray] = {}
    for i in np.argsort(boxes[:, 3], kind="stable"):  # back to front: a lower face stands nearer
        crop = _load(faces, int(which[i]), cache)
        upright_h = heights[i] / _tilt_factor(angles[i])
        centre = ((boxes[i, 0] + boxes[i, 2]) / 2, (boxes[i, 1] + boxes[i, 3]) / 2)
        tone = (gain[i], gamma[i], contrast[i]) if dark[i] else None
        light[i] = _paste(canvas, crop, bool(flipped[i]), upright_h, centre, angles[i], sigma[i], tone)
    sources = [f"array[{k}]" if isinstance(faces[k], np.ndarray) else Path(faces[k]).name for k in which]
    return CrowdImage(canvas, boxes, sources, angles, flipped, sigma, light)


def _load(faces: Sequence[Path | str | np.ndarray], k: int, cache: dict[int, np.ndarray]) -> np.ndarray:
    if k not in cache:
        f = faces[k]
        img = f if isinstance(f, np.ndarray) else cv2.imread(str(f), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError(f"cannot read face image {f}")
        cache[k] = np.ascontiguousarray(img[..., :3])
    return cache[k]


def _box_in_crop(w: int, h: int, flipped: bool) -> np.ndarray:
    """[4] the face box in crop pixels (mirrored for a flipped crop)."""
    x1, y1, x2, y2 = FACE_BOX
    if flipped:
        x1, x2 = 1 - x2, 1 - x1
    return np.array([x1 * w, y1 * h, x2 * w, y2 * h], np.float64)


def _aspect() -> float:
    """Face box width / height."""
    return (FACE_BOX[2] - FACE_BOX[0]) / (FACE_BOX[3] - FACE_BOX[1])


def _tilt_factor(angle: float) -> float:
    """Height of the axis-aligned box of a tilted face / its upright height.

    The face is taken as the ellipse inscribed in its box, so the box of a face
    tilted by ``angle`` is that ellipse's bounding box (a detector frames a
    tilted face about as tightly as an upright one): 0.99 at 15 degrees."""
    t = math.radians(angle)
    return math.hypot(_aspect() * math.sin(t), math.cos(t))


def _tilted_box_size(h: np.ndarray, angles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Width and height [N] of the boxes of faces whose tilted box height is ``h``."""
    t = np.radians(angles)
    a = _aspect()
    upright = h / np.hypot(a * np.sin(t), np.cos(t))
    return upright * np.hypot(a * np.cos(t), np.sin(t)), h


def _head_boxes(boxes: np.ndarray) -> np.ndarray:
    """[N, 4] the region around each face box its head mask covers at alpha >~ 0.5."""
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    return boxes + np.stack([-0.1 * w - 0.05 * h, -0.25 * h, 0.1 * w + 0.05 * h, 0.1 * h], axis=1)


def _place(heights: np.ndarray, angles: np.ndarray, size: tuple[int, int], overlap: float,
           rng: np.random.Generator, batch: int = 256, rounds: int = 40) -> np.ndarray:
    """[N, 4] boxes of the given heights, inside the canvas, none covered more than ``overlap`` by
    another face's box or head. Random positions, rejection in batches of candidates."""
    W, H = size
    widths, _ = _tilted_box_size(heights, angles)
    boxes = np.zeros((len(heights), 4))
    for i, (w, h) in enumerate(zip(widths, heights)):
        if w > W or h > H:
            raise ValueError(f"a {w:.0f}x{h:.0f} face does not fit a {W}x{H} canvas")
        placed, heads = boxes[:i], _head_boxes(boxes[:i])
        for _ in range(rounds):
            x = rng.uniform(0, W - w, batch)
            y = rng.uniform(0, H - h, batch)
            cand = np.stack([x, y, x + w, y + h], axis=1)  # [batch, 4]
            # Share of the candidate covered by placed heads, and of placed faces covered by its head.
            ok = (_cover(cand, heads) < overlap).all(1) & (_cover(placed, _head_boxes(cand)).T < overlap).all(1)
            if ok.any():
                boxes[i] = cand[int(np.argmax(ok))]
                break
        else:
            raise ValueError(f"the {W}x{H} canvas holds only {i} of {len(heights)} faces of "
                             f"{heights.min():.0f}-{heights.max():.0f} px at overlap < {overlap}")
    return boxes


def _cover(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[len(a), len(b)] share of each box in ``a`` covered by each box in ``b``."""
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    area = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    return np.clip(iw, 0, None) * np.clip(ih, 0, None) / np.maximum(area, 1e-12)[:, None]


def _extend(crop: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """The crop [h, w, 3] grown by the head margins, the margins painted from its border rows and
    columns and smoothed: [h', w', 3] float32, and the (x, y) offset of the crop inside it."""
    h, w = crop.shape[:2]
    t, b, s = round(_PAD_TOP * h), round(_PAD_BOTTOM * h), round(_PAD_SIDE * w)
    grown = cv2.copyMakeBorder(crop, t, b, s, s, cv2.BORDER_REPLICATE).astype(np.float32)
    smooth = cv2.GaussianBlur(grown, (0, 0), 0.05 * h)
    inner = np.zeros(grown.shape[:2], np.float32)
    e = max(1, round(0.02 * h))
    inner[t + e:t + h - e, s + e:s + w - e] = 1
    inner = cv2.GaussianBlur(inner, (0, 0), 0.015 * h)[..., None]
    return inner * grown + (1 - inner) * smooth, (s, t)


def _head_mask(shape: tuple[int, int], crop_wh: tuple[int, int], offset: tuple[int, int],
               flipped: bool) -> np.ndarray:
    """[h, w] float32 feathered head ellipse (:data:`_HEAD`) of a crop of size ``crop_wh`` placed at
    ``offset`` (x, y) in an image of ``shape``."""
    cw, ch = crop_wh
    cx, cy, ax, ay = _HEAD
    if flipped:
        cx = 1 - cx
    mask = np.zeros(shape, np.float32)
    k = 16  # sub-pixel precision of cv2.ellipse (4 fractional bits)
    cv2.ellipse(mask, (round((offset[0] + cx * cw) * k), round((offset[1] + cy * ch) * k)),
                (round(ax * cw * k), round(ay * ch * k)), 0, 0, 360, 1.0, -1, cv2.LINE_AA, 4)
    return cv2.GaussianBlur(mask, (0, 0), _FEATHER * ch)


def _paste(canvas: np.ndarray, crop: np.ndarray, flipped: bool, upright_h: float, centre: tuple[float, float],
           angle: float, sigma: float, tone: tuple[float, float, float] | None) -> float:
    """Paste ``crop`` (mirrored if ``flipped``) into ``canvas`` (in place) so that its face box is
    ``upright_h`` px high, tilted by ``angle`` about its centre, centred at ``centre``. ``sigma``
    blurs the face (the mask too: a blurred foreground over a sharp background), ``tone`` = (gain,
    gamma, contrast) darkens it. Returns the brightness ratio after / before darkening."""
    if flipped:
        crop = crop[:, ::-1]
    # Work at 4x the final scale at most (5x faster for a 200-face crowd; the boxes and the mask are
    # in crop fractions, so unchanged; YuNet finds the same faces in the result as at full scale).
    work = 4 * upright_h / ((FACE_BOX[3] - FACE_BOX[1]) * crop.shape[0])
    if work < 1:
        size = (max(8, round(crop.shape[1] * work)), max(8, round(crop.shape[0] * work)))
        crop = cv2.resize(crop, size, interpolation=cv2.INTER_AREA)
    src, (ox, oy) = _extend(crop)
    box = _box_in_crop(crop.shape[1], crop.shape[0], flipped) + (ox, oy, ox, oy)
    alpha = _head_mask(src.shape[:2], (crop.shape[1], crop.shape[0]), (ox, oy), flipped)
    # Downscale first (INTER_AREA: no aliasing from 200 px to 10 px), then tilt and place sub-pixel.
    s = upright_h / (box[3] - box[1])
    size = (max(1, round(src.shape[1] * s)), max(1, round(src.shape[0] * s)))
    sx, sy = size[0] / src.shape[1], size[1] / src.shape[0]
    interp = cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR
    src, alpha = cv2.resize(src, size, interpolation=interp), cv2.resize(alpha, size, interpolation=interp)
    c = ((box[0] + box[2]) / 2 * sx, (box[1] + box[3]) / 2 * sy)  # face box centre in the scaled patch
    M = cv2.getRotationMatrix2D(c, angle, 1.0)
    M[:, 2] += (centre[0] - c[0], centre[1] - c[1])
    # Canvas region the patch (plus the blur's reach) lands on.
    corners = np.array([[0, 0, 1], [size[0], 0, 1], [0, size[1], 1], [size[0], size[1], 1]], np.float64) @ M.T
    m = 3 * sigma + 2
    H, W = canvas.shape[:2]
    x0, y0 = max(0, math.floor(corners[:, 0].min() - m)), max(0, math.floor(corners[:, 1].min() - m))
    x1, y1 = min(W, math.ceil(corners[:, 0].max() + m)), min(H, math.ceil(corners[:, 1].max() + m))
    if x1 <= x0 or y1 <= y0:
        return 1.0
    M[:, 2] -= (x0, y0)
    roi = (x1 - x0, y1 - y0)
    color = cv2.warpAffine(src, M, roi, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    alpha = cv2.warpAffine(alpha, M, roi, flags=cv2.INTER_LINEAR, borderValue=0)
    light = 1.0
    if tone is not None:
        color, light = _darken(color, alpha, *tone)
    premult = color * alpha[..., None]
    if sigma > 0:
        premult = cv2.GaussianBlur(premult, (0, 0), sigma)
        alpha = cv2.GaussianBlur(alpha, (0, 0), sigma)
    region = canvas[y0:y1, x0:x1].astype(np.float32)
    out = premult + (1 - alpha[..., None]) * region
    canvas[y0:y1, x0:x1] = np.clip(out + 0.5, 0, 255).astype(np.uint8)
    return light


def _darken(color: np.ndarray, alpha: np.ndarray, gain: float, gamma: float,
            contrast: float) -> tuple[np.ndarray, float]:
    """Poor light on a face patch [h, w, 3] float32 0..255: lower contrast around its mean, a gamma
    (darker mid-tones) and a gain. Returns the patch and its mean brightness after / before."""
    weight = alpha[..., None] / max(float(alpha.sum()), 1e-6)
    before = float((color * weight).sum()) / 3
    x = color / 255.0
    mean = (x * weight).sum((0, 1))
    x = np.clip(mean + contrast * (x - mean), 0, 1) ** gamma * gain
    out = (x * 255.0).astype(np.float32)
    return out, float((out * weight).sum()) / 3 / max(before, 1e-6)


def write_debug_png(crowd: CrowdImage, path: str | Path, *, detections: np.ndarray | None = None,
                    scale: int = 1) -> Path:
    """Save the crowd with its boxes drawn (green; ``detections`` [M, 4] in red), upscaled ``scale`` times."""
    img = cv2.resize(crowd.image, None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST) \
        if scale != 1 else crowd.image.copy()
    for boxes, colour in ((crowd.boxes, (0, 255, 0)), (detections, (0, 0, 255))):
        if boxes is None:
            continue
        for x1, y1, x2, y2 in np.asarray(boxes, np.float64).reshape(-1, 4) * scale:
            cv2.rectangle(img, (round(x1), round(y1)), (round(x2), round(y2)), colour, 1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), img)
    return path


def render_example(faces_dir: str | Path, background: str | Path, out_dir: str | Path, *,
                   count: int = 200, seed: int = 0) -> CrowdImage:
    """One 1280x720 crowd of ``count`` faces: ``crowd.png`` and ``crowd_boxes.png`` in ``out_dir``."""
    bg = read_frame(background) if not is_image(background) else cv2.imread(str(background), cv2.IMREAD_COLOR)
    crowd = make_crowd(face_pool(faces_dir, seed=seed), bg, count=count, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(out / "crowd.png"), crowd.image)
    write_debug_png(crowd, out / "crowd_boxes.png")
    return crowd


if __name__ == "__main__":  # python -m streamdeid.eval.crowd FACES_DIR BACKGROUND OUT_DIR [COUNT] [SEED]
    import sys

    args = sys.argv[1:]
    if len(args) < 3:
        sys.exit("usage: python -m streamdeid.eval.crowd FACES_DIR BACKGROUND(video|image) OUT_DIR [COUNT] [SEED]")
    c = render_example(args[0], args[1], args[2], count=int(args[3]) if len(args) > 3 else 200,
                       seed=int(args[4]) if len(args) > 4 else 0)
    print(f"{len(c)} faces, heights {c.heights.min():.1f}-{c.heights.max():.1f} px -> {args[2]}")
