
import cv2
import numpy as np
import pytest

from streamdeid.align import ARCFACE_112, align_box, align_face, canonical_template, landmarks_usable, similarity_transform
from streamdeid.config import AlignConfig
from streamdeid.types import AlignedFace

from conftest import MEDIA  # noqa: E402


def similarity(scale, angle_deg, tx, ty):
    a = np.deg2rad(angle_deg)
    return np.array([[scale * np.cos(a), -scale * np.sin(a), tx], [scale * np.sin(a), scale * np.cos(a), ty]])


def apply(m, pts):
    return np.asarray(pts, np.float64) @ m[:, :2].T + m[:, 2]


def landmarks_in_frame(size, margin, frame_from_crop):
    return apply(frame_from_crop, canonical_template(size, margin))


def test_template():
    np.testing.assert_allclose(canonical_template(112, 0.0), ARCFACE_112)
    t = canonical_template(128, 0.25)
    assert t.shape == (5, 2)
    # shrunk toward the centre: same centre mapping, 0.75 of the spread
    np.testing.assert_allclose(t - 64, (ARCFACE_112 * 128 / 112 - 64) * 0.75)
    assert (t > 0.125 * 128).all() and (t < 0.875 * 128).all()
    with pytest.raises(ValueError):
        canonical_template(128, 1.0)


@pytest.mark.parametrize("scale,angle,tx,ty", [(1.0, 0, 0, 0), (0.37, 20, 300, 50), (2.5, -35, -40, 600)])
def test_exact_similarity_maps_landmarks_onto_template(scale, angle, tx, ty):
    cfg = AlignConfig()
    image = np.random.default_rng(0).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    lm = landmarks_in_frame(cfg.crop_size, cfg.margin, similarity(scale, angle, tx, ty))
    face = align_face(image, lm, cfg.crop_size, cfg.margin)
    assert isinstance(face, AlignedFace)
    assert face.crop.shape == (cfg.crop_size, cfg.crop_size, 3) and face.crop.dtype == np.uint8
    assert face.matrix.shape == (2, 3) and face.matrix.dtype == np.float64
    np.testing.assert_allclose(apply(face.matrix, lm), canonical_template(cfg.crop_size, cfg.margin), atol=1.0)
    # inverse round-trips points both ways
    pts = np.random.default_rng(1).uniform(-50, 500, (20, 2))
    np.testing.assert_allclose(apply(face.inverse, apply(face.matrix, pts)), pts, atol=1e-6)
    np.testing.assert_allclose(apply(face.matrix, apply(face.inverse, pts)), pts, atol=1e-6)


def test_crop_pixels_follow_the_matrix():
    crop_to_frame = similarity(1.3, 10, 30, 20)
    fx, fy = apply(crop_to_frame, [[40, 24]])[0].round().astype(int)
    image = np.zeros((200, 200, 3), np.uint8)
    cv2.circle(image, (int(fx), int(fy)), 4, (255, 255, 255), -1)
    face = align_face(image, landmarks_in_frame(64, 0.25, crop_to_frame), 64, 0.25)
    assert face.crop[24, 40].min() > 200
    assert face.crop[10, 10].max() == 0


def test_least_squares_on_noisy_landmarks():
    rng = np.random.default_rng(3)
    lm = landmarks_in_frame(112, 0.0, similarity(1.5, 5, 100, 100)) + rng.normal(0, 1.0, (5, 2))
    m = similarity_transform(lm, ARCFACE_112)
    assert np.abs(apply(m, lm) - ARCFACE_112).max() < 3.0
    assert np.linalg.det(m[:, :2]) > 0  # never a reflection


def test_face_at_the_border():
    image = np.random.default_rng(4).integers(0, 256, (100, 160, 3), dtype=np.uint8)
    lm = landmarks_in_frame(128, 0.25, similarity(0.8, 0, -60, 30))  # left half outside the frame
    assert lm[:, 0].min() < 0
    face = align_face(image, lm, 128, 0.25)
    assert face.crop.shape == (128, 128, 3)
    box = align_box(image, np.array([-30, 40, 20, 110]), 96)
    assert box.crop.shape == (96, 96, 3)


def test_real_partial_face():
    path = MEDIA / "obama_partial_face.jpg"
    if not path.exists():
        pytest.skip("media not available")
    from streamdeid.detect import create_detector

    image = cv2.imread(str(path))
    dets = create_detector().detect(image)
    assert len(dets)
    assert landmarks_usable(dets.landmarks[0], dets.boxes[0])
    face = align_face(image, dets.landmarks[0], 128, 0.25)
    assert face.crop.shape == (128, 128, 3)
    fallback = align_box(image, dets.boxes[0], 128, 0.25)
    # both crops frame the face similarly: the box centre lands near the same crop point
    c = (dets.boxes[0, :2] + dets.boxes[0, 2:]) / 2
    assert np.abs(apply(face.matrix, [c]) - apply(fallback.matrix, [c])).max() < 12


def test_align_box_is_a_centred_similarity():
    image = np.zeros((300, 300, 3), np.uint8)
    f = align_box(image, np.array([100, 50, 180, 150]), 128, 0.25)
    m = f.matrix
    assert m[0, 1] == 0 and m[1, 0] == 0 and m[0, 0] == pytest.approx(m[1, 1])
    cx, cy = apply(m, [[140, 100]])[0]
    assert cx == pytest.approx(64) and 64 < cy < 80
    side = 100 * m[0, 0]
    assert 0.6 * 128 < side < 0.8 * 128
    np.testing.assert_allclose(apply(f.inverse, apply(m, [[0, 0], [300, 300]])), [[0, 0], [300, 300]], atol=1e-9)


def test_landmarks_usable_rejects_garbage():
    box = np.array([100, 100, 180, 200])
    good = landmarks_in_frame(112, 0.0, similarity(0.8, 0, 95, 100))
    assert landmarks_usable(good, box)
    assert not landmarks_usable(np.full((5, 2), 140.0), box)  # collapsed
    assert not landmarks_usable(good + (400, 0), box)  # far from the box
    shuffled = good[[3, 1, 2, 0, 4]]  # eye and mouth swapped
    assert not landmarks_usable(shuffled, box)
    nan = good.copy()
    nan[2, 0] = np.nan
    assert not landmarks_usable(nan, box)


def test_degenerate_landmarks_raise():
    with pytest.raises(ValueError):
        align_face(np.zeros((50, 50, 3), np.uint8), np.full((5, 2), 10.0), 64, 0.25)
    with pytest.raises(ValueError):
        align_face(np.zeros((50, 50, 3), np.uint8), np.full((5, 2), np.nan), 64, 0.25)
