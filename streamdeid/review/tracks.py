"""Where the review page's tracks come from.

1. The run's audit log (``streamdeid run --export-tracks X.jsonl``, streamdeid/audit.py): one line per
   frame and track with its box, score, state and method, then one line per --keep/--only decision. It
   is taken from ``--tracks``, else from beside the output (``find_audit_log``). These are the run's own
   covers, exactly.
2. Without one, and with ``--source``: detection and tracking run again, in process, on the source
   (``track_source``: ``FaceStage`` and the look-ahead's back-fill, as ``Pipeline`` runs them). The run is
   deterministic, so with the run's detection options (review takes the same flags: --threshold,
   --detect-every, --detect-size, --min-face, --hold, --remember, --rejoin, --lookahead) these are the run's tracks;
   what --keep/--only left visible is not replayed (their evidence is in the audit log). A run's --edits are
   applied too (``track_source(edits=...)``) when the output's tag names them (review/session.py).

A cover's box is the tracked box; the pasted region is that box grown by the mask's margin and feather.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import PipelineConfig
from ..edits import EditPlan, Edits, decide_removals
from ..types import StreamdeidError

# Looked for beside OUT (in this order) when --tracks is not given: OUT.tracks.jsonl, then STEM.tracks.jsonl,
# STEM_tracks.jsonl and STEM.jsonl, where STEM is OUT without its extension.
AUDIT_NAMES = ("{name}.tracks.jsonl", "{stem}.tracks.jsonl", "{stem}_tracks.jsonl", "{stem}.jsonl")


@dataclass
class Cover:
    """One track on one frame."""

    frame: int
    track: int
    box: tuple[float, float, float, float]  # x1 y1 x2 y2, source pixels
    score: float
    state: str  # detected | held | backfilled
    method: str = ""  # the anonymizer that pasted it (audit log only); "kept": left visible; "none": nothing
    matched: bool = False  # held/back-filled on the face's own pixels (template found), not widened


@dataclass
class Tracks:
    covers: list[Cover]
    origin: str  # "audit log PATH" | "tracking pass on SOURCE"
    decisions: dict[int, dict] = field(default_factory=dict)  # --keep/--only, from the audit log
    seconds: float = 0.0  # the tracking pass's time (0 for an audit log)
    video_id: str | None = None  # hex, from the audit log's first line (logs before it have none)

    def by_frame(self) -> dict[int, list[Cover]]:
        out: dict[int, list[Cover]] = {}
        for c in self.covers:
            out.setdefault(c.frame, []).append(c)
        return out

    def by_track(self) -> dict[int, list[Cover]]:
        out: dict[int, list[Cover]] = {}
        for c in self.covers:
            out.setdefault(c.track, []).append(c)
        return out


def find_audit_log(output: Path) -> Path | None:
    for pattern in AUDIT_NAMES:
        candidate = output.with_name(pattern.format(name=output.name, stem=output.stem))
        if candidate.is_file():
            return candidate
    return None


def read_audit_log(path: Path) -> Tracks:
    covers: list[Cover] = []
    decisions: dict[int, dict] = {}
    video_id = None
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    if "video_id" in rec and "frame" not in rec:
                        video_id = str(rec["video_id"])
                        continue
                    if "decision" in rec:
                        decisions[int(rec["track"])] = rec["decision"]
                        continue
                    box = tuple(float(v) for v in rec["box"])
                    if len(box) != 4:
                        raise ValueError("box")
                    covers.append(Cover(int(rec["frame"]), int(rec["track"]), box, float(rec["score"]),
                                        str(rec["state"]), str(rec.get("method", "")), bool(rec.get("matched"))))
                except (ValueError, KeyError, TypeError) as exc:
                    raise StreamdeidError(f"{path}:{n}: not an audit log line of `streamdeid run --export-tracks` "
                                          f"({type(exc).__name__}: {exc})") from None
    except UnicodeDecodeError:  # a key file or a video given as --tracks
        raise StreamdeidError(f"{path}: not an audit log of `streamdeid run --export-tracks` (not text)") from None
    except OSError as exc:
        raise StreamdeidError(f"cannot read {path}: {exc.strerror or exc}") from None
    return Tracks(covers, f"audit log {path}", decisions, video_id=video_id)


def track_source(source: str, config: PipelineConfig, progress: Callable[[int], None] | None = None,
                 edits: Edits | None = None) -> Tracks:
    """Detection + tracking + back-fill on ``source`` in process: the run's tracks for these options. ``edits``:
    the reviewer's corrections the run applied (--edits), applied as the run applies them (edits/apply.py: a
    first pass decides the removals when there are any; a removed track's faces are "kept", as its audit log
    says)."""
    t0 = time.perf_counter()
    covers: list[Cover] = []

    def take(result) -> None:
        for face, method in [(f, "") for f in result.faces] + [(f, "kept") for f in result.kept]:
            box = tuple(round(float(v), 1) for v in face.box)
            covers.append(Cover(result.frame.index, int(face.track_id), box, round(float(face.score), 4), face.state,
                                method, matched=bool(face.matched)))
        if progress is not None:
            progress(result.frame.index)

    plan = None
    if edits is not None:
        plan = decide_removals(edits, lambda first: _track(source, config, first, None))
    _track(source, config, plan, take)
    origin = f"tracking pass on {source}" + (" with the edits the output was rendered with" if edits else "")
    return Tracks(covers, origin, seconds=time.perf_counter() - t0)


def _track(source: str, config: PipelineConfig, plan: EditPlan | None, take: Callable | None) -> None:
    """``source`` through ``FaceStage`` and the look-ahead as ``Pipeline`` runs them (nothing rendered): each frame
    leaving the look-ahead to ``take`` (None: to none), after ``plan`` resolved and applied its edits."""
    from ..anonymizers import anonymizer_type, guard_every
    from ..lookahead import LookaheadBuffer
    from ..pipeline import flag_last
    from ..stages import FaceStage
    from ..summary import StageTimes
    from ..video.reader import open_source

    # a leak guard on every frame sets the default cadence (config.detect_cadence), as in Pipeline
    guarded = guard_every(config.anonymize, anonymizer_type(config.anonymize.method)) == 1

    def leave(result) -> None:
        if plan is not None:
            plan.resolve(result)  # as Pipeline._take, then _flush
            plan.apply(result)
        if take is not None:
            take(result)

    with open_source(source) as src:
        fps = src.pace  # as the run paced it (run/video.py)
        buffer = LookaheadBuffer.for_run(round(config.lookahead_seconds * fps), config.track)
        stage = FaceStage(config, fps, guarded=guarded, lookahead_frames=buffer.capacity,
                          added=plan.adds if plan is not None else None)
        times = StageTimes()
        for frame, last in flag_last(src.frames()):  # the last frame gets a detector run, as in the run
            for ready in buffer.push(stage(frame, times, step=stage.step(frame.image, last))):
                leave(ready)
        for ready in buffer.drain():
            leave(ready)


def boxes_array(covers: list[Cover]) -> np.ndarray:
    return np.array([c.box for c in covers], np.float64).reshape(-1, 4)
