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

from streamdeid.video.images import IMAGE_EXTENSIONS, is_image
from .crowd_paste import FACE_BOX, box_in_crop, paste_face
from .recall import read_frames
from .recognizers import box_iou

# Largest blur sigma as a fraction of face height: defocus or motion a person still reads as a face.
# At 0.15 (tried first) the faces were featureless blobs that neither a person nor any detector finds.
MAX_BLUR = 0.06
# The size buckets (face box height, px) a recall benchmark reports.
SIZE_BUCKETS = ((0, 16), (16, 24), (24, 40), (40, 80))


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
    from streamdeid.config import DetectConfig
    from streamdeid.detect import create_detector

    return face_pool(folder, limit=limit, seed=seed,
                     detector=create_detector(DetectConfig(input_size=0, score_threshold=0.5)))


def crop_face_box(crop: np.ndarray, detector) -> np.ndarray | None:
    """The detector's face box in an aligned crop as crop fractions [4], seen as make_crowd pastes it
    (1:1 scale, grey surround); None when it finds no face. Used to measure :data:`FACE_BOX`."""
    h, w = crop.shape[:2]
    box_px = box_in_crop(w, h, False)
    canvas = np.full((int(2.2 * h), int(2.2 * w), 3), 128, np.uint8)
    centre = (canvas.shape[1] / 2, canvas.shape[0] / 2)
    paste_face(canvas, crop, False, box_px[3] - box_px[1], centre, 0.0, 0.0, None)
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
        light[i] = paste_face(canvas, crop, bool(flipped[i]), upright_h, centre, angles[i], sigma[i], tone)
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


if __name__ == "__main__":  # python -m evaluation.crowd FACES_DIR BACKGROUND OUT_DIR [COUNT] [SEED]
    import sys

    args = sys.argv[1:]
    if len(args) < 3:
        sys.exit("usage: python -m evaluation.crowd FACES_DIR BACKGROUND(video|image) OUT_DIR [COUNT] [SEED]")
    c = render_example(args[0], args[1], args[2], count=int(args[3]) if len(args) > 3 else 200,
                       seed=int(args[4]) if len(args) > 4 else 0)
    print(f"{len(c)} faces, heights {c.heights.min():.1f}-{c.heights.max():.1f} px -> {args[2]}")
