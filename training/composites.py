"""``python -m training composites --faces DIR --out DIR [--k 12] [--per-group 2] [--limit N]``

Builds the donor bank of the ``composite`` anonymizer (streamdeid/anonymizers/composite.py,
docs/composite.md): k-Same-style composites, each the pixel average of ``k`` >= 10 different faces
aligned to streamdeid's own canonical crop (the 5-point template of ``streamdeid.align`` at
``--size`` px with ``AlignConfig.margin``; landmarks from YuNet, the pipeline's detector), so no
composite is any one person's face.

Faces are grouped by the labels UTKFace puts in its file names (``age_gender_race_*.jpg``): race,
gender and an age band; only near-frontal faces are used (head turn estimated from the landmarks:
the nose tip's offset from the eyes' midpoint, in eye distances), so the averages stay sharp. Each
group is shuffled (fixed seed) and cut into disjoint sets of ``k`` faces; a face is used in one
composite at most. Files of the held-out evaluation split (``evaluation.heldout``) are never read.

Writes ``DIR/bank.png`` (the composites side by side, one row), ``DIR/sface.npy`` (their SFace
embeddings, float16) and ``DIR/manifest.json`` (how the bank was built, per composite its group and the
number of faces averaged, the light classifier, and the dataset's licence).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

import cv2
import numpy as np

from .cli import at_least, error_line

MIN_K = 10  # never fewer faces in one composite: no composite may be one person's face
RACES = {0: "white", 1: "black", 2: "asian", 3: "indian"}  # UTKFace's 4 ("others") is too mixed to fit anyone
GENDERS = {0: "male", 1: "female"}
AGE_BANDS = ((4, 14, "child"), (15, 29, "young"), (30, 44, "adult"), (45, 59, "middle"), (60, 116, "senior"))
DUP_BITS = 20  # dHash distance of a near-duplicate (training.data.prepare's default)
MAX_YAW = 0.12  # |nose offset| / eye distance: near-frontal only
UTKFACE_LICENCE = ("UTKFace (https://susanqq.github.io/UTKFace/) is available for non-commercial research purposes "
                   "only; the copyright of the images remains with their original owners. The composites are "
                   "averages of its images and inherit that restriction: non-commercial research use only.")


def parse_label(name: str) -> tuple[int, int, int] | None:
    """UTKFace ``age_gender_race_date.jpg[.chip.jpg]`` -> (age, gender, race); None if the name says otherwise."""
    parts = name.split("_")
    if len(parts) < 4:
        return None
    try:
        age, gender, race = int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError:
        return None
    return age, gender, race


def age_band(age: int) -> str | None:
    for lo, hi, band in AGE_BANDS:
        if lo <= age <= hi:
            return band
    return None


def grouped_label(name: str) -> tuple[int, int, int] | None:
    """``parse_label`` where the label puts the face in one of the bank's groups (a known gender and race, an age
    in AGE_BANDS); None otherwise."""
    label = parse_label(name)
    if label is None or label[1] not in GENDERS or label[2] not in RACES or age_band(label[0]) is None:
        return None
    return label


def head_turn(landmarks: np.ndarray) -> float:
    """Signed yaw proxy from 5 landmarks: (nose x - eye-midpoint x) / eye distance (0: frontal)."""
    lm = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)
    eyes = lm[1] - lm[0]
    d = float(np.hypot(*eyes)) or 1.0
    mid = (lm[0] + lm[1]) / 2
    # offset along the eye line, so a rolled head is not read as turned
    return float(np.dot(lm[2] - mid, eyes / d) / d)


def _is_heldout(path: Path) -> bool:
    try:
        from evaluation.heldout import is_heldout
    except ImportError:  # outside the repository: nothing is held out
        return False
    return is_heldout(path)


def find_landmarks(detector, image: np.ndarray, pad: int) -> np.ndarray | None:
    """The most confident face's [5, 2] landmarks in ``image`` (padded so a tight crop still detects)."""
    big = cv2.copyMakeBorder(image, pad, pad, pad, pad, cv2.BORDER_REPLICATE)
    det = detector.detect(big)
    if len(det) == 0:
        return None
    best = int(np.argmax(det.scores))
    return det.landmarks[best].astype(np.float64) - pad


def fit_classifier(crops: list[np.ndarray], labels: list[tuple[int, int, int]], *, thumb: int = 16,
                   ridge: float = 1.0, seed: int = 0, log=print) -> dict:
    """The anonymizer's light classifier: ridge regressions from the face's grey thumbnail
    (``streamdeid.anonymizers.composite.face_thumb``) to female (0/1) and age (years), fitted on 80 % of the
    faces and scored on the rest (the accuracy goes into the manifest); then refitted on all of them."""
    from streamdeid.anonymizers.composite import face_thumb

    x = np.stack([np.append(face_thumb(c, thumb), 1.0) for c in crops]).astype(np.float64)  # [n, t*t+1]
    female = np.array([lab[1] == 1 for lab in labels], np.float64)
    age = np.array([lab[0] for lab in labels], np.float64)

    def fit(rows):
        a = x[rows].T @ x[rows] + ridge * np.eye(x.shape[1])
        return np.linalg.solve(a, x[rows].T @ female[rows]), np.linalg.solve(a, x[rows].T @ age[rows])

    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    train, test = order[:cut], order[cut:]
    wf, wa = fit(train)
    accuracy = float(np.mean((x[test] @ wf > 0.5) == (female[test] > 0.5)))
    age_mae = float(np.mean(np.abs(x[test] @ wa - age[test])))
    log(f"classifier on {len(test)} held-back faces: gender accuracy {accuracy:.1%}, age error {age_mae:.1f} years")
    wf, wa = fit(np.arange(len(x)))
    return {"what": "ridge regressions on face_thumb(crop, thumb) + [1]: female (0/1) and age (years)",
            "thumb": thumb, "female": [round(float(v), 6) for v in wf], "age": [round(float(v), 4) for v in wa],
            "scored_on": len(test), "gender_accuracy": round(accuracy, 4), "age_mae_years": round(age_mae, 2)}


def build(faces: str | Path, out: str | Path, *, k: int = 12, per_group: int = 2, size: int = 112,
          limit: int = 0, seed: int = 0, log=print) -> dict:
    """Build the bank (see the module docstring); returns the manifest."""
    from streamdeid.align import align_face
    from streamdeid.config import AlignConfig, DetectConfig
    from streamdeid.detect.yunet import YuNetDetector

    if k < MIN_K:
        raise ValueError(f"k must be >= {MIN_K} (a composite of fewer faces is too close to one person), got {k}")
    margin = AlignConfig.margin
    folder = Path(faces)
    if not folder.is_dir():
        raise FileNotFoundError(f"--faces {folder} is not a folder")
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    if limit:
        files = files[:limit]
    if not files:
        raise ValueError(f"no .jpg or .png files in {folder}")
    detector = YuNetDetector(DetectConfig(input_size=0))
    groups: dict[tuple[str, str, str], list[Path]] = {}
    labels: dict[Path, tuple[int, int, int]] = {}
    aligned: dict[Path, np.ndarray] = {}
    skipped = {"heldout": 0, "label": 0, "no_face": 0, "turned": 0}
    from .data import dhash, duplicate_masks
    t0 = time.time()
    held_hashes = []
    for n, path in enumerate(files):
        held = _is_heldout(path)
        label = grouped_label(path.name)
        if not held and label is None:
            skipped["label"] += 1
            continue
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        lm = None if image is None else find_landmarks(detector, image, pad=image.shape[0] // 4)
        if lm is None:
            skipped["heldout" if held else "no_face"] += 1
            continue
        crop = align_face(image, lm, size=size, margin=margin).crop
        if held:  # never averaged; hashed to drop re-saved copies of held-out faces (as prepare does)
            skipped["heldout"] += 1
            held_hashes.append(dhash(crop, margin))
            continue
        if abs(head_turn(lm)) > MAX_YAW:
            skipped["turned"] += 1
            continue
        aligned[path] = crop
        labels[path] = label
        if n % 1000 == 999:
            log(f"{n + 1}/{len(files)} files, {len(aligned)} faces aligned ({time.time() - t0:.0f} s)")
    # one copy of a face at most, and none of a held-out face (UTKFace holds re-saved copies)
    paths = sorted(aligned)
    dup, held_dup = duplicate_masks([aligned[p] for p in paths], held_hashes, margin, DUP_BITS)
    skipped["duplicate"], skipped["heldout_duplicate"] = int(dup.sum()), int(held_dup.sum())
    for p, drop in zip(paths, dup | held_dup):
        if drop:
            del aligned[p], labels[p]
            continue
        age, gender, race = labels[p]
        groups.setdefault((RACES[race], GENDERS[gender], age_band(age)), []).append(p)
    composites, entries = [], []
    for key in sorted(groups):
        members = sorted(groups[key])
        random.Random(f"{seed}:{'/'.join(key)}").shuffle(members)
        for i in range(min(per_group, len(members) // k)):
            chosen = members[i * k:(i + 1) * k]
            assert len(set(chosen)) == k >= MIN_K
            mean = np.mean([aligned[p].astype(np.float32) for p in chosen], axis=0)
            composites.append(np.clip(mean + 0.5, 0, 255).astype(np.uint8))
            entries.append({"race": key[0], "gender": key[1], "age_band": key[2], "k": k,
                            # which files were averaged, by digest only: the bank names no one
                            "members_sha256": hashlib.sha256("\n".join(p.name for p in chosen).encode()).hexdigest()})
    if not composites:
        raise ValueError(f"{folder}: no group has {k} usable faces ({len(files)} files; skipped: "
                         + ", ".join(f"{n} {SKIPPED_WHY.get(why, why)}" for why, n in skipped.items() if n)
                         + "; names must read age_gender_race_*, as UTKFace's do)")
    classifier = fit_classifier([aligned[p] for p in sorted(aligned)], [labels[p] for p in sorted(aligned)],
                                seed=seed, log=log)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atlas = np.concatenate(composites, axis=1)  # [S, n*S, 3]
    cv2.imwrite(str(out / "bank.png"), atlas, [cv2.IMWRITE_PNG_COMPRESSION, 9])
    # the composites' SFace embeddings, so a run need not compute them (the anonymizer's "not the person" step)
    from streamdeid.anonymizers.composite import composite_embeddings
    from streamdeid.files import sha256_file
    from streamdeid.identity.sface import SFace, default_model_path

    np.save(out / "sface.npy", composite_embeddings(SFace(threads=1), np.stack(composites)).astype(np.float16))
    manifest = {
        "schema": 1,
        "what": "k-Same-style composite faces for --anonymizer composite: each the pixel average of k different "
                "aligned faces; bank.png holds them side by side in this order",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "built_by": f"python -m training composites --faces {faces} --out {out} --k {k} --per-group {per_group} "
                    f"--size {size}" + (f" --limit {limit}" if limit else ""),
        "dataset": folder.name,
        "licence": UTKFACE_LICENCE,
        "size": size,
        "align_margin": margin,
        "alignment": "streamdeid.align canonical 5-point template (ArcFace 112 scaled, margin above); "
                     "landmarks from YuNet",
        "k": k,
        "min_k": MIN_K,
        "max_head_turn": MAX_YAW,
        "counts": {"files": len(files), "faces_used": k * len(composites), "faces_aligned": len(aligned),
                   "skipped": skipped, "groups": {"/".join(g): len(v) for g, v in sorted(groups.items())}},
        "classifier": classifier,
        "sface": {"file": "sface.npy", "sha256": sha256_file(out / "sface.npy"),
                  "model": default_model_path().name, "model_sha256": sha256_file(default_model_path())},
        "bank_sha256": hashlib.sha256((out / "bank.png").read_bytes()).hexdigest(),
        "composites": entries,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    log(f"{len(composites)} composites of {k} faces each -> {out} ({(out / 'bank.png').stat().st_size // 1024} KiB)")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training composites", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--faces", required=True, help="folder of face photos named age_gender_race_* (UTKFace), "
                                                    "subfolders included")
    ap.add_argument("--out", required=True, help="output folder (streamdeid/composites to ship it; "
                                                  "streamdeid run --anonymizer composite --model DIR to use it)")
    ap.add_argument("--k", type=int, default=12, help=f"faces per composite (>= {MIN_K}; default: 12)")
    ap.add_argument("--per-group", type=at_least(1), default=2,
                    help="composites per race/gender/age group at most (default: 2; the shipped bank: 3)")
    ap.add_argument("--size", type=at_least(MIN_SIZE), default=112, help="composite side in pixels (default: 112)")
    ap.add_argument("--limit", type=at_least(0), default=0, help="only the first N files (0: all)")
    ap.add_argument("--seed", type=int, default=0, help="which faces go into which composite (default: 0)")
    ap.add_argument("--overwrite", action="store_true", help="replace a bank already in --out")
    args = ap.parse_args(argv)
    try:
        refuse_replacing(Path(args.out), args.overwrite)  # before a minute of work, not after it
        build(args.faces, args.out, k=args.k, per_group=args.per_group, size=args.size, limit=args.limit,
              seed=args.seed, log=lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", flush=True))
    except (OSError, ValueError) as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


MIN_SIZE = 32  # a composite smaller than this has no features to draw
SKIPPED_WHY = {"heldout": "of the held-out split", "label": "without a usable label (age under 4, race 'others')",
               "no_face": "without a face found", "turned": "turned heads", "duplicate": "near-duplicates",
               "heldout_duplicate": "near-duplicates of held-out faces"}


def refuse_replacing(out: Path, overwrite: bool) -> None:
    """``out`` must be a folder (or not exist yet) without a bank in it, unless ``overwrite``."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file, not a folder")
    there = [n for n in ("manifest.json", "bank.png", "sface.npy") if (out / n).exists()]
    if there and not overwrite:
        raise FileExistsError(f"{out} holds a bank already ({', '.join(there)}); pass --overwrite to replace it")


if __name__ == "__main__":
    raise SystemExit(main())
