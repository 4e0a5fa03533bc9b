#!/usr/bin/env python3
"""How often do the recognisers of benchmarks/quality.py match two *different* real people?

    python benchmarks/strangers.py                  # the held-out UTKFace split, SFace and dlib
    python benchmarks/strangers.py --json strangers.json

quality.py counts an anonymized face as "matched to the original" when a recogniser takes it for the same
person (SFace cosine >= 0.363, dlib distance <= 0.6). A realistic replacement is a face of somebody: it can
be matched no less often than a real stranger who looks like the person would be. This prints that floor:
for every pair of different held-out faces (UTKFace file names carry age, gender and race), the share each
recogniser matches, over all pairs, over pairs of the same gender and race, and of the same gender, race
and age band (the composite bank's bands, training.composites.AGE_BANDS: 4-14, 15-29, 30-44, 45-59, 60 and
over; faces under 4, which the bank leaves out, form a band of their own here). Faces are
found and prepared as quality.py does (YuNet on the image padded by --pad, the largest face; dlib's own
HOG box where it overlaps). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root: evaluation/
from evaluation import create_recognizers, heldout_files  # noqa: E402
from evaluation.faces import load_face_set  # noqa: E402
from training.composites import age_band, parse_label  # noqa: E402

UTK = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "utkface-crops" / "images"


def labels(path: Path) -> tuple[str, str, str]:
    """(gender, race, age band) from a UTKFace file name ``age_gender_race_date...``."""
    age, gender, race = parse_label(path.name)
    return str(gender), str(race), age_band(age) or "baby"


def pair_rates(matched: np.ndarray, groups: list[tuple[str, str, str]]) -> dict[str, dict]:
    """matched: [N, N] bool, i != j pairs judged the same person. Shares over the pair classes."""
    n = len(groups)
    g = np.array([[a[0] == b[0] and a[1] == b[1] for b in groups] for a in groups])
    ga = np.array([[a == b for b in groups] for a in groups])
    off = ~np.eye(n, dtype=bool)
    out = {}
    for name, mask in (("any two people", off), ("same gender and race", g & off),
                       ("same gender, race and age band", ga & off)):
        out[name] = {"pairs": int(mask.sum()) // 2, "matched": float(matched[mask].mean()) if mask.any() else None}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=Path, default=UTK, help="a UTKFace-named folder (its held-out split is used)")
    ap.add_argument("--pad", type=float, default=0.3, help="as quality.py's --pad")
    ap.add_argument("--recognizers", default="sface,dlib")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    paths = heldout_files(args.images)
    if not paths:
        sys.exit(f"{args.images}: no held-out UTKFace images")
    fs = load_face_set("utkface-heldout", paths, largest_only=True, pad=args.pad)
    recognizers, skipped = create_recognizers(tuple(args.recognizers.split(",")))
    groups = [labels(fs.paths[f.image]) for f in fs.faces]
    images = [fs.images[f.image] for f in fs.faces]
    result = {"faces": len(fs.faces), "skipped": skipped, "recognizers": {}}
    print(f"{len(fs.faces)} held-out faces (of {len(paths)} images)")
    for rec in recognizers:
        handles = [rec.prepare(img, f.geometry) for img, f in zip(images, fs.faces)]
        emb = np.concatenate([rec.embed(images[i:i + 32], handles[i:i + 32]) for i in range(0, len(images), 32)])
        scores = np.stack([rec.score(emb, e[None].repeat(len(emb), 0)) for e in emb])  # [N, N]
        rates = pair_rates(rec.matches(scores), groups)
        result["recognizers"][rec.name] = {"rule": rec.rule, **rates}
        for name, r in rates.items():
            print(f"  {rec.name} ({rec.rule}): {name}: {100 * r['matched']:.1f}% of {r['pairs']} pairs")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
