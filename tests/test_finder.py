"""The pipeline's detection passes (streamdeid.detect.finder): exposure, fast pass, small-face scan."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from streamdeid.config import DetectConfig
from streamdeid.detect.finder import MAX_SCAN_SIDE, SCAN_FACE_PX, FaceFinder, brighten, exposure_gamma, merge
from streamdeid.types import Detections

from conftest import load_image

HAND_LABELS = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "hand_faces.json"


def test_dark_frames_are_brightened_bright_ones_left_alone():
    rng = np.random.default_rng(0)
    # a smooth dark picture (a noisy one is smoothed as well: tests/test_noisy_dark.py)
    dark = np.broadcast_to(np.linspace(0, 49, 160).astype(np.uint8)[None, :, None], (90, 160, 3)).copy()
    bright = rng.integers(100, 220, (90, 160, 3), dtype=np.uint8)
    assert exposure_gamma(dark) < 0.7
    out = brighten(dark)
    assert out.mean() > 1.8 * dark.mean()
    assert np.all(np.diff(out[..., 0].ravel()[np.argsort(dark[..., 0].ravel(), kind="stable")].astype(int)) >= 0)
    assert brighten(bright) is bright
    assert exposure_gamma(np.zeros((10, 10, 3), np.uint8)) == 1.0  # black: nothing to lift


def test_brightening_finds_more_of_the_dark_audience(media):
    """short_hamilton_clip.mp4's audience shots are dark: the fast pass at the default threshold
    finds more of the hand-labelled faces after the exposure correction (46 -> 54 detections on
    these 8 frames when measured)."""
    from evaluation.recall import HandLabels, box_iou, read_frames

    labels = HandLabels.load(HAND_LABELS).for_media("short_hamilton_clip.mp4")
    frames = sorted(f for f in labels if 45 <= f <= 80)
    finder = FaceFinder(DetectConfig(min_face=0))

    def matched(detect) -> int:
        n = 0
        for i, image in read_frames(media / "short_hamilton_clip.mp4", set(frames)):
            dets = detect(image)
            if len(dets) and len(labels[i]):
                n += int((box_iou(labels[i], dets.boxes).max(axis=1) >= 0.3).sum())
        return n

    raw, bright = matched(finder.fast.detect), matched(lambda im: finder.find(im, scan=False))
    assert bright >= raw + 3, (raw, bright)


def test_scan_side_follows_min_face_and_is_capped():
    finder = FaceFinder(DetectConfig(input_size=640, min_face=12))
    assert finder.scan_side(640, 360) == round(640 * SCAN_FACE_PX / 12)  # 12 px faces seen at 24 px
    assert finder.smallest_face(640, 360) == pytest.approx(12, abs=0.1)
    assert finder.scan_side(3840, 2160) == MAX_SCAN_SIDE  # 4K is not scanned at 8K ...
    assert finder.smallest_face(3840, 2160) == pytest.approx(SCAN_FACE_PX)  # ... and says what it looks for
    assert FaceFinder(DetectConfig(min_face=48)).scan_side(640, 360) is None  # the fast pass sees 48 px faces
    assert FaceFinder(DetectConfig(min_face=0)).scan_side(640, 360) is None
    assert FaceFinder(DetectConfig(min_face=0)).smallest_face(640, 360) == pytest.approx(SCAN_FACE_PX)


def test_merge_keeps_one_box_per_face():
    lm = np.zeros((1, 5, 2))
    a = Detections(np.array([[10, 10, 50, 60.0]]), np.array([0.9]), lm)
    b = Detections(np.array([[11, 11, 51, 61.0], [200, 10, 230, 50]]), np.array([0.4, 0.5]), np.zeros((2, 5, 2)))
    out = merge([a, b, Detections.empty()], 0.3)
    assert len(out) == 2 and sorted(out.scores.tolist()) == pytest.approx([0.5, 0.9])
    assert len(merge([Detections.empty()], 0.3)) == 0


def test_scan_finds_small_faces_the_fast_pass_misses():
    """Twelve copies of a real face 13 px tall on a 1280x720 frame: the fast pass (640) sees them at 6.5 px."""
    face = load_image("obama-240p.jpg")[0:140, 150:290]  # the 72 px face (y 20-92) with hair and collar
    small = cv2.resize(face, (26, 26), interpolation=cv2.INTER_AREA)  # the face itself about 13 px tall
    frame = np.full((720, 1280, 3), 120, np.uint8)
    for k in range(12):
        y, x = 100 + 200 * (k // 6), 100 + 180 * (k % 6)
        frame[y:y + 26, x:x + 26] = small
    finder = FaceFinder(DetectConfig())
    fast = finder.find(frame, scan=False)
    both = finder.find(frame, scan=True)
    assert len(fast) <= 2
    assert len(both) >= 10
    heights = both.boxes[:, 3] - both.boxes[:, 1]
    assert heights.max() < 30


def test_a_face_boxed_twice_at_two_scales_keeps_the_larger_box():
    from streamdeid.detect.finder import drop_nested

    boxes = np.array([[100, 100, 124, 130],  # a face
                      [90, 95, 136, 150],  # the same face boxed with its hair: it holds the first
                      [140, 100, 164, 130],  # the neighbour beside it, same size
                      [300, 300, 340, 350],  # a face ...
                      [328, 290, 348, 312]], np.float32)  # ... and a small one at its corner
    lm = np.zeros((5, 5, 2), np.float32)
    kept = drop_nested(Detections(boxes, np.array([0.9, 0.4, 0.8, 0.9, 0.5]), lm))
    assert kept.boxes.tolist() == boxes[[1, 2, 3, 4]].tolist()


def test_a_box_over_another_face_is_told_apart():
    from streamdeid.detect.finder import holds_a_centre

    boxes = np.array([[100, 100, 120, 120],  # a face
                      [90, 90, 150, 150],  # a box over it and more (holds its centre)
                      [125, 100, 145, 120],  # a neighbour, overlapping the large box, holding no centre
                      [300, 300, 340, 350]], np.float32)  # alone
    assert holds_a_centre(boxes).tolist() == [False, True, False, False]
    assert holds_a_centre(np.zeros((0, 4), np.float32)).tolist() == []


def test_a_1080p_frame_is_seen_at_half_its_size_by_the_fast_pass(media):
    """At 640 px a 1080p frame's faces of 40-72 px fall under the fast pass's floor (72 px); the fast pass
    sees such frames at half their size (DetectConfig.fast_share), where those faces are 20-36 px, which
    YuNet finds well: on a synthetic 1080p crowd of 40-70 px faces the fast pass alone finds far more."""
    from conftest import UTK
    from evaluation.crowd import crowd_pool, default_background, make_crowd
    from streamdeid.track.matching import iou_matrix

    finder = FaceFinder(DetectConfig())
    assert finder.fast_side(1920, 1080) == 960 and finder.fast_floor(1920, 1080) == 48
    assert finder.fast_side(1280, 720) == 640 and finder.fast_side(640, 360) == 640
    assert FaceFinder(DetectConfig(input_size=0)).fast_side(1920, 1080) == 1920
    crowd = make_crowd(crowd_pool(UTK, limit=80), default_background(media), size=(1920, 1080), count=60,
                       face_px=(40, 70), seed=3)

    def found(cfg: DetectConfig) -> float:
        dets = FaceFinder(cfg).find(crowd.image, scan=False)
        return float((iou_matrix(crowd.boxes, dets.boxes).max(axis=1) >= 0.3).mean())

    half, third = found(DetectConfig()), found(DetectConfig(fast_share=0.0))
    assert half >= 0.9, half
    assert half >= third + 0.2, (half, third)
