#!/usr/bin/env python
"""Quality of streamdeid's anonymizers: privacy, recovery, diversity, utility, video.

    python benchmarks/quality.py --anonymizers blur,mosaic,solid --limit 200 --out quality-report

Writes ``quality.json``, ``quality.md`` (tables) and ``quality.png`` (bars per
metric per method and a grid of original / anonymized / recovered / wrong-key
faces) to ``--out``. Face sets: ``--faces DIR`` (default: the held-out UTKFace
split, ``evaluation/heldout_utkface.txt``) and ``--stills DIR`` (default:
the photos in ../shared/media); videos: ``--videos`` (default: the clips in
../shared/media; ``--videos none`` skips them). What each number means is in
the docstrings of ``evaluation.faces`` and ``evaluation.video``.

A reversible method (``dbaf``) plugs in by name once it is registered with
``streamdeid.anonymizers.register_anonymizer`` and its inverse with
``evaluation.register_recoverer``; keys come from FaceContext.key.
``dbaf`` uses the shipped weights (or ``--model``) with the pipeline's leak
guard, as users get it; ``dbaf-raw`` is the generator alone (leak guard off),
which is what the model card's targets are about.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root, last (a --code tree stays first): evaluation/
from streamdeid.anonymizers import AnonymizerBase, create_anonymizer
from streamdeid.config import AnonymizeConfig, PipelineConfig
from evaluation import PIXEL_RANGE, EvalKeys, create_recognizers, create_recoverer, heldout_files
from evaluation.faces import FaceEvaluator, image_files, load_face_set
from evaluation.report import bar_panel, face_grid, figure, markdown, write_json
from streamdeid.identity.leakcheck import EXCESS_MARGIN
from streamdeid.types import StreamdeidError

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
UTK = SHARED / "datasets" / "utkface-crops" / "images"
MEDIA = SHARED / "media"


class IdentityAnonymizer(AnonymizerBase):
    """Reference 'anonymizer' that changes nothing (what the metrics say when no face is hidden)."""

    name = "none"

    def __call__(self, crops, contexts=None):
        return np.array(crops, copy=True)


def method_config(spec: str, model: str | None) -> AnonymizeConfig:
    """``blur`` etc.; ``NAME-raw``: NAME with the leak guard off; ``--model`` applies to dbaf."""
    name, raw = (spec[:-4], True) if spec.endswith("-raw") else (spec, False)
    cfg = AnonymizeConfig(method=name, leak_guard=not raw)
    if name == "dbaf" and model:
        cfg.model_path = model
    return cfg


def bar(it=None, **kw):
    return tqdm(it, dynamic_ncols=True, **kw)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--anonymizers", default="blur,mosaic,solid",
                    help="comma-separated method names; NAME-raw turns the leak guard off (e.g. dbaf-raw)")
    ap.add_argument("--model", help="dbaf: generator file (default: the shipped weights)")
    ap.add_argument("--faces", default=None, help="folder of face images (default: held-out UTKFace split)")
    ap.add_argument("--pad", type=float, default=0.25,
                    help="black border (fraction of the image) around --faces images; tight crops need it (default 0.25)")
    ap.add_argument("--stills", default=None, help="folder of photos, all faces used, no padding (default: ../shared/media; 'none' skips)")
    ap.add_argument("--limit", type=int, default=200, help="at most this many faces from --faces")
    ap.add_argument("--videos", nargs="*", default=None, help="video files or folders (default: ../shared/media clips; 'none' skips)")
    ap.add_argument("--recognizers", default="sface,dlib")
    ap.add_argument("--no-baseline", action="store_true", help="omit the identity reference row ('none')")
    ap.add_argument("--out", default="quality-report", help="output folder")
    ap.add_argument("--keep-videos", action="store_true", help="keep the anonymized clips (in --out/videos)")
    ap.add_argument("--video-runs", type=int, default=1,
                    help="anonymize every clip this many times and pool them (clips and frames count each run): "
                         "a composite run draws its faces anew each time, and its leak count moves with them")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--seed", type=int, default=0, help="seed of the evaluation keys")
    args = ap.parse_args(argv)
    if args.video_runs < 1:
        ap.error("--video-runs must be at least 1")
    return args


def build_anonymizers(methods: list[str], model: str | None) -> dict | None:
    """{method: (anonymizer, config, recoverer)}; None (after printing why) when one cannot be made."""
    anonymizers = {}
    for m in methods:
        cfg = method_config(m, model)
        try:
            anonymizer = create_anonymizer(cfg)
            anonymizers[m] = (anonymizer, cfg, create_recoverer(cfg, anonymizer))
        except StreamdeidError as exc:
            print(f"error: {m}: {exc}", file=sys.stderr)
            return None
    return anonymizers


def face_sets(args) -> list[tuple[str, list[Path], float, bool]]:
    """(name, image paths, pad, largest face only) per face set: --faces (or held-out UTKFace), then --stills."""
    sets = []
    if args.faces:
        sets.append((Path(args.faces).name, image_files(args.faces), args.pad, True))
    elif UTK.is_dir():
        sets.append(("utkface-heldout", heldout_files(UTK), args.pad, True))
    else:
        print(f"note: {UTK} not found; pass --faces DIR", file=sys.stderr)
    stills = None if args.stills == "none" else Path(args.stills) if args.stills else (MEDIA if MEDIA.is_dir() else None)
    if stills:
        sets.append((f"stills ({stills.name})", image_files(stills), 0.0, False))
    return sets


def evaluate_face_sets(sets, args, anonymizers: dict, recognizers, keys: EvalKeys, report: dict) -> list:
    """Every method on every face set, into ``report["faces"]``; returns the (name, rows) the figure's grids use."""
    grids = []
    for name, paths, pad, largest in sets:
        fs = load_face_set(name, paths, limit=args.limit if largest else None, largest_only=largest, pad=pad,
                           progress=lambda it: bar(it, desc=f"{name}: detect", leave=False))
        if not fs.faces:
            print(f"note: no faces found in {name}", file=sys.stderr)
            continue
        ev = FaceEvaluator(fs, recognizers, keys=keys, progress=bar)
        rows = []
        todo = ([] if args.no_baseline else [("none", IdentityAnonymizer(), AnonymizeConfig(method="none"), None)])
        todo += [(m, a, c, r) for m, (a, c, r) in anonymizers.items()]
        for label, anon, cfg, rec in bar(todo, desc=f"{name}: methods"):
            res = ev.evaluate(anon, cfg, rec)
            res["label"] = label
            rows.append(res)
        report["faces"][name] = {"set": {"faces": len(fs.faces), "images": len(fs.images), "pad": pad,
                                         "no_face": fs.no_face, "files": [p.name for p in fs.paths]},
                                 "methods": rows, "vault": ev.vault()}
        grids.append((name, rows))
    return grids


def video_files(videos: list[str] | None) -> list[Path]:
    """--videos as files: None is the shared media's clips, ['none'] none, folders are listed."""
    if videos is None:
        return sorted(MEDIA.glob("*.mp4")) if MEDIA.is_dir() else []
    paths: list[Path] = []
    if videos != ["none"]:
        for v in videos:
            p = Path(v)
            paths += sorted(q for q in p.iterdir() if q.suffix.lower() in (".mp4", ".mov", ".mkv", ".avi", ".webm")) if p.is_dir() else [p]
    return paths


def evaluate_videos(video_paths: list[Path], methods: list[str], anonymizers: dict, sface, args, out: Path) -> dict:
    """The ``report["videos"]`` section: every method on every clip, pooled per method."""
    from evaluation.video import evaluate_clip, original_detections, pool

    work = out / "videos" if args.keep_videos else Path(tempfile.mkdtemp(prefix="sdeid-quality-"))
    # originals are detected once, not once per method
    dets = {str(c): original_detections(c) for c in bar(video_paths, desc="videos: detect originals", leave=False)}
    # per method, per run: every clip's result (a composite run draws its faces anew: --video-runs)
    per_run = {m: [[] for _ in range(args.video_runs)] for m in methods}
    for run in range(args.video_runs):
        for clip in bar(video_paths, desc="videos" if args.video_runs == 1 else f"videos, run {run + 1}"):
            for m in methods:
                pcfg = PipelineConfig(anonymize=anonymizers[m][1])
                per_run[m][run].append(evaluate_clip(clip, pcfg.anonymize.method, work / m / f"run{run}", sface,
                                                     detections=dets[str(clip)], config=pcfg))
    vrows = [{"method": m, "pooled": pool([r for runs in per_run[m] for r in runs]), "runs": args.video_runs,
              "per_run": [pool(runs) for runs in per_run[m]], "clips": [r for runs in per_run[m] for r in runs]}
             for m in methods]
    if not args.keep_videos:
        shutil.rmtree(work, ignore_errors=True)
    return {"files": [str(p) for p in video_paths], "methods": vrows}


def write_outputs(out: Path, report: dict, grids) -> None:
    write_json(out / "quality.json", report)
    md = markdown(report)
    (out / "quality.md").write_text(md, encoding="utf-8")
    cv2.imwrite(str(out / "quality.png"), make_figure(report, grids))
    print(md)
    print(f"wrote {out / 'quality.json'}, {out / 'quality.md'}, {out / 'quality.png'}")


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cv2.setNumThreads(args.threads)
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    methods = [m.strip() for m in args.anonymizers.split(",") if m.strip()]
    anonymizers = build_anonymizers(methods, args.model)
    if anonymizers is None:
        return 1

    from streamdeid.identity import SFace
    sface = SFace(threads=args.threads)
    recognizers, skipped = create_recognizers(tuple(r.strip() for r in args.recognizers.split(",")), sface=sface)
    for k, v in skipped.items():
        print(f"note: recognizer {k} skipped: {v}", file=sys.stderr)
    keys = EvalKeys(args.seed)
    sets = face_sets(args)

    report = {"meta": {"methods": methods, "recognizers": {r.name: r.rule for r in recognizers},
                       "skipped_recognizers": skipped, "pixel_range": PIXEL_RANGE,
                       "beyond_context_margin": EXCESS_MARGIN, "limit": args.limit, "pad": args.pad},
              "faces": {}}
    grids = evaluate_face_sets(sets, args, anonymizers, recognizers, keys, report)
    video_paths = video_files(args.videos)
    if video_paths:
        report["videos"] = evaluate_videos(video_paths, methods, anonymizers, sface, args, out)

    report["meta"]["seconds"] = time.perf_counter() - t0
    write_outputs(out, report, grids)
    return 0


def make_figure(report: dict, grids) -> np.ndarray:
    panels = []
    for name, rows in grids:
        labels = [r["label"] for r in rows]

        def col(path, rows=rows):
            vals = {}
            for r in rows:
                d = r
                for p in path:
                    d = d.get(p) if isinstance(d, dict) else None
                vals[r["label"]] = d
            return vals

        metrics = [("SFace\nmatched (low)", col(("anonymization", "sface", "matched"))),
                   ("SFace beyond\ncontext (low)", col(("anonymization", "sface", "matched_beyond_context"))),
                   ("dlib\nmatched (low)", col(("anonymization", "dlib", "matched"))),
                   ("YuNet\ndetected", col(("utility", "yunet", "detected"))),
                   ("dlib\ndetected", col(("utility", "dlib", "detected"))),
                   ("recovered\n(SFace)", col(("recovery", "right_key", "sface", "matched"))),
                   ("diversity\nmatched (low)", col(("diversity", "sface", "matched")))]
        p = bar_panel(metrics, labels)
        cv2.putText(p, f"faces: {name}", (p.shape[1] - 420, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
        panels.append(p)
        columns = [("original", rows[0]["_examples"]["original"])]
        for r in rows:
            ex = r["_examples"]
            columns.append((r["label"], ex["anonymized"]))
            if ex["recovered"] is not None:
                columns += [(f"{r['label']} recovered", ex["recovered"]), (f"{r['label']} wrong key", ex["wrong_key"])]
        panels.append(face_grid(columns, rows=6 if "utk" in name else 4))
    if report.get("videos"):
        vm = report["videos"]["methods"]
        labels = [r["method"] for r in vm]
        metrics = [("video leak\nrate (low)", {r["method"]: r["pooled"]["leak"]["leak_rate"] for r in vm}),
                   ("SFace plain\nmatched (low)", {r["method"]: r["pooled"]["leak"]["plain_matched"] for r in vm}),
                   ("same-track\npairs matched", {r["method"]: r["pooled"]["stability"]["matched"] for r in vm}),
                   ("flicker ratio\n(out/orig, cap 1)", {r["method"]: r["pooled"]["flicker"]["ratio"] for r in vm})]
        p = bar_panel(metrics, labels, width=700)
        cv2.putText(p, "videos", (600, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
        panels.append(p)
    if not panels:
        return np.full((50, 300, 3), 255, np.uint8)
    return figure(panels)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except StreamdeidError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
