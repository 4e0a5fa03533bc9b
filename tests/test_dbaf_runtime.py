"""DBAF in the runtime: keys -> P, `run --anonymizer dbaf`, model-mode recovery, fail-closed, leak guard.

The generator is a random-init cpu-small 64 px DBAF exported to ONNX in a
temporary folder (never committed): these tests check the wiring, not the
quality of the faces.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest

from streamdeid.anonymizers import (
    REGISTRY,
    AnonymizerBase,
    DBAFAnonymizer,
    SolidAnonymizer,
    dbaf_recover_crops,
    register_anonymizer,
)
from streamdeid.config import PipelineConfig
from streamdeid.keys import kria_vector, track_key
from streamdeid.summary import RunSummary
from streamdeid.render import FrameRenderer
from streamdeid.types import FaceContext, Frame, FrameResult, StreamdeidError, TrackedFace

from conftest import MEDIA, decode, make_video, trained_kria

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]
CLIP = MEDIA / "head-pose-face-detection-female-and-male.mp4"  # 480x270, 2 people
CLIP_FRAMES = 10


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="session")
def dbaf_files(tmp_path_factory) -> dict:
    """A random-init cpu-small 64 px DBAF: ONNX export and safetensors checkpoint of the same weights."""
    from streamdeid.models import DBAFConfig
    from streamdeid.models.dbaf import DBAF
    from streamdeid.models.io import save_checkpoint

    spec = importlib.util.spec_from_file_location("engines.export_onnx", ROOT / "engines" / "export_onnx.py")
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = trained_kria(DBAF(DBAFConfig.preset("cpu-small", 64))).eval()
        d = tmp_path_factory.mktemp("dbaf")
        onnx_path = export.export_dbaf(model, d / "dbaf64.onnx")
        ckpt = d / "dbaf64.safetensors"
        save_checkpoint(ckpt, model)
    finally:
        torch.set_num_threads(n)
    return {"onnx": onnx_path, "ckpt": ckpt, "model": model}


@pytest.fixture(scope="session")
def anonymizer(dbaf_files) -> DBAFAnonymizer:
    return DBAFAnonymizer(dbaf_files["onnx"], "onnxrt", threads=1)


@pytest.fixture(scope="module")
def short_clip(tmp_path_factory) -> Path:
    if not CLIP.is_file():
        pytest.skip(f"shared clip {CLIP} not found")
    frames = decode(CLIP)[:CLIP_FRAMES]
    return make_video(tmp_path_factory.mktemp("clip") / "two.mkv", frames, codec="ffv1")


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamdeid.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("streamdeid: error: ")]
    assert len(errors) == 1, proc.stderr
    for n in needles:
        assert n.lower() in errors[0].lower(), errors[0]
    return errors[0]


def contexts(n: int, master: bytes = bytes(range(32)), video_id: bytes = bytes(16), frame: int = 0):
    return [FaceContext(t, frame, track_key(master, video_id, t)) for t in range(1, n + 1)]


def crops_of(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = cv2.resize(cv2.imread(str(MEDIA / "obama.jpg")), (128, 128)) if (MEDIA / "obama.jpg").is_file() \
        else rng.integers(0, 255, (128, 128, 3), dtype=np.uint8)
    return np.stack([np.roll(base, 3 * i, axis=1) for i in range(n)])


# --------------------------------------------------------------------------- keys -> P, G(x, P)


def test_p_is_deterministic_per_track_and_differs_across_tracks(anonymizer) -> None:
    l, d = anonymizer.key_shape
    ctx = contexts(3)
    p1 = anonymizer.keys_for(ctx)
    p2 = anonymizer.keys_for(contexts(3))
    assert p1.shape == (3, l, d) and p1.dtype == np.float32
    assert np.array_equal(p1, p2)  # same master, video, track -> same P
    assert np.array_equal(p1[0], kria_vector(ctx[0].key, l * d).reshape(l, d))
    assert not np.allclose(p1[0], p1[1]) and not np.allclose(p1[1], p1[2])  # two tracks never share a P
    other_video = anonymizer.keys_for(contexts(1, video_id=b"\x01" * 16))
    assert not np.allclose(other_video[0], p1[0])
    # The output follows: same crop + same track -> same face; another track -> another face.
    crop = crops_of(1)
    same = np.concatenate([crop, crop])
    a = anonymizer(same, [ctx[0], ctx[0]])
    b = anonymizer(same, [ctx[0], ctx[1]])
    assert a.shape == same.shape and a.dtype == np.uint8
    assert np.array_equal(a[0], a[1]) and not np.array_equal(b[0], b[1])


def test_crop_without_key_raises(anonymizer) -> None:
    with pytest.raises(Exception, match="key"):
        anonymizer(crops_of(1), [FaceContext(7, 0, None)])


def test_anonymize_and_recover_use_the_same_weights(anonymizer, dbaf_files) -> None:
    ctx = contexts(2)
    x = crops_of(2)
    x_ano = anonymizer(x, ctx)
    x_rec = dbaf_recover_crops(anonymizer, x_ano, ctx)
    assert x_rec.shape == x.shape and x_rec.dtype == np.uint8
    # Recovery is G again, with the same weights and P: it equals one more anonymizer pass ...
    assert np.array_equal(x_rec, anonymizer(x_ano, ctx))
    # ... and the torch checkpoint of the same weights gives the same faces as the ONNX graph.
    via_torch = DBAFAnonymizer(dbaf_files["ckpt"], "torch")
    assert np.abs(via_torch(x, ctx).astype(int) - x_ano).max() <= 2
    # A wrong key gives another face, not an error.
    assert not np.array_equal(dbaf_recover_crops(anonymizer, x_ano, contexts(2, master=b"\x07" * 32)), x_rec)


def test_crop_size_other_than_model_resolution(anonymizer) -> None:
    out = anonymizer(crops_of(1)[:, ::2, ::2].copy(), contexts(1))  # S = 64 = R: no resize
    assert out.shape == (1, 64, 64, 3)
    big = np.stack([cv2.resize(crops_of(1)[0], (200, 200))])
    assert anonymizer(big, contexts(1)).shape == (1, 200, 200, 3)


# --------------------------------------------------------------------------- rendering: fail closed, leak guard

LM = np.array([[140, 110], [180, 110], [160, 135], [145, 160], [175, 160]], np.float32)
BOX = np.array([120, 80, 200, 180], np.float32)


class _Exploding:
    name = "exploding"
    resolution = 64
    key_shape = (10, 128)

    def __init__(self) -> None:
        self.calls = 0

    def run(self, x, p):
        self.calls += 1
        raise RuntimeError("generator exploded")


def test_generator_error_falls_back_to_solid_per_track(caplog) -> None:
    cfg = PipelineConfig()
    gen = _Exploding()
    anon = DBAFAnonymizer(generator=gen)
    keys = {1: b"\x01" * 32}
    no_guard = replace(cfg.anonymize, leak_guard=False)
    renderer = FrameRenderer(anon, align=cfg.align, blend=cfg.blend, anonymize=no_guard, key_for_track=keys.get)
    img = np.random.default_rng(1).integers(0, 255, (240, 320, 3), dtype=np.uint8)
    pasted = renderer.render(FrameResult(Frame(0, img, 0, None), [TrackedFace(1, BOX, LM, 0.9)]))
    assert [p.method for p in pasted] == ["solid-fallback"]
    assert np.array_equal(img[135, 160], cfg.anonymize.solid_color)
    assert "generator exploded" in caplog.text
    # The track stays on solid fill: the generator is not asked again for it.
    img2 = img.copy()
    pasted = renderer.render(FrameResult(Frame(1, img2, 1, None), [TrackedFace(1, BOX, LM, 0.9)]))
    assert [p.method for p in pasted] == ["solid-fallback"] and gen.calls == 1
    assert renderer.fallbacks == 2 and renderer.leak_fallbacks == 0
    assert "2 faces fell back to solid fill" in RunSummary(frames=2, fallbacks=renderer.fallbacks).line()


class _Identity(AnonymizerBase):
    """An 'anonymizer' that keeps the face, and asks for the leak guard."""

    name = "identity-test"
    needs_leak_guard = True

    def __init__(self, cfg=None) -> None:
        self.calls = 0

    def __call__(self, crops, contexts):
        self.calls += 1
        return np.array(crops, copy=True)


class _GuardedSolid(SolidAnonymizer):
    name = "solid-guarded-test"
    needs_leak_guard = True


@pytest.fixture(scope="module")
def obama_faces():
    from streamdeid.config import DetectConfig
    from streamdeid.detect import create_detector

    path = MEDIA / "obama.jpg"
    if not path.is_file():
        pytest.skip("shared media not found")
    image = cv2.imread(str(path))
    dets = create_detector(DetectConfig()).detect(image)
    assert len(dets) >= 1
    faces = [TrackedFace(i + 1, dets.boxes[i], dets.landmarks[i], float(dets.scores[i])) for i in range(len(dets))]
    return image, faces


def _guarded_renderer(anonymizer):
    """(default config, anonymizer, a FrameRenderer around it: leak guard on, one fixed key per track)."""
    cfg = PipelineConfig()
    return cfg, anonymizer, FrameRenderer(anonymizer, align=cfg.align, blend=cfg.blend, anonymize=cfg.anonymize,
                                          key_for_track=lambda t: b"\x02" * 32)


def test_leak_guard_catches_identity_and_spares_solid(obama_faces) -> None:
    image, faces = obama_faces
    cfg, ident, renderer = _guarded_renderer(_Identity())
    assert renderer.guard is not None
    img = image.copy()
    pasted = renderer.render(FrameResult(Frame(0, img, 0, None), faces))
    assert [p.method for p in pasted] == ["solid-fallback"] * len(faces)
    assert renderer.leak_fallbacks == len(faces) and renderer.fallbacks == len(faces)
    assert not np.array_equal(img, image)  # the leaking faces were covered, not left as they were
    cx, cy = faces[0].landmarks[2]
    assert np.array_equal(img[int(cy), int(cx)], cfg.anonymize.solid_color)
    # Later frames of the track: solid without asking the anonymizer.
    renderer.render(FrameResult(Frame(1, image.copy(), 1, None), faces))
    assert ident.calls == 1

    solid = FrameRenderer(_GuardedSolid(cfg.anonymize), align=cfg.align, blend=cfg.blend, anonymize=cfg.anonymize)
    for i in range(4):
        pasted = solid.render(FrameResult(Frame(i, image.copy(), i, None), faces))
    assert solid.guard.checks >= 3 * len(faces)
    assert solid.leak_fallbacks == 0 and [p.method for p in pasted] == ["solid-guarded-test"] * len(faces)

    # Blur/mosaic/solid never pay for the guard.
    from streamdeid.anonymizers import BlurAnonymizer

    assert FrameRenderer(BlurAnonymizer(), align=cfg.align, blend=cfg.blend, anonymize=cfg.anonymize).guard is None


def test_leak_guard_end_to_end_counts_in_summary(short_clip, tmp_path) -> None:
    from streamdeid.api import anonymize

    register_anonymizer("identity-test", _Identity)
    try:
        config = PipelineConfig()
        config.anonymize.method = "identity-test"
        config.progress = False
        res = anonymize(str(short_clip), tmp_path / "out.mkv", config)
    finally:
        REGISTRY.pop("identity-test")
    s = res.summary
    assert s.frames == CLIP_FRAMES and s.tracks >= 2
    assert s.leak_fallbacks == s.tracks and s.fallbacks == s.faces
    assert "leak guard" in s.line()


# --------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def dbaf_run(short_clip, dbaf_files, tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("run")
    key = d / "k.bin"
    out = d / "anon.mkv"
    proc = cli("run", short_clip, "-o", out, "--anonymizer", "dbaf", "--model", dbaf_files["onnx"],
               "--key-file", key, "--new-key", "--no-crops", "--codec", "ffv1", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    return {"dir": d, "key": key, "out": out, "proc": proc}


def test_run_dbaf_end_to_end(dbaf_run, short_clip) -> None:
    from streamdeid.config import DetectConfig
    from streamdeid.detect import create_detector
    from streamdeid.keys import load_key
    from streamdeid.vault import VaultReader

    src, anon = decode(short_clip), decode(dbaf_run["out"])
    assert len(anon) == len(src) == CLIP_FRAMES
    assert "2 tracks" in dbaf_run["proc"].stderr
    assert "leak guard" not in dbaf_run["proc"].stderr and "solid fill" not in dbaf_run["proc"].stderr
    detector = create_detector(DetectConfig(input_size=0))
    checked = 0
    for s, a in zip(src, anon):
        for lm in detector.detect(s).landmarks:
            x0, y0 = np.floor(lm.min(0)).astype(int)
            x1, y1 = np.ceil(lm.max(0)).astype(int) + 1
            diff = np.abs(s[y0:y1, x0:x1].astype(int) - a[y0:y1, x0:x1]).max(-1)
            assert (diff > 2).mean() > 0.9  # every face region changed
            checked += 1
    assert checked >= CLIP_FRAMES
    with VaultReader(Path(str(dbaf_run["out"]) + ".sdv")) as reader:
        assert reader.header["store_crops"] is False
        assert reader.header["pipeline"]["anonymizer"] == "dbaf"
        recs = list(reader.records(load_key(dbaf_run["key"])))
    assert recs and all(r.crop is None for r in recs)  # geometry only: no face pixels in the vault
    assert all(r.mask_params.generated is True for r in recs)


def test_recover_model_mode(dbaf_run, dbaf_files) -> None:
    rec = dbaf_run["dir"] / "rec.mkv"
    proc = cli("recover", dbaf_run["out"], "-o", rec, "--key-file", dbaf_run["key"], "--mode", "model",
               "--model", dbaf_files["onnx"], "--codec", "ffv1", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "cannot tell a wrong key from a right one" in proc.stderr
    assert "(model mode)" in proc.stderr
    anon, out = decode(dbaf_run["out"]), decode(rec)
    assert len(out) == len(anon)
    assert any(not np.array_equal(a, o) for a, o in zip(anon, out))  # G ran and was pasted back
    # Exact mode has nothing to restore from a geometry-only vault: it says how to proceed.
    proc = cli("recover", dbaf_run["out"], "-o", dbaf_run["dir"] / "x.mkv", "--key-file", dbaf_run["key"])
    one_line_error(proc, "geometry only", "--mode model")


def test_missing_model_is_a_one_line_error(short_clip, tmp_path, monkeypatch) -> None:
    proc = cli("run", short_clip, "-o", tmp_path / "o.mkv", "--anonymizer", "dbaf", "--model",
               tmp_path / "nope.onnx", "--no-progress")
    one_line_error(proc, "nope.onnx")
    assert not (tmp_path / "o.mkv").exists()
    proc = cli("run", short_clip, "-o", tmp_path / "o.mkv", "--anonymizer", "blur", "--no-crops", "--no-progress")
    assert proc.returncode == 2 and "--no-crops" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    # an installation that lost its shipped weights says so, and names the ways out
    from streamdeid.anonymizers import dbaf as dbaf_mod

    monkeypatch.setattr(dbaf_mod, "WEIGHTS_DIR", tmp_path / "empty")
    with pytest.raises(StreamdeidError, match="shipped DBAF weights are missing.*--model PATH.*blur"):
        dbaf_mod.resolve_model_path(None, "onnxrt")


def test_shipped_weights_run_without_model(short_clip, tmp_path) -> None:
    """--anonymizer dbaf without --model: the shipped generator runs, checked against its manifest."""
    from streamdeid.anonymizers.dbaf import WEIGHTS_DIR, resolve_model_path, sha256_file

    manifest = json.loads((WEIGHTS_DIR / "manifest.json").read_text())
    path = resolve_model_path(None, "onnxrt")
    assert sha256_file(path) == manifest["models"]["onnxrt"]["sha256"]
    out, key = tmp_path / "o.mkv", tmp_path / "k.key"
    proc = cli("run", short_clip, "-o", out, "--anonymizer", "dbaf", "--no-progress", "--key-file", key, "--new-key",
               "--no-crops")
    assert proc.returncode == 0, proc.stderr
    assert "(dbaf)" in proc.stderr
    assert "--mode model" in proc.stderr
    assert "--model None" not in proc.stderr
    src, anon = decode(short_clip), decode(out)
    assert len(anon) == len(src)
    assert any(not np.array_equal(a, b) for a, b in zip(src, anon))
    # model-mode recovery finds the same shipped generator without --model
    rec = tmp_path / "rec.mkv"
    proc = cli("recover", out, "-o", rec, "--key-file", key, "--mode", "model", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "is not the model file" not in proc.stderr
    assert len(decode(rec)) == len(src)


def test_leak_found_mid_batch_covers_the_rest_of_the_batch(obama_faces) -> None:
    """render_many: a track caught leaking in frame 0 must not show generator output in frames 1..3."""
    image, faces = obama_faces
    cfg, ident, renderer = _guarded_renderer(_Identity())
    results = [FrameResult(Frame(i, image.copy(), i, None), faces) for i in range(4)]
    pasted = renderer.render_many(results)
    assert ident.calls == 1  # one generator batch for the four frames
    assert all(p.method == "solid-fallback" for frame in pasted for p in frame)
    cx, cy = faces[0].landmarks[2]
    for r in results:
        assert np.array_equal(r.frame.image[int(cy), int(cx)], cfg.anonymize.solid_color)


def test_leak_guard_embeds_the_blanked_reference_only_over_the_threshold(obama_faces) -> None:
    """The guard's lazy reference gives the verdicts of the full rule (threshold AND margin over the
    blanked reference), on the original face, light and strong blurs and a solid fill."""
    from streamdeid.identity.leakcheck import blank_face
    from streamdeid.identity.sface import align_for_sface, cosine
    from streamdeid.leakguard import LeakGuard

    image, faces = obama_faces
    guard = LeakGuard(PipelineConfig().anonymize)
    orig = align_for_sface(image, np.asarray(faces[0].landmarks, np.float64))
    outputs = [orig, cv2.GaussianBlur(orig, (0, 0), 1.0), cv2.GaussianBlur(orig, (0, 0), 2.5),
               cv2.GaussianBlur(orig, (0, 0), 8.0), np.full_like(orig, 128)]
    embedded = []
    real_embed = guard.sface.embed
    guard.sface.embed = lambda crops: embedded.append(len(crops)) or real_embed(crops)
    verdicts = guard._judge(list(range(len(outputs))), np.stack([orig] * len(outputs)), np.stack(outputs))
    e_orig, e_blank = real_embed(np.stack([orig, blank_face(orig)]))
    for v, out in zip(verdicts, outputs):
        sim = cosine(e_orig, real_embed(out[None])[0])
        ref = cosine(e_orig, e_blank)
        assert v.similarity == pytest.approx(sim, abs=1e-4)
        assert v.leaked == (sim >= guard.threshold and sim - ref >= guard.margin)
        assert (v.reference is None) == (sim < guard.threshold)
    over = sum(v.similarity >= guard.threshold for v in verdicts)
    assert verdicts[0].leaked and not verdicts[-1].leaked and 0 < over < len(outputs)
    assert embedded == [2 * len(outputs), over]  # the reference only for the faces over the threshold


def test_eval_recoverer_reuses_a_loaded_generator(anonymizer, dbaf_files) -> None:
    """quality.py: the dbaf recoverer is the anonymizer's own recover (one model load), and gives
    the same faces as a recoverer that loads the weights itself."""
    from streamdeid.config import AnonymizeConfig
    from evaluation import create_recoverer

    cfg = AnonymizeConfig(method="dbaf", model_path=str(dbaf_files["onnx"]))
    reused = create_recoverer(cfg, anonymizer)
    assert reused == anonymizer.recover
    ctx = contexts(2)
    x_ano = anonymizer(crops_of(2), ctx)
    assert np.array_equal(reused(x_ano, ctx), create_recoverer(cfg)(x_ano, ctx))
    assert create_recoverer(AnonymizeConfig(method="blur"), anonymizer) is None  # no recovery for blur
