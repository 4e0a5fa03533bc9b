#!/usr/bin/env python3
"""What `streamdeid review`'s second opinion costs beside the run it reviews, and what it finds.

    python benchmarks/review_scan.py ../shared/media/short_hamilton_clip.mp4 --repeats 3

1. Cost: `streamdeid run CLIP --export-tracks` (a command-line process, timed wall-clock, default options)
   against the review's scan of that output (streamdeid/review/flags.py: CenterFace loaded, the output
   decoded, CenterFace at native resolution on every flags.sample_step-th frame, thumbnails cut), alternating,
   medians printed. The budget is half the run's time.
2. Finds: a run at `--threshold 0.95 --anonymizer solid` (which leaves faces visible) reviewed the same way:
   how many faces the flags say were left visible, and on how many sampled frames.
Nothing is asserted; figures are printed (and written with --json).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_run(clip: Path, out: Path, *extra: str) -> tuple[float, float]:
    """(wall-clock seconds, CPU seconds) of `streamdeid run` as a process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "streamdeid.cli", "run", str(clip), "-o", str(out), "--overwrite",
                    "--no-progress", "--export-tracks", str(out.with_name(out.name + ".tracks.jsonl")), *extra],
                   check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def review_pass(out: Path, source: Path) -> dict:
    """The review's preparation in a fresh process (as `streamdeid review` does it), its timings and flags."""
    code = ("import json,sys,tempfile; from pathlib import Path; from streamdeid.review import Review, ReviewSettings;"
            "r=Review(ReviewSettings(output=Path(sys.argv[1]), source=Path(sys.argv[2])), Path(tempfile.mkdtemp()),"
            " echo=lambda s: None); r.prepare();"
            "print(json.dumps({'timings': r.timings, 'scan': r.scan_info,"
            " 'flags': [f.to_json() for f in r.flags]}))")
    proc = subprocess.run([sys.executable, "-c", code, str(out), str(source)], check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clip", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="review-scan-"))
    out = d / "run.mp4"
    runs, scans, run_cpu, scan_cpu = [], [], [], []
    for k in range(args.repeats):
        wall, cpu = timed_run(args.clip, out)
        runs.append(wall)
        run_cpu.append(cpu)
        r = review_pass(out, args.clip)
        scans.append(r["timings"]["output pass"])
        scan_cpu.append(r["timings"]["output pass cpu"])
        print(f"repeat {k + 1}: run {runs[-1]:.2f} s ({cpu:.2f} s CPU), scan {scans[-1]:.2f} s ({scan_cpu[-1]:.2f} s CPU; "
              f"{r['scan']['frames']} of {r['scan']['of']} frames, one in {r['scan']['every']})", flush=True)
    run_s, scan_s = statistics.median(runs), statistics.median(scans)
    print(f"streamdeid run (default options): {run_s:.2f} s; review scan of its output: {scan_s:.2f} s "
          f"= {scan_s / run_s:.0%} of the run (budget 50%)")
    print(f"CPU time: run {statistics.median(run_cpu):.2f} s, scan {statistics.median(scan_cpu):.2f} s "
          f"= {statistics.median(scan_cpu) / statistics.median(run_cpu):.0%}")
    low = d / "low.mkv"
    timed_run(args.clip, low, "--threshold", "0.95", "--anonymizer", "solid", "--codec", "ffv1")
    r = review_pass(low, args.clip)
    visible = [f for f in r["flags"] if f["kind"] == "visible"]
    print(f"--threshold 0.95 run: {len(visible)} faces flagged as left visible ({r['scan']['hits']} CenterFace hits "
          f"outside every cover on {r['scan']['frames']} sampled frames)")
    default_visible = [f for f in review_pass(out, args.clip)["flags"] if f["kind"] == "visible"]
    print(f"default run: {len(default_visible)} faces flagged as left visible")
    if args.json:
        args.json.write_text(json.dumps({"run_s": runs, "scan_s": scans, "run_cpu_s": run_cpu, "scan_cpu_s": scan_cpu, "run_median": run_s, "scan_median": scan_s,
                                         "visible_095": len(visible), "hits_095": r["scan"]["hits"],
                                         "visible_default": len(default_visible), "flags_095": r["flags"]}, indent=1))


if __name__ == "__main__":
    main()
