"""The renderer's batched face geometry gives every face what it would get alone.

``FrameRenderer._align_all`` fits, inverts and places all of a frame's faces in one numpy pass
(align.aligner.template_fits, invert_similarities, box_matrices; blend.paste.paste_rois). Checked
here against independent references on real detections of shared clips: the Python-float
similarity fit, OpenCV's affine inverse and the warped mask itself.
"""

from __future__ import annotations

import av
import cv2
import numpy as np
import pytest

from streamdeid.align.aligner import (ARCFACE_112, IMPLIED_HEIGHT_RANGE, box_scaled_fits, invert_similarities,
                                     similarity_transform, template_fits)
from streamdeid.anonymizers import create_anonymizer
from streamdeid.blend.paste import paste_rois
from streamdeid.config import AlignConfig, AnonymizeConfig, BlendConfig, DetectConfig
from streamdeid.detect.finder import FaceFinder
from streamdeid.render import FrameRenderer
from streamdeid.types import TrackedFace


def _frames(path, every: int = 10, limit: int = 8) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        out = [f.to_ndarray(format="bgr24") for i, f in enumerate(c.decode(video=0)) if i % every == 0]
    return out[:limit]


@pytest.fixture(scope="module")
def detected(media) -> list[tuple[np.ndarray, object]]:
    """(frame, detections) on frames of two shared clips: the crowd of hamilton and two turning heads."""
    finder = FaceFinder(DetectConfig())
    out = []
    for name in ("short_hamilton_clip.mp4", "head-pose-face-detection-female-and-male.mp4"):
        for image in _frames(media / name):
            dets = finder.find(image, scan=True)
            if len(dets):
                out.append((image, dets))
    assert sum(len(d) for _, d in out) >= 40
    return out


def _plausible(lm: np.ndarray, box: np.ndarray, tolerance: float = 0.65) -> bool:
    """template_fit's rule, one face at a time with numpy: landmarks within the box grown by half, the
    fitted scale 0.3-3x the box, every point within ``tolerance`` eye distances of the template."""
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1
    if ((lm[:, 0] < x1 - 0.5 * w) | (lm[:, 0] > x2 + 0.5 * w) | (lm[:, 1] < y1 - 0.5 * h) | (lm[:, 1] > y2 + 0.5 * h)).any():
        return False
    m = similarity_transform(lm, ARCFACE_112)
    if not 0.3 <= 100.0 / np.hypot(m[0, 0], m[1, 0]) / h <= 3.0:
        return False
    residual = np.hypot(*(lm @ m[:, :2].T + m[:, 2] - ARCFACE_112).T)
    return bool((residual <= tolerance * np.linalg.norm(ARCFACE_112[1] - ARCFACE_112[0])).all())


def test_batched_fit_is_the_single_fit_and_rejects_swapped_points(detected) -> None:
    landmarks = np.concatenate([d.landmarks for _, d in detected]).astype(np.float64)  # [N, 5, 2]
    boxes = np.concatenate([d.boxes for _, d in detected]).astype(np.float64)
    fits, ok = template_fits(landmarks, boxes)
    assert ok.mean() > 0.8  # real frontal-to-profile detections mostly fit
    assert ok.tolist() == [_plausible(lm, box) for lm, box in zip(landmarks, boxes)]
    for lm, fit, good in zip(landmarks, fits, ok):
        if good:  # bit for bit the Python-float least-squares fit
            np.testing.assert_array_equal(fit, similarity_transform(lm, ARCFACE_112))
    swapped = landmarks[:, [2, 1, 0, 3, 4]]  # the nose where an eye is: not a face
    fits, ok = template_fits(swapped, boxes)
    assert ok.mean() < 0.5  # the tolerance is generous (profiles), yet most are refused
    assert ok.tolist() == [_plausible(lm, box) for lm, box in zip(swapped, boxes)]
    assert template_fits(np.zeros((0, 5, 2)), np.zeros((0, 4)))[1].shape == (0,)


def test_batched_inverse_is_opencvs() -> None:
    rng = np.random.default_rng(3)
    m = rng.normal(0, 2, (200, 2, 3))
    inv = invert_similarities(m)
    for a, b in zip(m, inv):
        np.testing.assert_array_equal(b, cv2.invertAffineTransform(a))


def test_paste_rectangles_hold_every_pixel_the_mask_reaches(detected) -> None:
    """Each face's rectangle holds every frame pixel its mask, warped by OpenCV, gives weight to."""
    anonymize = AnonymizeConfig(method="blur")
    renderer = FrameRenderer(create_anonymizer(anonymize), align=AlignConfig(), blend=BlendConfig(), anonymize=anonymize)
    checked = 0
    for image, dets in detected[:6]:
        h, w = image.shape[:2]
        faces = [TrackedFace(i, b, lm, s) for i, (b, lm, s) in enumerate(zip(dets.boxes, dets.landmarks, dets.scores))]
        for face, placed in zip(faces, renderer._align_all(image, faces)):
            assert placed is not None
            aligned, (x, y, rw, rh) = placed
            mask, _ = renderer._mask_for(len(aligned.crop))
            alpha = cv2.warpAffine(mask, aligned.inverse, (w, h), flags=cv2.INTER_LINEAR)
            ys, xs = np.nonzero(alpha > 0)
            assert len(xs) and xs.min() >= x and xs.max() < x + rw and ys.min() >= y and ys.max() < y + rh
            # the crop is the face's pixels through the matrix the rectangle was placed with
            np.testing.assert_array_equal(aligned.crop, cv2.warpAffine(
                image, aligned.matrix, (len(aligned.crop),) * 2, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE))
            checked += 1
    assert checked >= 10
    # a support off the frame places nothing
    rois, ok = paste_rois(np.array([[[1, 0, 5000.0], [0, 1, 5000.0]]]), np.array([[0, 0, 64, 64]]), 640, 360)
    assert not ok[0]


def test_small_faces_get_the_smallest_crop_that_keeps_two_pixels_per_pixel() -> None:
    anonymize = AnonymizeConfig(method="blur")
    renderer = FrameRenderer(create_anonymizer(anonymize), align=AlignConfig(), blend=BlendConfig(), anonymize=anonymize)
    heights = np.array([10.0, 16.0, 20.0, 30.0, 47.0, 49.0, 200.0])
    boxes = np.stack([np.zeros_like(heights), np.zeros_like(heights), heights * 0.8, heights], 1)
    assert renderer._crop_sides(boxes).tolist() == [32, 32, 48, 64, 96, 128, 128]


def test_a_fit_is_scaled_to_its_box_about_the_landmarks_centre() -> None:
    """Landmarks that imply a face far larger than its box (a weak band-pan detection: 35 x 43 px box,
    points spread 43 px down) are drawn at the box's scale; a usual fit is left as it is."""
    landmarks = np.array([[[1223.0, 626.0], [1229.0, 616.0], [1230.0, 627.0], [1239.0, 659.0], [1233.0, 651.0]],
                          [[20.0, 30.0], [40.0, 30.0], [30.0, 42.0], [22.0, 52.0], [38.0, 52.0]]])
    boxes = np.array([[1209.0, 609.0, 1244.0, 652.0], [10.0, 12.0, 50.0, 62.0]])
    fits, ok = template_fits(landmarks, boxes)
    assert ok.all()
    implied = 100.0 / np.hypot(fits[:, 0, 0], fits[:, 1, 0]) / (boxes[:, 3] - boxes[:, 1])
    assert implied[0] > 2.0 and IMPLIED_HEIGHT_RANGE[0] <= implied[1] <= IMPLIED_HEIGHT_RANGE[1]
    scaled = box_scaled_fits(fits, boxes)
    after = 100.0 / np.hypot(scaled[:, 0, 0], scaled[:, 1, 0]) / (boxes[:, 3] - boxes[:, 1])
    assert after[0] == pytest.approx(IMPLIED_HEIGHT_RANGE[1]) and np.allclose(scaled[1], fits[1])
    centre = np.append(landmarks[0].mean(axis=0), 1.0)
    assert np.allclose(scaled[0] @ centre, fits[0] @ centre)  # the face stays where its points are
    # the rotation is the landmarks' own
    assert np.allclose(np.arctan2(scaled[:, 1, 0], scaled[:, 0, 0]), np.arctan2(fits[:, 1, 0], fits[:, 0, 0]))


def test_the_run_counts_the_faces_it_draws_as_the_vault_records_them() -> None:
    """A held face the camera carried wholly out of view is not drawn, so it is not counted (the summary
    said 2,212 faces on hamilton where its vault held 2,203 face records)."""
    from fractions import Fraction

    from streamdeid.stages import RenderStage
    from streamdeid.summary import RunSummary
    from streamdeid.types import Frame, FrameResult

    anonymize = AnonymizeConfig(method="blur")
    renderer = FrameRenderer(create_anonymizer(anonymize), align=AlignConfig(), blend=BlendConfig(), anonymize=anonymize)
    lm = np.array([[30, 40], [50, 40], [40, 50], [32, 60], [48, 60]], np.float32)
    inside = TrackedFace(1, np.array([20, 25, 60, 75], np.float32), lm, 0.9)
    gone = TrackedFace(2, np.array([900, 25, 940, 75], np.float32), lm + [880, 0], 0.9, state="held")
    recorded = []
    stage = RenderStage(renderer, [lambda result, pasted: recorded.extend(pasted)], summary := RunSummary())
    frame = Frame(0, np.full((120, 160, 3), 128, np.uint8), 0, Fraction(1, 25))
    stage(FrameResult(frame, [inside, gone]))
    stage.close()
    assert [p.face.track_id for p in recorded] == [1]
    assert (summary.frames, summary.faces, summary.tracks) == (1, 1, 1)
