"""The GPU lease's dry run: devtools/gpu_lease.sh and training.lease on the CPU, at batch 2, with the
gpu-lease preset's model, stages, layout (bf16 autocast, channels_last), checkpoints and copies home;
then the parts it leaves in OUT are joined, exported and used as the next lease's starting weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
pytest.importorskip("onnx")

from test_training import _smooth_faces  # noqa: E402
from training import cli as train_cli  # noqa: E402
from training.data import write_prepared  # noqa: E402
from training.lease import RECORD, join  # noqa: E402
from training.pack import pack  # noqa: E402
from streamdeid.models.io import read_checkpoint_header  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PLAN = "reconstruct=0.01,disentangle=0.01,anonymize=0.01"


def _lease(workdir: Path, out: Path, run: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out), "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", str(REPO / "devtools" / "gpu_lease.sh"), "--device", "cpu", "--batch", "2",
                           "--minutes", PLAN, "--run", str(run), "--probe-steps", "2", "--copy-every", "1", *extra],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def lease_tree(tmp_path_factory):
    """A copy of what travels: the repo (linked) and .gpu/data.npz with 6 synthetic crops."""
    root = tmp_path_factory.mktemp("lease")
    data = write_prepared(root / "prepared", _smooth_faces(6), [f"synthetic_{i:03d}.png" for i in range(6)])
    tree = root / "tree"
    tree.mkdir()
    for name in ("training", "streamdeid", "evaluation", "devtools"):
        (tree / name).symlink_to(REPO / name)
    (tree / ".gpu").mkdir()
    pack(data, tree / ".gpu" / "data.npz")
    return root, tree


def test_the_lease_runs_on_the_cpu_and_brings_a_generator_home(lease_tree):
    root, tree = lease_tree
    out, run = root / "out1", root / "run1"
    res = _lease(tree, out, run, "--compare-layouts")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "preflight ok" in res.stdout and "probe: training with" in res.stdout
    probes = [json.loads(line) for line in (out / "probe.jsonl").read_text().splitlines()]
    assert [p["stage"] for p in probes] == ["reconstruct", "disentangle", "anonymize", "reconstruct"]
    assert {(p["amp"], p["channels_last"]) for p in probes} == {("bf16", True), ("off", False)}
    for stage in ("reconstruct", "disentangle", "anonymize"):  # every stage trained and logged finite losses
        logged = [json.loads(line) for line in (run / stage / "log.jsonl").read_text().splitlines()]
        assert any("loss" in r for r in logged), stage
    record = json.loads((out / RECORD).read_text())
    assert record["stage"] == "anonymize" and record["step"] >= 1
    assert all((out / p).stat().st_size <= 15 * 2**20 for p in record["parts"])
    assert len(list(out.iterdir())) <= 8  # what a call may bring back
    gen = join(out, root / "home" / "gen.safetensors")
    assert gen["sha256"] == record["sha256"]
    assert read_checkpoint_header(root / "home" / "gen.safetensors")["extra"]["stage"] == "anonymize"

    # packaged at home like any run, and the next lease starts from it
    assert train_cli.main(["export", "--run", str(root / "home"), "--init", str(root / "home" / "gen.safetensors"),
                           "--out", str(root / "home" / "weights")]) == 0
    manifest = json.loads((root / "home" / "weights" / "manifest.json").read_text())
    assert manifest["stage"] == "anonymize"
    out2, run2 = root / "out2", root / "run2"
    # the next lease's model form and stage-2 recipe, as it travels (--config, docs/gpu.md)
    form = REPO / "devtools" / "lease_recon.json"
    res = _lease(tree, out2, run2, "--init", str(root / "home" / "gen.safetensors"), "--probe-steps", "0",
                 "--config", str(form))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"initialised from {root / 'home' / 'gen.safetensors'}" in res.stdout
    assert "reflection form" in res.stdout
    model = json.loads((run2 / "anonymize" / "config.json").read_text())["model"]
    assert model["kria_reflect"] is True and model["kria_spread"] == json.loads(form.read_text())["model"]["kria_spread"]
    logged = (run2 / "anonymize" / "log.jsonl").read_text()
    assert '"id_spread"' in logged  # the identity codes' spread is logged
    assert '"recon"' in logged  # the decoder keeps drawing a face's own codes (MODEL_CARD.md, "Fifth GPU run")


def test_a_cut_short_copy_is_refused_at_home(lease_tree, tmp_path):
    root, tree = lease_tree
    out = root / "out1"
    if not (out / RECORD).is_file():
        pytest.skip("needs the first test's lease")
    bad = tmp_path / "bad"
    bad.mkdir()
    record = json.loads((out / RECORD).read_text())
    (bad / RECORD).write_text(json.dumps(record))
    for name in record["parts"]:
        (bad / name).write_bytes((out / name).read_bytes()[:-10])
    with pytest.raises(SystemExit, match="do not match"):
        join(bad, tmp_path / "g.safetensors")
