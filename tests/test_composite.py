"""The composite anonymizer (streamdeid/anonymizers/composite.py) and its shipped donor bank."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
from conftest import MEDIA, decode, run_cli

from streamdeid.anonymizers import create_anonymizer, reversible_method
from streamdeid.anonymizers.composite import (
    BANK_DIR,
    MIN_K,
    CompositeAnonymizer,
    load_bank,
)
from streamdeid.config import AnonymizeConfig
from streamdeid.types import FaceContext, StreamdeidError


@pytest.fixture(scope="module")
def anon() -> CompositeAnonymizer:
    return CompositeAnonymizer()


def _key(i: int) -> bytes:
    return bytes([i]) * 32


def test_shipped_bank_loads_and_every_composite_averages_at_least_10_faces():
    faces, manifest = load_bank()
    assert faces.ndim == 4 and faces.shape[1:] == (manifest["size"], manifest["size"], 3)
    assert len(faces) == len(manifest["composites"]) >= 20
    assert manifest["k"] >= MIN_K == manifest["min_k"] == 10
    assert all(e["k"] >= MIN_K for e in manifest["composites"])
    assert manifest["counts"]["faces_used"] == sum(e["k"] for e in manifest["composites"])
    assert "non-commercial" in manifest["licence"]
    # disjoint member sets: no two composites average the same faces
    assert len({e["members_sha256"] for e in manifest["composites"]}) == len(faces)
    # the package data stays small
    assert sum(p.stat().st_size for p in BANK_DIR.iterdir()) < 2 * 1024 * 1024


def test_bank_with_a_composite_of_fewer_than_10_faces_is_refused(tmp_path):
    for name in ("bank.png", "manifest.json"):
        (tmp_path / name).write_bytes((BANK_DIR / name).read_bytes())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["composites"][3]["k"] = 9
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StreamdeidError, match="at least 10"):
        load_bank(tmp_path)
    (tmp_path / "bank.png").write_bytes(b"not a png")
    with pytest.raises(StreamdeidError, match="sha256"):
        CompositeAnonymizer(bank=tmp_path)


def _sub_bank(folder, n: int):
    """The shipped bank's first ``n`` composites as a bank of its own (what a user's build gives)."""
    import hashlib

    folder.mkdir()
    faces, manifest = load_bank()
    atlas = np.concatenate(list(faces[:n]), axis=1)
    cv2.imwrite(str(folder / "bank.png"), atlas)
    manifest["composites"] = manifest["composites"][:n]
    manifest["bank_sha256"] = hashlib.sha256((folder / "bank.png").read_bytes()).hexdigest()
    manifest.pop("sface", None)  # no shipped embeddings: the anonymizer computes them
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_run_model_names_a_bank_the_user_built(media, tmp_path):
    bank = _sub_bank(tmp_path / "bank", 3)
    assert len(CompositeAnonymizer(AnonymizeConfig(method="composite", model_path=str(bank))).faces) == 3
    src, out = media / "obama.jpg", tmp_path / "out.jpg"
    r = run_cli("run", str(src), "-o", str(out), "--anonymizer", "composite", "--model", str(bank))
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    box, _ = _largest_face(cv2.imread(str(src)))
    x1, y1, x2, y2 = box.astype(int)
    assert np.abs(cv2.imread(str(src))[y1:y2, x1:x2].astype(int) - cv2.imread(str(out))[y1:y2, x1:x2]).mean() > 8
    # a damaged bank, a file, or --model with blur: one line each, before any output
    (bank / "bank.png").write_bytes(b"not a png")
    for args, says in (((str(bank),), b"sha256"), ((str(src),), b"donor bank folder")):
        r = run_cli("run", str(src), "-o", str(tmp_path / "no.jpg"), "--anonymizer", "composite", "--model", *args)
        assert r.returncode == 1 and says in r.stderr and b"internal error" not in r.stderr, r.stderr
        assert not (tmp_path / "no.jpg").exists()
    r = run_cli("run", str(src), "-o", str(tmp_path / "no.jpg"), "--model", str(bank))
    assert r.returncode == 2 and b"--model is for" in r.stderr  # options that do not go together


def test_a_bank_built_from_a_users_folder_runs_and_is_not_replaced(tmp_path, capsys):
    import shutil

    from conftest import UTK
    from evaluation.heldout import is_heldout
    from training.composites import main as build_bank

    if not UTK.is_dir():
        pytest.skip(f"training images not found at {UTK}")
    faces = tmp_path / "faces"
    faces.mkdir()
    # 30 adults' photos, none of the held-out split (most folders a user has hold none of it)
    for p in [p for p in sorted(UTK.iterdir()) if p.name[:1] in "23" and not is_heldout(p)][:30]:
        shutil.copy(p, faces / p.name)
    out = tmp_path / "bank"
    assert build_bank(["--faces", str(faces), "--out", str(out), "--k", "10"]) == 0
    built, manifest = load_bank(out)
    assert len(built) >= 1 and all(e["k"] == 10 for e in manifest["composites"])
    assert build_bank(["--faces", str(faces), "--out", str(out), "--k", "10"]) == 2  # no --overwrite
    assert "holds a bank already" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert build_bank(["--faces", str(tmp_path / "empty"), "--out", str(tmp_path / "b2")]) == 2
    assert build_bank(["--faces", str(faces), "--out", str(tmp_path / "b3"), "--k", "12"]) == 2  # no group of 12
    err = capsys.readouterr().err
    assert "no .jpg or .png files" in err and "no group has 12 usable faces" in err and "Traceback" not in err


def test_registered_irreversible_and_scale_free():
    a = create_anonymizer(AnonymizeConfig(method="composite"))
    assert isinstance(a, CompositeAnonymizer)
    assert reversible_method(a) is None  # recovery through the vault only, like blur
    assert a.scale_free and a.needs_leak_guard and a.guard_every > 1  # a sampled leak guard (render.py)
    # the composites' SFace embeddings ship beside the bank (a run does not compute them)
    assert a._shipped_embeddings().shape == (len(a.faces), 128)


def _face_crop(anon: CompositeAnonymizer, side: int = 128) -> np.ndarray:
    """A face-like aligned crop: a composite, made darker and warmer (a stand-in for a person)."""
    face = cv2.resize(anon.faces[len(anon.faces) // 2], (side, side))
    return np.clip(face.astype(np.float32) * (0.8, 0.9, 1.1), 0, 255).astype(np.uint8)


def _aligned(media, name: str) -> np.ndarray:
    """The largest face of a shared photo, aligned as the renderer aligns it (128 px, margin 0.4)."""
    from streamdeid.align import align_face

    image = cv2.imread(str(media / name))
    _, lm = _largest_face(image)
    return align_face(image, lm, size=128, margin=0.4).crop


def test_same_key_and_track_keep_one_composite_another_key_another(anon, media):
    crop = _aligned(media, "obama.jpg")
    picks, first = [], None
    for frame in range(6):
        lit = np.clip(crop.astype(np.int16) + 4 * frame - 10, 0, 255).astype(np.uint8)  # light changes
        ctx = FaceContext(track_id=7, frame_index=frame, key=_key(1))
        out = anon(lit[None], [ctx])
        assert out.shape == (1, 128, 128, 3) and out.dtype == np.uint8
        picks.append(anon.choose(lit, ctx))
        first = lit if first is None else first
    assert len(set(picks)) == 1
    # the same key and first crop on a fresh anonymizer (the next run) give the same face
    assert CompositeAnonymizer().choose(first, FaceContext(7, 0, _key(1))) == picks[0]
    others = {anon.choose(crop, FaceContext(100 + i, 0, _key(10 + i))) for i in range(10)}
    assert len(others) >= 3
    # without a key: still one face per track
    assert len({anon.choose(crop, FaceContext(55, f, None)) for f in range(4)}) == 1


def test_chosen_composites_are_not_the_person_for_sface(anon, media):
    from streamdeid.anonymizers.composite import SFACE_UNLIKE, _arcface_crop
    from streamdeid.identity.sface import SFace

    sface = SFace()
    for name in ("obama.jpg", "two_people.jpg"):
        crop = _aligned(media, name)
        person = sface.embed(_arcface_crop(crop)[None])[0]
        for i in range(6):
            chosen = anon.faces[anon.choose(crop, FaceContext(200 + i, 0, _key(40 + i)))]
            assert float(sface.embed(_arcface_crop(chosen)[None])[0] @ person) < SFACE_UNLIKE


def test_output_replaces_the_face_and_is_steady(anon):
    crop = _face_crop(anon)
    a = anon(np.stack([crop, crop]), [FaceContext(3, 0, _key(3)), FaceContext(3, 1, _key(3))])
    # the centre of the face is the composite's, not the crop's
    centre = np.s_[45:95, 40:88]
    assert np.abs(a[0][centre].astype(int) - crop[centre]).mean() > 5
    # the same input twice on one track: the same output (no shimmer from the smoothing)
    assert np.abs(a[0].astype(int) - a[1]).max() <= 1
    # small crops (scale_free) work too
    small = anon(cv2.resize(crop, (32, 32))[None], [FaceContext(4, 0, _key(4))])
    assert small.shape == (1, 32, 32, 3)


def test_missing_contexts_raise_so_the_renderer_falls_back_to_solid(anon):
    with pytest.raises(ValueError):
        anon(_face_crop(anon)[None], None)


def _largest_face(image):
    from streamdeid.detect.yunet import YuNetDetector

    det = YuNetDetector().detect(image)
    assert len(det), "no face found"
    i = int(np.argmax((det.boxes[:, 2] - det.boxes[:, 0]) * (det.boxes[:, 3] - det.boxes[:, 1])))
    return det.boxes[i], det.landmarks[i]


def test_cli_on_a_real_clip_changes_the_faces_and_plays(media, tmp_path):
    src = media / "head-pose-face-detection-male.mp4"
    out = tmp_path / "out.mp4"
    r = run_cli("run", str(src), "-o", str(out), "--anonymizer", "composite", "--no-progress")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    before, after = decode(src), decode(out)
    assert len(after) == len(before) and after[0].shape == before[0].shape
    for i in (0, len(before) // 2, len(before) - 1):
        box, _ = _largest_face(before[i])
        x1, y1, x2, y2 = box.astype(int)
        diff = np.abs(before[i][y1:y2, x1:x2].astype(int) - after[i][y1:y2, x1:x2]).mean()
        assert diff > 8, f"frame {i}: face barely changed ({diff:.1f})"


def test_real_face_not_matched_by_sface(media, tmp_path):
    from streamdeid.identity.sface import SFACE_MATCH_THRESHOLD, SFace, cosine

    out = tmp_path / "obama.jpg"
    r = run_cli("run", str(media / "obama.jpg"), "-o", str(out), "--anonymizer", "composite")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    original, anonymized = cv2.imread(str(media / "obama.jpg")), cv2.imread(str(out))
    _, lm = _largest_face(original)
    sface = SFace()
    sim = float(cosine(sface.embed_face(original, lm), sface.embed_face(anonymized, lm)))
    assert sim < SFACE_MATCH_THRESHOLD, sim


def test_vault_recovers_exactly_and_model_mode_is_refused(media, tmp_path):
    src, out, key = media / "head-pose-face-detection-male.mp4", tmp_path / "out.mp4", tmp_path / "k.key"
    assert run_cli("keygen", str(key)).returncode == 0
    r = run_cli("run", str(src), "-o", str(out), "--anonymizer", "composite", "--key-file", str(key), "--no-progress")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    rec = tmp_path / "rec.mp4"
    r = run_cli("recover", str(out), "--key-file", str(key), "-o", str(rec))
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    before, after, back = decode(src), decode(out), decode(rec)
    box, _ = _largest_face(before[30])
    x1, y1, x2, y2 = box.astype(int)
    face = np.s_[y1:y2, x1:x2]
    assert np.abs(before[30][face].astype(int) - after[30][face]).mean() > 8
    assert np.abs(before[30][face].astype(int) - back[30][face]).mean() < 4  # the codec's noise only
    r = run_cli("recover", str(out), "--key-file", str(key), "--mode", "model", "-o", str(tmp_path / "m.mp4"))
    assert r.returncode != 0 and b"composite" in r.stderr


def test_a_sampling_leak_guard_checks_detected_faces_only():
    """The composite's guard (first frames, then every ``guard_every``) counts only frames where the face was
    detected: a check that falls on a held or back-filled face waits for the next detection."""
    from dataclasses import replace

    from streamdeid.leakguard import LeakGuard

    cfg = AnonymizeConfig(method="composite")
    guard = LeakGuard(replace(cfg, leak_every=CompositeAnonymizer.guard_every))
    assert not guard.due(1, measured=False)  # a back-filled first frame: not counted
    assert [guard.due(1) for _ in range(cfg.leak_first_frames)] == [True] * cfg.leak_first_frames
    checks = [guard.due(1, measured=(i % 2 == 0)) for i in range(4 * guard.every)]
    assert sum(checks) == 2 and all(i % 2 == 0 for i, c in enumerate(checks) if c)
    every_frame = LeakGuard(cfg)  # dbaf's schedule: every frame, measured or not
    assert all(every_frame.due(2, measured=False) for _ in range(5))


def test_a_weak_track_is_blurred_until_a_detection_of_it_is_sure(anon):
    """FaceContext.sure False (no detection of the track scored the tracker's high score yet: a dark face, or
    a hand the detector scored 0.4): the crop is blurred as --anonymizer blur does, and no composite is
    chosen for it; once sure, the track gets its composite."""
    from streamdeid.anonymizers.classic import strong_blur

    crop = _face_crop(anon)
    weak = anon(crop[None], [FaceContext(21, 0, _key(21), sure=False)])[0]
    np.testing.assert_array_equal(weak, strong_blur(crop, anon.sigma * len(crop)))
    assert not any(tid == 21 for tid, _ in anon._tracks)  # nothing chosen for it
    sure = anon(crop[None], [FaceContext(21, 1, _key(21), sure=True)])[0]
    centre = np.s_[45:95, 40:88]
    assert np.abs(sure[centre].astype(int) - weak[centre]).mean() > 5


def _sure_recorder():
    """A renderer whose composite anonymizer records (track, frame, sure) of every crop and draws nothing,
    and a frame maker for track 5 at one place with a given score and sure_ahead."""
    from streamdeid.config import AlignConfig, BlendConfig
    from streamdeid.render import FrameRenderer
    from streamdeid.types import Frame, FrameResult, TrackedFace

    seen = []

    class Recorder(CompositeAnonymizer):
        needs_leak_guard = False

        def __call__(self, crops, contexts):
            seen.extend((c.track_id, c.frame_index, c.sure) for c in contexts)
            return np.asarray(crops).copy()

    renderer = FrameRenderer(Recorder(), align=AlignConfig(), blend=BlendConfig(), anonymize=AnonymizeConfig(),
                             sure_score=0.6)
    image = np.full((240, 320, 3), 120, np.uint8)
    box = np.array([100, 60, 160, 140], np.float32)
    lm = np.array([[118, 92], [142, 92], [130, 106], [120, 120], [140, 120]], np.float32)

    def frame(t: int, score: float, ahead: frozenset = frozenset()) -> FrameResult:
        return FrameResult(Frame(t, image.copy(), t, None), [TrackedFace(5, box, lm, score)], sure_ahead=ahead)

    return renderer, frame, seen


def test_the_renderer_marks_a_track_sure_from_its_first_sure_face():
    renderer, frame, seen = _sure_recorder()
    methods = []
    for t, score in enumerate([0.4, 0.45, 0.9, 0.4]):
        methods += [p.method for p in renderer.render(frame(t, score))]
    assert seen == [(5, 0, False), (5, 1, False), (5, 2, True), (5, 3, True)]
    assert methods == ["blur", "blur", "composite", "composite"]  # what the audit log says


def test_a_track_sure_within_the_look_ahead_is_sure_on_its_earlier_frames():
    """FrameResult.sure_ahead: the tracks the detector was sure of when the frame left the look-ahead
    buffer. A face first scored weakly and surely a few frames later is given its composite from its
    first frame instead of blur and then a face (one look for the person, not two)."""
    renderer, frame, seen = _sure_recorder()
    for t, ahead in enumerate([frozenset(), frozenset({5}), frozenset({5})]):  # sure from frame 1's look-ahead
        renderer.render(frame(t, 0.4, ahead))
    assert seen == [(5, 0, False), (5, 1, True), (5, 2, True)]


def test_the_pipeline_hands_the_renderer_the_tracks_sure_in_its_look_ahead():
    """Pipeline._take: when a frame leaves the look-ahead buffer, its sure_ahead holds every track a
    detection was sure of up to the newest frame the detector has seen."""
    from streamdeid.config import PipelineConfig
    from streamdeid.pipeline import Pipeline, build_renderer
    from streamdeid.summary import RunSummary
    from streamdeid.types import Frame
    from evaluation.recall import read_frames

    config = PipelineConfig()
    got = []
    pipe = Pipeline(config, build_renderer(config), fps=25, summary=RunSummary(),
                    emit=lambda result, _pasted: got.append(result))
    clip = MEDIA / "short_hamilton_clip.mp4"
    frames = [Frame(t, img, t, None) for t, img in read_frames(clip)][:40]
    pipe.run(frames, lambda _item: None)
    assert len(got) == 40
    later = {f.track_id for r in got for f in r.faces if f.score >= config.track.high_score}
    assert later, "the clip's first 40 frames have sure faces"
    first_sure = min(r.frame.index for r in got for f in r.faces if f.score >= config.track.high_score)
    # the frame before the first sure face already knew of it (the look-ahead is 0.5 s = 12 frames)
    assert got[max(first_sure - 1, 0)].sure_ahead & later


def test_the_fit_benchmark_counts_each_choice_against_the_face_label(tmp_path):
    """benchmarks/composite_fit.py on a few held-out UTKFace faces: one choice per face and key, each counted
    against the file name's gender, age band and race; the shares are shares of those choices."""
    import importlib.util
    import shutil
    from pathlib import Path

    from conftest import UTK

    from evaluation import heldout_files

    if not UTK.is_dir():
        pytest.skip(f"training images not found at {UTK}")
    faces = tmp_path / "faces"
    faces.mkdir()
    for p in heldout_files(UTK)[:12]:
        shutil.copy(p, faces / p.name)
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "composite_fit.py"
    spec = importlib.util.spec_from_file_location("composite_fit", script)
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    assert fit.main(["--faces", str(faces), "--keys", "2", "--json", str(tmp_path / "fit.json")]) == 0
    result = json.loads((tmp_path / "fit.json").read_text())
    assert result["files"] == 12 and 0 < result["faces"] <= 12
    chosen = result["chosen"]
    assert chosen["n"] == 2 * result["faces"]
    assert all(0.0 <= chosen[k] <= 1.0 for k in ("gender", "band", "near", "race"))
    assert chosen["band"] <= chosen["near"]
    assert result["candidates by fit"]["n"] == fit.CANDIDATES * result["faces"]
