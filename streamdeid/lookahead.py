"""Look-ahead buffer: cover a face in the frames just before its first detection.

Detectors often find a face a few frames after it became visible (it turns,
grows, leaves motion blur). Holding the last ``capacity`` tracked frames back
lets a track that starts at frame t also cover frames t-capacity..t-1 at its
first known position carried back along the camera's motion (state
``"backfilled"``), back to the start of its shot,
widened the further back it goes (TrackedFace.widened: the face may have moved).
A track the tracker remembered and continues after frames it did not report
(track/tracker.py) is back-filled the same way over that gap. With ``match_templates``
the face's pixels at the detection are looked for near each back-filled box
(track/appearance.py): where they are found the cover goes on them, unwidened, and
the walk back goes on from there; where they are not, it is widened as above.

A face its next detections show still (carried along the camera's motion, it moved under
STILL_SHARE of its size in the 2-6 frames after its first detection) most likely sat still
before it too: its widened back-filled covers still in the buffer are redrawn at its found
box, with the margin of a face between two detector runs (cover_size.BETWEEN_RUNS_GROWTH).
Seated audiences are back-filled often (dim faces the detector finds late), and their widened
covers were the largest share of short_hamilton_clip.mp4's cover off every face.

A face its next detections show moving (at about its size) is settled too, on its way: each
widened cover is redrawn over the two places the face most likely was, the found box (had it
sat still until its first detection) and that box carried back along the detections' velocity
(had it moved as it moves now), and no further than the widened box it replaces, so the new
cover lies inside the old one. A widened cover grows the same way in every direction; the
moving face's is stretched along its way only.

A fast face (moving a quarter of its size a frame or more) is drawn between two detections on the box
interpolated between them where its prediction lags behind (FAST_IOU), and on a back-filled frame no
detector saw (``FrameResult.searched``) where its speed carried it, even outside the widened box.

A track first seen now whose first detection is weak (``confirm_below``: under the tracker's high_score)
is back-filled CONFIRM_SHORT frames at once; its back-fill further back waits ("pending"). A later
detection of the track draws it. Closer looks that end its hold inside the picture (they found no face at
its place twice: FrameResult.looked_gone, track/tracker.py) drop it: the box seen once was most likely no
face (on short_hamilton_clip.mp4 the performer's hands, shoulder and microphone, dark patches). A hold that
ends otherwise (it ran out, or the track was a copy of another's face) says nothing of the pixels: drawn.
In a file run a frame holding pending back-fill waits up to DECIDE_WAIT frames past the capacity for the
decision (the back-fill itself reaches no deeper than the capacity). Privacy fails closed: a pending cover
is drawn when its frame leaves the buffer undecided, at a scene cut, and when the track ends at the frame's
edge (a face seen once as it left). Dropping it at the first run that missed the track instead lost real
faces on the crowd pans (a 58 px face entering at the bottom edge bare on 7 frames, faces seen once as they
left at the left edge).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from .config import TrackConfig
from .track.appearance import find, moved_to, template_of
from .track.camera_motion import invert
from .track.matching import iou_matrix
from .track.tracker import MAX_HELD_SPEED
from .types import FrameResult, TrackedFace, box_centres, longest_sides

STILL_SHARE = 0.1  # of the face's size: a face that moved less after its first detection is still
STILL_WITHIN = (2, 6)  # frames after the first detection in which a detection can show it still
# A frame whose camera motion is unknown (camera_motion.py: no trustworthy estimate) counts as this many more
# frames of widening for a back-fill that crosses it, settled or not (its next detections say how the face moves
# now, not how the camera moved unseen). On short_hamilton_clip.mp4 a dark audience face
# at the left edge, first detected at frame 52 at 0.56, had moved 25 px from where the back-fill put it on frame
# 45 while the camera panned unseen (the performer's head crossing the frame outvoted the dim audience): SFace
# matched it there in the default output (tests/test_privacy_e2e.py).
UNSURE_FRAMES = 1
# back-filled frames drawn at once for a track first detected weakly; the rest waits (see the top). 4 before
# DECIDE_WAIT; 2 covers the same reference face-frames of benchmarks/precision.py and recall.py as 4, 0 left 3 more
# of hamilton's under half covered
CONFIRM_SHORT = 2
# A frame holding pending back-fill waits up to this many frames past the buffer's capacity for the decision (file
# mode: a live run's latency bound leaves no room, ``decide_wait`` 0 there). The decision comes DOUBTS_TO_END closer
# looks after the first miss (4 frames at --detect-every 2), or when the hold ends: without the wait the deepest
# pending frames left the buffer first and stayed drawn (short_hamilton_clip.mp4: a hand seen once at 0.37, its
# back-fill 15 frames deep, 11 of them pending, 4 of those gone undecided).
DECIDE_WAIT = 6
# A face held between two detections of its track, one size and at least MAX_HELD_SPEED of its size a frame apart
# (a fast face), whose drawn box overlaps the box interpolated between those detections under this IoU is moved onto
# the interpolation (``_bridge``): the prediction lags a face that fast (the tracker clamps held speeds), and a 90 px
# face crossing the frame at 60-80 px a frame lay beside its cover on every frame the detector skipped. On the crowd
# pans, without the speed bound, tracks whose two boxes were not one face moving (0.7: 13 fewer of the band's
# reference face-frames covered; 0.5: 11). The same bound, for a back-filled frame no detector run saw, moves its
# cover onto the first box carried back along the face's speed (``_settle``, ``_far_along``).
FAST_IOU = 0.5
BRIDGE_FRAMES = 4  # frames ``_bridge`` looks back for a track's last detection (the detector's idle cadence)
SEEN_FRAMES = 600  # a track unseen this long is forgotten by _seen (tracks are remembered for seconds)


@dataclass
class _Backfill:
    """A track's first detection (carried along the camera's motion to the newest frame) and where its
    widened back-filled covers are."""

    first: TrackedFace
    frames_since: int = 0
    # (the earlier frame, the cover added there, the face unwidened, frames back from the first detection, frames
    # crossed whose camera motion is unknown, whether no detector run saw the frames from it to the first detection)
    covers: list[tuple[FrameResult, TrackedFace, TrackedFace, int, int, bool]] = field(default_factory=list)


class LookaheadBuffer:
    def __init__(self, capacity: int, *, match_templates: bool = False, confirm_below: float = 0.0,
                 decide_wait: int = 0) -> None:
        self.capacity = max(0, int(capacity))
        self.decide_wait = max(0, int(decide_wait))
        self.match_templates = match_templates
        self.confirm_below = confirm_below
        self._buf: deque[FrameResult] = deque()
        self._unsettled: dict[int, _Backfill] = {}  # track id -> its widened back-fill, still or not unknown yet
        # track id -> the frames of its back-fill past CONFIRM_SHORT, drawn but not yet decided (see the top)
        self._pending: dict[int, list[FrameResult]] = {}
        self._seen: dict[int, int] = {}  # track id -> frames pushed when it was last shown (see SEEN_FRAMES)
        self._pushed = 0
        self._last: dict[int, TrackedFace] = {}  # a pending track's face on the newest frame that showed it

    @classmethod
    def for_run(cls, capacity: int, track: TrackConfig, *, live: bool = False) -> "LookaheadBuffer":
        """The buffer a run uses (Pipeline, and the review's tracking pass, which must cover as the run did);
        a ``live`` one never holds a frame past ``capacity`` (its latency bound)."""
        return cls(capacity, match_templates=track.match_templates, confirm_below=track.high_score,
                   decide_wait=0 if live else DECIDE_WAIT)

    def __len__(self) -> int:
        return len(self._buf)

    def push(self, result: FrameResult) -> Iterator[FrameResult]:
        """Add a tracked frame; yield the frames that are now old enough to render."""
        last = {f.track_id for f in self._buf[-1].faces} if self._buf else set()
        self._confirm(result)
        self._settle(result)
        self._bridge(result)
        # new tracks, and tracks back after a gap (a remembered track the detector found again)
        new = [f for f in result.faces if f.track_id not in last]
        if new:
            self._backfill(new, result)
        self._pushed += 1
        self._seen.update((f.track_id, self._pushed) for f in result.faces)
        if self._pushed % SEEN_FRAMES == 0:  # bounded on a live feed that runs for days
            self._seen = {tid: n for tid, n in self._seen.items() if self._pushed - n <= SEEN_FRAMES}
        self._buf.append(result)
        while len(self._buf) > self.capacity and not (len(self._buf) <= self.capacity + self.decide_wait
                                                       and self._undecided(self._buf[0])):
            yield self._leaving()

    def _undecided(self, result: FrameResult) -> bool:
        """Whether pending back-fill (see the top) lies on ``result``."""
        return any(r is result for frames in self._pending.values() for r in frames)

    def drain(self) -> Iterator[FrameResult]:
        while self._buf:
            yield self._leaving()

    def drain_searched(self) -> Iterator[FrameResult]:
        """The frames up to the newest one the detector ran on: those after it wait for a later run's back-fill
        (a face new on them was seen by no detector yet)."""
        last = max((k for k, r in enumerate(self._buf) if r.searched), default=-1)
        for _ in range(last + 1):
            yield self._leaving()

    def discard(self) -> list[FrameResult]:
        """Take every frame off the buffer unrendered (a live feed's gap or end: the frames after the newest detector
        run, which no later run will back-fill; see Pipeline.drop_unsearched)."""
        gone, self._buf = list(self._buf), deque()
        self._pending.clear()
        self._last.clear()
        self._unsettled.clear()
        return gone

    def _leaving(self) -> FrameResult:
        """The oldest frame, handed on to be rendered: a back-fill still pending on it stays drawn (fails closed:
        undecided is covered)."""
        result = self._buf.popleft()
        for tid, frames in list(self._pending.items()):
            frames[:] = [r for r in frames if r is not result]
            if not frames:
                del self._pending[tid]
        return result

    def _confirm(self, result: FrameResult) -> None:
        """Decide the pending back-fill (see the top) with ``result``: kept when a detection continued the track,
        at a scene cut, when the track ended at the frame's edge and when its hold ended without closer looks
        finding it gone; taken off its frames when they did, inside the picture."""
        if not self._pending:
            return
        state = {f.track_id: f for f in result.faces}
        h, w = result.frame.image.shape[:2]
        for tid in list(self._pending):
            face = state.get(tid)
            # kept: found again; at a cut (undecided); gone without closer looks finding it gone (its hold ran out,
            # or it was a copy: undecided), or from a box at the frame's edge (it may have left)
            if result.scene_cut or (face is not None and face.state == "detected") or (face is None and (
                    tid not in result.looked_gone or _at_the_edge(self._last[tid].box, w, h))):
                del self._pending[tid]
            elif face is None:  # gone inside the picture: closer looks found no face there
                for earlier in self._pending.pop(tid):  # (settled or not: the covers are the track's back-fill)
                    earlier.faces[:] = [f for f in earlier.faces if f.track_id != tid or f.state != "backfilled"]
            else:
                self._last[tid] = face
        self._last = {tid: f for tid, f in self._last.items() if tid in self._pending}

    def _backfill(self, faces: list[TrackedFace], first: FrameResult) -> None:
        """Walk back from the newest buffered frame; stop at a scene cut, since the
        faces cannot have been there before the shot began, and for each face at the
        first frame that already has its track."""
        if first.scene_cut:
            return
        # The faces in frame coordinates of each earlier frame: carried back through the camera
        # motion of every frame in between (a panning camera moved them across the picture).
        templates = {f.track_id: template_of(first.frame.image, f.box) for f in faces
                     if self.match_templates and f.state == "detected"}
        firsts = {f.track_id: f for f in faces if f.state == "detected"}  # (remembered tracks: not "detected")
        for tid in firsts:
            self._unsettled.pop(tid, None)  # a track found again is back-filled anew
        # first seen now, weakly: back-fill past CONFIRM_SHORT frames waits (see the top)
        doubtful = {tid for tid, f in firsts.items() if f.score < self.confirm_below and tid not in self._seen}
        here, later = faces, first
        unsure = 0  # frames crossed whose camera motion is unknown (see UNSURE_FRAMES)
        unseen = True  # no detector run between this frame and the first detection (FAST_IOU)
        for back, earlier in enumerate(reversed(self._buf), start=1):
            if back > self.capacity:  # a frame waiting for a decision (DECIDE_WAIT): no deeper than without it
                return
            if later.motion is not None:
                inverse = invert(later.motion)
                here = [f.moved(inverse) for f in here]
            unsure += later.motion_unsure
            unseen = unseen and not earlier.searched
            present = {f.track_id for f in earlier.faces}
            here = [f for f in here if f.track_id not in present]
            if not here:
                return
            here = [self._found(f, templates.get(f.track_id), earlier) for f in here]
            for f in here:
                drawn = f if f.matched else f.widened(back + UNSURE_FRAMES * unsure, "backfilled")
                earlier.faces.append(drawn)  # (a pending one too: drawn in the same order, taken off if dropped)
                if f.track_id in doubtful and back > CONFIRM_SHORT:
                    self._pending.setdefault(f.track_id, []).append(earlier)
                    self._last[f.track_id] = firsts[f.track_id]
                if not f.matched and f.track_id in firsts:
                    self._unsettled.setdefault(f.track_id, _Backfill(firsts[f.track_id])).covers.append(
                        (earlier, drawn, f, back, unsure, unseen))
            if earlier.scene_cut:
                return
            later = earlier

    def _settle(self, result: FrameResult) -> None:
        """Redraw the widened back-fill of tracks ``result``'s detections show still or moving at about their
        size (see the top); forget tracks whose size changed, or that went unseen too long."""
        detected = {f.track_id: f for f in result.faces if f.state == "detected"}
        for tid, fill in list(self._unsettled.items()):
            fill.first = fill.first.moved(result.motion)
            fill.frames_since += 1
            now = detected.get(tid)
            if result.scene_cut or fill.frames_since > STILL_WITHIN[1]:
                del self._unsettled[tid]
            elif now is not None and fill.frames_since >= STILL_WITHIN[0]:
                still = _still(fill.first, now)
                if still or _about_its_size(fill.first, now):
                    # [2] px a frame, in this frame's pixels (the first detection came along the camera's motion)
                    velocity = np.zeros(2) if still else \
                        (box_centres(now.box) - box_centres(fill.first.box)) / fill.frames_since
                    for earlier, drawn, unwidened, back, unsure, unseen in fill.covers:
                        if any(r is earlier for r in self._buf):  # not yet handed on to be rendered
                            way = _on_its_way(unwidened, drawn, -back * velocity, unsure)
                            if unseen:  # no detector run saw this frame: the face may be far along its way
                                way = _far_along(unwidened, way, -back * velocity, back + UNSURE_FRAMES * unsure)
                            _redraw(earlier, drawn, way)
                del self._unsettled[tid]

    def _bridge(self, result: FrameResult) -> None:
        """Move the between-runs covers of each track ``result`` detects onto the boxes interpolated between its
        last two detections, on the frames where the prediction drawn there overlaps that box under FAST_IOU (a
        fast face: see FAST_IOU). Both detections are carried to each frame along the camera's motion. Looks
        back BRIDGE_FRAMES at most, and tests each face's speed on its box centres first (a crowd pan has 150
        detected faces a run: carrying every box cost 6-10 ms a frame)."""
        if result.scene_cut or not self._buf:
            return
        # newest first: (frame, its faces by track, the frame after it, that frame's motion inverted, as floats)
        frames = [(r, {f.track_id: f for f in r.faces}, later, _floats(invert(later.motion)) if later.motion
                   is not None else None) for r, later in
                  zip(list(reversed(self._buf))[:BRIDGE_FRAMES], [result, *reversed(self._buf)])]
        for now in [f for f in result.faces if f.state == "detected"]:
            between: list[tuple[FrameResult, TrackedFace, FrameResult]] = []  # (frame, drawn, the frame after it)
            last = None
            back: list = []  # the inverted motions crossed, newest first
            for earlier, faces, later, inverse in frames:
                drawn = faces.get(now.track_id)
                if drawn is None or drawn.state == "backfilled" or later.scene_cut:
                    break
                if drawn.state == "detected":
                    last = drawn
                    break
                between.append((earlier, drawn, later))
                back.append(inverse)
            if last is not None and between and _about_its_size(last, now) and _fast_between(now, last, between, back):
                self._redraw_between(now, last, between)

    @staticmethod
    def _redraw_between(now: TrackedFace, last: TrackedFace, between: list) -> None:
        """Each between frame's held cover onto the box interpolated between ``last`` and ``now`` where it
        overlaps that box under FAST_IOU."""
        ahead, carried = [], now
        for _, _, later in between:  # ``now`` carried back to each frame between, newest first
            if later.motion is not None:
                carried = carried.moved(invert(later.motion))
            ahead.append(carried)
        n = len(between) + 1
        for k, ((earlier, drawn, _), there) in enumerate(zip(reversed(between), reversed(ahead)), start=1):
            last = last.moved(earlier.motion)  # the last detection, carried to this frame
            box = last.box + (there.box - last.box) * (k / n)  # [4] interpolated
            if drawn.state == "held" and iou_matrix(drawn.box[None], box[None])[0, 0] < FAST_IOU:
                _redraw(earlier, drawn, _placed(drawn, box))

    @staticmethod
    def _found(face: TrackedFace, template, earlier: FrameResult) -> TrackedFace:
        """``face`` moved onto its template's match in ``earlier`` (back-filled, matched), or as it was."""
        box = find(earlier.frame.image, template, face.box) if template is not None else None
        if box is not None:
            return moved_to(face, box, "backfilled")
        # not found here: a match on a later frame does not carry over (without camera motion
        # nothing else makes a new face for this frame)
        return replace(face, matched=False)


def _at_the_edge(box: np.ndarray, w: int, h: int) -> bool:
    """Whether ``box`` reaches the edge of a ``w`` x ``h`` frame."""
    return bool(box[0] <= 0 or box[1] <= 0 or box[2] >= w or box[3] >= h)


def _still(first: TrackedFace, now: TrackedFace) -> bool:
    """``now`` lies within STILL_SHARE of ``first``'s size of it, at about its size."""
    shift = float(np.hypot(*(box_centres(now.box) - box_centres(first.box))))
    return shift <= STILL_SHARE * _size(first) and _about_its_size(first, now)


def _about_its_size(first: TrackedFace, now: TrackedFace) -> bool:
    return 0.8 <= _size(now) / _size(first) <= 1.25


def _size(face: TrackedFace) -> float:
    return max(float(longest_sides(face.box[None])[0]), 1.0)


def _on_its_way(face: TrackedFace, drawn: TrackedFace, shift: np.ndarray, unsure: int = 0) -> TrackedFace:
    """``face`` (unwidened, at its first detection's box carried back) redrawn over its box and its box moved
    by ``shift`` ([2] px: where it was had it moved as it moves now), within ``drawn`` (the widened cover it
    replaces), with the margin of a face between two detector runs. Zero ``shift``: the face as it is. Carried
    back over ``unsure`` frames whose camera motion is unknown, it is widened by UNSURE_FRAMES for each (the
    camera may have moved it that much further)."""
    box = np.asarray(face.box, np.float64)
    way = np.concatenate([np.minimum(box[:2], box[:2] + shift), np.maximum(box[2:], box[2:] + shift)])
    within = np.concatenate([np.maximum(way[:2], drawn.box[:2]), np.minimum(way[2:], drawn.box[2:])])
    moved = box_centres(within) - box_centres(box)  # [2] the landmarks follow the box's centre
    face = replace(face, box=within, landmarks=face.landmarks + moved)
    if unsure:
        face = face.widened(UNSURE_FRAMES * unsure, "backfilled")
    return replace(face, state="backfilled", between_runs=True)


def _far_along(face: TrackedFace, way: TrackedFace, shift: np.ndarray, frames: int) -> TrackedFace:
    """``way`` (the cover along a moving face's way, within its widened box), or, where that box carried back
    by ``shift`` ([2] px) overlaps it under FAST_IOU, a guess at the carried box, widened by ``frames``: on a
    frame no detector saw, a fast face was most likely there, outside the widened box (see FAST_IOU)."""
    carried = np.asarray(face.box, np.float64) + np.tile(shift, 2)
    if iou_matrix(np.asarray(way.box, np.float64)[None], carried[None])[0, 0] >= FAST_IOU:
        return way
    return _placed(face, carried).widened(frames, "backfilled")


def _fast_between(now: TrackedFace, last: TrackedFace, between: list, back: list) -> bool:
    """Whether ``now`` and ``last``, carried to the first frame between them, lie at least MAX_HELD_SPEED of its
    size a frame apart, or the cover drawn on that frame lies that far from ``last`` (a fast face that stopped:
    the prediction ran on at its speed; a face darting at 70 px a frame that slowed to 10 was drawn 62 px
    past it). Box centres only, through the camera's motion (``back``: the motions that carry ``now`` back,
    inverted, newest first). In plain floats: numpy's per-call cost showed on a crowd."""
    x1, y1, x2, y2 = now.box.tolist()
    x, y = (x1 + x2) / 2, (y1 + y2) / 2
    for m in back:
        if m is not None:
            x, y = m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5]
    x1, y1, x2, y2 = last.box.tolist()
    sx, sy = (x1 + x2) / 2, (y1 + y2) / 2
    motion = between[-1][0].motion  # the first frame between them, from the last detection's
    if motion is not None:
        m = _floats(motion)
        sx, sy = m[0] * sx + m[1] * sy + m[2], m[3] * sx + m[4] * sy + m[5]
    size = max(x2 - x1, y2 - y1, 1.0)
    if ((x - sx) ** 2 + (y - sy) ** 2) ** 0.5 >= (len(between) + 1) * MAX_HELD_SPEED * size:
        return True
    x1, y1, x2, y2 = between[-1][1].box.tolist()  # the cover drawn on that frame
    return (((x1 + x2) / 2 - sx) ** 2 + ((y1 + y2) / 2 - sy) ** 2) ** 0.5 >= MAX_HELD_SPEED * size


def _floats(m: np.ndarray) -> tuple[float, ...]:
    """A [2, 3] affine as six floats, row by row."""
    return tuple(np.asarray(m, np.float64).reshape(6).tolist())


def _placed(face: TrackedFace, box: np.ndarray) -> TrackedFace:
    """``face`` put on ``box`` ([4]): its landmarks moved and scaled with the box (a face drawn elsewhere)."""
    old = np.asarray(face.box, np.float64)
    scale = (box[2:] - box[:2]) / np.maximum(old[2:] - old[:2], 1e-6)  # [2]
    landmarks = (face.landmarks - box_centres(old)) * scale + box_centres(box)
    return replace(face, box=np.asarray(box, np.float32), landmarks=landmarks.astype(np.float32), matched=False,
                   still=False)


def _redraw(result: FrameResult, drawn: TrackedFace, face: TrackedFace) -> None:
    """Put ``face`` where ``drawn`` is in ``result``'s faces (the same object, if nothing replaced it)."""
    for k, f in enumerate(result.faces):
        if f is drawn:
            result.faces[k] = face
            return
