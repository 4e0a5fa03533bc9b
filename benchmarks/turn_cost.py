"""What the turned passes (docs/recall.md, "Turned faces") cost a clip, in process.

    python benchmarks/turn_cost.py ../shared/media/short_hamilton_clip.mp4 [--rounds 2] [--out cost.json]

Runs the clip through the pipeline (the default blur, no vault) with `DetectConfig.look_turned` off and on,
alternating, and times inside `FaceFinder.find`: the upright passes, the turned probes (a turn not active:
one fast-pass-sized detection), the active turns' passes, and turning the frames. The wall time of a
whole run swings with the machine's load (20% here); the parts of `find` are what the turned passes add,
whatever the load. Nothing is asserted; a table is printed and JSON written with --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import streamdeid.detect.finder as finder  # noqa: E402
from streamdeid.api import anonymize  # noqa: E402
from streamdeid.config import PipelineConfig  # noqa: E402


class Timers:
    """Wraps the finder's parts to count calls and seconds (one instance per process: it patches the class)."""

    def __init__(self) -> None:
        self.calls, self.seconds = Counter(), Counter()
        self._wrap_module("turned", "turn")
        for name, label in (("find", "find"), ("_passes", "passes")):
            self._wrap_method(name, label)
        probe_for = finder.FaceFinder._probe_for

        def timed_probe_for(this, width, height, view):
            detector, timers = probe_for(this, width, height, view), self

            class Timed:  # the probe's detect() call, timed
                def detect(self, image):
                    return timers._timed("probe", detector.detect, image)
            return Timed()
        finder.FaceFinder._probe_for = timed_probe_for

    def _timed(self, label, fn, *args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds[label] += time.perf_counter() - t
            self.calls[label] += 1

    def _wrap_module(self, name: str, label: str) -> None:
        fn = getattr(finder, name)
        setattr(finder, name, lambda *a, **k: self._timed(label, fn, *a, **k))

    def _wrap_method(self, name: str, label: str) -> None:
        fn = getattr(finder.FaceFinder, name)
        setattr(finder.FaceFinder, name, lambda this, *a, **k: self._timed(label, fn, this, *a, **k))


def run_once(clip: str, look: bool, timers: Timers) -> dict:
    timers.calls.clear()
    timers.seconds.clear()
    cfg = PipelineConfig()
    cfg = replace(cfg, detect=replace(cfg.detect, look_turned=look), progress=False)
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        anonymize(clip, str(Path(d) / "out.mp4"), cfg, vault=False)
    wall = time.perf_counter() - t
    # _passes runs for the upright frame on every detector run, and again for each active turn
    runs = timers.calls["find"]
    return {"look_turned": look, "wall_s": round(wall, 3), "detector_runs": runs,
            "probes": timers.calls["probe"], "active_turn_passes": timers.calls["passes"] - runs,
            "seconds": {k: round(v, 3) for k, v in timers.seconds.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clip")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    timers = Timers()
    rows = [run_once(args.clip, look, timers) for _ in range(args.rounds) for look in (False, True)]
    print(f"{'turned':7} {'wall s':>7} {'find s':>7} {'probes':>7} {'probe s':>8} {'active':>7} {'turn s':>7}")
    for r in rows:
        s = r["seconds"]
        print(f"{'on' if r['look_turned'] else 'off':7} {r['wall_s']:7.2f} {s.get('find', 0):7.2f} {r['probes']:7d} "
              f"{s.get('probe', 0):8.2f} {r['active_turn_passes']:7d} {s.get('turn', 0):7.2f}")
    if args.out:
        args.out.write_text(json.dumps({"clip": args.clip, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
