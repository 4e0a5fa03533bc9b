"""ByteTrack-style face tracker with privacy-first output rules.

* Every detection passed to ``update`` starts or continues a track (unmatched
  low-score detections too, unlike ByteTrack). A track is reported from the
  frame of its first detection scoring ``high_score`` or more; a track whose
  detections all score lower (a dark, soft or small face, or a false positive)
  from the detector run that matches it ``confirm_hits`` times. It is carried
  (held, unreported) in between, so a face found only by the periodic
  small-face scan is confirmed by the next scan. The look-ahead buffer covers
  the frames before a track is first reported.
* Camera motion (``update(..., motion=M)``, track/camera_motion.py): every
  track's state is carried through the frame-to-frame motion of the picture
  before association, so a panning camera does not fragment tracks and held
  covers move with the picture instead of staying where the face was.
* Four-stage association: detections with ``score >= high_score`` are matched
  to all tracks first, the remaining (low-score) ones to the tracks left over
  (both by IoU; a track no run has confirmed, once a run missed it, comes
  last), then what is left by nearness: a detection whose centre lies
  inside a left-over track's box continues it (a face that moved more than its
  box since the last run) instead of starting a duplicate beside it. A fourth
  stage (``_fast``) pairs a track the last run found with a detection of its
  own face (its pixels, ``same_face``) up to FAST_REACH of its height a frame
  away: a face moving most of its size a frame. The
  assignment is solved per connected component of the allowed pairs.
* ``provisional`` detections (FaceStage: the fast pass's boxes under its
  reliable size, between small-face scans) start tracks reported only from
  their second detector run; the look-ahead covers the frames before.
* A track that misses its detection is reported as ``"held"`` for
  ``round(hold_seconds * fps)`` frames (counted from the first detector run
  that missed it), then dropped. The held box is the Kalman-predicted one,
  widened with every frame unseen (TrackedFace.widened, bounded). The
  prediction itself keeps its last observed size and a clamped centre
  velocity (MAX_HELD_SPEED once a run missed it, FAST_REACH between runs), so
  it cannot grow or fly off explosively. ``update(...,
  blind_below=H)``: this run could not see faces under H px (the fast pass
  between small-face scans), so a smaller track it missed is not widened for
  it (only a run that could see it starts the widening), though its hold
  still counts from this run. On a crowd pan this took the changed area from
  57.9% to 55.8% of the frame with the same faces covered.
* ``update(..., locate=f)``: before a held face is widened (a detector run
  that could see it missed it), ``f`` looks for the face's pixels from its
  last detection near the predicted box (track/appearance.py, FaceStage passes
  it); a face found is reported on the match, unwidened
  (``TrackedFace.matched``, drawn with the smallest margin). Only the cover
  changes: the track's state, hold and memory go on as if nothing was found.
  Between detector runs a face of LOCATE_BETWEEN_PX or more is looked for the
  same way (a large face near the camera moves most in pixels).
* A reported track is then remembered, unreported, until
  ``remember_seconds`` after it was lost (standing still but for the camera's
  motion). A detection that matches it continues it from the detection (its
  motion state restarts): a face that flickers out of the detector for longer
  than the hold keeps one track, so one key and one identity (on a crowd pan
  39 of 534 tracks were such restarts). The look-ahead covers the frames it
  was not reported (lookahead.py). Until ``rejoin_seconds`` after it was lost
  it is still remembered, but a detection continues it only where
  ``update(..., same_face=f)`` says the detection shows the track's face
  (its pixels, track/appearance.py): a face that left through the frame's
  edge and came back (a camera sweeping back over a crowd) keeps its track,
  and a stranger standing where it was lost does not take it.
* ``update(dets, cut=True)``: a scene cut. Tracks no detection continues are
  dropped at once instead of held: their faces were in the previous shot.
* ``update(None)`` means the detector was not run on this frame: every track
  is predicted and reported as held. Such a frame never drops a track that was
  seen at the last detector run, so detect-every-N keeps faces covered
  between runs whatever ``hold_seconds`` is.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from streamdeid.config import TrackConfig
from streamdeid.cover_size import STILL_SPEED
from streamdeid.track.kalman_filter import KalmanFilter, xyah_to_xyxy, xyxy_to_xyah
from streamdeid.track.matching import NEAR_GATE, iou_matrix, linear_assignment, near_matrix
from streamdeid.types import Detections, TrackedFace

from .appearance import moved_to

# (track_id, predicted box [4]) -> the box moved onto the face's pixels, or None (see update)
Locate = Callable[[int, np.ndarray], "np.ndarray | None"]
# detection indices [K] that start tracks -> [K] bool, which of them are provisional (see update)
Provisional = Callable[[np.ndarray], np.ndarray]
# predicted box [4] -> (looked, the closer look's detection on it or None): see update and detect/closer.py
Verify = Callable[[np.ndarray], "tuple[bool, Detections | None]"]
# (track_id, detection box [4]) -> whether the detection shows that track's face (see update)
SameFace = Callable[[int, np.ndarray], bool]

# Detector runs that must match a track started by a provisional detection before it is reported.
PROVISIONAL_HITS = 2

# Closer looks in a row that must find no face before a hold ends (update's ``verify``): one look misses
# a dark face now and then (hamilton's audience: a moving 55 px face the fast pass found every run, a look
# at its held box did not, once), a face that has gone is missed by every look.
DOUBTS_TO_END = 2

# A held track whose predicted box overlaps a detection of this run (that went to another track) at this IoU,
# at a size within this ratio, is a copy of that face (FaceTracker._without_ended). Two faces that overlap
# so much are one face and the one it hides.
COPY_IOU = 0.4
COPY_SIZE_RATIO = 1.5

# A held track (missed by a run that could see it) with less than this share of its predicted box inside the
# frame has left through the edge (FaceTracker._without_ended).
DEPARTED_INSIDE = 0.4

# A face whose detected box spans this share of the frame's height or width is a close-up: when the detector
# loses it, it has most likely come closer still (a person leaning into a doorbell camera, a zoom), and a face
# larger than the frame is one no detector finds. Its hold lasts CLOSE_UP_HOLD_SECONDS, ended only by a scene
# cut or its own detection, not by closer looks nor by its box leaving the frame: on a zoom into the head-pose
# clip the man's eyes, nose and mouth were left uncovered for 2 s once the hold of 0.5 s ran out. (Hamilton's
# performer, the largest face of the shared clips, reaches 0.8 of its frame's height.)
CLOSE_UP_SHARE = 0.9
CLOSE_UP_HOLD_SECONDS = 3.0
# ... and, once a detector run has missed it, it is drawn over the whole frame: the frame's box, this much
# larger about its centre, so the cover's ellipse reaches the corners (the face, closer than the camera can
# frame, may be anywhere in it). Between detector runs, and while the runs find it, it is drawn as any face:
# a close talking head or a selfie that the detector keeps finding is covered at its own size.
CLOSE_UP_COVER = 2.0
# A close-up that a detection scoring under TrackConfig.high_score continues (``_Track.shaky``) is drawn over the
# frame too, on that frame and until the next run, and stays a close-up even when that box is smaller than the
# frame (only a sure detection brings it back to its size): a face larger than the frame is boxed weakly by part of
# it (an eye and the nose), and the box lies off the face's middle. On the zoom into the head-pose clip such boxes
# (0.28-0.44) left the mouth's corner, the cheek and the beard bare on 4-6 of 40 frames; how many moved with the
# input's encoding (tests/test_cli_run.py::test_a_face_zoomed_closer_than_the_frame_stays_covered). On noisy
# encodings of the zoom centred on the man, boxes of 0.40-0.42 a third of the frame wide took his track back to that
# size, and half his face box was bare on frames 25-28. A face once found at high_score or more that a weak box
# spanning the frame continues (it grew into a close-up: the zoom at x=330 with noise, 0.35 on frame 15, 41% of the
# frame bare on frames 15-16) is drawn over the frame as well; a weak box spanning the frame that starts a track, or
# continues one never sure, is not. So is one whose box reaches past the frame's edge by more than SHAKY_CUT of its
# size: on a zoom centred on the man's face, some encodings of the clip gave boxes of its eyes and nose at 0.61-0.91,
# 13% past the frame's left and bottom edges, and half his face box stayed bare on 2-4 frames. A close talking head
# that the frame holds whole (the selfie test's) reaches 2-4% past the top and bottom, and is drawn at its own size.
SHAKY_CUT = 0.08

# A track a reviewer's added box starts (--edits) takes its id from here on, so every other track keeps the id it had
# in the reviewed run: the ids `recover --track` and `export-key --track` name (an added track took the next id,
# and every later track's was one higher). Ids are 32-bit (keys/keyfile.py).
ADDED_IDS_FROM = 1_000_000

# Largest centre speed of a held track, in box heights per frame.
MAX_HELD_SPEED = 0.25

# Stage 4 of the association (FaceTracker._fast): a track the last run found continues with a detection of its
# face up to this many of its heights a frame away from its predicted centre, at a height within this ratio.
# A new track's first pairing starts from no speed, so this is also the fastest face followed. At 1.0 a face
# moving 1.1-1.4 of its size a frame (60 and 80 px faces on a street) started a new track at every run and was
# bare on every frame the detector skipped (31 of 156 face-frames bare); at 1.6, with the speed its detections
# measure (_fast_speeds), none (the pixel check still refuses neighbours: the crowd pans and hamilton covered the
# same, docs/recall.md).
FAST_REACH = 1.6
FAST_SIZE = 1.25

# Between two detector runs a face is drawn at its predicted box (BETWEEN_RUNS_GROWTH larger). A face at
# least this tall is looked for by its pixels there too (``locate``) and drawn on them when found
# (MATCHED_GROWTH): a large face near the camera moves most in pixels, and a crowd has few (looking at
# every face between runs cost a crowd pan 7 ms a frame).
LOCATE_BETWEEN_PX = 64.0


class _Track:
    __slots__ = ("track_id", "mean", "cov", "score", "landmarks_rel", "height", "misses", "lost_age", "hits",
                 "confirmed", "provisional", "unseen", "doubts", "gone", "sure", "close_up", "shaky")

    def __init__(self, track_id: int, kf: KalmanFilter, box: np.ndarray, score: float, landmarks: np.ndarray,
                 config: TrackConfig, provisional: bool = False) -> None:
        self.track_id = track_id
        self.provisional = provisional  # started by a provisional detection: confirmed by a second one
        self.mean, self.cov = kf.initiate(xyxy_to_xyah(box))
        self.misses = 0  # frames since the last matched detection
        self.lost_age = 0  # frames since a detector run first missed it (0: not lost)
        self.hits = 0  # detector runs that matched it
        self.unseen = 0  # frames since a detector run that could see it first missed it (0: none did)
        self.confirmed = False  # reported (see the module docstring)
        self.doubts = 0  # closer looks in a row, since its last detection, that found no face (see update)
        self.gone = False  # its hold ended early: closer looks found the face gone (remembered, not covered)
        self.sure = False  # a detection scored config.high_score or more (see FaceTracker.sure_boxes)
        self.close_up = False  # its last detection spanned CLOSE_UP_SHARE of the frame (see FaceTracker._report)
        self.shaky = False  # a close-up last boxed under high_score or past the frame's edge (see _spotted)
        self._observe(box, score, landmarks, config)

    def _observe(self, box: np.ndarray, score: float, landmarks: np.ndarray, config: TrackConfig) -> None:
        self.hits += 1
        needed = max(PROVISIONAL_HITS, config.confirm_hits) if self.provisional else config.confirm_hits
        strong = score >= config.high_score and not self.provisional
        self.confirmed = self.confirmed or strong or self.hits >= needed
        self.sure = self.sure or score >= config.high_score
        x1, y1, x2, y2 = box.astype(np.float64)
        w, h = max(x2 - x1, 1e-3), max(y2 - y1, 1e-3)
        self.height = h
        self.score = float(score)
        # landmarks relative to the box centre, in box units: they follow the
        # predicted box while the track is held
        self.landmarks_rel = (landmarks.astype(np.float64) - ((x1 + x2) / 2, (y1 + y2) / 2)) / (w, h)

    def matched(self, mean: np.ndarray, cov: np.ndarray, box: np.ndarray, score: float, landmarks: np.ndarray,
                config: TrackConfig) -> None:
        """A detection continued this track: ``mean``, ``cov`` its state corrected by it (FaceTracker
        corrects every matched track in one batched Kalman update)."""
        self.mean, self.cov = mean, cov
        self.misses = 0
        self.lost_age = 0
        self.unseen = 0
        self.doubts = 0
        self.gone = False
        self._observe(box, score, landmarks, config)


class FaceTracker:
    def __init__(self, *, fps: float, config: TrackConfig | None = None) -> None:
        if not fps > 0:
            raise ValueError(f"fps must be > 0, got {fps}")
        self.config = config or TrackConfig()
        self.fps = float(fps)
        self.hold_frames = max(0, int(round(self.config.hold_seconds * self.fps)))
        # tracks whose hold closer looks ended on the last update (DOUBTS_TO_END looks in a row found no face)
        self.looked_gone: set[int] = set()
        self.close_up_frames = max(self.hold_frames, int(round(CLOSE_UP_HOLD_SECONDS * self.fps)))
        self.remember_frames = max(self.hold_frames, int(round(self.config.remember_seconds * self.fps)))
        self.rejoin_frames = max(self.remember_frames, int(round(self.config.rejoin_seconds * self.fps)))
        self._kf = KalmanFilter()
        self._tracks: list[_Track] = []
        self._next_id = 1
        self._next_added_id = ADDED_IDS_FROM

    @property
    def num_tracks(self) -> int:
        """Tracks reported or waiting for confirmation (not those only remembered)."""
        return sum(self._holding(t) for t in self._tracks)

    def sure_boxes(self) -> np.ndarray:
        """[K, 4] last boxes (x1 y1 x2 y2, before this frame's prediction) of the kept tracks a detection
        was once sure of (score >= high_score): a face the detector was sure of stays that face when it is
        boxed oddly later (turning away at the frame's edge, FaceStage._without_odd)."""
        sure = [t.mean for t in self._tracks if t.sure and self._kept(t)]
        return xyah_to_xyxy(np.stack(sure)) if sure else np.zeros((0, 4))

    def sure_ids(self) -> set[int]:
        """Ids of the tracks a detection was once sure of (score >= high_score), as of the newest frame."""
        return {t.track_id for t in self._tracks if t.sure}

    def _kept(self, t: _Track) -> bool:
        """Whether a track missed by the detector is still kept: held, or remembered if it was reported
        (until rejoin_frames; past remember_frames only a detection that shows its face continues it)."""
        return t.lost_age <= self._hold(t) or (t.confirmed and t.lost_age <= self.rejoin_frames)

    def _holding(self, t: _Track) -> bool:
        """Whether a track is held (covered if confirmed): found at the last run, or missed within its hold
        and not found gone by closer looks."""
        return t.lost_age <= self._hold(t) and not t.gone

    def _hold(self, t: _Track) -> int:
        return self.close_up_frames if t.close_up else self.hold_frames

    def _new_id(self, added: bool = False) -> int:
        """The next track id; from ADDED_IDS_FROM for a track a reviewer's added box starts."""
        if added:
            self._next_added_id += 1
            return self._next_added_id - 1
        tid = self._next_id
        self._next_id += 1
        return tid

    def update(self, dets: Detections | None, *, cut: bool = False, motion: np.ndarray | None = None,
               provisional: "np.ndarray | Provisional | None" = None, blind_below: float = 0.0,
               locate: Locate | None = None, verify: Verify | None = None,
               same_face: SameFace | None = None, frame_size: tuple[int, int] | None = None,
               added: np.ndarray | None = None) -> list[TrackedFace]:
        """Advance one frame. ``motion``: the camera motion from the previous frame ([2, 3], see
        track/camera_motion.py), applied to every track before association. ``provisional``: [N]
        bool, detections that start a track reported only from its second detector run (back-filled
        before it by the look-ahead); or a function giving that for the detections (indices [K]) that
        start tracks, asked once per run. ``blind_below``: the height (px) under which this run could not
        see a face (see the module docstring). ``locate(track_id, box)``: where the track's face
        is found near its predicted ``box`` in this frame (track/appearance.py), or None; a held
        face it finds is put there and not widened. ``verify(box)``: a closer look at a reported track
        this run missed though it could see it (detector frames only): a face it finds continues the
        track as a detection; where DOUBTS_TO_END looks in a row find none, the face has gone (turned
        away, left, hidden) and its hold ends then (it is remembered, uncovered). ``same_face(track_id,
        box)``: whether a detection shows the face of a track lost more than remember_seconds ago; only
        then does the detection continue it (None: such a track is continued by no detection). ``added``: [N]
        bool, the detections a reviewer added (--edits): a track one starts takes an id from ADDED_IDS_FROM."""
        self.looked_gone = set()
        self._predict(motion)
        self._age()
        if dets is None:
            self._tracks = [t for t in self._tracks if self._kept(t)]
            return self._held([t for t in self._tracks if t.confirmed and self._holding(t)], locate, frame_size)

        boxes, scores, landmarks = dets.boxes, dets.scores, dets.landmarks
        matched, left_dets = self._associate(boxes, scores)
        refused = self._refused(matched, boxes, same_face)
        for ti in refused:
            del matched[ti]
        fast = self._fast(matched, left_dets, boxes, same_face) if same_face is not None else {}
        matched.update(fast)
        speeds = self._fast_speeds(fast, boxes)
        self._correct(matched, dets)
        for ti, speed in speeds.items():  # the two detections measure it; the filter would take runs to follow
            self._tracks[ti].mean[4:6] = speed
        # PRIVACY: unmatched detections (high or low score) start tracks now; a provisional one is
        # reported from its second detector run (FaceStage sets it only when the look-ahead reaches back)
        taken = set(matched.values())
        unmatched = sorted({di for di in left_dets if di not in taken} | set(refused.values()))
        if callable(provisional):  # decided only for the detections that start tracks (FaceStage: a closer look)
            provisional = dict(zip(unmatched, provisional(np.array(unmatched, np.int64)).tolist()))
        new_tracks = [_Track(self._new_id(added is not None and bool(added[di])), self._kf, boxes[di], scores[di],
                             landmarks[di], self.config, provisional is not None and bool(provisional[di]))
                      for di in unmatched]
        det_of = {id(self._tracks[ti]): di for ti, di in matched.items()}
        det_of.update({id(t): di for t, di in zip(new_tracks, unmatched)})
        return self._report(self._tracks + new_tracks, det_of, dets, cut, blind_below, locate, verify, frame_size)

    def update_added(self, added: Detections, *, motion: np.ndarray | None = None, locate: Locate | None = None,
                     same_face: SameFace | None = None,
                     frame_size: tuple[int, int] | None = None) -> list[TrackedFace]:
        """Advance one frame that is no detector run of the schedule but holds a reviewer's ``added`` boxes
        (edits/apply.py: sure faces, never provisional). The added boxes continue the tracks they match or
        start new ones, reported at once; every other track advances as between detector runs. So a re-run
        with edits keeps the reviewed run's other tracks: updating them with a whole off-schedule run's
        detections changed 150 of hamilton's first 1,006 covers for one box in an empty corner."""
        self.looked_gone = set()
        self._predict(motion)
        self._age()
        boxes = added.boxes
        matched, _ = self._associate(boxes, added.scores)
        for ti in self._refused(matched, boxes, same_face):
            del matched[ti]
        self._correct(matched, added)
        unmatched = sorted(set(range(len(added))) - set(matched.values()))  # start tracks, reported at once
        new = [_Track(self._new_id(True), self._kf, boxes[di], added.scores[di], added.landmarks[di], self.config,
                      False) for di in unmatched]
        det_of = {id(self._tracks[ti]): di for ti, di in matched.items()}
        det_of.update({id(t): di for t, di in zip(new, unmatched)})
        self._tracks = [t for t in self._tracks if id(t) in det_of or self._kept(t)] + new
        out = []
        for t in self._tracks:
            di = det_of.get(id(t))
            if di is not None:
                self._spotted(t, boxes[di], float(added.scores[di]), frame_size)
                if t.confirmed:
                    out.append(self._detected(t, boxes[di], added.landmarks[di], float(added.scores[di]), frame_size))
        between = [t for t in self._tracks if id(t) not in det_of and t.confirmed and self._holding(t)]
        return out + self._held(between, locate, frame_size)

    def _refused(self, matched: dict[int, int], boxes: np.ndarray, same_face: SameFace | None) -> dict[int, int]:
        """The pairs of ``matched`` ({track index: detection index}) whose track was lost more than
        remember_frames ago and whose detection ``same_face`` does not take for its face."""
        return {ti: di for ti, di in matched.items()
                if self._tracks[ti].lost_age > self.remember_frames
                and (same_face is None or not same_face(self._tracks[ti].track_id, boxes[di]))}

    def _correct(self, matched: dict[int, int], dets: Detections) -> None:
        """Every matched track ({track index: detection index}) corrected by its detection, in one
        batched Kalman update ([M, 8] means, [M, 8, 8] covariances)."""
        if not matched:
            return
        tracks = [self._tracks[ti] for ti in matched]
        di = np.fromiter(matched.values(), np.int64, len(matched))
        measured = xyxy_to_xyah(dets.boxes[di])  # [M, 4] float64
        for t, z in zip(tracks, measured):
            if not self._holding(t):  # remembered: where it stood is stale, start from the detection
                t.mean, t.cov = self._kf.initiate(z)
        mean, cov = self._kf.update(np.stack([t.mean for t in tracks]), np.stack([t.cov for t in tracks]), measured)
        for t, m, c, d in zip(tracks, mean, cov, di.tolist()):
            t.matched(m, c, dets.boxes[d], dets.scores[d], dets.landmarks[d], self.config)

    def _age(self) -> None:
        """One more frame since each track's last match, and since a run first missed it (if one did)."""
        for t in self._tracks:
            t.misses += 1
            if t.lost_age:
                t.lost_age += 1
            if t.unseen:
                t.unseen += 1

    def _associate(self, boxes: np.ndarray, scores: np.ndarray) -> tuple[dict[int, int], list[int]]:
        """Match detections to tracks in three stages (see the module docstring). Returns {track index:
        detection index} and the detections the first two stages left, in index order (those the third
        did not take start tracks)."""
        high = np.flatnonzero(scores >= self.config.high_score)
        low = np.flatnonzero(scores < self.config.high_score)
        track_boxes = xyah_to_xyxy(np.stack([t.mean for t in self._tracks])) if self._tracks else np.zeros((0, 4))
        # tracks a detector run missed before any run confirmed them (a weak box seen once): matched last
        doubtful, others = [], []
        for ti, t in enumerate(self._tracks):
            (doubtful if t.lost_age and not t.confirmed else others).append(ti)

        matched: dict[int, int] = {}  # track index -> detection index

        def assign(dets: np.ndarray, tracks: list[int]) -> np.ndarray:
            """Match ``dets`` (detection indices) to the unmatched of ``tracks`` (track indices) by IoU; the
            detections left over."""
            tracks = [ti for ti in tracks if ti not in matched]
            pairs, _, free = linear_assignment(iou_matrix(track_boxes[tracks], boxes[dets]), self.config.match_iou)
            for ti, di in pairs:
                matched[tracks[ti]] = int(dets[di])
            return dets[free]

        # stages 1 and 2: confident detections, then low-score ones, each to the tracks left over, the doubtful
        # ones last. On hamilton a second box on the performer's face started a track no later run found; 15
        # frames on it overlapped his next detection more than his own track did and took it over: his track's
        # hold ended as a copy, and the look-ahead back-filled the other over its gap, a second, larger cover
        # beside him.
        free_high = assign(assign(high, others), doubtful)
        free_low = assign(assign(low, others), doubtful)
        # stage 3: what is left, by nearness: a face that moved more than its box since the last
        # detector run (a small face, a jolt the camera motion missed) continues its track instead
        # of starting a second one beside it, which would leave a ghost cover held where it was
        left_tracks = [ti for ti in range(len(self._tracks)) if ti not in matched]
        left_dets = sorted(set(free_high.tolist()) | set(free_low.tolist()))
        pairs, _, _ = linear_assignment(near_matrix(track_boxes[left_tracks], boxes[left_dets]), NEAR_GATE)
        for ti, di in pairs:
            matched[left_tracks[ti]] = left_dets[di]
        return matched, left_dets

    def _fast_speeds(self, fast: dict[int, int], boxes: np.ndarray) -> dict[int, np.ndarray]:
        """The centre speed ([2] px a frame) of each track ``_fast`` continued ({track index: detection
        index}): the way from its last detection to this one over the frames between (the prediction less the
        speed it assumed, so the camera's motion stays in). A face at 110 px a frame first paired from rest kept
        a third of that speed after the Kalman update, and the frame after its last run was drawn 70 px behind
        it (9% of its inner box covered)."""
        speeds = {}
        for ti, di in fast.items():
            t = self._tracks[ti]
            centre = (boxes[di, :2] + boxes[di, 2:]).astype(np.float64) / 2
            speeds[ti] = t.mean[4:6] + (centre - t.mean[:2]) / max(t.misses, 1)
        return speeds

    def _fast(self, matched: dict[int, int], left_dets: list[int], boxes: np.ndarray,
              same_face: SameFace) -> dict[int, int]:
        """Stage 4 of the association: a face that moved more than half its box since the last run (a runner, a
        face close to the camera), which the nearness stage cannot pair. A track the last run found and this one
        has not matched continues with a detection no stage took when the detection is within FAST_SIZE of its
        height, its centre lies within FAST_REACH of that height a frame since the last run from the track's
        predicted centre, and it shows the track's face (``same_face``: its pixels, the rejoin's check, which
        takes no neighbour in a crowd). Each such face would otherwise start a new track at every run, drawn
        where the last run left it between runs: a 90 px face crossing a 640 px frame at 80 px a frame was bare
        on every frame the detector skipped ({track index: detection index}, the pairs made)."""
        taken = set(matched.values())
        dets = [di for di in left_dets if di not in taken]
        tracks = [ti for ti, t in enumerate(self._tracks)
                  if ti not in matched and t.misses and not t.lost_age and self._holding(t)]
        if not dets or not tracks:
            return {}
        predicted = xyah_to_xyxy(np.stack([self._tracks[ti].mean for ti in tracks]))  # [T, 4]
        d = boxes[dets].astype(np.float64)  # [D, 4]
        height = np.array([self._tracks[ti].height for ti in tracks])  # [T]
        reach = FAST_REACH * height * np.array([self._tracks[ti].misses for ti in tracks])  # [T] px
        gap = np.hypot(*((d[None, :, :2] + d[None, :, 2:]) / 2 - (predicted[:, None, :2] + predicted[:, None, 2:]) / 2
                         ).transpose(2, 0, 1))  # [T, D] centre distances
        ratio = (d[:, 3] - d[:, 1])[None, :] / np.maximum(height[:, None], 1e-6)  # [T, D]
        near = np.where((gap <= reach[:, None]) & (ratio >= 1 / FAST_SIZE) & (ratio <= FAST_SIZE),
                        1.0 - gap / np.maximum(reach[:, None], 1e-6), 0.0)
        for i, j in zip(*np.nonzero(near)):  # the pixel check only where the geometry allows (a few pairs)
            if not same_face(self._tracks[tracks[i]].track_id, d[j]):
                near[i, j] = 0.0
        pairs, _, _ = linear_assignment(near, NEAR_GATE)
        return {tracks[i]: dets[j] for i, j in pairs}

    def _spotted(self, t: _Track, box: np.ndarray, score: float, frame_size: tuple[int, int] | None) -> None:
        """A detection (``box``, ``score``) continued or started ``t``: is it a close-up, and is it shaky (a
        close-up before and now, found under high_score or boxed past the frame's edge: see SHAKY_CUT)?"""
        was, weak = t.close_up, score < self.config.high_score
        # a weak box does not bring a close-up back to its size: it frames part of the face (see SHAKY_CUT); nor
        # is a face once found surely drawn at a weak box that spans the frame as it grows into a close-up
        t.close_up = frame_size is not None and (_spans(box, frame_size) or (was and weak))
        t.shaky = t.close_up and ((weak and (was or t.sure)) or (was and _cut_off(box, frame_size)))

    @staticmethod
    def _detected(t: _Track, box: np.ndarray, landmarks: np.ndarray, score: float,
                  frame_size: tuple[int, int] | None) -> TrackedFace:
        """``t``'s face on a frame a detection continued it: at its box, or over the frame when shaky."""
        face = TrackedFace(t.track_id, box, landmarks, score, "detected")
        return _over_the_frame(face, frame_size) if t.shaky and frame_size is not None else face

    def _report(self, tracks: list[_Track], det_of: dict[int, int], dets: Detections,
                cut: bool, blind_below: float = 0.0, locate: Locate | None = None,
                verify: Verify | None = None, frame_size: tuple[int, int] | None = None) -> list[TrackedFace]:
        """The faces to cover on a detector frame, and the tracks kept for the next one. ``det_of``:
        {id(track): detection index} of the tracks a detection continued or started; the others are
        held while within ``hold_frames`` of the run that first missed them (dropped at once at a cut).
        ``locate``, ``verify``: see update."""
        out: list[TrackedFace | None] = []
        kept: list[_Track] = []
        held: list[tuple[int, _Track]] = []  # (place in out, track): held faces are made in one batch
        for t in tracks:
            di = det_of.get(id(t))
            if di is not None:
                self._spotted(t, dets.boxes[di], float(dets.scores[di]), frame_size)
                if t.confirmed:
                    out.append(self._detected(t, dets.boxes[di], dets.landmarks[di], float(dets.scores[di]),
                                              frame_size))
                kept.append(t)
                continue
            t.lost_age = t.lost_age or 1
            if t.height >= blind_below:
                t.unseen = t.unseen or 1
            if cut or not self._kept(t):
                continue
            if t.confirmed and self._holding(t):
                held.append((len(out), t))
                out.append(None)
            kept.append(t)
        self._tracks = kept
        held = self._without_ended(held, dets, frame_size)
        for (i, t), face in zip(held, self._held([t for _, t in held], locate, frame_size)):
            # a face a run that could see it missed, whose pixels are not where it is guessed: look closer
            out[i] = self._verified(t, face, verify, dets.boxes) if t.unseen and verify is not None else face
        return [f for f in out if f is not None]

    @staticmethod
    def _without_ended(held: list[tuple[int, _Track]], dets: Detections,
                       frame_size: tuple[int, int] | None) -> list[tuple[int, _Track]]:
        """``held`` (place in out, track) less the tracks whose hold ends now (``gone``: remembered,
        uncovered, continued by a later detection as any lost track):

        * a copy of a face this run found for another track: its predicted box overlaps one of the run's
          detections at COPY_IOU or more, at a size within COPY_SIZE_RATIO (the detection went to a track
          that had it before, or to a remembered one). On hamilton the performer's face went back to a
          remembered track of his while the track that had followed him was held at its stale place for
          16 frames, a 250 px disc beside him;
        * a face that left through the frame's edge: a run that could see it missed it and under
          DEPARTED_INSIDE of its predicted box is inside the frame (``frame_size``, width and height). The
          performer, leaving at the right edge, was held 15 frames at a box drifting up and out."""
        if not held:
            return held
        boxes = xyah_to_xyxy(np.stack([t.mean for _, t in held]))  # [N, 4]
        ended = np.zeros(len(held), bool)
        if len(dets.boxes):
            ratio = (boxes[:, 3] - boxes[:, 1])[:, None] / np.maximum(dets.boxes[:, 3] - dets.boxes[:, 1], 1e-3)
            ended |= ((iou_matrix(boxes, dets.boxes) >= COPY_IOU) & (ratio <= COPY_SIZE_RATIO)
                      & (ratio >= 1 / COPY_SIZE_RATIO)).any(1)  # [N, D] -> [N]
        if frame_size is not None:
            w, h = frame_size
            inside_w = np.clip(np.minimum(boxes[:, 2], w) - np.maximum(boxes[:, 0], 0), 0, None)
            inside_h = np.clip(np.minimum(boxes[:, 3], h) - np.maximum(boxes[:, 1], 0), 0, None)
            area = np.maximum((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), 1e-6)
            ended |= ((inside_w * inside_h / area < DEPARTED_INSIDE)
                      & np.array([t.unseen > 0 and not t.close_up for _, t in held]))  # a close-up outgrows it
        for (_, t), end in zip(held, ended):
            t.gone = t.gone or bool(end)
        return [x for x, end in zip(held, ended) if not end]

    def _verified(self, t: _Track, held: TrackedFace, verify: Verify, taken: np.ndarray) -> TrackedFace | None:
        """``held``, the face _held made for a track this run missed, after a closer look at its predicted
        box: the face the look finds, reported as detected (the track continues from it); ``held`` when
        its pixels were found there by template (it is there: no look, which costs 10-20 ms where the
        template cost 30 us), when it is not looked at, or when the look finds nothing for the first time;
        None once DOUBTS_TO_END looks in a row found nothing: its hold ends, ``gone`` (it is remembered,
        uncovered, for as long as a track lost then would be). None too, ``gone``, when the face the look
        finds overlaps one of this run's detections (``taken``, [D, 4]: each went to another track) at
        COPY_IOU: the held track is a copy of a face another track covers. Continued, it made two tracks
        on one face until the end of the crowd pan (the parade's: two tracks on one face for 60 frames)."""
        if held.matched:
            t.doubts = 0
            return held
        looked, found = verify(xyah_to_xyxy(t.mean[:4]))
        if not looked:
            return held
        if found is None:
            t.doubts += 1
            if t.doubts >= DOUBTS_TO_END and not t.close_up:  # a face larger than the frame is found by no look
                t.gone = True
                self.looked_gone.add(t.track_id)
                return None
            return held
        if len(taken) and (iou_matrix(found.boxes[:1], taken) >= COPY_IOU).any():
            t.gone = True
            return None
        mean, cov = self._kf.update(t.mean[None], t.cov[None], xyxy_to_xyah(found.boxes))
        t.matched(mean[0], cov[0], found.boxes[0], float(found.scores[0]), found.landmarks[0], self.config)
        return TrackedFace(t.track_id, found.boxes[0], found.landmarks[0], float(found.scores[0]), "detected")

    def _predict(self, motion: np.ndarray | None) -> None:
        """Every track one frame ahead, in one batch ([N, 8] means, [N, 8, 8] covariances), then
        carried through the camera motion. A held track (missed at a detector run) keeps its size
        and a clamped centre speed, so its prediction cannot grow or fly off explosively."""
        if not self._tracks:
            return
        mean = np.stack([t.mean for t in self._tracks])
        cov = np.stack([t.cov for t in self._tracks])
        height = np.array([t.height for t in self._tracks])
        held = np.array([t.misses > 0 for t in self._tracks])
        mean[held, 6:8] = 0.0
        # between runs (no run missed it yet) as fast as a face the association follows (FAST_REACH)
        reach = np.array([FAST_REACH if not t.lost_age else MAX_HELD_SPEED for t in self._tracks])
        limit = (reach[held] * height[held])[:, None]
        mean[held, 4:6] = np.clip(mean[held, 4:6], -limit, limit)
        remembered = np.array([not self._holding(t) for t in self._tracks])
        mean[remembered, 4:6] = 0.0  # no longer covered: it stands where it was lost (and moves with the camera)
        mean, cov = self._kf.predict(mean, cov)
        mean[:, 2] = np.maximum(mean[:, 2], 1e-2)
        mean[:, 3] = np.clip(mean[:, 3], 0.5 * height, 2.0 * height)
        if motion is not None:
            mean, cov, height = _moved(mean, cov, height, motion)
        for t, m, c, h in zip(self._tracks, mean, cov, height):
            t.mean, t.cov, t.height = m, c, float(h)

    @staticmethod
    def _held(tracks: list[_Track], locate: Locate | None,
              frame_size: tuple[int, int] | None = None) -> list[TrackedFace]:
        """The tracks' predicted faces (boxes and landmarks in one batch: a crowd holds hundreds), each
        widened by the frames since a detector run first missed it (between runs, the frames the
        detector skips, it is not widened: it was seen at the last run), unless ``locate`` finds the
        face's pixels near it: then it is put on them, not widened. (Looking between runs too, within
        4% of the size, took a crowd pan's changed area 2 points lower for 7 ms a frame of tracking,
        about 17 ms.) A close-up a run missed is drawn over the frame (``frame_size``, width and height)."""
        if not tracks:
            return []
        boxes = xyah_to_xyxy(np.stack([t.mean for t in tracks]))  # [N, 4]
        size, centre = boxes[:, 2:] - boxes[:, :2], (boxes[:, :2] + boxes[:, 2:]) / 2  # [N, 2] each
        # landmarks_rel is in box units about the centre: they follow the predicted box
        landmarks = np.stack([t.landmarks_rel for t in tracks]) * size[:, None] + centre[:, None]  # [N, 5, 2]
        boxes, landmarks = boxes.astype(np.float32), landmarks.astype(np.float32)
        faces = []
        for t, box, lm in zip(tracks, boxes, landmarks):
            # between runs, a track moving under STILL_SPEED of its height a frame is where it was detected
            still = not t.unseen and float(np.hypot(t.mean[4], t.mean[5])) < STILL_SPEED * t.height
            face = TrackedFace(t.track_id, box, lm, t.score, "held", between_runs=not t.unseen, still=still)
            if t.unseen:
                found = locate(t.track_id, face.box) if locate is not None else None
                face = moved_to(face, found) if found is not None else face.widened(t.unseen, "held")
            elif locate is not None and t.height >= LOCATE_BETWEEN_PX:
                found = locate(t.track_id, face.box)  # a large face between runs: on its pixels if found
                face = moved_to(face, found) if found is not None else face
            if t.close_up and (t.lost_age or t.shaky) and frame_size is not None:
                face = _over_the_frame(face, frame_size)
            faces.append(face)
        return faces


def _moved(mean: np.ndarray, cov: np.ndarray, height: np.ndarray,
           motion: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Track states ([N, 8], [N, 8, 8], [N] last observed heights) carried through a camera motion
    ([2, 3] similarity, previous -> this frame): the centre and its velocity rotate and shift with the
    picture, the height scales (as BoT-SORT's GMC does for its (x, y, w, h) state)."""
    rot = motion[:, :2]
    scale = float(np.sqrt(abs(np.linalg.det(rot))))
    jac = np.eye(8)
    jac[0:2, 0:2] = rot
    jac[4:6, 4:6] = rot
    jac[3, 3] = jac[7, 7] = scale
    mean = mean @ jac.T
    mean[:, 0:2] += motion[:, 2]
    return mean, jac @ cov @ jac.T, height * scale


def _spans(box: np.ndarray, frame_size: tuple[int, int]) -> bool:
    """Whether ``box`` (x1 y1 x2 y2) spans CLOSE_UP_SHARE of the frame (width, height) on either axis."""
    w, h = frame_size
    return bool(box[3] - box[1] >= CLOSE_UP_SHARE * h or box[2] - box[0] >= CLOSE_UP_SHARE * w)


def _cut_off(box: np.ndarray, frame_size: tuple[int, int]) -> bool:
    """Whether ``box`` (x1 y1 x2 y2) reaches past an edge of the frame (width, height) by more than SHAKY_CUT of
    its own size: the face it is part of goes on beyond the frame."""
    w, h = frame_size
    bw, bh = max(box[2] - box[0], 1e-3), max(box[3] - box[1], 1e-3)
    return bool(max(-box[0], box[2] - w) > SHAKY_CUT * bw or max(-box[1], box[3] - h) > SHAKY_CUT * bh)


def _over_the_frame(face: TrackedFace, frame_size: tuple[int, int]) -> TrackedFace:
    """A close-up a detector run has missed (its track's ``lost_age``) or found shakily (``shaky``), drawn over its
    whole frame: the frame's box, CLOSE_UP_COVER larger about its centre, with no landmarks, so the renderer places
    the cover by the box (as an added box's). The track's landmarks put on that box placed it by their centre,
    which lies where the last detection's box had them: on a zoom centred on the head-pose clip's man, off to the
    left, and his jaw, mouth corner and ear were bare on 17 frames (33-48% of his face box unchanged). Only the
    drawn face: the track stays at its own box, so the face's next detection continues it and ends the hold."""
    width, height = frame_size
    dx, dy = (CLOSE_UP_COVER - 1) * width / 2, (CLOSE_UP_COVER - 1) * height / 2
    box = np.array([-dx, -dy, width + dx, height + dy], np.float32)
    return TrackedFace(face.track_id, box, np.full((5, 2), np.nan, np.float32), face.score, "held")
