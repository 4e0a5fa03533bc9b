"""align/steady.py: what an anonymizer draws inside the crop stays put while the crop trembles with the
landmarks, and follows at once when the face really moves; the composite uses it."""

from __future__ import annotations

import cv2
import numpy as np
from conftest import load_image

from streamdeid.align.steady import SNAP, SteadyAlignment
from streamdeid.anonymizers.composite import CompositeAnonymizer
from streamdeid.types import FaceContext

SIDE = 128


def _inverse(cx: float, cy: float, scale: float = 1.0, angle: float = 0.0) -> np.ndarray:
    """crop -> frame [2, 3]: a 128 px crop of a face of ``scale`` * 128 px centred at (cx, cy)."""
    m = cv2.getRotationMatrix2D((SIDE / 2, SIDE / 2), angle, scale)
    m[:, 2] += (cx - SIDE / 2, cy - SIDE / 2)
    return m


def _drawn_centre(inverse: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Where the crop centre drawn through ``c`` (steady -> this crop) lands in the frame."""
    p = np.array([SIDE / 2, SIDE / 2, 1.0])
    in_crop = c @ p
    return inverse @ np.append(in_crop, 1.0)


def test_first_frame_and_a_real_move_draw_where_the_crop_is():
    s = SteadyAlignment()
    assert np.allclose(s.correction(1, 0, _inverse(200, 150), SIDE), np.eye(3)[:2])
    # a move of 20% of the face in one frame is the face moving: followed at once
    assert np.allclose(s.correction(1, 1, _inverse(226, 150), SIDE), np.eye(3)[:2])
    # a gap in the track's frames starts again
    assert np.allclose(s.correction(1, 5, _inverse(227, 151), SIDE), np.eye(3)[:2])


def test_jitter_of_a_still_face_is_smoothed_and_stays_within_snap():
    rng = np.random.default_rng(0)
    s = SteadyAlignment()
    raw, drawn = [], []
    for t in range(60):
        jitter = rng.normal(0, 1.5, 2)  # px, a face of 128 px: what landmarks do on a still face
        inv = _inverse(300 + jitter[0], 200 + jitter[1], 1.0 + rng.normal(0, 0.01), rng.normal(0, 1.0))
        c = s.correction(9, t, inv, SIDE)
        raw.append(inv[:, 2] + inv[:, :2] @ (SIDE / 2, SIDE / 2))
        drawn.append(_drawn_centre(inv, c))
        # never further from this frame's crop than SNAP of its side (the cover is the crop)
        assert np.linalg.norm(drawn[-1] - raw[-1]) <= SNAP * SIDE + 1e-6
    step_raw = np.linalg.norm(np.diff(raw, axis=0), axis=1).mean()
    step_drawn = np.linalg.norm(np.diff(drawn, axis=0), axis=1).mean()
    assert step_drawn < 0.5 * step_raw, (step_drawn, step_raw)


def test_the_camera_motion_is_carried():
    s = SteadyAlignment()
    s.correction(2, 0, _inverse(100, 100), SIDE)
    pan = np.array([[1.0, 0, 3.0], [0, 1.0, 0]])  # the picture moved 3 px right
    c = s.correction(2, 1, _inverse(103, 100), SIDE, motion=pan)
    assert np.allclose(c, np.eye(3)[:2], atol=1e-9)  # the face moved with the camera: nothing lags


def test_a_composite_on_a_trembling_crop_trembles_less(media):
    """The composite of a real face, rendered on crops aligned with jittered landmarks, then put back in
    the frame: its pixels change less from frame to frame with the steady alignment than without."""
    from streamdeid.align.aligner import warp_aligned

    image = load_image("obama.jpg")
    h, w = image.shape[:2]
    base = _inverse(w / 2, h * 0.4, scale=min(w, h) * 0.5 / SIDE)
    rng = np.random.default_rng(1)
    anon = CompositeAnonymizer()
    outs = {False: [], True: []}
    for steady in (False, True):
        s = SteadyAlignment()
        for t in range(12):
            inv = base.copy()
            inv[:, 2] += rng.normal(0, 2.0, 2)  # a few px of landmark jitter on a still face
            matrix = cv2.invertAffineTransform(inv)
            crop = warp_aligned(image, matrix, SIDE, inv).crop
            ctx = FaceContext(5, t, bytes(32), s.correction(5, t, inv, SIDE) if steady else None)
            new = anon(crop[None], [ctx])[0]
            outs[steady].append(cv2.warpAffine(new, inv, (w, h)).astype(np.float32))
    x0, y0 = (base @ (SIDE * 0.35, SIDE * 0.35, 1.0)).astype(int)
    x1, y1 = (base @ (SIDE * 0.65, SIDE * 0.7, 1.0)).astype(int)

    def tremble(frames):
        return float(np.mean([np.abs(a[y0:y1, x0:x1] - b[y0:y1, x0:x1]).mean() for a, b in zip(frames, frames[1:])]))

    assert tremble(outs[True]) < 0.7 * tremble(outs[False]), (tremble(outs[True]), tremble(outs[False]))



def test_a_held_face_is_drawn_at_the_size_it_was_detected():
    """A held face's cover is drawn larger than its box (cover_size.py); what the composite draws keeps the
    face's size: the map the steady alignment follows is the detected face's."""
    from streamdeid.anonymizers import create_anonymizer
    from streamdeid.config import AlignConfig, AnonymizeConfig, BlendConfig
    from streamdeid.render import FrameRenderer, _unwidened
    from streamdeid.types import TrackedFace

    anonymize = AnonymizeConfig(method="composite")
    renderer = FrameRenderer(create_anonymizer(anonymize), align=AlignConfig(), blend=BlendConfig(), anonymize=anonymize)
    box = np.array([100, 80, 180, 180], np.float32)
    lm = np.array([[125, 120], [155, 120], [140, 140], [128, 160], [152, 160]], np.float32)
    detected = TrackedFace(1, box, lm, 0.9)
    held = TrackedFace(1, box, lm, 0.9, state="held")
    sides, _, inverses, _, _ = renderer._placements([detected, held], 640, 480)
    assert _unwidened(detected, inverses[0]) is None
    face = _unwidened(held, inverses[1])
    probes = np.array([[0.3, 0.4, 1.0], [0.7, 0.4, 1.0], [0.5, 0.75, 1.0]])  # eyes and mouth, unit crop

    def to_frame(inv, side):
        return (probes * (side, side, 1.0)) @ np.asarray(inv).T

    widened = to_frame(inverses[1], sides[1])
    assert np.abs(widened - to_frame(inverses[0], sides[0])).max() > 3  # the cover is drawn larger
    assert np.abs(to_frame(face, sides[1]) - to_frame(inverses[0], sides[0])).max() < 0.5
