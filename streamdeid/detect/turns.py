"""Faces turned in the picture (sideways, upside down, rolled): the detector looks at the frame turned as well.

YuNet (like CenterFace) is trained on upright faces and finds a face rolled up to about 20 degrees: a phone
clip whose rotation tag was stripped, a camera mounted on its side or tilted, a person lying down or leaning
their head left faces bare. On a 30-frame pan over group_meeting.jpg turned a quarter turn either way
(pixels, no display matrix), 21 and 53 of the 64 faces dlib's HOG finds on the upright frames were bare; on
a walking clip tilted 45 degrees, 139 of 217 (docs/recall.md, "Turned faces").

A turned pass is the fast pass (and the small-face scan) on the frame turned by a quarter turn (np.rot90,
exact) or 45 degrees (onto a canvas that holds the whole frame); its boxes and landmarks are turned back
into the frame's coordinates. The landmarks keep the subject's sides (a turn is no mirror), so the
renderer aligns the face at its own angle.

Seven turned passes on every detector run would take seven times the detector's time. ``TurnWatch``
spends it where turned faces are: every turn on a video's first run (a clip stored sideways shows it at
once) and on each scene cut the turns that were active before, one turn in rotation on each small-face scan (a person who lies down in a
shot is found within seven scans, under 2 s; the look-ahead covers the 0.5 s before), and a turn whose
pass found a sure face the upright pass did not, on every run, until it has found none for
``QUIET_RUNS`` runs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import cv2
import numpy as np

from streamdeid.track.matching import iou_matrix
from streamdeid.types import Detections

# Degrees anticlockwise, probed in this order: sideways both ways (stored-sideways phone clips, cameras on
# their side, people lying down), upside down (a ceiling camera mounted without its flip), then the
# diagonals. YuNet finds a face rolled up to about 20 degrees; between the quarter turns a face rolled
# 30-60 degrees was missed (a red team's tilted walking clip: 139 of 217 faces bare at 45 degrees).
TURNS = (90, 270, 180, 45, 315, 135, 225)
# A box of another pass under this score does not hide a sure turned box on the same face (own_faces).
WEAK_OTHER = 0.5
# A probe whose face of its own scores from CANDIDATE_SCORE but under ACTIVATE_SCORE is probed again on this
# many runs: a red team's face turned 135 degrees that came into an upright clip at
# frame 30 was probed at 0.74 at frame 36 and came round again at 0.92 only at frame 56 (a turn comes round
# every seven scans, 1.75 s), and the look-ahead covered 48-55: frames 30-47 were bare.
CANDIDATE_RUNS = 2
# (From 0.6, hamilton's dim heads and hands made candidates on 24 of its 138 detector runs: 114 probes
# instead of 42, and it ran at 49.6 fps against the session start's 64.6, where it runs at 56.6-61.0 against
# 61.7-64.3 from 0.7.)
CANDIDATE_SCORE = 0.7
# A turned pass's box on a face the other passes boxed (IoU) is that face again, not a turned one.
SAME_FACE_IOU = 0.3
# A sure turned box replaces the upright passes' box of the same face when it scores this much more (outscored),
# or scores more at all where the two disagree on the face's roll by ROLL_DISAGREE degrees or more (one of them
# has the face's landmarks wrong, and the surer is the likelier right).
TURN_MARGIN = 0.2
ROLL_DISAGREE = 45.0
# A turn not yet active takes a face only from this score: on the upright shared clips (hamilton, the
# store aisle, the worker zone, every sixth frame, all three turns) the turned passes boxed 103 things the
# upright passes did not, none scoring 0.8 (hamilton 14 from 0.6); on the same pan and hamilton turned a quarter
# turn, 37 and 21 of 108 and 92 such boxes scored 0.8 or more. Once a turn is active, its boxes count from the
# run's threshold, as the upright passes' do: the picture, or someone in it, is evidently turned.
ACTIVATE_SCORE = 0.8
# ... and in a picture that stands upright (the turn holds fewer faces than the upright passes), a turn's
# box counts from this score, the tracker's high score: on the marching band's pan (benchmarks/precision.py)
# musicians' heads on one side made the 45-degree turn active, and its weak boxes took over-cover from
# 7.02% to 8.12% of the frame.
LONE_SCORE = 0.6
# An active turn stays active (looked at on every detector run) until this many runs in a row found no
# face of its own: at the default cadence (every second frame) about 0.8 s at 25 fps, longer than the
# tracker's hold (0.5 s), so a turned face one run misses stays followed.
QUIET_RUNS = 10


@dataclass(frozen=True)
class View:
    """A frame turned for a detector pass."""

    image: np.ndarray  # [H', W', C] contiguous
    back: np.ndarray  # [2, 3] affine: the view's pixel coordinates -> the frame's


def turned(image: np.ndarray, angle: int) -> View:
    """``image`` ([H, W, C]) turned ``angle`` degrees anticlockwise: a multiple of 90 exactly (np.rot90),
    any other onto the canvas that holds the whole turned frame (black around it)."""
    h, w = image.shape[:2]
    if angle % 90 == 0:
        k = (angle // 90) % 4
        back = {0: [[1, 0, 0], [0, 1, 0]], 1: [[0, -1, w], [1, 0, 0]],
                2: [[-1, 0, w], [0, -1, h]], 3: [[0, 1, 0], [-1, 0, h]]}[k]
        return View(np.ascontiguousarray(np.rot90(image, k)), np.array(back, np.float64))
    turn = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
    c, s = abs(turn[0, 0]), abs(turn[0, 1])
    size = (round(w * c + h * s), round(w * s + h * c))
    turn[:, 2] += (size[0] - w) / 2, (size[1] - h) / 2
    view = cv2.warpAffine(image, turn, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    return View(view, cv2.invertAffineTransform(turn))


def turned_back(dets: Detections, back: np.ndarray) -> Detections:
    """Detections found on a View in the frame's coordinates (``back``: the View's). A box is taken for the
    ellipse it frames, as a face is: turned back, its box is the ellipse's bounding box, which for a
    diagonal is not larger than the face as the corners' bounding box would be (sqrt 2 for a square)."""
    if not len(dets):
        return dets
    linear, shift = back[:, :2], back[:, 2]
    centre = (dets.boxes[:, :2] + dets.boxes[:, 2:]) / 2 @ linear.T + shift  # [N, 2]
    half = (dets.boxes[:, 2:] - dets.boxes[:, :2]) / 2  # [N, 2] the ellipse's semi-axes
    # frame axis i's half-extent: sqrt(sum_j (linear[i, j] * half[j]) ** 2)
    extent = np.sqrt(((half[:, None, :] * linear[None, :, :]) ** 2).sum(axis=2))  # [N, 2]
    landmarks = dets.landmarks @ linear.T + shift
    return Detections(np.concatenate([centre - extent, centre + extent], axis=1), dets.scores.copy(), landmarks)


def pooled(dets: list[Detections]) -> Detections | None:
    """Several passes' detections together (no NMS); None when they hold none."""
    dets = [d for d in dets if len(d)]
    if not dets:
        return None
    return Detections(np.concatenate([d.boxes for d in dets]), np.concatenate([d.scores for d in dets]),
                      np.concatenate([d.landmarks for d in dets]))


def roll(landmarks: np.ndarray) -> np.ndarray:
    """[N] degrees: the angle of each face's eye line ([N, 5, 2] landmarks, right eye then left), 0 upright."""
    eyes = landmarks[:, 1] - landmarks[:, 0]  # [N, 2]
    return np.degrees(np.arctan2(eyes[:, 1], eyes[:, 0]))


def outscored(found: Detections, turned_faces: list[Detections]) -> np.ndarray:
    """[N] bool: the boxes of ``found`` (the upright passes) on a face (SAME_FACE_IOU) that a sure turned box
    (ACTIVATE_SCORE) scores TURN_MARGIN more than, or more at all where the two boxes' landmarks disagree on the
    face's roll by ROLL_DISAGREE or more. The turned box then stands for the face: its landmarks turn the cover
    with it. An upright pass boxes a sideways face with an upright face's landmarks, and its cover then leaves
    mouth and chin bare (two_people.jpg a quarter turned: 0.56 against 0.93; a clip stored sideways, every
    detector run: 0.51-0.85 at a roll of 0-34 degrees against 0.84-0.92 turned, at -91 to -96)."""
    pool = pooled(turned_faces)
    if not len(found) or pool is None:
        return np.zeros(len(found), bool)
    return replaces(found, pool).any(axis=1)


def replaces(found: Detections, turned_faces: Detections) -> np.ndarray:
    """[N, M] bool: turned box m stands for face n of ``found`` instead of its box (see outscored)."""
    same = iou_matrix(found.boxes, turned_faces.boxes) >= SAME_FACE_IOU  # [N, M]
    apart = np.abs((roll(found.landmarks)[:, None] - roll(turned_faces.landmarks)[None, :] + 180) % 360 - 180)
    margin = np.where(apart >= ROLL_DISAGREE, 0.0, TURN_MARGIN)  # [N, M]
    theirs, ours = turned_faces.scores[None, :], found.scores[:, None]
    return same & (theirs >= ACTIVATE_SCORE) & (theirs > ours + margin - 1e-6)


def own_faces(turned_dets: Detections, others: list[Detections]) -> np.ndarray:
    """[N] bool: the turned pass's boxes on no face the other passes boxed (SAME_FACE_IOU), where a sure
    turned box (ACTIVATE_SCORE) over only weak boxes (under WEAK_OTHER) counts as its own: that is the turned
    face, which the upright pass half saw. A red team's face turned a quarter turn, 30 px, was boxed
    0.91-0.93 turned and 0.31-0.35 upright, narrow and off-centre, and its eyes stayed bare (the NMS that
    follows keeps the surer box). A turned box that outscored any upright box took the band pan's over-cover
    from 7.08% to 7.50% (heads on one side boxed again, turned, and tracked twice)."""
    pool = pooled(others)
    if not len(turned_dets) or pool is None:
        return np.ones(len(turned_dets), bool)
    same = iou_matrix(turned_dets.boxes, pool.boxes) >= SAME_FACE_IOU  # [N, M]
    overrides = (turned_dets.scores[:, None] >= ACTIVATE_SCORE) & (pool.scores[None, :] < WEAK_OTHER)
    return ~(same & ~overrides).any(axis=1)


class TurnWatch:
    """Which turned passes a video's detector run takes (see the module docstring). One per video."""

    def __init__(self) -> None:
        self._quiet: dict[int, int] = {}  # active turn -> runs in a row its pass found no face of its own
        self._probe = 0  # index into TURNS of the turn the next scan probes
        self._started = False
        self._seen: set[int] = set()  # turns ever active in this video
        self._candidates: dict[int, int] = {}  # turn -> runs it is probed again on (a face short of sure)
        self._whole: set[int] = set()  # active turns that held more faces than upright on their last run

    def copy(self) -> "TurnWatch":
        """A watch in this one's state that can run without changing it (an off-schedule detector run)."""
        return copy.deepcopy(self)

    @property
    def active(self) -> tuple[int, ...]:
        return tuple(k for k in TURNS if k in self._quiet)

    def due(self, *, scan: bool, cut: bool) -> list[int]:
        """The turns to look at on this run: every turn on the first run; the active turns, on a cut every
        turn that was ever active, and on a scan one more in rotation. (Every turn on every cut took 11% of
        hamilton's speed, most of it on its many cuts.)"""
        if not self._started:
            self._started = True
            return list(TURNS)
        due = list(self.active)
        if cut:  # a new shot of a clip stored sideways: the turns that were active before
            due += [k for k in TURNS if k in self._seen and k not in due]
        for k in list(self._candidates):  # a face short of sure: looked at again
            due += [k] if k not in due else []
            self._candidates[k] -= 1
            if not self._candidates[k]:
                del self._candidates[k]
        if scan:
            for _ in TURNS:
                k = TURNS[self._probe]
                self._probe = (self._probe + 1) % len(TURNS)
                if k not in due:
                    due.append(k)
                    break
        return due

    def take(self, angle: int, scores: np.ndarray, own: np.ndarray, upright: int) -> np.ndarray:
        """[N] bool: which of turn ``angle``'s boxes (``scores`` [N]; ``own`` [N]: on no face the other passes
        boxed) this run takes, beside ``upright`` boxes of the upright passes. A probe takes none unless one
        scores ACTIVATE_SCORE (which makes the turn active). Where the turn holds more faces than upright,
        the picture stands that way and it takes them all, weak ones too; otherwise (someone lying down,
        a head on one side in an upright crowd) those from LONE_SCORE."""
        if angle not in self._quiet and not (own & (scores >= ACTIVATE_SCORE)).any():
            if (own & (scores >= CANDIDATE_SCORE)).any():  # and the opposite turn: YuNet half-finds a face
                # upside down (a face turned 90 degrees scored 0.6 in the 90-degree probe, 0.92 in the 270)
                self._candidates[angle] = self._candidates[(angle + 180) % 360] = CANDIDATE_RUNS
            own = np.zeros_like(own)  # a probe that found no sure face of its own takes nothing
        elif own.sum() <= upright:
            own = own & (scores >= LONE_SCORE)
        self._whole.discard(angle)
        if own.sum() > upright:
            self._whole.add(angle)
        self._saw(angle, bool(own.any()))
        return own

    def whole(self, angle: int) -> bool:
        """Whether turn ``angle`` held more faces than the upright passes on its last run: the picture stands
        that way, and the turn gets the small-face scan too (a clip stored sideways has small faces as well).
        A face lying down in an upright picture does not need it, and on a diagonal's canvas the scan of a
        1080p frame is 3840 px square."""
        return angle in self._whole

    def _saw(self, k: int, found_own: bool) -> None:
        """Whether turn ``k``'s pass on this run found a face of its own."""
        if found_own:
            self._quiet[k] = 0
            self._seen.add(k)
        elif k in self._quiet:
            self._quiet[k] += 1
            if self._quiet[k] >= QUIET_RUNS:
                del self._quiet[k]

