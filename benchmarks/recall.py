#!/usr/bin/env python3
"""Recall of `streamdeid run`, judged by faces the pipeline does not find itself.

    python benchmarks/recall.py                       # shared clips + photos + synthetic crowds, defaults
    python benchmarks/recall.py --run-args "--threshold 0.5" --out /tmp/recall-t05
    git worktree add /tmp/base COMMIT; python benchmarks/recall.py --code /tmp/base --out /tmp/recall-base
    python benchmarks/recall.py ../shared/media/short_hamilton_clip.mp4 --references centerface,hand

Each medium goes through the real command line (``streamdeid run SRC -o OUT
RUN_ARGS``; stills are written as PNG so no JPEG noise is mistaken for a cover).
Reference faces come from (see evaluation.recall):
  centerface   deface's CenterFace at full resolution, score >= --centerface-threshold; videos only:
               the still passes run CenterFace themselves (detect/still.py), so on a photo it
               would grade the pipeline with its own detector
               (needs deface in ~/venv-deface: python3 -m venv ~/venv-deface &&
               ~/venv-deface/bin/pip install deface==1.5.0 onnxruntime onnx)
  dlib-cnn     dlib's CNN (mmod), upsampled once, on every --cnn-every-th frame (slow: ~13 s a 640x360 frame)
  dlib-hog     dlib's HOG, upsampled once, every frame
  hand         benchmarks/data/hand_faces.json: boxes checked by a person, on the frames it lists;
               boxes it flags as showing no facial features count as "hand-uncertain"
  synthetic    the synthetic crowds' own boxes (faces we placed, exact)
A face is covered when at least half of its inner box (the central half of the
reference box) changed in the output. The runs use `--anonymizer solid` by
default: detection and tracking are the same for blur, mosaic and solid (dbaf's
leak guard alone changes the cadence), and a solid fill changes every pixel it
covers, where blurring an already defocused dark face may change almost none
(on hamilton's audience, 2% of a covered face's pixels), which would read as a
miss that is not one. Prints recall per face-size bucket, per
medium and in total, the share of frame area changed with no reference face in
it, and writes JSON and a contact sheet (PNG) of every missed face to --out.
Nothing is asserted: tests/test_recall.py holds the defaults to a fast sample.
Reference detections are cached in ~/.cache/streamdeid/recall (keyed by the
file's sha256 and the reference's settings).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root, last (a --code tree stays first): evaluation/
from streamdeid.files import sha256_file
from evaluation.recall import (
    SIZE_BUCKETS,
    CenterFaceReference,
    DlibReference,
    HandLabels,
    RecallReport,
    contact_sheet,
    deface_python,
    evaluate,
    frame_pairs,
    merge_references,
    python_has_deface,
    read_frames,
)

REPO = Path(__file__).resolve().parents[1]
MEDIA = REPO.parent / "shared" / "media"
UTK = REPO.parent / "shared" / "datasets" / "utkface-crops" / "images"
HAND = REPO / "benchmarks" / "data" / "hand_faces.json"
STILLS = {".jpg", ".jpeg", ".png"}
CACHE = Path.home() / ".cache" / "streamdeid" / "recall"
DEFAULT_MEDIA = [
    "short_hamilton_clip.mp4", "classroom.mp4", "face-demographics-walking-and-pause.mp4",
    "head-pose-face-detection-female-and-male.mp4", "head-pose-face-detection-male.mp4",
    "one-by-one-person-detection.mp4", "two_people.jpg", "obama.jpg", "obama-240p.jpg", "obama_partial_face.jpg",
]


def cached(path: Path, key: str, compute) -> dict[int, np.ndarray]:
    """Reference boxes of ``path`` for settings ``key``, computed once."""
    CACHE.mkdir(parents=True, exist_ok=True)
    file = CACHE / f"{sha256_file(path)[:16]}-{key}.json"
    if file.exists():
        return {int(k): np.asarray(v, np.float64).reshape(-1, 4) for k, v in json.loads(file.read_text()).items()}
    t0 = time.perf_counter()
    boxes = compute()
    file.write_text(json.dumps({str(k): np.round(v, 2).tolist() for k, v in boxes.items()}))
    print(f"  {key} on {path.name}: {sum(map(len, boxes.values()))} faces in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)
    return boxes


def references(path: Path, names: list[str], args, hand: HandLabels | None) -> dict[str, dict[int, np.ndarray]]:
    """{source: boxes per frame}; hand labels first, so a merged face keeps the box a person drew."""
    out: dict[str, dict[int, np.ndarray]] = {}
    still = path.suffix.lower() in STILLS
    for name in sorted(names, key=lambda n: n != "hand"):
        if name == "centerface" and still:
            print(f"  {path.name}: no CenterFace reference (the still passes run it)", file=sys.stderr)
        elif name == "hand":
            if hand is not None:
                out.update(hand.sources(path.name))
        elif name == "centerface":
            out[name] = cached(path, f"centerface-{args.centerface_threshold}", lambda: CenterFaceReference(
                args.deface_python, args.centerface_threshold).detect(read_frames(path)))
        elif name == "dlib-hog":
            out[name] = cached(path, "dlib-hog-up1", lambda: DlibReference("hog", 1).detect(read_frames(path)))
        elif name == "dlib-cnn":
            every = 1 if still else args.cnn_every
            frames = lambda: ((i, f) for i, f in read_frames(path) if i % every == 0)  # noqa: E731
            out[name] = cached(path, f"dlib-cnn-up1-every{every}", lambda: DlibReference("cnn", 1).detect(frames()))
    if hand is not None:
        out, dropped = hand.drop_not_faces(path.name, out)
        if dropped:
            print(f"  {path.name}: {dropped} reference boxes left out, a person found no face there "
                  f"(hand labels' not_faces)", file=sys.stderr)
    return out


def run_streamdeid(src: Path, out: Path, run_args: list[str], code: Path | None = None) -> float:
    """`streamdeid run` on ``src``; ``code``: a source tree to run instead of the installed package."""
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "streamdeid.cli", "run", str(src), "-o", str(out), "--no-progress", *run_args]
    # `python -m` puts the working directory first on sys.path: run from the tree to be measured
    env = {**os.environ, "PYTHONPATH": str(code)} if code else None
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=code)
    if res.returncode != 0:
        raise SystemExit(f"streamdeid failed on {src}: {res.stderr.strip()}")
    return time.perf_counter() - t0


def synthetic_crowds(out_dir: Path, count: int, faces_per_crowd: int) -> list[tuple[Path, np.ndarray]]:
    """Still crowds of UTKFace faces at 10-60 px on a face-free frame of the shared media (exact boxes)."""
    from evaluation.crowd import crowd_pool, default_background, make_crowd

    pool = crowd_pool(UTK)
    background = default_background(MEDIA)
    made = []
    for seed in range(count):
        crowd = make_crowd(pool, background, count=faces_per_crowd, seed=seed)
        path = out_dir / f"synthetic_crowd_{seed}.png"
        cv2.imwrite(str(path), crowd.image)
        made.append((path, crowd.boxes))
    return made


def table(reports: list[RecallReport]) -> str:
    labels = [b[0] for b in SIZE_BUCKETS]
    head = f"{'medium':44s} " + " ".join(f"{lab:>13s}" for lab in labels) + f" {'all':>13s} {'over-cover':>10s}"
    rows = [head, "-" * len(head)]
    for r in reports:
        cells = [f"{c}/{t} {100 * c / t:5.1f}%" if t else "-" for c, t in r.by_bucket().values()]
        c, t = r.recall()
        cells.append(f"{c}/{t} {100 * c / t:5.1f}%" if t else "-")
        rows.append(f"{r.name[:44]:44s} " + " ".join(f"{x:>13s}" for x in cells) + f" {100 * r.uncovered_area:9.2f}%")
    return "\n".join(rows)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("media", nargs="*", type=Path, help="videos or images (default: the shared clips and photos)")
    ap.add_argument("--references", default="centerface,dlib-cnn,dlib-hog,hand,synthetic",
                    help="comma-separated reference sources (unavailable ones are skipped with a note)")
    ap.add_argument("--run-args", default="--anonymizer solid",
                    help="options for `streamdeid run` (default: solid fill, see the top of this file)")
    ap.add_argument("--crowds", type=int, default=3, help="synthetic crowd images (0: none)")
    ap.add_argument("--crowd-faces", type=int, default=200, help="faces per synthetic crowd")
    ap.add_argument("--centerface-threshold", type=float, default=0.5)
    ap.add_argument("--cnn-every", type=int, default=25, help="dlib CNN on every N-th video frame")
    ap.add_argument("--deface-python", default=None, help="Python of a venv with deface (default ~/venv-deface)")
    ap.add_argument("--code", type=Path, default=None,
                    help="run streamdeid from this source tree (e.g. a git worktree of an older commit: before/after)")
    ap.add_argument("--out", type=Path, default=Path("recall-out"), help="outputs, JSON and contact sheet go here")
    return ap.parse_args()


def available_references(args) -> list[str]:
    """--references less the sources this machine cannot compute (a note for each); sets args.deface_python."""
    names = [n.strip() for n in args.references.split(",") if n.strip()]
    args.deface_python = args.deface_python or deface_python()
    if "centerface" in names and not (args.deface_python and python_has_deface(args.deface_python)):
        print("note: centerface skipped (no deface venv; see --help)", file=sys.stderr)
        names.remove("centerface")
    if any(n.startswith("dlib") for n in names):
        from evaluation.recognizers import dlib_available

        if not dlib_available():
            print("note: dlib references skipped (pip install 'streamdeid[eval]')", file=sys.stderr)
            names = [n for n in names if not n.startswith("dlib")]
    return names


def recall_jobs(args, names: list[str], hand: HandLabels | None) -> list[tuple[Path, dict[str, dict[int, np.ndarray]]]]:
    """(medium, {source: boxes per frame}) for every medium, then the synthetic crowds (default media only)."""
    media = [p.resolve() for p in args.media] or [MEDIA / m for m in DEFAULT_MEDIA]
    jobs: list[tuple[Path, dict[str, dict[int, np.ndarray]]]] = []
    for path in media:
        if not path.exists():
            raise SystemExit(f"{path}: no such file")
        jobs.append((path, references(path, [n for n in names if n != "synthetic"], args, hand)))
    if "synthetic" in names and args.crowds and not args.media:
        for path, boxes in synthetic_crowds(args.out, args.crowds, args.crowd_faces):
            jobs.append((path, {"synthetic": {0: boxes}}))
    return jobs


def run_jobs(jobs, args, run_args: list[str]) -> tuple[list[RecallReport], list, float]:
    """`streamdeid run` on each medium: (recall per medium, then all pooled), missed faces for the contact
    sheet, streamdeid's total seconds."""
    reports, sheet, total = [], [], RecallReport("all")
    seconds = 0.0
    for path, refs in jobs:
        faces = merge_references(refs)
        if not faces:
            print(f"  {path.name}: no reference face, skipped", file=sys.stderr)
            continue
        is_still = path.suffix.lower() in STILLS
        out = args.out / (f"{path.stem}_out.png" if is_still else f"{path.stem}_out{path.suffix}")
        seconds += run_streamdeid(path, out, run_args, args.code)
        report = evaluate(path.name, frame_pairs(path, out, {f.frame for f in faces}), faces)
        missed = dict(read_frames(path, {o.face.frame for o in report.misses})) if report.misses else {}
        sheet.extend((path.name, o, missed[o.face.frame]) for o in report.misses)
        reports.append(report)
        total.extend(report)
    reports.append(total)
    return reports, sheet, seconds


def print_headlines(total: RecallReport) -> None:
    for name in total.sources():
        per = total.by_bucket(source=name)
        print(f"  found by {name:14s}: " + ", ".join(f"{k} {c}/{t}" for k, (c, t) in per.items() if t))
    # Headline figures leave out faces only an uncertain hand label has (no facial features to see).
    unsure = frozenset({"hand-uncertain"})
    for lo, hi, label in ((16, np.inf, ">=16 px"), (12, 16, "12-16 px"), (24, np.inf, ">=24 px")):
        c, t = total.recall(lo, hi, ignore=unsure)
        if t:
            print(f"recall {label}: {c}/{t} = {100 * c / t:.2f}% ({t - c} missed)")
    c, t = total.recall()
    cu, tu = c - total.recall(ignore=unsure)[0], t - total.recall(ignore=unsure)[1]
    if tu:
        print(f"faces only an uncertain hand label has (featureless heads): {cu}/{tu} covered")


def main() -> None:
    args = parse_args()
    names = available_references(args)
    hand = HandLabels.load(HAND) if "hand" in names and HAND.exists() else None
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    run_args = shlex.split(args.run_args)

    jobs = recall_jobs(args, names, hand)
    reports, sheet, seconds = run_jobs(jobs, args, run_args)
    print(f"\nreferences: {', '.join(names)}; run args: {args.run_args or '(defaults)'}; "
          f"streamdeid time {seconds:.0f} s\n")
    print(table(reports))
    print_headlines(reports[-1])
    contact_sheet(sheet, args.out / "misses.png")
    (args.out / "recall.json").write_text(json.dumps({
        "references": names, "run_args": args.run_args, "streamdeid_seconds": round(seconds, 1),
        "media": [r.to_json() for r in reports]}, indent=1))
    print(f"\nJSON: {args.out / 'recall.json'}" + (f"; missed faces: {args.out / 'misses.png'}" if sheet else ""))


if __name__ == "__main__":
    main()
