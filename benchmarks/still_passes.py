#!/usr/bin/env python3
"""The still passes (streamdeid/detect/still.py) against the video passes, on synthetic crowds.

    python benchmarks/still_passes.py                  # seeds 20-28 (not looked at while tuning)
    python benchmarks/still_passes.py --seeds 0-8      # the seeds the design was tuned on

Each seed is a 1280x720 crowd of 200 UTKFace faces at 10-60 px (evaluation.crowd, as in
benchmarks/recall.py). A pasted face counts as found when a detection's box holds its centre; a
detection whose centre is near no pasted face is a false box. Detector only, no rendering:
benchmarks/recall.py measures what the output covers. Prints found faces per size and the time a still.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root, last (a --code tree stays first): evaluation/
from streamdeid.config import DetectConfig
from streamdeid.detect.finder import FaceFinder
from streamdeid.detect.still import StillFinder
from evaluation.crowd import crowd_pool, default_background, make_crowd

SHARED = Path(__file__).resolve().parents[2] / "shared"
SIZES = ((12, 16), (16, 24), (24, 10_000))


def score(truth: np.ndarray, boxes: np.ndarray) -> tuple[np.ndarray, int]:
    """([N] each true face has a box over its centre, number of boxes whose centre is near no true face)."""
    cx, cy = truth[:, [0, 2]].mean(1), truth[:, [1, 3]].mean(1)
    if not len(boxes):
        return np.zeros(len(truth), bool), 0
    inside = ((boxes[None, :, 0] <= cx[:, None]) & (cx[:, None] <= boxes[None, :, 2])
              & (boxes[None, :, 1] <= cy[:, None]) & (cy[:, None] <= boxes[None, :, 3]))
    dx, dy = boxes[:, [0, 2]].mean(1), boxes[:, [1, 3]].mean(1)
    near = ((np.abs(dx[None] - cx[:, None]) <= 0.75 * (truth[:, 2] - truth[:, 0])[:, None])
            & (np.abs(dy[None] - cy[:, None]) <= 0.75 * (truth[:, 3] - truth[:, 1])[:, None]))
    return inside.any(1), int((~near.any(0)).sum())


def seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=seeds, default=seeds("20-28"), help="crowd seeds, e.g. 20-28")
    ap.add_argument("--faces", type=int, default=200, help="faces per crowd")
    args = ap.parse_args()
    pool = crowd_pool(SHARED / "datasets" / "utkface-crops" / "images")
    background = default_background(SHARED / "media")
    crowds = [make_crowd(pool, background, count=args.faces, seed=s) for s in args.seeds]
    finder = FaceFinder(DetectConfig())
    for name, find in (("video passes", lambda im: finder.find(im, scan=True)), ("still passes", StillFinder(finder).find)):
        found, total, false, seconds = np.zeros(len(SIZES), int), np.zeros(len(SIZES), int), 0, 0.0
        for crowd in crowds:
            t0 = time.perf_counter()
            dets = find(crowd.image)
            seconds += time.perf_counter() - t0
            hit, f = score(crowd.boxes, dets.boxes)
            false += f
            for i, (lo, hi) in enumerate(SIZES):
                size = (crowd.heights >= lo) & (crowd.heights < hi)
                found[i] += hit[size].sum()
                total[i] += size.sum()
        cells = "  ".join(f"{lo}-{hi if hi < 10_000 else ''} px {found[i]}/{total[i]} ({100 * found[i] / total[i]:.1f}%)"
                          for i, (lo, hi) in enumerate(SIZES))
        big = found[1:].sum() / total[1:].sum()
        print(f"{name:12s}  {cells}  >=16 px {100 * big:.2f}%  false boxes {false / len(crowds):.1f} a still"
              f"  {seconds / len(crowds):.2f} s a still")


if __name__ == "__main__":
    main()
