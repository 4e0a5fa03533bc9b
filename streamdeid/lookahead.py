"""Look-ahead buffer: cover a face in the frames just before its first detection.

Detectors often find a face a few frames after it became visible (it turns,
grows, leaves motion blur). Holding the last ``capacity`` tracked frames back
lets a track that starts at frame t also cover frames t-capacity..t-1 at its
first known position carried back along the camera's motion (state
``"backfilled"``), back to the start of its shot,
widened the further back it goes (TrackedFace.widened: the face may have moved).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from .track.camera_motion import invert
from .types import FrameResult, TrackedFace


class LookaheadBuffer:
    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, int(capacity))
        self._buf: deque[FrameResult] = deque()
        self._seen: set[int] = set()

    def __len__(self) -> int:
        return len(self._buf)

    def push(self, result: FrameResult) -> Iterator[FrameResult]:
        """Add a tracked frame; yield the frames that are now old enough to render."""
        for face in result.faces:
            if face.track_id not in self._seen:
                self._seen.add(face.track_id)
                self._backfill(face, result)
        self._buf.append(result)
        while len(self._buf) > self.capacity:
            yield self._buf.popleft()

    def drain(self) -> Iterator[FrameResult]:
        while self._buf:
            yield self._buf.popleft()

    def _backfill(self, face: TrackedFace, first: FrameResult) -> None:
        """Walk back from the newest buffered frame; stop at a scene cut, since the
        face cannot have been there before the shot began."""
        if first.scene_cut:
            return
        # The face in frame coordinates of each earlier frame: carried back through the camera
        # motion of every frame in between (a panning camera moved it across the picture).
        here, later = face, first
        for back, earlier in enumerate(reversed(self._buf), start=1):
            if later.motion is not None:
                here = here.moved(invert(later.motion))
            if not any(f.track_id == face.track_id for f in earlier.faces):
                earlier.faces.append(here.widened(back, "backfilled"))
            if earlier.scene_cut:
                return
            later = earlier
