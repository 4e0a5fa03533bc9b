"""Edits in the pipeline: ``EditPlan`` (what the stages ask) and ``with_added`` (FaceStage's hook).

* An added box is a detection on its frame (score 1.0, no landmarks: NaN, so the renderer covers the box,
  align.landmarks_usable says no), put in on a detector run that frame always gets (FaceStage): it starts
  or continues a track the tracker follows forward and the look-ahead back-fills, as a detected face's.
* A removal names the track whose face overlaps its box most on its frame (``owner``), decided when that
  frame leaves the look-ahead buffer (its faces are final there: every back-fill into it is done). That
  track's faces move to ``FrameResult.kept`` (not rendered, not vaulted) on every frame the plan is asked
  about once it knows the track. A run with removals decides them first in a pass of its own
  (``decide_removals``: detect and track only, nothing rendered), so the output run knows every removed
  track from its first frame; tracking is deterministic, and the output run checks each decision again.
  A track an added box went into is never removed (a person said "a face" there: privacy first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..track.matching import iou_matrix
from ..types import Detections, FrameResult, TrackedFace
from .format import Edits

log = logging.getLogger(__name__)

__all__ = ["ADD_SCORE", "OWNER_IOU", "REPLACE_IOU", "EditPlan", "decide_removals", "owner", "with_added"]

ADD_SCORE = 1.0  # an added face's detection score: sure (a track reported at once, never provisional)
# A removal's box names the face overlapping it this much (IoU), or whose box holds the removal box's centre
# (a cover drawn around a widened, held face is larger than the face's box).
OWNER_IOU = 0.3
# A detection of the run overlapping an added box this much is that face: the added box replaces it (one
# face, one track), keeping the detection's landmarks.
REPLACE_IOU = 0.3


def with_added(dets: Detections, added: np.ndarray) -> tuple[Detections, np.ndarray]:
    """``dets`` with the added boxes ([K, 4]) appended as detections (score ADD_SCORE, NaN landmarks, or the
    landmarks of a detection they replace: one overlapping an added box at REPLACE_IOU or more is dropped).
    Returns the detections and [N] bool, which of them were added."""
    added = np.asarray(added, np.float32).reshape(-1, 4)
    landmarks = np.full((len(added), 5, 2), np.nan, np.float32)
    keep = np.ones(len(dets), bool)
    if len(dets):
        iou = iou_matrix(added, dets.boxes)  # [K, N]
        for k in range(len(added)):
            j = int(np.argmax(iou[k]))
            if iou[k, j] >= REPLACE_IOU:
                if keep[j]:
                    landmarks[k] = dets.landmarks[j]
                keep[iou[k] >= REPLACE_IOU] = False
    kept = dets[keep]
    out = Detections(np.concatenate([kept.boxes, added]), np.concatenate([kept.scores, np.full(len(added), ADD_SCORE)]),
                     np.concatenate([kept.landmarks, landmarks]))
    return out, np.arange(len(out)) >= len(kept)


def took_added(faces: list[TrackedFace], boxes: np.ndarray) -> set[int]:
    """The tracks of ``faces`` that took one of a frame's added ``boxes`` [K, 4] (their detection is that box)."""
    return {f.track_id for f in faces if f.state == "detected"
            and any(np.allclose(f.box, b, atol=0.01) for b in np.asarray(boxes, np.float32).reshape(-1, 4))}


def cover_added(result: FrameResult, tracks: set[int], told: set[int]) -> None:
    """A face --keep/--only left visible (``result.kept``) goes back to the covered faces when its track took a
    reviewer's added box (``tracks``): an added box is a face to cover that nothing overrules, and the keep
    photo's judgement left the face on the reviewed frame bare. ``told``: tracks already logged."""
    back = [f for f in result.kept if f.track_id in tracks]
    if not back:
        return
    result.kept = [f for f in result.kept if f.track_id not in tracks]
    result.faces = list(result.faces) + back
    for f in back:
        if f.track_id not in told:
            told.add(f.track_id)
            log.warning("edits: track %d is covered from frame %d on, though a --keep/--only photo leaves it visible: "
                        "a reviewer added a face box to it", f.track_id, result.frame.index)


def owner(faces: list[TrackedFace], box: tuple[float, float, float, float]) -> TrackedFace | None:
    """The face of ``faces`` a removal ``box`` names: among those overlapping it at OWNER_IOU or more or whose
    box holds its centre, the one overlapping it most (ties: the lowest track id); None when there is none."""
    if not faces:
        return None
    b = np.asarray(box, np.float64).reshape(1, 4)
    boxes = np.stack([np.asarray(f.box, np.float64) for f in faces])
    iou = iou_matrix(boxes, b)[:, 0]
    cx, cy = (b[0, 0] + b[0, 2]) / 2, (b[0, 1] + b[0, 3]) / 2
    inside = (boxes[:, 0] <= cx) & (cx <= boxes[:, 2]) & (boxes[:, 1] <= cy) & (cy <= boxes[:, 3])
    named = [(float(iou[i]), -faces[i].track_id, i) for i in range(len(faces)) if iou[i] >= OWNER_IOU or inside[i]]
    return faces[max(named)[2]] if named else None


class EditPlan:
    """One run's edits as the pipeline applies them. ``decided``: a first pass's decisions ({removal index:
    track id, or None where no face was there}), whose tracks are removed from the first frame on; ``added``:
    the tracks its added boxes went into, which no removal hides (privacy first: a person said "a face" there).
    ``report``: log each removal's outcome at ``finish`` (not for a first pass, whose output is discarded)."""

    def __init__(self, edits: Edits, decided: dict[int, int | None] | None = None,
                 added: dict[int, int] | None = None, *, report: bool = True) -> None:
        self.edits = edits
        self.report = report
        by_frame: dict[int, list] = {}
        for b in edits.add:
            by_frame.setdefault(b.frame, []).append(b.box)
        self.adds = {f: np.array(boxes, np.float32) for f, boxes in by_frame.items()}  # frame -> [K, 4]
        self._adds_at: dict[int, list[tuple[int, tuple]]] = {}  # frame -> [(add index, box)]
        for j, b in enumerate(edits.add):
            self._adds_at.setdefault(b.frame, []).append((j, b.box))
        self._removes: dict[int, list[tuple[int, tuple]]] = {}  # frame -> [(removal index, box)]
        for k, b in enumerate(edits.remove):
            self._removes.setdefault(b.frame, []).append((k, b.box))
        self._first = dict(decided) if decided is not None else None
        self.decided: dict[int, int | None] = dict(self._first or {})  # removal index -> track (None: no face)
        self.added: dict[int, int] = dict(added or {})  # track -> the first added box (index) it took
        self.removed: set[int] = {t for t in self.decided.values() if t is not None} - set(self.added)  # not drawn
        # track -> the reviewed covers' frame spans it is undrawn on (None: every frame); a re-run whose
        # tracks differ from the reviewed run's (an added box moves the detector's runs) may give the removal's
        # box to a track that reaches beyond the cover the reviewer saw: it stays drawn there
        self.spans: dict[int, list[tuple[int, int] | None]] = {}
        for k, t in self.decided.items():
            if t is not None:
                self.spans.setdefault(t, []).append(edits.remove[k].frames)
        self.hidden: dict[int, list[int]] = {}  # track -> [first frame, last frame, faces] not drawn
        self.last_frame = -1  # the last frame ``resolve`` saw

    def resolve(self, result: FrameResult) -> None:
        """Decide the removals of ``result``'s frame (call it once the frame's faces are final: leaving the
        look-ahead buffer, before --keep/--only split them)."""
        self.last_frame = max(self.last_frame, result.frame.index)
        for j, box in self._adds_at.get(result.frame.index, ()):
            # the added box is its track's detection on this frame: that very box
            for track in took_added(result.faces, np.asarray(box, np.float32)):
                self.added.setdefault(track, j)
                self.removed.discard(track)
        for k, box in self._removes.get(result.frame.index, ()):
            face = owner(result.faces, box)
            track = None if face is None else face.track_id
            if self._first is not None and self._first.get(k) != track:
                log.warning("edits: remove[%d] at frame %d named track %s on the first pass and %s now (tracking "
                            "did not repeat exactly); both are left undrawn from here on", k, result.frame.index,
                            self._first.get(k), track)
            if track is not None and self.decided.get(k) != track:
                self.spans.setdefault(track, []).append(self.edits.remove[k].frames)
            self.decided[k] = track
            if track is not None and track not in self.added:
                self.removed.add(track)

    def apply(self, result: FrameResult) -> None:
        """The faces of removed tracks move from ``result.faces`` to ``result.kept`` (not rendered, not vaulted)."""
        if not self.removed:
            return
        index = result.frame.index
        gone = [f for f in result.faces if f.track_id in self.removed and self._undrawn(f.track_id, index)]
        if not gone:
            return
        result.faces = [f for f in result.faces if not any(f is g for g in gone)]
        result.kept = list(result.kept) + gone
        for f in gone:
            span = self.hidden.setdefault(f.track_id, [index, index, 0])
            span[0], span[1], span[2] = min(span[0], index), max(span[1], index), span[2] + 1

    def _undrawn(self, track: int, index: int) -> bool:
        """Is removed ``track`` undrawn on frame ``index``: inside a span its removals name (or any frame)."""
        return any(span is None or span[0] <= index <= span[1] for span in self.spans.get(track, [None]))

    def finish(self) -> None:
        """End of the video: one line per removal (a person's decision, on the record), and the edits that fell
        on frames the video did not have (only where its frame count was not known beforehand, check_source)."""
        if not self.report:
            return
        if self.edits.add:
            log.info("edits: %d face box(es) added on %d frame(s)", len(self.edits.add), len(self.adds))
        for k, b in enumerate(self.edits.remove):
            if b.frame > self.last_frame:
                continue
            track = self.decided.get(k)
            if track is None:
                log.warning("edits: remove[%d] at frame %d: no cover there, nothing removed", k, b.frame)
                continue
            if track in self.added:
                j = self.added[track]
                log.warning("edits: remove[%d] at frame %d: track %d is drawn all the same: add[%d] (frame %d) went "
                            "into it", k, b.frame, track, j, self.edits.add[j].frame)
                continue
            first, last, faces = self.hidden.get(track, (b.frame, b.frame, 0))
            log.warning("edits: remove[%d] at frame %d: track %d not drawn (frames %d-%d, %d faces; a reviewer's "
                        "decision)", k, b.frame, track, first, last, faces)
        late = sum(b.frame > self.last_frame for b in self.edits.add + self.edits.remove)
        if late:
            log.warning("edits: %d edit(s) on frames after the video's last (%d) were not applied", late,
                        self.last_frame)


def decide_removals(edits: Edits, run_pass: Callable[[EditPlan], None]) -> EditPlan:
    """The plan of an output run: with removals, ``run_pass(plan)`` first runs the video through a pipeline
    that detects and tracks only (streamdeid.run.video.track_pass), deciding each removal's track; the
    returned plan removes those tracks from the first frame on."""
    if not edits.remove:
        return EditPlan(edits)
    first = EditPlan(edits, report=False)
    run_pass(first)
    return EditPlan(edits, first.decided, first.added)
