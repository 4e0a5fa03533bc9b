"""``--export-tracks``: one JSON line per frame and track, for audits and review."""

from __future__ import annotations

import json
from pathlib import Path

from .render import PastedFace
from .types import FrameResult


class TrackExporter:
    """Writes a JSONL record per covered face: box, score, state and the method used."""

    def __init__(self, path: str | Path) -> None:
        self._fh = open(path, "w", encoding="utf-8")

    def __call__(self, result: FrameResult, pasted: list[PastedFace]) -> None:
        methods = {id(p.face): p.method for p in pasted}
        frame = result.frame
        for face in result.faces:
            record = {
                "frame": frame.index,
                "pts": frame.pts,
                "time": frame.seconds,
                "track": face.track_id,
                "box": [round(float(v), 1) for v in face.box],
                "score": round(float(face.score), 4),
                "state": face.state,
                # A face whose crop lies wholly outside the frame pastes nothing.
                "method": methods.get(id(face), "none"),
            }
            self._fh.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self._fh.close()
