#!/usr/bin/env python3
"""Files per minute of `streamdeid batch` against a plain folder run, on the short shared clips.

    python benchmarks/batch.py                       # 4 short clips (204 frames), blur, with a key file
    python benchmarks/batch.py --copies 2 --out /tmp/batch-bench

Each configuration is one CLI process on a fresh output folder, timed wall-clock (start-up, model loading
and, for Ray, starting the local cluster included):
  run FOLDER                      the plain loop: one process, one file after another
  batch FOLDER --workers 1        the local process pool, one worker
  batch FOLDER --workers 2        the local process pool, two workers
  batch FOLDER --ray local --workers 2   a local Ray instance started by the command, two actors
  batch FOLDER (again)            the rerun: every file verified and skipped
Prints files/min and frames/s and writes batch.json to --out. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEDIA = ROOT.parent / "shared" / "media"
CLIPS = ["classroom", "face-demographics-walking-and-pause", "head-pose-face-detection-female-and-male",
         "head-pose-face-detection-male"]


def cli(*args: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "streamdeid.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed: streamdeid {' '.join(args)}\n{proc.stderr}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", nargs="+", default=CLIPS)
    ap.add_argument("--copies", type=int, default=1, help="copies of each clip in the batch")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray configuration")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/batch"))
    args = ap.parse_args()
    import av

    work = Path(tempfile.mkdtemp(prefix="batch-bench-"))
    src = work / "in"
    src.mkdir()
    frames = 0
    for name in args.clips:
        for k in range(args.copies):
            shutil.copy(MEDIA / f"{name}.mp4", src / f"{name}-{k}.mp4")
            with av.open(str(MEDIA / f"{name}.mp4")) as c:
                frames += c.streams.video[0].frames
    files = len(args.clips) * args.copies
    key = work / "k.bin"
    common = ("--key-file", str(key), "--new-key", "--no-progress")
    configs = [("run folder (plain loop)", ("run", str(src), "-o", str(work / "run"), *common)),
               ("batch, local pool, 1 worker", ("batch", str(src), "-o", str(work / "b1"), "--workers", "1", *common)),
               ("batch, local pool, 2 workers", ("batch", str(src), "-o", str(work / "b2"), "--workers", "2", *common))]
    if not args.no_ray:
        configs.append(("batch, Ray local, 2 actors",
                        ("batch", str(src), "-o", str(work / "ray"), "--ray", "local", "--workers", "2", *common)))
    configs.append(("batch rerun (all skipped)", ("batch", str(src), "-o", str(work / "b2"), "--workers", "2", *common)))
    rows = []
    print(f"{files} files, {frames} frames, {os.cpu_count()} CPUs")
    for label, cmd in configs:
        wall = cli(*cmd)
        rows.append({"config": label, "wall_s": round(wall, 2), "files_per_min": round(60 * files / wall, 2),
                     "frames_per_s": round(frames / wall, 2)})
        print(f"{label:32s} {wall:7.1f} s  {60 * files / wall:6.1f} files/min  {frames / wall:6.1f} frames/s",
              flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "batch.json").write_text(json.dumps({"files": files, "frames": frames, "cpus": os.cpu_count(),
                                                     "clips": args.clips, "results": rows}, indent=2) + "\n")
    print(f"wrote {args.out / 'batch.json'}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
