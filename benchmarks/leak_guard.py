#!/usr/bin/env python
"""How many faces get past the DBAF leak guard, for given guard settings.

    python benchmarks/leak_guard.py ../shared/media/short_hamilton_clip.mp4 --every 15 --every 1 --threshold 0.28 --repeat 2

Anonymizes the clip with ``--anonymizer`` (default dbaf, the shipped weights) once per
setting (``--repeat`` times: every run draws new keys, so the faces differ), then runs the offline check (:func:`streamdeid.identity.leakcheck.check_video`,
the one ``tests/test_privacy_e2e.py`` uses) on the encoded output, and prints per
setting: fps, faces checked, leaks (frame, SFace similarity, face-blanked reference),
and the tracks (and rendered faces) the guard switched to solid fill. ``--json`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root, last (a --code tree stays first): evaluation/
from streamdeid.config import AnonymizeConfig, PipelineConfig
from evaluation.video import anonymize_clip
from streamdeid.identity import SFace
from streamdeid.identity.leakcheck import check_video


def run(clip: str, method: str, every: int, threshold: float, margin: float, sface: SFace, work: Path) -> dict:
    cfg = PipelineConfig()
    cfg.anonymize.leak_every, cfg.anonymize.leak_threshold, cfg.anonymize.leak_margin = every, threshold, margin
    out = work / f"{Path(clip).stem}_{every}_{threshold}_{margin}.mp4"
    t0 = time.perf_counter()
    res = anonymize_clip(clip, out, method, config=cfg)
    seconds = time.perf_counter() - t0
    rep = check_video(clip, str(out), sface=sface)
    return {"every": every, "threshold": threshold, "margin": margin, "fps": res.summary.frames / seconds,
            "faces": rep.faces, "leaks": [(c.frame, round(c.similarity, 3), round(c.reference, 3)) for c in rep.leaks],
            "guard_tracks": res.summary.leak_fallbacks, "tracks": res.summary.tracks,
            "rendered_faces": res.summary.faces, "solid_faces": res.summary.fallbacks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("clip")
    ap.add_argument("--anonymizer", default="dbaf")
    default = AnonymizeConfig()
    ap.add_argument("--every", type=int, action="append",
                    help=f"guard cadence in frames (repeatable; default {default.leak_every})")
    ap.add_argument("--threshold", type=float, default=default.leak_threshold, help="guard SFace threshold")
    ap.add_argument("--margin", type=float, default=default.leak_margin,
                    help="guard margin over the face-blanked reference")
    ap.add_argument("--repeat", type=int, default=1, help="runs per setting (new keys each time)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    sface = SFace()
    results = []
    with tempfile.TemporaryDirectory(prefix="sdeid-guard-") as tmp:
        for every in [e for e in args.every or [default.leak_every] for _ in range(args.repeat)]:
            r = run(args.clip, args.anonymizer, every, args.threshold, args.margin, sface, Path(tmp))
            print(f"every {every}, threshold {args.threshold}, margin {args.margin}: {r['fps']:.1f} fps, "
                  f"{r['faces']} faces checked, {len(r['leaks'])} leaks {r['leaks']}, "
                  f"guard switched {r['guard_tracks']} of {r['tracks']} track(s) to solid "
                  f"({r['solid_faces']} of {r['rendered_faces']} rendered faces solid)", flush=True)
            results.append(r)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
