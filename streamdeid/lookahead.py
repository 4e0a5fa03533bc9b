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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import replace

from .track.appearance import find, moved_to, template_of
from .track.camera_motion import invert
from .types import FrameResult, TrackedFace


class LookaheadBuffer:
    def __init__(self, capacity: int, *, match_templates: bool = False) -> None:
        self.capacity = max(0, int(capacity))
        self.match_templates = match_templates
        self._buf: deque[FrameResult] = deque()

    def __len__(self) -> int:
        return len(self._buf)

    def push(self, result: FrameResult) -> Iterator[FrameResult]:
        """Add a tracked frame; yield the frames that are now old enough to render."""
        last = {f.track_id for f in self._buf[-1].faces} if self._buf else set()
        # new tracks, and tracks back after a gap (a remembered track the detector found again)
        new = [f for f in result.faces if f.track_id not in last]
        if new:
            self._backfill(new, result)
        self._buf.append(result)
        while len(self._buf) > self.capacity:
            yield self._buf.popleft()

    def drain(self) -> Iterator[FrameResult]:
        while self._buf:
            yield self._buf.popleft()

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
        here, later = faces, first
        for back, earlier in enumerate(reversed(self._buf), start=1):
            if later.motion is not None:
                inverse = invert(later.motion)
                here = [f.moved(inverse) for f in here]
            present = {f.track_id for f in earlier.faces}
            here = [f for f in here if f.track_id not in present]
            if not here:
                return
            here = [self._found(f, templates.get(f.track_id), earlier) for f in here]
            earlier.faces.extend(f if f.matched else f.widened(back, "backfilled") for f in here)
            if earlier.scene_cut:
                return
            later = earlier

    @staticmethod
    def _found(face: TrackedFace, template, earlier: FrameResult) -> TrackedFace:
        """``face`` moved onto its template's match in ``earlier`` (back-filled, matched), or as it was."""
        box = find(earlier.frame.image, template, face.box) if template is not None else None
        if box is not None:
            return moved_to(face, box, "backfilled")
        # not found here: a match on a later frame does not carry over (without camera motion
        # nothing else makes a new face for this frame)
        return replace(face, matched=False)
