"""Periodic live statistics: input/output fps, drops, faces, latency.

One human-readable line on stderr, or JSON lines (to a file or stderr) for
monitoring. Rates and latency are over the last interval; counts are totals.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import IO


class LiveStats:
    def __init__(self, interval: float, json_target: str | None = None,
                 clock=time.monotonic, stream: IO[str] | None = None) -> None:
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        self._stream = stream if stream is not None else sys.stderr
        self._json = json_target is not None
        self._file: IO[str] | None = None
        if json_target not in (None, "-", "stderr"):
            self._file = Path(json_target).open("a", encoding="utf-8", buffering=1)
        self.started = clock()
        self._last_report = self.started
        self.frames_in = 0
        self.frames_out = 0
        self.faces = 0
        self._win_in = 0
        self._win_out = 0
        self._win_faces = 0
        self._win_lat: list[float] = []
        self.latencies: list[float] = []  # every emitted frame's latency (bounded below)
        self.reports: list[dict] = []

    MAX_KEPT = 200_000  # latency samples kept for the summary (about 2 h at 30 fps)

    def frame_in(self) -> None:
        with self._lock:
            self.frames_in += 1
            self._win_in += 1

    def frame_out(self, faces: int, latency: float) -> None:
        with self._lock:
            self.frames_out += 1
            self.faces += faces
            self._win_out += 1
            self._win_faces += faces
            self._win_lat.append(latency)
            if len(self.latencies) < self.MAX_KEPT:
                self.latencies.append(latency)

    def maybe_report(self, dropped: int, reconnects: int, connected: bool, force: bool = False) -> dict | None:
        now = self.clock()
        if not force and (self.interval <= 0 or now - self._last_report < self.interval):
            return None
        with self._lock:
            dt = max(1e-6, now - self._last_report)
            lat = sorted(self._win_lat)
            rec = {
                "time": round(time.time(), 3),
                "uptime": round(now - self.started, 2),
                "input_fps": round(self._win_in / dt, 2),
                "output_fps": round(self._win_out / dt, 2),
                "frames_in": self.frames_in,
                "frames_out": self.frames_out,
                "dropped": dropped,
                "faces": self._win_faces,
                "faces_total": self.faces,
                "latency_mean": round(sum(lat) / len(lat), 3) if lat else None,
                "latency_max": round(lat[-1], 3) if lat else None,
                "reconnects": reconnects,
                "connected": connected,
            }
            self._win_in = self._win_out = self._win_faces = 0
            self._win_lat = []
            self._last_report = now
        self.reports.append(rec)
        if len(self.reports) > 1000:
            del self.reports[:500]
        self._emit(rec)
        return rec

    def _emit(self, rec: dict) -> None:
        if self._json:
            line = json.dumps(rec)
        else:
            lat = "-" if rec["latency_mean"] is None else f"{rec['latency_mean'] * 1000:.0f}/{rec['latency_max'] * 1000:.0f} ms"
            line = (f"[live {rec['uptime']:.0f}s] in {rec['input_fps']:.1f} fps, out {rec['output_fps']:.1f} fps, "
                    f"dropped {rec['dropped']}, faces {rec['faces']}, latency mean/max {lat}, "
                    f"reconnects {rec['reconnects']}{'' if rec['connected'] else ', DISCONNECTED'}")
        target = self._file or self._stream
        try:
            target.write(line + "\n")
            target.flush()
        except (OSError, ValueError):
            pass  # statistics must never stop the stream

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
