"""``--export-tracks``: one JSON line per frame and track, for audits and review."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .render import PastedFace
from .types import FrameResult


class TrackExporter:
    """Writes a JSONL record per covered face: box, score, state (and whether a guess was matched) and
    the method used."""

    def __init__(self, path: str | Path, summary=None, video_id: bytes | None = None) -> None:
        """``summary``: the run's RunSummary; its ``decisions`` (--keep/--only) are written at close,
        one ``{"track": id, "decision": {...}}`` line per judged track. ``video_id``: the run's (the output
        carries it too, vault/naming.py): the first line is ``{"video_id": hex}``, so a reader can tell this
        log from one an earlier run of the same output left beside it (review). The lines go to
        ``PATH.partial`` and replace PATH at ``close`` only: a failed or interrupted re-run (--overwrite)
        leaves the earlier log, which is its output's, as it was."""
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self._fh = open(self.partial, "w", encoding="utf-8")
        self.summary = summary
        if video_id is not None:
            self._fh.write(json.dumps({"video_id": video_id.hex()}) + "\n")

    def __call__(self, result: FrameResult, pasted: list[PastedFace]) -> None:
        methods = {id(p.face): p.method for p in pasted}
        methods.update((id(f), "kept") for f in result.kept)  # --keep/--only: left visible
        frame = result.frame
        for face in list(result.faces) + list(result.kept):
            record = {
                "frame": frame.index,
                "pts": frame.pts,
                "time": frame.seconds,
                "track": face.track_id,
                "box": [round(float(v), 1) for v in face.box],
                "score": round(float(face.score), 4),
                "state": face.state,
                # held/backfilled and put on the face's own pixels, not widened (track/appearance.py)
                "matched": face.matched,
                # A face whose crop lies wholly outside the frame pastes nothing.
                "method": methods.get(id(face), "none"),
            }
            self._fh.write(json.dumps(record) + "\n")

    def close(self, publish: bool = True, discard: bool = False) -> None:
        """Finish the log: ``publish`` moves it to its path; else it stays at ``partial`` (an interrupted
        run's, beside its partial output), or with ``discard`` (a failed run's) is removed."""
        if self._fh.closed:
            return
        decisions = self.summary.decisions if self.summary is not None else {}
        for track_id, decision in sorted(decisions.items()):
            self._fh.write(json.dumps({"track": track_id, "decision": decision}) + "\n")
        self._fh.close()
        if publish:
            os.replace(self.partial, self.path)
        elif discard:
            self.partial.unlink(missing_ok=True)
