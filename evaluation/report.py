"""Quality report output: JSON (``inf`` as the string "inf"), a markdown table and a PNG figure (OpenCV drawing)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import numpy as np


def jsonable(x):
    """Drop private keys (``_examples``), turn numpy values into Python and non-finite floats into strings."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items() if not str(k).startswith("_")}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else ("inf" if x > 0 else "-inf" if x < 0 else "nan")
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")


def pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def num(v, fmt: str = "{:.3f}") -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return fmt.format(v)


def _get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def face_table(set_name: str, set_info: dict, rows: list[dict], vault: dict | None) -> list[str]:
    out = [f"### Faces: {set_name} ({set_info.get('faces', 0)} faces in {set_info.get('images', 0)} images"
           + (f", {len(set_info['no_face'])} images without a detectable face skipped" if set_info.get("no_face") else "")
           + ")", "",
           "| method | SFace matched ↓ | SFace beyond context ↓ | dlib matched ↓ | YuNet detected | YuNet IoU / NME "
           "| dlib detected | dlib IoU / NME | recovered (SFace, PSNR dB, SSIM) | wrong key matched ↓ | diversity matched ↓ |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]

    def rec_cell(r):
        if not r or not r.get("applicable"):
            return "n/a", "n/a"
        right, wrong = r["right_key"], r["wrong_key"]
        rc = (f"{pct(_get(right, 'sface', 'matched'))}, {num(_get(right, 'pixels', 'psnr'), '{:.1f}')}, "
              f"{num(_get(right, 'pixels', 'ssim'))}") if "pixels" in right else pct(right.get("recovered"))
        wc = pct(_get(wrong, "sface", "matched")) if "sface" in wrong else f"{pct(wrong.get('recovered'))} recovered"
        return rc, wc

    for r in rows:
        a, u = r["anonymization"], r["utility"]
        rc, wc = rec_cell(r.get("recovery"))
        div = r.get("diversity", {})
        out.append("| " + " | ".join([
            r["label"], pct(_get(a, "sface", "matched")), pct(_get(a, "sface", "matched_beyond_context")),
            pct(_get(a, "dlib", "matched")),
            pct(_get(u, "yunet", "detected")),
            f"{num(_get(u, 'yunet', 'box_iou'), '{:.2f}')} / {num(_get(u, 'yunet', 'landmark_nme'))}",
            pct(_get(u, "dlib", "detected")),
            f"{num(_get(u, 'dlib', 'box_iou'), '{:.2f}')} / {num(_get(u, 'dlib', 'landmark_nme'))}",
            rc, wc, pct(_get(div, "sface", "matched")) if div.get("applicable") else "n/a",
        ]) + " |")
    if vault and vault.get("applicable"):
        rc, wc = rec_cell(vault)
        out.append(f"| vault (any method) | | | | | | | | {rc} | {wc} | n/a |")
    return out + [""]


def _followed_cell(f: dict | None) -> str:
    if not f:
        return "-"
    return f"{num(f['output'], '{:.2f}')} / {num(f['original'], '{:.2f}')} ({num(f['ratio'], '{:.2f}')})"


def video_table(rows: list[dict]) -> list[str]:
    out = ["### Videos", "",
           "| method | clips / frames | faces | leaks | leak rate ↓ | SFace plain matched | same-track pairs matched "
           "(original) | flicker out / orig (ratio) | shimmer: flicker after the face's motion, out / orig (ratio) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["pooled"]
        out.append("| " + " | ".join([
            r["method"], f"{p['clips']} / {p['frames']}", str(p["leak"]["faces"]), str(p["leak"]["leaks"]),
            pct(p["leak"]["leak_rate"]), pct(p["leak"]["plain_matched"]),
            f"{pct(p['stability']['matched'])} ({pct(p['stability']['original_matched'])})",
            f"{num(p['flicker']['output'], '{:.2f}')} / {num(p['flicker']['original'], '{:.2f}')} "
            f"({num(p['flicker']['ratio'], '{:.2f}')})",
            _followed_cell(p["flicker"].get("followed")),
        ]) + " |")
    return out + [""]


def markdown(report: dict) -> str:
    lines = ["# streamdeid quality report", ""]
    m = report["meta"]
    lines += [f"Recognizers: {', '.join(f'{k} ({v})' for k, v in m['recognizers'].items())}"
              + (f"; skipped: {', '.join(f'{k}: {v}' for k, v in m['skipped_recognizers'].items())}"
                 if m.get("skipped_recognizers") else "") + ".",
              f"Pixels: {m['pixel_range']}. Anonymized faces are embedded at the original's geometry; "
              "'beyond context' also requires SFace to beat the original with its face blanked by "
              f"{m['beyond_context_margin']}. Detection counts at box IoU >= 0.5; NME = mean 5-point error / eye distance. "
              "'none' is the identity reference (nothing hidden).", ""]
    for name, fs in report["faces"].items():
        lines += face_table(name, fs["set"], fs["methods"], fs.get("vault"))
    if report.get("videos"):
        lines += video_table(report["videos"]["methods"])
    lines += [f"Runtime: {report['meta']['seconds']:.0f} s.", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- figure

PALETTE = [(180, 119, 31), (14, 127, 255), (44, 160, 44), (40, 39, 214), (189, 103, 148), (75, 86, 140)]


def _text(img, s, org, scale=0.45, color=(30, 30, 30), thick=1):
    cv2.putText(img, s, org, cv2.FONT_HERSHEY_SIMPLEX, scale, color, thick, cv2.LINE_AA)


def bar_panel(metrics: list[tuple[str, dict[str, float | None]]], methods: list[str], width: int = 1200,
              height: int = 300) -> np.ndarray:
    """Grouped bars: one group per metric (values in [0, 1], labelled), one colour per method."""
    img = np.full((height, width, 3), 255, np.uint8)
    top, bottom, left = 40, height - 60, 40
    plot_h = bottom - top
    cv2.line(img, (left, bottom), (width - 10, bottom), (0, 0, 0), 1)
    for frac in (0.25, 0.5, 0.75, 1.0):
        y = int(bottom - frac * plot_h)
        cv2.line(img, (left, y), (width - 10, y), (225, 225, 225), 1)
        _text(img, f"{frac:.2f}", (2, y + 4), 0.35)
    n = max(len(metrics), 1)
    gw = (width - left - 10) / n
    bw = max(4, int(gw * 0.8 / max(len(methods), 1)))
    for gi, (mname, vals) in enumerate(metrics):
        x0 = int(left + gi * gw + gw * 0.1)
        for mi, meth in enumerate(methods):
            v = vals.get(meth)
            x = x0 + mi * bw
            if v is None:
                _text(img, "n/a", (x, bottom - 4), 0.3, (120, 120, 120))
                continue
            h = int(min(max(v, 0.0), 1.0) * plot_h)
            cv2.rectangle(img, (x, bottom - h), (x + bw - 2, bottom), PALETTE[mi % len(PALETTE)], -1)
            _text(img, f"{v:.2f}", (x, bottom - h - 3), 0.3)
        for k, line in enumerate(mname.split("\n")):
            _text(img, line, (x0, bottom + 16 + 14 * k), 0.38)
    x = left
    for mi, meth in enumerate(methods):
        cv2.rectangle(img, (x, 10), (x + 14, 24), PALETTE[mi % len(PALETTE)], -1)
        _text(img, meth, (x + 18, 22), 0.45)
        x += 30 + 9 * len(meth)
    return img


def face_grid(columns: list[tuple[str, np.ndarray | None]], cell: int = 96, rows: int = 6) -> np.ndarray:
    """Columns of face crops (label, [N, S, S, 3] or None = n/a)."""
    rows = min(rows, max((len(c) for _, c in columns if c is not None), default=0))
    head = 22
    img = np.full((head + rows * (cell + 4), len(columns) * (cell + 4) + 4, 3), 255, np.uint8)
    for ci, (label, crops) in enumerate(columns):
        x = 4 + ci * (cell + 4)
        _text(img, label[:16], (x, 15), 0.38)
        for ri in range(rows):
            y = head + ri * (cell + 4)
            if crops is None or ri >= len(crops):
                cv2.rectangle(img, (x, y), (x + cell, y + cell), (235, 235, 235), -1)
                _text(img, "n/a", (x + cell // 2 - 12, y + cell // 2), 0.4, (120, 120, 120))
                continue
            img[y:y + cell, x:x + cell] = cv2.resize(crops[ri], (cell, cell), interpolation=cv2.INTER_AREA)
    return img


def figure(panels: list[np.ndarray]) -> np.ndarray:
    w = max(p.shape[1] for p in panels)
    padded = [cv2.copyMakeBorder(p, 0, 8, 0, w - p.shape[1], cv2.BORDER_CONSTANT, value=(255, 255, 255)) for p in panels]
    return np.vstack(padded)
