"""What a run returns (``RunResult``), and what every kind of run adds to its frames (the audit log)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..audit import TrackExporter
from ..config import PipelineConfig
from ..summary import RunSummary
from .outcome import FileOutcome


@dataclass
class RunResult:
    output: Path | str  # a str for a stream output (stdout, a push URL)
    summary: RunSummary  # a live feed's is a LiveSummary (segments, drops, reconnects, latency)
    vault: Path | None = None  # None: irreversible output (no key file, --no-vault, a still or a stream)
    files: list[FileOutcome] = field(default_factory=list)  # a folder run: one per file, in order
    segment_vaults: list[Path] = field(default_factory=list)  # a live recording: one vault per segment


def track_observers(config: PipelineConfig, summary: RunSummary | None = None, video_id: bytes | None = None):
    """The audit log (with ``summary``: its per-track --keep/--only decisions are written at close; with
    ``video_id``, the run's, its first line names it)."""
    observers, closers = [], []
    if config.export_tracks:
        exporter = TrackExporter(config.export_tracks, summary, video_id)
        observers.append(exporter)
        closers.append(exporter.close)
    return observers, closers
