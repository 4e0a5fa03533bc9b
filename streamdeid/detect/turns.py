"""Faces turned sideways or upside down in the picture: the detector looks at the frame turned as well.

YuNet (like CenterFace) is trained on upright faces and misses a face turned a quarter turn or more: a phone
clip whose rotation tag was stripped, a camera mounted on its side, a person lying down. On a 30-frame pan
over group_meeting.jpg turned a quarter turn (pixels, no display matrix), 17 of the 18 faces dlib's HOG finds
on the upright frames were left bare, the largest a 110 px face (docs/recall.md, "Turned faces").

A turned pass is the fast pass (and the small-face scan) on the frame turned by ``np.rot90``; its boxes and
landmarks are turned back into the frame's coordinates. The landmarks keep the subject's sides (a turn is
no mirror), so the renderer aligns the face at its own angle.

Three turned passes on every detector run would take three times the detector's time. ``TurnWatch``
spends it where turned faces are: every turn on a video's first run and on scene cuts (a clip stored
sideways shows it at once), one turn in rotation on each small-face scan (a person lying down in a shot
that began without one is found within three scans), and a turn whose pass found a face the upright pass
did not on every run, until it has found none for ``QUIET_RUNS`` runs.
"""

from __future__ import annotations

import numpy as np

from streamdeid.track.matching import iou_matrix
from streamdeid.types import Detections

# np.rot90's k: 1 = a quarter turn anticlockwise, 2 = a half turn, 3 = a quarter turn clockwise.
# Probed in this order: sideways both ways first (stored-sideways phone clips, cameras on their side,
# people lying down), then upside down (a ceiling camera mounted without its flip).
TURNS = (1, 3, 2)
# A turned pass's box on a face the other passes boxed (IoU) is that face again, not a turned one.
SAME_FACE_IOU = 0.3
# A turn not yet active takes a face only from this score: on the upright shared clips (hamilton, the
# store aisle, the worker zone, every sixth frame, all three turns) the turned passes boxed 103 things the
# upright passes did not, none scoring 0.8 (hamilton 14 from 0.6); on the same pan and hamilton turned a quarter
# turn, 37 and 21 of 108 and 92 such boxes scored 0.8 or more. Once a turn is active, its boxes count from the
# run's threshold, as the upright passes' do: the picture, or someone in it, is evidently turned.
ACTIVATE_SCORE = 0.8
# An active turn stays active (looked at on every detector run) until this many runs in a row found no
# face of its own: at the default cadence (every second frame) about 0.8 s at 25 fps, longer than the
# tracker's hold (0.5 s), so a turned face one run misses stays followed.
QUIET_RUNS = 10


def turned(image: np.ndarray, k: int) -> np.ndarray:
    """``image`` ([H, W, C]) turned k quarter turns anticlockwise, contiguous (the detector's blob wants it)."""
    return np.ascontiguousarray(np.rot90(image, k))


def _points_back(xy: np.ndarray, k: int, width: int, height: int) -> np.ndarray:
    """[..., 2] points in the turned image -> the same points in the ``width`` x ``height`` frame."""
    x, y = xy[..., 0], xy[..., 1]
    if k == 1:  # turned (x, y) = (y0, width - x0)
        back = (width - y, x)
    elif k == 2:  # turned (x, y) = (width - x0, height - y0)
        back = (width - x, height - y)
    elif k == 3:  # turned (x, y) = (height - y0, x0)
        back = (y, height - x)
    else:
        return xy
    return np.stack(back, axis=-1)


def turned_back(dets: Detections, k: int, width: int, height: int) -> Detections:
    """Detections found on ``turned(frame, k)`` in the ``width`` x ``height`` frame's coordinates."""
    if not len(dets) or k % 4 == 0:
        return dets
    corners = _points_back(dets.boxes.reshape(-1, 2, 2), k, width, height)  # [N, 2, 2]
    boxes = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)
    return Detections(boxes, dets.scores.copy(), _points_back(dets.landmarks, k, width, height))


def own_faces(turned_dets: Detections, others: list[Detections]) -> np.ndarray:
    """[N] bool: the turned pass's boxes on no face the other passes boxed (SAME_FACE_IOU)."""
    others = [o.boxes for o in others if len(o)]
    if not len(turned_dets) or not others:
        return np.ones(len(turned_dets), bool)
    return iou_matrix(turned_dets.boxes, np.concatenate(others)).max(axis=1) < SAME_FACE_IOU


class TurnWatch:
    """Which turned passes a video's detector run takes (see the module docstring). One per video."""

    def __init__(self) -> None:
        self._quiet: dict[int, int] = {}  # active turn -> runs in a row its pass found no face of its own
        self._probe = 0  # index into TURNS of the turn the next scan probes
        self._started = False

    def copy(self) -> "TurnWatch":
        """A watch in this one's state that can run without changing it (an off-schedule detector run)."""
        other = TurnWatch()
        other._quiet, other._probe, other._started = dict(self._quiet), self._probe, self._started
        return other

    @property
    def active(self) -> tuple[int, ...]:
        return tuple(k for k in TURNS if k in self._quiet)

    def due(self, *, scan: bool, cut: bool) -> list[int]:
        """The turns to look at on this run: every turn on the first run and on cuts; the active turns,
        and on a scan one more in rotation."""
        if cut or not self._started:
            self._started = True
            return list(TURNS)
        due = list(self.active)
        if scan:
            for _ in TURNS:
                k = TURNS[self._probe]
                self._probe = (self._probe + 1) % len(TURNS)
                if k not in due:
                    due.append(k)
                    break
        return due

    def take(self, k: int, scores: np.ndarray, own: np.ndarray) -> np.ndarray:
        """[N] bool: which of turn ``k``'s boxes (``scores`` [N]; ``own`` [N]: on no face the other passes
        boxed) this run takes: all of them for an active turn, and for a probe that found one from
        ACTIVATE_SCORE (which makes the turn active)."""
        if k not in self._quiet and not sure_own(scores, own):
            own = np.zeros_like(own)  # a probe that found no sure face of its own takes nothing
        self._saw(k, bool(own.any()))
        return own

    def _saw(self, k: int, found_own: bool) -> None:
        """Whether turn ``k``'s pass on this run found a face of its own."""
        if found_own:
            self._quiet[k] = 0
        elif k in self._quiet:
            self._quiet[k] += 1
            if self._quiet[k] >= QUIET_RUNS:
                del self._quiet[k]


def sure_own(scores: np.ndarray, own: np.ndarray) -> bool:
    """Whether a turned pass found a face of its own (``own`` [N]) from ACTIVATE_SCORE (``scores`` [N])."""
    return bool((own & (scores >= ACTIVATE_SCORE)).any())
