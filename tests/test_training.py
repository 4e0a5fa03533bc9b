"""Training package (python -m training): every stage on a tiny config, overfit, exact resume, export, held-out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
pytest.importorskip("onnx")

from training import cli  # noqa: E402
from training.config import TrainConfig, preset, resolve  # noqa: E402
from training.data import FaceSet, HeldoutError, dhash, near_duplicates, write_prepared  # noqa: E402
from training.optim import Lookahead, build_optimizer  # noqa: E402
from training.config import OptimConfig  # noqa: E402
from training.stages import STAGE_CLASSES  # noqa: E402
from training.trainer import latest_state, load_state  # noqa: E402
from streamdeid.types import StreamdeidError  # noqa: E402

from conftest import UTK as DATASET  # noqa: E402

TINY = {
    "model": {"w_dim": 32, "channels": {"4": 32, "8": 32, "16": 32, "32": 16, "64": 16}, "enc_in_channels": 8,
              "style_head_channels": 16, "cid_heads": 2, "n_mlp": 2, "kria_layers": 3},
    "batch": 2, "log_every": 1, "sample_every": 2, "ckpt_every": 2, "ckpt_minutes": 1000.0, "threads": 1,
    "stages": {s: {"sface_batch": 1, "r1_every": 2} for s in ("stylegan2", "e4e", "reconstruct", "disentangle",
                                                            "anonymize")},
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _smooth_faces(n: int, r: int = 64, seed: int = 0) -> np.ndarray:
    """Synthetic 'faces': a skin-coloured ellipse with dark eyes/mouth on a smooth random background."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:r, 0:r] / r
    out = []
    for _ in range(n):
        bg = rng.uniform(0, 255, 3)[None, None] * (0.6 + 0.4 * yy[..., None])
        img = bg.copy()
        face = ((xx - 0.5) / 0.22) ** 2 + ((yy - 0.55) / 0.3) ** 2 < 1
        img[face] = rng.uniform(120, 230, 3)
        for cx, cy, s in ((0.42, 0.5, 0.03), (0.58, 0.5, 0.03), (0.5, 0.7, 0.04)):
            img[((xx - cx) ** 2 + (yy - cy) ** 2) < s * s] = rng.uniform(0, 60, 3)
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return np.stack(out)


@pytest.fixture(scope="module")
def tiny_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    cfg_file = root / "tiny.json"
    cfg_file.write_text(json.dumps(TINY))
    data = write_prepared(root / "data", _smooth_faces(6), [f"synthetic_{i:03d}.png" for i in range(6)])
    return root, cfg_file, data


def _cfg(cfg_file, **stage_over) -> TrainConfig:
    cfg = resolve("cpu-small", cfg_file)
    for stage, over in stage_over.items():
        for k, v in over.items():
            setattr(cfg.stages[stage], k, v)
    return cfg


# ---------------------------------------------------------------------- config
def test_presets_and_strict_config(tmp_path):
    paper = preset("paper")
    assert paper.resolution == 256 and paper.batch == 8 and paper.dbaf.w_dim == 512
    assert paper.stages["disentangle"].g_optim.name == "ranger" and paper.stages["anonymize"].g_optim.lr == 1e-4
    small = preset("cpu-small")
    assert small.resolution == 64 and small.stages["disentangle"].weights["l1"] == 3.5
    assert TrainConfig.from_dict(small.to_dict()).to_dict() == small.to_dict()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"losses": {"perceptul": "x"}}))
    with pytest.raises(ValueError, match="unknown fields"):
        resolve("cpu-small", bad)


def test_lookahead_state_roundtrip():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(5))
    opt = build_optimizer([w], OptimConfig(name="ranger", lr=0.1, lookahead_k=2))
    assert isinstance(opt, Lookahead)
    for _ in range(3):
        opt.zero_grad()
        (w ** 2).sum().backward()
        opt.step()
    state = opt.state_dict()
    w2 = torch.nn.Parameter(w.detach().clone())
    opt2 = build_optimizer([w2], OptimConfig(name="ranger", lr=0.1, lookahead_k=2))
    opt2.load_state_dict(state)
    for o, p in ((opt, w), (opt2, w2)):
        o.zero_grad()
        (p ** 2).sum().backward()
        o.step()
    assert torch.equal(w, w2)


def test_near_duplicates_hash():
    rng = np.random.default_rng(0)
    faces = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(3)]
    h = np.stack([dhash(f) for f in faces] + [dhash(np.clip(faces[0].astype(int) + 3, 0, 255).astype(np.uint8))])
    assert near_duplicates(h, 20).tolist() == [False, False, False, True]


# ---------------------------------------------------------------------- stages
@pytest.mark.parametrize("stage", ["stylegan2", "e4e", "reconstruct", "disentangle", "anonymize"])
def test_stage_runs_with_finite_losses(tiny_env, stage):
    root, cfg_file, data = tiny_env
    run = root / f"run_{stage}"
    trainer = STAGE_CLASSES[stage](_cfg(cfg_file), run, data, init="none", log=lambda m: None)
    records = trainer.run(2)
    assert len(records) == 2 and all(np.isfinite(v) for r in records for v in r.values())
    d = run / stage
    assert json.loads((d / "config.json").read_text())["batch"] == 2
    assert len([ln for ln in (d / "log.jsonl").read_text().splitlines() if '"step"' in ln]) >= 2
    assert list((d / "samples").glob("step_*.png")) and (d / "generator.safetensors").is_file()
    assert latest_state(d) is not None


def test_ctrl_c_finishes_the_step_writes_a_checkpoint_and_stops(tiny_env, tmp_path):
    import os
    import signal

    root, cfg_file, data = tiny_env
    cfg = _cfg(cfg_file)
    cfg.ckpt_every = 10**6  # the only checkpoint is the one the signal asks for
    trainer = STAGE_CLASSES["reconstruct"](cfg, tmp_path / "run", data, init="none", log=lambda m: None)
    update = trainer.update_ema

    def signal_on_step_2():  # Ctrl-C arrives in the middle of the second step
        if trainer.step == 1:
            os.kill(os.getpid(), signal.SIGINT)
        update()

    trainer.update_ema = signal_on_step_2
    records = trainer.run(50)
    assert trainer.interrupted and trainer.step == 2 and len(records) == 2
    assert load_state(latest_state(tmp_path / "run" / "reconstruct"))["step"] == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    events = [json.loads(x).get("event") for x in (tmp_path / "run" / "reconstruct" / "log.jsonl").read_text().splitlines()]
    assert events[-1] == "interrupted"


def test_overfit_fixed_batch(tiny_env, tmp_path):
    root, cfg_file, _ = tiny_env
    data = write_prepared(tmp_path / "data2", _smooth_faces(2, seed=3), ["a.png", "b.png"])
    cfg = _cfg(cfg_file, reconstruct={"weights": {"l1": 1.0}})
    cfg.batch, cfg.augment.hflip_data, cfg.ckpt_every, cfg.sample_every = 2, False, 10**6, 0
    trainer = STAGE_CLASSES["reconstruct"](cfg, tmp_path / "run", data, init="none", log=lambda m: None)
    losses = [r["l1"] for r in trainer.run(40)]
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:3]), losses


def test_resume_reproduces_next_steps(tiny_env, tmp_path):
    root, cfg_file, data = tiny_env
    over = dict(TINY)
    over["stages"] = {k: dict(v) for k, v in TINY["stages"].items()}
    over["stages"]["reconstruct"]["g_optim"] = {"name": "ranger", "lr": 1e-3, "lookahead_k": 2}
    cf = tmp_path / "c.json"
    cf.write_text(json.dumps(over))
    base = ["reconstruct", "--data", str(data), "--config", str(cf), "--init", "none"]
    assert cli.main(base + ["--run", str(tmp_path / "a"), "--steps", "4"]) == 0
    assert cli.main(base + ["--run", str(tmp_path / "b"), "--steps", "2"]) == 0
    assert cli.main(["reconstruct", "--data", str(data), "--run", str(tmp_path / "b"), "--resume", "--steps", "4"]) == 0

    def rec(run):
        lines = [json.loads(x) for x in (run / "reconstruct" / "log.jsonl").read_text().splitlines()]
        return {r["step"]: {k: v for k, v in r.items() if k not in ("time", "s_per_it", "elapsed_h")}
                for r in lines if "event" not in r}

    a, b = rec(tmp_path / "a"), rec(tmp_path / "b")
    assert a[3] == b[3] and a[4] == b[4]
    assert load_state(latest_state(tmp_path / "b" / "reconstruct"))["step"] == 4


def test_stage_chain_and_export_roundtrip(tiny_env, tmp_path, monkeypatch):
    root, cfg_file, data = tiny_env
    run = tmp_path / "run"
    common = ["--data", str(data), "--run", str(run), "--config", str(cfg_file), "--steps", "1"]
    assert cli.main(["disentangle", *common]) == 2  # no reconstruct/e4e checkpoint to start from
    assert cli.main(["reconstruct", *common, "--init", "none"]) == 0
    assert cli.main(["disentangle", *common]) == 0
    assert cli.main(["anonymize", *common]) == 0
    out = tmp_path / "weights"
    assert cli.main(["export", "--run", str(run), "--out", str(out)]) == 0
    assert cli.main(["export", "--run", str(run), "--out", str(out)]) == 2  # not over them without --overwrite
    manifest = json.loads((out / "manifest.json").read_text())
    from training.export import sha256_file

    for name, entry in manifest["files"].items():
        assert sha256_file(out / name) == entry["sha256"]
    assert manifest["stage"] == "anonymize" and manifest["onnx_parity_max_abs"] <= 1e-3
    from streamdeid.backends.onnxrt import OnnxRuntimeBackend
    from streamdeid.models.dbaf import DBAFRuntime
    from streamdeid.models.io import load_checkpoint

    model, header = load_checkpoint(out / "dbaf64.safetensors")
    assert header["extra"]["stage"] == "anonymize"
    g = torch.Generator().manual_seed(5)
    x = torch.rand(3, 3, 64, 64, generator=g) * 2 - 1
    p = torch.randn(3, *model.cfg.key_shape, generator=g)
    with torch.no_grad():
        ref = DBAFRuntime(model)(x, p).numpy()
    got = OnnxRuntimeBackend(out / "dbaf64.onnx", intra_op_threads=1).run(x.numpy(), p.numpy())
    assert np.abs(got - ref).max() <= 1e-3

    # the manifest's "models" section is what the runtime resolves (and sha256-checks) by backend
    from streamdeid.anonymizers import dbaf as dbaf_mod

    monkeypatch.setattr(dbaf_mod, "WEIGHTS_DIR", out)
    assert dbaf_mod.resolve_model_path(None, "onnxrt") == out / "dbaf64.onnx"
    assert dbaf_mod.resolve_model_path(None, "torch") == out / "dbaf64.safetensors"
    # one fp16 copy of the weights: the ONNX graph reads them from the safetensors, checked with it
    assert manifest["precision"] == "fp16" and manifest["precision_max_abs"] <= 1e-2
    assert manifest["models"]["onnxrt"]["weights"]["file"] == "dbaf64.safetensors"
    weights = (out / "dbaf64.safetensors").read_bytes()
    (out / "dbaf64.safetensors").write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))
    with pytest.raises(StreamdeidError, match="dbaf64.safetensors does not match the sha256"):
        dbaf_mod.resolve_model_path(None, "onnxrt")
    (out / "dbaf64.safetensors").write_bytes(weights)
    (out / "dbaf64.onnx").write_bytes((out / "dbaf64.onnx").read_bytes() + b"\0")
    with pytest.raises(StreamdeidError, match="sha256"):
        dbaf_mod.resolve_model_path(None, "onnxrt")


def test_anonymize_from_a_plain_kria_checkpoint_starts_kria_as_identity(tiny_env, tmp_path):
    """A disentangle checkpoint trained with the paper's plain KRIA (never trained before stage 2)
    initialises a residual-KRIA anonymize run: the untrained KRIA is reset to the identity, so the
    first anonymized faces are reconstructions, not decoded noise. Any other config change is refused."""
    root, cfg_file, data = tiny_env
    run = tmp_path / "run"
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({**TINY, "model": {**TINY["model"], "kria_residual": False}}))
    common = ["--data", str(data), "--run", str(run), "--steps", "1"]
    assert cli.main(["reconstruct", *common, "--config", str(plain), "--init", "none"]) == 0
    assert cli.main(["disentangle", *common, "--config", str(plain)]) == 0
    trainer = STAGE_CLASSES["anonymize"](_cfg(cfg_file), run, data, init=str(run / "disentangle"), log=lambda m: None)
    assert trainer.mcfg.kria_residual
    G = trainer.G.eval()
    x = torch.rand(2, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        codes, feats = G.encode(x)
        torch.testing.assert_close(G(x, torch.randn(2, *G.cfg.key_shape)), G.decode(codes, feats))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**TINY, "model": {**TINY["model"], "kria_layers": 4}}))
    with pytest.raises(ValueError, match="model config differs"):
        STAGE_CLASSES["anonymize"](resolve("cpu-small", other), run, data, init=str(run / "disentangle"),
                                   log=lambda m: None)


def _disentangled(tiny_env, run: Path) -> Path:
    """Stages 0 and 1 for one step each from random weights: a run that stage 2 can start from."""
    _, cfg_file, data = tiny_env
    common = ["--data", str(data), "--run", str(run), "--steps", "1", "--config", str(cfg_file)]
    assert cli.main(["reconstruct", *common, "--init", "none"]) == 0
    assert cli.main(["disentangle", *common]) == 0
    return run


def test_anonymize_switching_to_a_reflected_kria_centres_it_on_the_mean_identity(tiny_env, tmp_path):
    """kria_reflect from a residual checkpoint: every key's centre starts at the mean identity of the
    training crops, so I' = 2 mean - I whatever the key, and the first step trains (cycle term logged)."""
    _, cfg_file, data = tiny_env
    run = _disentangled(tiny_env, tmp_path / "run")
    reflect = tmp_path / "reflect.json"
    reflect.write_text(json.dumps({**TINY, "model": {**TINY["model"], "kria_reflect": True}}))
    logs = []
    trainer = STAGE_CLASSES["anonymize"](resolve("cpu-small", reflect), run, data, init=str(run / "disentangle"),
                                         log=logs.append)
    assert any("reflection form" in m for m in logs)
    G = trainer.G.eval()
    with torch.no_grad():
        idents = G.disentangle(G.encode(trainer.data.batch(np.arange(len(trainer.data))))[0])[1]  # [N, L, D]
        mean = torch.cat([lvl.mean(dim=(0, 1)).expand_as(lvl[0]) for lvl in G.split_levels(idents)])  # [L, D]
        a, i = torch.randn(2, *G.cfg.key_shape), torch.randn(2, *G.cfg.key_shape)
        for _ in range(2):  # any key
            torch.testing.assert_close(G.anonymize_codes(a, i, torch.randn(2, *G.cfg.key_shape)), a + 2 * mean - i,
                                       atol=1e-4, rtol=1e-4)
    records = trainer.run(stop_after=1)
    assert np.isfinite(records[-1]["cycle"]) and np.isfinite(records[-1]["loss"])


def test_anonymize_recon_term_trains_the_decoder_on_a_face_s_own_codes(tiny_env, tmp_path):
    """Weight "recon" (docs/MODEL_CARD.md, "Fifth GPU run"): stage 2 also decodes x from its own codes and
    pulls that towards x, so a decoder trained on the cycle keeps drawing real identities. Off by default:
    without the weight the term is neither computed nor logged."""
    _, cfg_file, data = tiny_env
    run = _disentangled(tiny_env, tmp_path / "run")
    with_recon = tmp_path / "recon.json"
    with_recon.write_text(json.dumps({**TINY, "stages": {**TINY["stages"], "anonymize": {
        **TINY["stages"]["anonymize"], "train": ["decoder"], "weights": {"recon": 1.0}}}}))
    seen = {}
    for name, cfg in (("off", cfg_file), ("on", with_recon)):
        trainer = STAGE_CLASSES["anonymize"](resolve("cpu-small", cfg), tmp_path / name, data,
                                             init=str(run / "disentangle"), log=lambda m: None)
        before = {k: v.clone() for k, v in trainer.G.decoder.state_dict().items()}
        seen[name] = trainer.run(stop_after=1)[-1]
        moved = any(not torch.equal(before[k], v) for k, v in trainer.G.decoder.state_dict().items())
        assert moved == (name == "on")  # the preset trains KRIA alone; "on" trains the decoder
    assert "recon" not in seen["off"]
    assert np.isfinite(seen["on"]["recon"]) and seen["on"]["recon"] > 0


# --------------------------------------------------------------------- held-out
def test_training_refuses_heldout_files(tiny_env, tmp_path):
    from evaluation.heldout import heldout_names

    held = sorted(heldout_names())[0]
    with pytest.raises(HeldoutError):
        write_prepared(tmp_path / "x", _smooth_faces(2), ["ok.png", held])
    d = write_prepared(tmp_path / "y", _smooth_faces(2), ["ok.png", "ok2.png"])
    (d / "train.txt").write_text(f"ok.png\n{held}\n")  # a list edited by hand
    with pytest.raises(HeldoutError):
        FaceSet(d, 64)
    root, cfg_file, _ = tiny_env
    with pytest.raises(HeldoutError):
        cli.main(["reconstruct", "--data", str(d), "--run", str(tmp_path / "r"), "--config", str(cfg_file),
                  "--init", "none", "--steps", "1"])


def test_prepare_detects_aligns_and_excludes_heldout(tmp_path):
    if not DATASET.is_dir():
        pytest.skip(f"training images not found at {DATASET}")
    from evaluation.heldout import heldout_names

    src = tmp_path / "photos"
    src.mkdir()
    names = sorted(p.name for p in DATASET.iterdir() if p.name not in heldout_names())[:3]
    held = sorted(n for n in heldout_names() if (DATASET / n).is_file())[0]
    for n in names + [held]:
        shutil.copy(DATASET / n, src / n)
    shutil.copy(DATASET / names[0], src / ("copy_of_" + names[0]))  # an exact duplicate
    assert cli.main(["prepare", "--data", str(src), "--run", str(tmp_path / "run")]) == 0
    meta = json.loads((tmp_path / "run" / "data" / "prepared.json").read_text())
    train = (tmp_path / "run" / "data" / "train.txt").read_text().split()
    assert meta["refused_heldout"] == [held] and held not in train
    assert len(meta["duplicates"]) == 1 and len(train) == 3
    crops = np.load(tmp_path / "run" / "data" / "crops.npy")
    assert crops.shape == (3, 64, 64, 3) and crops.dtype == np.uint8

    # the prepared data is not replaced without --overwrite; a folder with no held-out file is prepared too
    (src / held).unlink()
    assert cli.main(["prepare", "--data", str(src), "--run", str(tmp_path / "run")]) == 2
    assert cli.main(["prepare", "--data", str(src), "--run", str(tmp_path / "run"), "--overwrite"]) == 0
    assert json.loads((tmp_path / "run" / "data" / "prepared.json").read_text())["kept"] == 3
    (tmp_path / "empty").mkdir()
    assert cli.main(["prepare", "--data", str(tmp_path / "empty"), "--run", str(tmp_path / "run2")]) == 2
    # files of the names prepare writes, with no prepared dataset beside them, are somebody else's: kept
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train.txt").write_text("my list\n")
    assert cli.main(["prepare", "--data", str(src), "--run", str(tmp_path / "run3"), "--out", str(mine)]) == 2
    assert (mine / "train.txt").read_text() == "my list\n" and not (mine / "crops.npy").exists()


def test_bad_numbers_and_files_that_are_no_checkpoint_are_one_line(tmp_path, capsys):
    """--steps -5 trained "step 0 -> -5", a plan's nan minutes ran without a limit, --resolution 100000 ended in
    OpenCV's allocation error, and an --init file that is no checkpoint in a traceback, after export had made
    its output folder."""
    from training import plan

    run = ["--run", str(tmp_path / "r"), "--data", str(tmp_path)]
    for argv in (["reconstruct", *run, "--steps", "-5"], ["reconstruct", *run, "--minutes", "nan"],
                 ["reconstruct", *run, "--threads", "0"], ["prepare", *run, "--resolution", "100000"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2
    for minutes in ("reconstruct=nan", "reconstruct=-1", "reconstruct=abc"):
        assert plan.main(["--data", str(tmp_path), "--run", str(tmp_path / "r"), "--minutes", minutes]) == 2
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    for init in (str(tmp_path / "notes.pt"), str(tmp_path)):
        capsys.readouterr()
        assert cli.main(["export", "--run", str(tmp_path / "r"), "--init", init, "--out", str(tmp_path / "w")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: "), err
    assert not (tmp_path / "w").exists()


def test_curve_scores_sample_grids_at_a_common_size(tmp_path):
    """training.curve: PSNR at a common size and SFace cosine, read back from grids the trainer writes."""
    import cv2

    from streamdeid.identity import SFace
    from evaluation.pixels import psnr
    from training.curve import curve, resize_all
    from training.trainer import to_image_grid

    files = sorted(DATASET.glob("*.jpg"))[:4]
    if len(files) < 4:
        pytest.skip("UTKFace crops not found")
    faces = np.stack([cv2.resize(cv2.imread(str(f)), (128, 128), interpolation=cv2.INTER_AREA) for f in files])
    blurred = np.stack([cv2.GaussianBlur(f, (0, 0), 3.0) for f in faces])
    solid = np.full_like(faces, 127)

    def as_tensor(x):  # BGR uint8 [N, R, R, 3] -> RGB [-1, 1] [N, 3, R, R], as sample_rows gives
        return torch.from_numpy(x[..., ::-1].copy()).permute(0, 3, 1, 2).float() / 127.5 - 1

    samples = tmp_path / "reconstruct" / "samples"
    samples.mkdir(parents=True)
    for step, out in ((100, solid), (200, blurred)):
        cv2.imwrite(str(samples / f"step_{step:07d}.png"), to_image_grid([as_tensor(faces), as_tensor(out)]))
    rows = curve(tmp_path / "reconstruct", 64, SFace())
    assert [r["step"] for r in rows] == [100, 200] and rows[0]["resolution"] == 128
    x64 = resize_all(faces, 64)
    for r, out in zip(rows, (solid, blurred)):
        assert r["psnr"] == pytest.approx(psnr(x64, resize_all(out, 64)), abs=0.1)  # PNG round trip
    assert rows[1]["psnr"] > rows[0]["psnr"] + 5 and rows[1]["sface_cos"] > rows[0]["sface_cos"] + 0.2


def test_plan_trains_each_stage_for_its_minutes_then_exports_and_resumes(tiny_env, tmp_path):
    """training.plan: time-boxed stages in order (each checkpoints when its time is up), export last;
    started again on the same run dir, every stage continues from its own checkpoint."""
    from training import plan

    root, cfg_file, data = tiny_env
    run = tmp_path / "run"
    args = ["--data", str(data), "--run", str(run), "--config", str(cfg_file),
            "--minutes", "reconstruct=0.005,disentangle=0.005,anonymize=0.005"]
    assert plan.main(args) == 0
    steps = {s: load_state(latest_state(run / s))["step"] for s in ("reconstruct", "disentangle", "anonymize")}
    assert all(n >= 1 for n in steps.values()), steps
    budget = [json.loads(line) for line in (run / "anonymize" / "log.jsonl").read_text().splitlines()]
    assert any(r.get("event") == "time budget" for r in budget)
    manifest = json.loads((run / "weights" / "manifest.json").read_text())
    assert manifest["stage"] == "anonymize" and manifest["step"] == steps["anonymize"]
    assert plan.main([*args, "--no-export"]) == 0
    for s, n in steps.items():
        assert load_state(latest_state(run / s))["step"] > n, s
    assert plan.main([*args[:-1], "export=1"]) == 2  # not a training stage


def test_pack_round_trip_keeps_names_and_crops_close(tiny_env, tmp_path):
    from training.pack import pack, unpack

    root, cfg_file, data = tiny_env
    info = pack(data, tmp_path / "data.npz", quality=95)
    assert info["crops"] == 6
    unpack(tmp_path / "data.npz", tmp_path / "copy")
    a, b = np.load(data / "crops.npy"), np.load(tmp_path / "copy" / "crops.npy")
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.abs(a.astype(int) - b.astype(int)).mean() < 3  # JPEG q95: about a level per pixel
    assert (tmp_path / "copy" / "train.txt").read_text() == (data / "train.txt").read_text()
    FaceSet(tmp_path / "copy", 64)  # loads, and passes the held-out check
