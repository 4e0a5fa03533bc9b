"""Who stays visible: ``--keep`` and ``--only`` decided per track, failing closed.

Evidence is SFace cosine similarity between a track's face and the reference
photos (the best over all references), taken on *judged* frames only: frames
where the track was detected (not held or back-filled), the face is at least
``MIN_JUDGE_PX`` tall and its landmarks fit the face. Small, blurred or
turned-away faces give no evidence, never evidence for keeping.

keep (the listed people stay visible, everyone else is anonymized):
    a track becomes visible after ``CONFIRM`` consecutive judged frames at or
    above ``KEEP_THRESHOLD``; any judged frame below it covers the track again
    at once (an ID switch after an occlusion), until it is confirmed anew, and
    so does the track's return after frames it was not reported (``resumed``:
    the tracker remembers a lost track for a second, and another person may
    have stepped where it was lost); a visible track that goes
    ``STALE_SECONDS`` without a judged frame is covered until it is judged
    again.
only (only the listed people are anonymized):
    a track stays anonymized until ``CONFIRM`` judged frames say it is *not* a
    listed person (all below ``ONLY_THRESHOLD``); one judged frame at or above
    it anonymizes the track for good.

Thresholds, measured (``python benchmarks/keep.py``): SFace similarities of
different people on the held-out UTKFace split (460 faces, 105,570 pairs):
3.3% of pairs reach OpenCV's 0.363, 0.22% reach 0.55, 0.066% reach 0.6.
``KEEP_THRESHOLD`` = 0.6 keeps a stranger's still photo in under 0.1% of
pairs, and a video track needs it on 3 judged frames in a row.
``ONLY_THRESHOLD`` = 0.3 (5.3% of strangers' pairs reach it: they stay
anonymized, which is the safe side).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KEEP_THRESHOLD = 0.6
ONLY_THRESHOLD = 0.3
CONFIRM = 3
MIN_JUDGE_PX = 40
STALE_SECONDS = 2.0


@dataclass
class TrackEvidence:
    """What a track's judged frames said; exported with ``--export-tracks``."""

    judged: int = 0
    similarities: list[float] = field(default_factory=list)
    streak: int = 0  # keep: consecutive judged frames >= KEEP_THRESHOLD; only: consecutive below ONLY_THRESHOLD
    streak_start: int = -1  # frame index of the streak's first judged frame
    visible: bool = False
    matched: bool = False  # only: a judged frame matched, anonymized for good
    last_judged: int = -1  # frame index
    last_agreeing: int = -1  # frame index of the last judged frame that agreed with the streak
    # Frames [start, end) the evidence vouches for; end None: open. Rendering may come later than the
    # evidence (file runs look ahead), so a frame is shown only inside an interval, never because the
    # track is visible *now*: a track that switched to the reference person later does not reveal the
    # person it followed before.
    intervals: list[list] = field(default_factory=list)
    # Frames [start, end) the track was left visible on when rendered (``visible`` said so): what the audit log
    # reports. The intervals above are the evidence, which a later match clears (only) or cuts short: reported
    # instead, a listed man left bare on 42 frames read as "visible_frames: []".
    shown: list[list[int]] = field(default_factory=list)

    def summary(self) -> dict:
        s = self.similarities
        return {"judged": self.judged, "best": round(max(s), 3) if s else None,
                "median": round(float(np.median(s)), 3) if s else None, "left_visible": bool(self.shown),
                "visible_frames": [list(iv) for iv in self.shown]}

    def showed(self, frame_index: int) -> None:
        """``frame_index`` was rendered with this track left visible."""
        if self.shown and self.shown[-1][0] <= frame_index < self.shown[-1][1]:
            return
        if self.shown and self.shown[-1][1] == frame_index:
            self.shown[-1][1] += 1
        else:
            self.shown.append([frame_index, frame_index + 1])


class TrackSelector:
    """Per-track visibility from reference similarities. ``mode``: "keep" or "only". ``confirm``: judged
    frames in a row that decide (1 for a still photo, which has no second frame)."""

    def __init__(self, mode: str, references: np.ndarray, *, fps: float = 25.0, confirm: int = CONFIRM) -> None:
        if mode not in ("keep", "only"):
            raise ValueError(f"mode must be keep or only, not {mode!r}")
        self.mode = mode
        self.references = np.asarray(references, np.float32).reshape(-1, 128)  # [R, 128] unit norm
        self.stale_frames = max(1, round(STALE_SECONDS * fps))
        self.confirm = confirm
        self.tracks: dict[int, TrackEvidence] = {}

    def similarity(self, embeddings: np.ndarray) -> np.ndarray:
        """[N, 128] -> [N]: the best cosine over the references."""
        return (np.asarray(embeddings, np.float32) @ self.references.T).max(axis=1)

    def observe(self, track_id: int, frame_index: int, similarity: float) -> None:
        """One judged frame of a track."""
        ev = self.tracks.setdefault(track_id, TrackEvidence())
        ev.judged += 1
        ev.similarities.append(float(similarity))
        ev.last_judged = frame_index
        if self.mode == "keep":
            agrees = similarity >= KEEP_THRESHOLD
        else:
            agrees = similarity < ONLY_THRESHOLD
            if not agrees:
                ev.matched = True
                ev.intervals.clear()  # a listed person: anonymized on every frame not yet rendered
        if not agrees:
            if ev.visible and ev.intervals and ev.intervals[-1][1] is None:
                ev.intervals[-1][1] = ev.last_agreeing + 1  # covered from just after the last good judgement
            ev.streak, ev.visible = 0, False
        else:
            if ev.streak == 0:
                ev.streak_start = frame_index
            ev.streak += 1
            ev.last_agreeing = frame_index
            if ev.streak >= self.confirm and not ev.matched and not ev.visible:
                ev.visible = True
                ev.intervals.append([ev.streak_start, None])

    def resumed(self, track_id: int) -> None:
        """A track reported again after frames without it: covered from just after its last good
        judgement until it is confirmed anew (as after a judged frame that disagrees). An ``only``
        match stays anonymized for good."""
        ev = self.tracks.get(track_id)
        if ev is None:
            return
        if ev.visible and ev.intervals and ev.intervals[-1][1] is None:
            ev.intervals[-1][1] = ev.last_agreeing + 1
        ev.streak, ev.visible = 0, False

    def visible(self, track_id: int, frame_index: int) -> bool:
        """Leave this track's face as it is on this frame? False whenever the evidence is not positive."""
        ev = self.tracks.get(track_id)
        if ev is None:
            return False
        for start, end in ev.intervals:
            if start <= frame_index and (end is None or frame_index < end):
                # an open interval vouches up to STALE_SECONDS past the last judged frame
                if end is not None or frame_index - ev.last_judged <= self.stale_frames:
                    ev.showed(frame_index)
                    return True
                return False
        return False

    def counts(self) -> tuple[int, int]:
        """(tracks left visible at some point, tracks never left visible) among tracks seen."""
        shown = sum(bool(ev.shown) for ev in self.tracks.values())
        return shown, len(self.tracks) - shown
