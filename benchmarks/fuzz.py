#!/usr/bin/env python3
"""Mutation fuzzing of `streamdeid run` on real clips: no traceback, no hang, nothing half-written.

    python benchmarks/fuzz.py                  # 300 cases over the shared clips
    python benchmarks/fuzz.py --cases 30 --seed 1 --out /tmp/fuzz

Each case damages a real clip from ../shared/media (seeded): a truncation, byte
flips, a zeroed block, a repeated block, or the head of one clip spliced onto the
body of another. The real command line runs on it (subprocess, --timeout each),
and the case is graded:
  ok           exit 0 and the output decodes
  clean error  exit 1 with a one-line "streamdeid: error:" and no output file
  BAD          anything else: a traceback or "internal error", a hang (timeout),
               exit 0 with an output that does not decode, or an output left by a
               failed run
Prints the counts per mutation and writes fuzz.json (every BAD case with its
stderr) to --out. tests/test_cli_run.py runs a fast sample.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import av

REPO = Path(__file__).resolve().parents[1]
MEDIA = REPO.parent / "shared" / "media"
CLIPS = ["head-pose-face-detection-male.mp4", "face-demographics-walking-and-pause.mp4", "classroom.mp4",
         "short_hamilton_clip.mp4"]
MUTATIONS = ("truncate", "flip", "zero", "repeat", "splice")


def mutate(data: bytes, kind: str, rng: random.Random, other: bytes) -> bytes:
    """``data`` damaged one way (``other``: a second clip, for splices)."""
    n = len(data)
    if kind == "truncate":
        return data[:rng.randrange(0, n)]
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.choice((1, 4, 32, 256))):
            out[rng.randrange(n)] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == "zero":
        at, size = rng.randrange(n), rng.choice((16, 512, 4096, 65536))
        return data[:at] + bytes(min(size, n - at)) + data[at + size:]
    if kind == "repeat":
        at, size = rng.randrange(n), rng.choice((512, 4096, 65536))
        return data[:at + size] + data[at:at + size] + data[at + size:]
    if kind == "splice":
        cut = rng.randrange(8, min(n, len(other)))
        return data[:cut] + other[cut:]
    raise ValueError(kind)


def decodes(path: Path) -> bool:
    try:
        with av.open(str(path)) as c:
            return any(True for _ in c.decode(video=0))
    except (av.FFmpegError, OSError, ValueError, IndexError):
        return False


def grade(src: Path, out_dir: Path, timeout: float) -> tuple[str, str]:
    """("ok" | "clean" | "BAD: why", stderr) for one run of the CLI on ``src``."""
    out = out_dir / "out.mp4"
    for p in out_dir.glob("out*"):
        p.unlink()
    try:
        res = subprocess.run([sys.executable, "-m", "streamdeid.cli", "run", str(src), "-o", str(out), "--no-progress"],
                             capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "BAD: hang", ""
    err = res.stderr.decode(errors="replace")
    if "Traceback" in err or "internal error" in err:
        return "BAD: traceback", err
    if res.returncode == 0:
        return ("ok", err) if out.exists() and decodes(out) else ("BAD: exit 0 without a good output", err)
    if out.exists():
        return "BAD: output left by a failed run", err
    lines = [line for line in err.splitlines() if line.strip()]
    if res.returncode == 1 and lines and lines[-1].startswith("streamdeid: error:"):
        return "clean", err
    return f"BAD: exit {res.returncode}", err


def run_cases(cases: int, seed: int, out_dir: Path, timeout: float = 120.0, verbose: bool = True) -> dict:
    clips = [MEDIA / c for c in CLIPS if (MEDIA / c).is_file()]
    if not clips:
        raise SystemExit(f"no shared clips in {MEDIA}")
    data = {c: c.read_bytes() for c in clips}
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, Counter] = {m: Counter() for m in MUTATIONS}
    bad = []
    for i in range(cases):
        clip, kind = rng.choice(clips), MUTATIONS[i % len(MUTATIONS)]
        other = data[rng.choice([c for c in clips if c != clip] or clips)]
        src = out_dir / f"case{clip.suffix}"
        src.write_bytes(mutate(data[clip], kind, rng, other))
        verdict, err = grade(src, out_dir, timeout)
        counts[kind][verdict.split(":")[0]] += 1
        if verdict.startswith("BAD"):
            kept = out_dir / f"bad_{i}_{kind}{clip.suffix}"
            src.rename(kept)
            bad.append({"case": i, "clip": clip.name, "mutation": kind, "verdict": verdict, "file": str(kept),
                        "stderr": err[-2000:]})
        if verbose:
            print(f"{i:4d} {kind:9s} {clip.name[:32]:32s} {verdict}", flush=True)
    return {"cases": cases, "seed": seed, "counts": {k: dict(v) for k, v in counts.items()}, "bad": bad}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a run may take before it counts as a hang")
    ap.add_argument("--out", type=Path, default=Path("fuzz-out"))
    args = ap.parse_args()
    result = run_cases(args.cases, args.seed, args.out.resolve(), args.timeout)
    print()
    for kind, c in result["counts"].items():
        print(f"{kind:9s} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    total = Counter()
    for c in result["counts"].values():
        total.update(c)
    print("all       " + ", ".join(f"{k} {v}" for k, v in sorted(total.items())))
    (args.out / "fuzz.json").write_text(json.dumps(result, indent=1))
    print(f"JSON: {args.out / 'fuzz.json'}")
    sys.exit(1 if result["bad"] else 0)


if __name__ == "__main__":
    main()
