"""What a run reports: frames, faces, tracks, fallbacks and per-stage times (``RunSummary``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StageTimes:
    """Accumulated milliseconds per stage (for benchmarks/fps.py)."""

    ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("decode", "detect", "track", "anonymize", "paste", "encode"), 0.0))

    def add(self, stage: str, seconds: float) -> None:
        self.ms[stage] = self.ms.get(stage, 0.0) + seconds * 1000.0


@dataclass
class RunSummary:
    frames: int = 0
    faces: int = 0  # face instances covered (detected + held + backfilled)
    tracks: int = 0
    fallbacks: int = 0  # faces covered by solid fill because the anonymizer failed (or its track leaked)
    leak_fallbacks: int = 0  # tracks the leak guard switched to solid fill (dbaf)
    smallest_face: float | None = None  # face height (px) the detection passes looked for
    scans_skipped: int = 0  # detector runs at which a due small-face scan was put off (FaceStage.scan_gate)
    seconds: float = 0.0
    interrupted: bool = False
    selection: str | None = None  # --keep/--only: what the per-track decisions came to
    decisions: dict = field(default_factory=dict)  # --keep/--only: track id -> evidence (TrackEvidence.summary)
    times: StageTimes = field(default_factory=StageTimes)

    def add(self, other: RunSummary) -> None:
        """Add ``other`` (one file of a folder run) into this total."""
        for name in ("frames", "faces", "tracks", "fallbacks", "leak_fallbacks", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        sizes = [v for v in (self.smallest_face, other.smallest_face) if v is not None]
        self.smallest_face = max(sizes) if sizes else None  # the weakest promise of the folder

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        text = f"{_count(self.frames, 'frame')}, {_count(self.faces, 'face')}, {_count(self.tracks, 'track')}, " \
               f"{self.fps:.1f} fps"
        if self.smallest_face is not None:
            text += f", looked for faces from {self.smallest_face:.0f} px"
        if self.scans_skipped:
            text += f" (small-face scan put off at {self.scans_skipped} detector runs to keep up)"
        if self.fallbacks:
            text += f", {self.fallbacks} faces fell back to solid fill"
        if self.leak_fallbacks:
            text += f", leak guard: {self.leak_fallbacks} track(s) switched to solid fill"
        if self.selection:
            text += f"; {self.selection}"
        return text


def _count(n: int, noun: str) -> str:
    """``1 frame``, ``2 frames``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
