"""Known-answer tests of the quality metrics (evaluation, benchmarks/quality.py)."""

from __future__ import annotations

import json
import math

import cv2
import numpy as np
import pytest

from streamdeid.anonymizers import AnonymizerBase, create_anonymizer
from streamdeid.config import AnonymizeConfig, DetectConfig
from streamdeid.detect import create_detector
from evaluation import (
    EvalKeys,
    FaceGeometry,
    create_recognizers,
    dlib_available,
    fidelity,
    heldout_files,
    heldout_names,
    heldout_rule,
    is_heldout,
    keyless,
    mse,
    psnr,
    ssim,
    vault_round_trip,
)
from evaluation.heldout import make_split_list
from evaluation.report import jsonable

from conftest import MEDIA, UTK  # noqa: E402

needs_utk = pytest.mark.skipif(not UTK.is_dir(), reason=f"shared dataset not found at {UTK}")
needs_media = pytest.mark.skipif(not MEDIA.is_dir(), reason=f"shared media not found at {MEDIA}")
RECOGNIZERS = ["sface"] + (["dlib"] if dlib_available() else [])


class Identity(AnonymizerBase):
    name = "none"

    def __call__(self, crops, contexts=None):
        return np.array(crops, copy=True)


class XorKey(AnonymizerBase):
    """A toy reversible, keyed 'anonymizer': XOR with a keystream derived from the key."""

    name = "xor"

    def __call__(self, crops, contexts):
        out = np.empty_like(crops)
        for i, (c, ctx) in enumerate(zip(crops, contexts)):
            rng = np.random.default_rng(list(ctx.key))
            out[i] = c ^ rng.integers(0, 256, c.shape, dtype=np.uint8)
        return out


@pytest.fixture(scope="module")
def recognizers():
    recs, _ = create_recognizers(tuple(RECOGNIZERS))
    return recs


@pytest.fixture(scope="module")
def evaluator(recognizers):
    if not UTK.is_dir():
        pytest.skip(f"shared dataset not found at {UTK}")
    from evaluation.faces import FaceEvaluator, load_face_set

    fs = load_face_set("utk", heldout_files(UTK), limit=6, largest_only=True, pad=0.25)
    assert len(fs.faces) == 6
    return FaceEvaluator(fs, recognizers)


# ----------------------------------------------------------------------------- pixels


def test_ssim_psnr_known_values():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    assert ssim(a, a) == pytest.approx(1.0, abs=1e-9)
    assert psnr(a, a) == math.inf
    # Flat images: only the luminance term is left, (2 mx my + C1) / (mx^2 + my^2 + C1).
    c1 = (0.01 * 255) ** 2
    flat = np.full((32, 32), 100, np.uint8)
    assert ssim(flat, flat + 10) == pytest.approx((2 * 100 * 110 + c1) / (100**2 + 110**2 + c1))
    smooth = np.tile(np.linspace(0, 255, 64), (64, 1)).astype(np.uint8)
    noisy = np.clip(smooth + rng.normal(0, 25, smooth.shape), 0, 255).astype(np.uint8)
    assert ssim(smooth, noisy) < 0.5
    b = a.copy()
    b[0, 0, 0] = a[0, 0, 0] ^ 1 if a[0, 0, 0] < 255 else 254  # one value off by 1
    expected_mse = (1 / 127.5) ** 2 / a.size  # on the [-1, 1] scale
    assert mse(a, b) == pytest.approx(expected_mse)
    assert psnr(a, b) == pytest.approx(10 * math.log10(255**2 / (1 / a.size)))  # same dB as on 0..255


def test_lossless_round_trip_reports_infinite_psnr():
    rng = np.random.default_rng(1)
    crops = rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    f = fidelity(crops, crops.copy())
    assert f["lossless"] and f["psnr"] == math.inf and f["mse"] == 0.0 and f["ssim"] == pytest.approx(1.0)
    assert jsonable(f)["psnr"] == "inf"  # strict JSON cannot hold inf: it is reported as the string
    json.dumps(jsonable(f), allow_nan=False)
    keys = EvalKeys(3)
    back = vault_round_trip(crops, keys, "right")  # through the real vault (lossless H.264 in AES-GCM)
    assert fidelity(crops, back)["psnr"] == math.inf
    assert vault_round_trip(crops, keys, "wrong") is None


def test_keyless_detection():
    rng = np.random.default_rng(2)
    crops = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    keys = EvalKeys()
    assert keyless(create_anonymizer(AnonymizeConfig(method="blur")), crops, keys)
    assert not keyless(XorKey(), crops, keys)


# ----------------------------------------------------------------------------- held-out split


@needs_utk
def test_heldout_split_is_deterministic_and_non_empty():
    names = heldout_names()
    total = sum(1 for _ in UTK.iterdir())
    assert 0.03 * total < len(names) < 0.07 * total
    assert sorted(names) == make_split_list(UTK) == make_split_list(UTK)
    assert all(heldout_rule(n) for n in names)
    first = sorted(names)[0]
    assert is_heldout(UTK / first) and is_heldout(first)
    other = next(p for p in sorted(UTK.iterdir()) if p.name not in names)
    assert not is_heldout(other)
    assert [p.name for p in heldout_files(UTK)] == sorted(names)


def test_heldout_list_ships_with_the_package():
    assert len(heldout_names()) > 100


# ----------------------------------------------------------------------------- recognizers


@needs_media
def test_face_matches_its_flipped_copy(recognizers):
    img = cv2.imread(str(MEDIA / "obama.jpg"))
    flipped = np.ascontiguousarray(img[:, ::-1])
    det = create_detector(DetectConfig())
    a, b = det.detect(img), det.detect(flipped)
    ga, gb = FaceGeometry(a.boxes[0], a.landmarks[0]), FaceGeometry(b.boxes[0], b.landmarks[0])
    for rec in recognizers:
        ea = rec.embed([img], [rec.prepare(img, ga)])
        eb = rec.embed([flipped], [rec.prepare(flipped, gb)])
        assert rec.matches(rec.score(ea, eb)).all(), rec.name


def test_identity_leaks_everything(evaluator):
    r = evaluator.evaluate(Identity(), AnonymizeConfig(method="none"))
    for name in RECOGNIZERS:
        assert r["anonymization"][name]["matched"] == 1.0, name
    assert r["anonymization"]["sface"]["matched_beyond_context"] == 1.0
    assert r["utility"]["yunet"]["detected"] == 1.0
    assert r["recovery"]["applicable"] is False and r["diversity"]["applicable"] is False


def test_solid_fill_leaks_nothing(evaluator):
    cfg = AnonymizeConfig(method="solid")
    r = evaluator.evaluate(create_anonymizer(cfg), cfg)
    for name in RECOGNIZERS:
        assert r["anonymization"][name]["matched"] == 0.0, name
    assert r["utility"]["yunet"]["detected"] == 0.0


def test_recovery_with_right_and_wrong_key(evaluator):
    xor = XorKey()
    r = evaluator.evaluate(xor, AnonymizeConfig(method="xor"), recover=xor)
    right, wrong = r["recovery"]["right_key"], r["recovery"]["wrong_key"]
    assert right["pixels"]["psnr"] == math.inf and right["sface"]["matched"] == 1.0
    assert wrong["pixels"]["psnr"] < 12 and wrong["sface"]["matched"] == 0.0
    assert r["diversity"]["applicable"] is True
    assert r["anonymization"]["sface"]["matched"] == 0.0
    v = evaluator.vault()
    assert v["right_key"]["pixels"]["psnr"] == math.inf and v["wrong_key"]["recovered"] == 0.0


# ----------------------------------------------------------------------------- video


@needs_media
def test_video_leak_metric_catches_an_uncovered_frame(tmp_path):
    from evaluation.video import anonymize_clip, clip_fps, decode, leak_metric, write_video

    src = MEDIA / "head-pose-face-detection-male.mp4"
    frames = []
    for f in decode(src):
        frames.append(f)
        if len(frames) == 8:
            break
    fps = clip_fps(src)
    clip = write_video(tmp_path / "clip.mp4", frames, fps)
    anon = anonymize_clip(clip, tmp_path / "anon.mp4", "solid").output
    clean = leak_metric(clip, anon)
    assert clean["faces"] >= 8 and clean["leaks"] == 0
    out = list(decode(anon))
    original = list(decode(clip))
    out[5] = original[5]  # the deliberately uncovered frame
    tampered = write_video(tmp_path / "tampered.mp4", out, fps)
    rep = leak_metric(clip, tampered)
    assert rep["leaks"] > 0
    assert set(rep["leaks_per_frame"]) == {5}


def test_followed_flicker_separates_a_face_moving_from_a_drawn_face_shimmering():
    """Raw flicker counts motion: a textured face moving 3 px a frame changes its box a lot, and an output that
    moves with it as much. The followed change (after the original's optical flow) is small for both, and large
    for an output that shimmers in place (new noise every frame) or stays behind while the face moves."""
    from evaluation.video import _box_change, _followed_change

    rng = np.random.default_rng(0)
    canvas = cv2.GaussianBlur((rng.random((160, 220, 3)) * 255).astype(np.uint8), (0, 0), 2.0)
    prev, cur = canvas[20:140, 20:180], canvas[20:140, 23:183]  # the picture moved 3 px left
    box = (50, 30, 110, 90)
    moving = _box_change(box, (prev, cur), (prev, cur))
    followed = _followed_change(box, (prev, cur), (prev, cur))
    assert moving[0] > 5 and followed[0] < 0.1 * moving[0] and followed[1] == followed[0]
    shimmer = np.clip(cur.astype(np.int16) + rng.integers(-12, 13, cur.shape), 0, 255).astype(np.uint8)
    assert _followed_change(box, (prev, cur), (prev, shimmer))[1] > followed[0] + 4
    behind = _followed_change(box, (prev, cur), (prev, prev))  # the output did not move with the face
    assert _box_change(box, (prev, cur), (prev, prev))[1] == 0 and behind[1] > 2 * followed[0]
