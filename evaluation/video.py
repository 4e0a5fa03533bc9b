"""Video metrics: leak rate, identity stability within a track, flicker.

* Leak rate: :func:`streamdeid.identity.leakcheck.check_video` (every face
  YuNet finds in the original frames at full resolution, compared by SFace with
  the same place in the output; a leak must also beat the blanked-face
  reference, see its docstring). ``plain_matched`` is SFace's threshold alone.
* Identity stability: the pipeline's own tracks (``--export-tracks``); for each
  track, up to ``max_per_track`` of its detected faces, evenly spaced, are
  embedded (SFace, at the original's landmarks) in the output; the share of
  same-track pairs that match each other (one person, one fake identity; higher
  is better). The same share on the original frames is the reference (SFace on
  small video faces does not match a person with himself every time).
* Flicker: for every track present in two consecutive frames, the mean absolute
  change (0..255, all channels) inside its box from frame t-1 to t, in the
  output and in the original; ``ratio`` = output / original (1 = no added flicker).
  A face that moves changes its box, so this counts motion too: an output that
  does not move with the face (a blur, or a drawn face that lags) scores low.
  ``followed`` is the change left after following the original's own motion
  (frame t-1 warped onto t by the original's dense optical flow, Farneback, over
  the box grown by half its size): what the output adds beyond the motion, the
  shimmer of a drawn face (0.9 levels on a still original face, docs/composite.md).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from streamdeid.config import AnonymizeConfig, DetectConfig, PipelineConfig
from streamdeid.detect import create_detector
from streamdeid.identity.leakcheck import check_video
from streamdeid.identity.sface import SFACE_MATCH_THRESHOLD, SFace, align_for_sface, cosine
from .recognizers import box_iou

VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v")


def decode(path: str | Path):
    """BGR frames of the first video stream."""
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            yield frame.to_ndarray(format="bgr24")


def clip_fps(path: str | Path) -> float:
    with av.open(str(path)) as c:
        rate = c.streams.video[0].average_rate
    return float(rate) if rate else 25.0


def write_video(path: str | Path, frames, fps: float = 25.0, crf: int = 12) -> Path:
    """Encode BGR frames to H.264 (for tests and tampered copies)."""
    frames = list(frames)
    h, w = frames[0].shape[:2]
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"crf": str(crf), "preset": "veryfast"}
        for img in frames:
            for pkt in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="bgr24")):
                out.mux(pkt)
        for pkt in stream.encode():
            out.mux(pkt)
    return Path(path)


def anonymize_clip(clip: str | Path, out: str | Path, method: str, tracks: str | Path | None = None,
                   config: PipelineConfig | None = None):
    """Run the streamdeid pipeline on ``clip`` with ``method``; tracks to a JSONL file.
    Returns the run's ``streamdeid.api.RunResult`` (``.output``, ``.summary``)."""
    from streamdeid.api import anonymize

    cfg = config or PipelineConfig()
    cfg.anonymize = AnonymizeConfig(**{**cfg.anonymize.__dict__, "method": method})
    cfg.export_tracks = None if tracks is None else str(tracks)
    cfg.progress = False
    cfg.output.overwrite = True
    return anonymize(str(clip), str(out), cfg)


def leak_metric(original: str | Path, output: str | Path, sface: SFace | None = None) -> dict:
    """Leak rate through ``leakcheck.check_video``, with the frames that leaked."""
    rep = check_video(str(original), str(output), sface=sface)
    per_frame = Counter(c.frame for c in rep.leaks)
    return {
        "frames": rep.frames,
        "faces": rep.faces,
        "leaks": len(rep.leaks),
        "leak_rate": len(rep.leaks) / rep.faces if rep.faces else None,
        "plain_matched": rep.plain_matches / rep.faces if rep.faces else None,
        "max_similarity": None if not rep.faces else rep.max_similarity,
        "leaks_per_frame": {int(k): int(v) for k, v in sorted(per_frame.items())},
    }


def read_tracks(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def original_detections(clip: str | Path) -> list:
    """The pipeline detector's faces in every original frame (gives tracked boxes their landmarks)."""
    det = create_detector(DetectConfig())
    return [det.detect(f) for f in decode(clip)]


def stability_and_flicker(original: str | Path, output: str | Path, tracks: list[dict], detections: list,
                          sface: SFace, *, max_per_track: int = 40) -> dict:
    by_frame: dict[int, list[dict]] = defaultdict(list)
    for r in tracks:
        if r.get("method", "none") != "none":
            by_frame[r["frame"]].append(r)
    wanted = _faces_to_embed(by_frame, detections, max_per_track)

    crops_out: dict[int, list] = defaultdict(list)
    crops_orig: dict[int, list] = defaultdict(list)
    flick_out, flick_orig = [], []
    follow_out, follow_orig = [], []  # the same after following the original's motion
    prev_o = prev_a = None
    prev_tracks: set[int] = set()
    for fi, (fo, fa) in enumerate(zip(decode(original), decode(output))):
        for tid, lm in wanted.get(fi, []):
            crops_orig[tid].append(align_for_sface(fo, lm))
            crops_out[tid].append(align_for_sface(fa, lm))
        cur = {r["track"]: r for r in by_frame.get(fi, [])}
        if prev_o is not None:
            for tid, r in cur.items():
                change = _box_change(r["box"], (prev_o, fo), (prev_a, fa)) if tid in prev_tracks else None
                if change is not None:
                    flick_orig.append(change[0])
                    flick_out.append(change[1])
                    followed = _followed_change(r["box"], (prev_o, fo), (prev_a, fa))
                    if followed is not None:
                        follow_orig.append(followed[0])
                        follow_out.append(followed[1])
        prev_o, prev_a, prev_tracks = fo, fa, set(cur)

    pairs = matched = pairs_ref = matched_ref = 0
    for tid in crops_out:
        if len(crops_out[tid]) < 2:
            continue
        n, m = _matching_pairs(sface, crops_out[tid])
        pairs, matched = pairs + n, matched + m
        n, m = _matching_pairs(sface, crops_orig[tid])
        pairs_ref, matched_ref = pairs_ref + n, matched_ref + m
    return {
        "stability": {"tracks": sum(len(v) >= 2 for v in crops_out.values()), "pairs": pairs,
                      "matched": matched / pairs if pairs else None,
                      "original_matched": matched_ref / pairs_ref if pairs_ref else None,
                      "rule": f"SFace cosine >= {SFACE_MATCH_THRESHOLD}"},
        "flicker": {**_mean_pair(flick_out, flick_orig), "scale": "mean |dI| on 0..255",
                    "followed": _mean_pair(follow_out, follow_orig)},
    }


def _mean_pair(output: list[float], original: list[float]) -> dict:
    """{pairs, output, original, ratio}: the means of two lists of per-pair changes."""
    o = float(np.mean(output)) if output else None
    r = float(np.mean(original)) if original else None
    return {"pairs": len(output), "output": o, "original": r, "ratio": o / r if o is not None and r else None}


def _pooled_pair(parts: list[dict | None]) -> dict:
    """``_mean_pair`` results of several clips pooled (means weighted by pairs; parts without pairs left out)."""
    parts = [p for p in parts if p and p["pairs"]]
    n = sum(p["pairs"] for p in parts)
    o = sum(p["output"] * p["pairs"] for p in parts) / n if n else None
    r = sum(p["original"] * p["pairs"] for p in parts) / n if n else None
    return {"pairs": n, "output": o, "original": r, "ratio": o / r if o is not None and r else None}


def _faces_to_embed(by_frame: dict[int, list[dict]], detections: list,
                    max_per_track: int) -> dict[int, list[tuple[int, np.ndarray]]]:
    """{frame: [(track, landmarks)]}: up to ``max_per_track`` detected faces of each track seen at least
    twice, evenly spaced, with the landmarks of the detection their box matches (tracks carry none)."""
    per_track: dict[int, list[tuple[int, np.ndarray]]] = defaultdict(list)
    for fi, recs in by_frame.items():
        dets = detections[fi] if fi < len(detections) else None
        if dets is None or not len(dets):
            continue
        for r in recs:
            if r["state"] != "detected":
                continue
            ious = box_iou(dets.boxes, np.array(r["box"])[None])[:, 0]
            j = int(ious.argmax())
            if ious[j] >= 0.5:
                per_track[r["track"]].append((fi, dets.landmarks[j]))
    wanted: dict[int, list[tuple[int, np.ndarray]]] = defaultdict(list)
    for tid, items in per_track.items():
        items.sort(key=lambda x: x[0])
        if len(items) < 2:
            continue
        idx = np.unique(np.linspace(0, len(items) - 1, min(max_per_track, len(items))).round().astype(int))
        for i in idx:
            wanted[items[i][0]].append((tid, items[i][1]))
    return wanted


def _clipped(box, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """``box`` (x1, y1, x2, y2) rounded to pixels and clipped to an image of ``shape`` (H, W, ...)."""
    h, w = shape[:2]
    x1, y1, x2, y2 = (int(round(v)) for v in box)
    return max(x1, 0), max(y1, 0), min(x2, w), min(y2, h)


def _box_change(box, original: tuple[np.ndarray, np.ndarray],
                output: tuple[np.ndarray, np.ndarray]) -> tuple[float, float] | None:
    """Mean absolute change inside ``box`` from the previous frame to this one, in the original and in
    the output (each a (previous, current) pair); None when the box, clipped to the frame, is too small."""
    x1, y1, x2, y2 = _clipped(box, original[1].shape)
    if x2 - x1 < 2 or y2 - y1 < 2:
        return None
    sl = (slice(y1, y2), slice(x1, x2))
    return tuple(float(np.abs(cur[sl].astype(np.int16) - prev[sl].astype(np.int16)).mean())
                 for prev, cur in (original, output))


def _followed_change(box, original: tuple[np.ndarray, np.ndarray],
                     output: tuple[np.ndarray, np.ndarray]) -> tuple[float, float] | None:
    """Like ``_box_change``, after following the original's own motion: the previous frame of each is warped
    onto this one by the dense optical flow (Farneback) of the original over ``box`` grown by half its size, so
    a face that moves, and an output that moves with it, change little; what is left is what the output adds."""
    h, w = original[1].shape[:2]
    x1, y1, x2, y2 = _clipped(box, original[1].shape)
    if x2 - x1 < 8 or y2 - y1 < 8:
        return None
    pad = (max(x2 - x1, y2 - y1) + 1) // 2
    X1, Y1, X2, Y2 = max(x1 - pad, 0), max(y1 - pad, 0), min(x2 + pad, w), min(y2 + pad, h)
    grey = [cv2.cvtColor(f[Y1:Y2, X1:X2], cv2.COLOR_BGR2GRAY) for f in original]  # previous, current
    flow = cv2.calcOpticalFlowFarneback(grey[1], grey[0], None, 0.5, 3, 15, 3, 5, 1.2, 0)  # [H, W, 2]: cur -> prev
    gx, gy = np.meshgrid(np.arange(X2 - X1, dtype=np.float32), np.arange(Y2 - Y1, dtype=np.float32))
    mx, my = gx + flow[..., 0], gy + flow[..., 1]
    sl = (slice(y1 - Y1, y2 - Y1), slice(x1 - X1, x2 - X1))
    out = []
    for prev, cur in (original, output):
        moved = cv2.remap(prev[Y1:Y2, X1:X2], mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        out.append(float(np.abs(cur[Y1:Y2, X1:X2][sl].astype(np.int16) - moved[sl].astype(np.int16)).mean()))
    return out[0], out[1]


def _matching_pairs(sface: SFace, crops: list) -> tuple[int, int]:
    """(pairs, pairs SFace matches) among one track's aligned crops."""
    e = sface.embed(np.stack(crops))
    sim = np.asarray(cosine(e[:, None, :], e[None, :, :]))
    iu = np.triu_indices(len(e), 1)
    return len(iu[0]), int((sim[iu] >= SFACE_MATCH_THRESHOLD).sum())


def evaluate_clip(clip: str | Path, method: str, workdir: str | Path, sface: SFace, *,
                  detections: list | None = None, config: PipelineConfig | None = None) -> dict:
    """Anonymize ``clip`` with ``method`` and measure leaks, stability and flicker."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    stem = Path(clip).stem
    out = workdir / f"{stem}_{method}.mp4"
    tracks = workdir / f"{stem}_{method}.tracks.jsonl"
    anonymize_clip(clip, out, method, tracks, config)
    detections = detections if detections is not None else original_detections(clip)
    res = {"clip": Path(clip).name, "method": method, "output": str(out)}
    res["leak"] = leak_metric(clip, out, sface)
    res.update(stability_and_flicker(clip, out, read_tracks(tracks), detections, sface))
    return res


def pool(results: list[dict]) -> dict:
    """Pool per-clip results of one method (counts summed, rates re-derived, means weighted)."""
    faces = sum(r["leak"]["faces"] for r in results)
    leaks = sum(r["leak"]["leaks"] for r in results)
    plain = sum((r["leak"]["plain_matched"] or 0) * r["leak"]["faces"] for r in results)
    pairs = sum(r["stability"]["pairs"] for r in results)
    st = sum((r["stability"]["matched"] or 0) * r["stability"]["pairs"] for r in results)
    fp = [r["flicker"] for r in results if r["flicker"]["pairs"]]
    ref_pairs = [r for r in results if r["stability"]["original_matched"] is not None]
    return {
        "clips": len(results), "frames": sum(r["leak"]["frames"] for r in results),
        "leak": {"faces": faces, "leaks": leaks, "leak_rate": leaks / faces if faces else None,
                 "plain_matched": plain / faces if faces else None},
        "stability": {"pairs": pairs, "matched": st / pairs if pairs else None,
                      "original_matched": (sum(r["stability"]["original_matched"] * r["stability"]["pairs"]
                                               for r in ref_pairs) / pairs) if pairs and ref_pairs else None},
        "flicker": {**_pooled_pair(fp), "followed": _pooled_pair([f.get("followed") for f in fp])},
    }
