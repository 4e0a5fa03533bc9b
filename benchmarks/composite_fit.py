#!/usr/bin/env python3
"""Does `--anonymizer composite` give a person a face of their gender and age? Measured on labelled faces.

    python benchmarks/composite_fit.py                   # the held-out UTKFace split, 3 keys a face
    python benchmarks/composite_fit.py --bank DIR --json fit.json

Each face with a usable UTKFace label (``age_gender_race_*``: the file name) is found by YuNet and aligned as
`python -m training composites` aligns the bank's faces; the anonymizer chooses its composite as it does for a
track's first crop (fit, then SFace's "not the person" step, then the key's pick among the candidates), once per
key. Printed: how often the chosen composite's group (manifest.json) keeps the face's gender, its age band (and
within one band), and its race label, both for the key's pick and over the candidates before and after the
"not the person" step. The held-out faces were never averaged into the bank (training/composites.py).
These are photos: on video faces the bank's classifier does worse (docs/composite.md, "Limits"). Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import cv2

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root: evaluation/, training/
from evaluation import heldout_files  # noqa: E402
from streamdeid.align import align_face  # noqa: E402
from streamdeid.anonymizers.composite import CANDIDATES, CompositeAnonymizer  # noqa: E402
from streamdeid.config import AlignConfig, DetectConfig  # noqa: E402
from streamdeid.detect.yunet import YuNetDetector  # noqa: E402
from streamdeid.types import FaceContext  # noqa: E402
from training.composites import AGE_BANDS, GENDERS, RACES, age_band, find_landmarks, grouped_label  # noqa: E402

UTK = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "utkface-crops" / "images"
BANDS = [band for _, _, band in AGE_BANDS]


def labelled_crops(paths: list[Path], size: int) -> list[tuple[str, tuple[int, int, int], object]]:
    """(file name, (age, gender, race), aligned crop) of each file with a usable label and a face YuNet finds."""
    detector = YuNetDetector(DetectConfig(input_size=0))
    out = []
    for p in paths:
        label = grouped_label(p.name)
        if label is None:
            continue
        image = cv2.imread(str(p), cv2.IMREAD_COLOR)
        lm = None if image is None else find_landmarks(detector, image, pad=image.shape[0] // 4)
        if lm is not None:
            out.append((p.name, label, align_face(image, lm, size=size, margin=AlignConfig.margin).crop))
    return out


def kept(counts: Counter, entry: dict, label: tuple[int, int, int], prefix: str) -> None:
    """Count ``entry`` (a composite's manifest entry) against the face's ``label`` under ``prefix``."""
    have, want = BANDS.index(entry["age_band"]), BANDS.index(age_band(label[0]))
    counts[prefix, "n"] += 1
    counts[prefix, "gender"] += entry["gender"] == GENDERS[label[1]]
    counts[prefix, "race"] += entry["race"] == RACES[label[2]]
    counts[prefix, "band"] += have == want
    counts[prefix, "near"] += abs(have - want) <= 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--faces", default=None, help="folder of UTKFace-named faces (default: the held-out split)")
    ap.add_argument("--bank", default=None, help="composite bank folder (default: the shipped one)")
    ap.add_argument("--keys", type=int, default=3, help="keys (choices) per face")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    paths = sorted(Path(args.faces).glob("*.jp*g")) if args.faces else heldout_files(UTK)
    if not paths:
        print(f"error: no faces in {args.faces or UTK}", file=sys.stderr)
        return 2
    anon = CompositeAnonymizer(bank=args.bank)
    entries = anon.manifest["composites"]
    faces = labelled_crops(paths, anon.size)
    counts: Counter = Counter()
    for n, (_name, label, crop) in enumerate(faces):
        fitted = anon.candidates(crop, 4 * CANDIDATES)
        for i in fitted[:CANDIDATES]:
            kept(counts, entries[i], label, "candidates by fit")
        for i in anon.unlike(crop, fitted)[:CANDIDATES]:
            kept(counts, entries[i], label, "candidates, not the person")
        for k in range(args.keys):
            kept(counts, entries[anon.choose(crop, FaceContext(n * args.keys + k, 0, key=bytes([k + 1]) * 32))],
                 label, "chosen")
    result = {"faces": len(faces), "files": len(paths), "keys": args.keys, "bank": str(args.bank or "shipped")}
    print(f"{len(faces)} labelled faces of {len(paths)} files, {args.keys} keys each")
    for prefix in ("candidates by fit", "candidates, not the person", "chosen"):
        n = counts[prefix, "n"]
        shares = {k: counts[prefix, k] / n for k in ("gender", "band", "near", "race")} if n else {}
        result[prefix] = {"n": n, **{k: round(v, 4) for k, v in shares.items()}}
        if n:
            print(f"  {prefix:27s} gender kept {shares['gender']:.1%}, age band {shares['band']:.1%} (within one "
                  f"{shares['near']:.1%}), race label {shares['race']:.1%}  ({n} composites)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
