"""The synthetic crowd (evaluation.crowd): determinism, geometry, and ground truth checked by YuNet."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from streamdeid.config import DetectConfig
from streamdeid.detect import create_detector
from evaluation.crowd import (
    FACE_BOX,
    SIZE_BUCKETS,
    CrowdImage,
    crop_face_box,
    face_pool,
    fit_background,
    make_crowd,
    read_frame,
)
from evaluation.recognizers import box_iou

from conftest import UTK  # noqa: E402

BACKGROUND = "one-by-one-person-detection.mp4"  # frame 0: an empty room, no face


@pytest.fixture(scope="module")
def pool() -> list[Path]:
    if not UTK.is_dir():
        pytest.skip(f"shared dataset not found at {UTK} (clone the repo beside ../shared)")
    return face_pool(UTK, limit=120, seed=0)


@pytest.fixture(scope="module")
def background(media: Path) -> np.ndarray:
    return read_frame(media / BACKGROUND, 0)  # [432, 768, 3]


def test_face_pool_is_seeded(pool):
    assert len(pool) == 120 and len(set(pool)) == 120
    assert pool == face_pool(UTK, limit=120, seed=0)
    assert face_pool(UTK, limit=120, seed=1) != pool
    assert face_pool(UTK, limit=5, seed=0) == pool[:5]


def test_same_seed_same_crowd(pool, background):
    kw = dict(size=(320, 240), count=25, seed=3)
    a, b = make_crowd(pool, background, **kw), make_crowd(pool, background, **kw)
    assert np.array_equal(a.image, b.image) and np.array_equal(a.boxes, b.boxes) and a.sources == b.sources
    c = make_crowd(pool, background, **{**kw, "seed": 4})
    assert not np.array_equal(a.image, c.image) and not np.array_equal(a.boxes, c.boxes)


def test_geometry(pool, background):
    W, H = 640, 360
    crowd = make_crowd(pool, background, size=(W, H), count=80, face_px=(10, 60), seed=0)
    assert isinstance(crowd, CrowdImage)
    assert crowd.image.shape == (H, W, 3) and crowd.image.dtype == np.uint8
    assert crowd.boxes.shape == (80, 4) and crowd.boxes.dtype == np.float64
    assert len(crowd.sources) == len(crowd.angles) == len(crowd.blur_sigma) == len(crowd.light) == 80
    b = crowd.boxes
    assert (b[:, 0] >= 0).all() and (b[:, 1] >= 0).all() and (b[:, 2] <= W).all() and (b[:, 3] <= H).all()
    assert (crowd.heights >= 10 - 1e-9).all() and (crowd.heights <= 60 + 1e-9).all()
    iou = box_iou(b, b)
    np.fill_diagonal(iou, 0)
    assert iou.max() < 0.1
    # Log-uniform heights: every size bucket a recall benchmark reports gets a fair share.
    for lo, hi in SIZE_BUCKETS[:3]:
        assert ((crowd.heights >= lo) & (crowd.heights < hi)).sum() >= 12, (lo, hi)
    assert (crowd.heights >= 40).sum() >= 12
    assert (np.abs(crowd.angles) <= 15).all() and crowd.flipped.any() and (~crowd.flipped).any()


def test_too_many_faces_is_a_clear_error(pool, background):
    with pytest.raises(ValueError, match="holds only"):
        make_crowd(pool, background, size=(160, 120), count=200, face_px=(20, 30))
    with pytest.raises(ValueError, match="does not fit"):
        make_crowd(pool, background, size=(100, 100), count=1, face_px=(150, 150))


def test_blur_and_darken(pool, background):
    kw = dict(size=(480, 270), count=20, face_px=(30, 50), seed=5)
    plain = make_crowd(pool, background, blur=0, darken=0, **kw)
    assert (plain.blur_sigma == 0).all() and (plain.light == 1).all()
    dark = make_crowd(pool, background, blur=0, darken=1, **kw)
    blurred = make_crowd(pool, background, blur=1, darken=0, **kw)
    # The per-face draws do not depend on the probabilities: same faces, same places.
    assert np.array_equal(dark.boxes, plain.boxes) and np.array_equal(blurred.boxes, plain.boxes)
    assert (dark.light < 0.9).all() and (blurred.blur_sigma >= 0.02 * blurred.heights - 1e-9).all()
    assert (blurred.blur_sigma <= 0.15 * blurred.heights + 1e-9).all()
    def sharpness(im: np.ndarray) -> float:
        return float(np.abs(np.diff(im.astype(np.float64), axis=1)).mean())

    for (x1, y1, x2, y2) in plain.boxes.round().astype(int):
        p = plain.image[y1:y2, x1:x2].astype(np.float64)
        assert dark.image[y1:y2, x1:x2].mean() < 0.9 * p.mean()
        assert sharpness(blurred.image[y1:y2, x1:x2]) < sharpness(p)


def test_faces_as_arrays_and_any_background(pool):
    crops = [cv2.imread(str(p)) for p in pool[:3]]
    bg = np.random.default_rng(0).integers(0, 256, (50, 300, 3), dtype=np.uint8)  # any size: resized, cropped
    crowd = make_crowd(crops, bg, size=(320, 200), count=7, face_px=(20, 40))
    assert crowd.image.shape == (200, 320, 3)
    assert set(crowd.sources) == {"array[0]", "array[1]", "array[2]"}  # 7 faces cycle through the 3
    assert fit_background(bg, (64, 480)).shape == (480, 64, 3)


@pytest.fixture(scope="module")
def yunet():
    return create_detector(DetectConfig(input_size=0))  # native resolution


def test_face_box_constant_matches_yunet_on_crops(pool, yunet):
    """FACE_BOX is YuNet's median box on crops pasted like make_crowd does (crowd.py says how)."""
    boxes = np.array([crop_face_box(cv2.imread(str(p)), yunet) for p in pool[:12]])
    iou = box_iou(boxes, np.array([FACE_BOX]))[:, 0]
    assert np.median(iou) >= 0.8, iou


def test_ground_truth_boxes_are_where_yunet_finds_the_faces(pool, background, yunet):
    """Large clear faces (YuNet finds those reliably), tilted up to 15 degrees, at native resolution.

    Measured: 20/20 found at IoU >= 0.5 here (median IoU 0.86); over 10 seeds 200/200, median IoU
    0.86, with box height and width ratios (YuNet / ground truth) 0.99-1.00 / 1.00-1.02 at every tilt."""
    crowd = make_crowd(pool, background, size=(960, 540), count=20, face_px=(60, 90), blur=0, darken=0, seed=0)
    dets = yunet.detect(crowd.image)
    assert len(dets)
    iou = box_iou(crowd.boxes, dets.boxes).max(1)
    assert (iou >= 0.5).mean() >= 0.9, iou
    assert np.median(iou) >= 0.75
