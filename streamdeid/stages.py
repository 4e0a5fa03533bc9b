"""The two stages every run goes through: ``FaceStage`` (detect + track) and ``RenderStage`` (render + count).

``Pipeline`` (pipeline.py) wires them around the look-ahead buffer; both are usable on their own
(tests, benchmarks/crowd.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from .config import PipelineConfig, detect_cadence
from .detect.closer import AGREE_IOU, CloserLook, GuessCheck, frame_scale_look
from .detect.finder import (MAX_SCAN_SIDE, ODD_SIZE_RATIO, FaceFinder, concat, holds_a_centre, merge,
                            min_face_over_picture, odd_boxes, typical_sizes)
from .detect.fields import seen_by_detector
from .detect.turns import TurnWatch
from .edits.apply import took_added, with_added
from .render import FrameRenderer, PastedFace
from .scenecut import SceneCutDetector
from .summary import RunSummary, StageTimes
from .track import FaceTracker
from .track.appearance import TemplateStore, find, same_face
from .track.camera_motion import CameraMotion
from .track.matching import iou_matrix
from .track.tracker import Locate, Provisional, SameFace, Verify
from .types import Detections, Frame, FrameResult, box_centres, longest_sides

log = logging.getLogger(__name__)

# A box from the fast pass's floor up, over another box's centre, scoring under this, starts a track
# reported from its second detector run (FaceStage._provisional); as the still passes' SURE_SCORE
# (detect/still.py), under which a box needs a second look there. On the crowd pan (benchmarks/crowd.py,
# solid): 37.8% -> 35.1% of the frame changed, the same CenterFace faces covered (4,191 of 4,194); in
# process, 44 of 11,741 pasted face-frames fewer, all of three 14-17 px faces no cover of their own was
# on (the cluster's box had covered them). Every weak box from the floor up, over another box or not:
# 33.3%, but 7 of hamilton's 20 featureless heads (hand-labelled, uncertain) uncovered; none with this rule.
WEAK_SCORE = 0.5
# An odd box overlapping a sure track's last box this much (IoU), and not odd beside it, is that face
# (FaceStage._without_odd). In a crowd an odd box over two faces overlaps a sure one too, but is odd beside it.
SURE_OVERLAP = 0.2
# ... or whose centre is this close to it (in the sure box's longest sides): a face that moved fast while
# its track was held or remembered (hamilton's performer leaving at the right edge, frames 46-70).
SURE_REACH = 0.75
# A look-ahead of this many frames or fewer (a slow live feed, a small --max-latency) backs no detector cadence
SHORT_LOOKAHEAD = 2


FrameObserver = Callable[[FrameResult, list[PastedFace]], None]


@dataclass(frozen=True)
class CameraStep:
    """What the picture did since the previous frame (FaceStage.step): a function of the frames alone, so
    Pipeline.run works it out on a thread of its own, ahead of detection and tracking."""

    motion: np.ndarray | None  # [2, 3] affine, previous frame -> this one, in frame pixels (camera_motion.py)
    cut: bool  # the picture changed more than the camera's motion explains (scenecut.py)
    # the input's last frame (Pipeline.run knows it a frame ahead): it gets a detector run, as no later run
    # can back-fill it (a face shown on the last frame only, at an odd index, was left bare: red team round 5)
    last: bool = False
    unsure: bool = False  # no motion known, though the camera may have moved (camera_motion.py)


class FaceStage:
    """Detection on every N-th frame plus tracking: turns frames into FrameResults.

    A scene cut always triggers detection, whatever the cadence: the tracker's
    predictions from the previous shot say nothing about the new one, and a
    face first seen on a cut cannot be back-filled. With no face in view the
    detector runs every ``idle_every`` frames instead (the look-ahead covers
    the frames before a newcomer's first detection). The small-face scan
    (detect/finder.py) runs on a detector run every ``scan_every`` frames and
    on every cut; a small face's track is held in between, so the interval is
    kept under the hold time. The camera's motion is estimated on every frame
    (track/camera_motion.py, timed as tracking) and handed to the tracker and,
    on the FrameResult, to the look-ahead.
    """

    def __init__(self, config: PipelineConfig, fps: float, *, guarded: bool = False,
                 lookahead_frames: int | None = None, scan_gate: Callable[[], bool] | None = None,
                 added: Mapping[int, np.ndarray] | None = None) -> None:
        """``guarded``: the renderer runs a leak guard (sets the default cadence, see DetectConfig.every).
        ``lookahead_frames``: the look-ahead buffer behind this stage; when it is too short to back-fill
        the frames a weak track waits for its confirmation, weak tracks are reported at once.
        ``scan_gate``: asked before a due small-face scan (live runs: is there time for it?); each refusal
        is counted in ``scans_skipped`` and the scan is tried again at the next detector run.
        ``added``: {frame index: [K, 4] boxes} a reviewer added (--edits, edits/apply.py): that frame gets a
        detector run whatever the cadence, and its boxes join the run's detections as sure faces."""
        self.added = added or {}
        self.finder = FaceFinder(config.detect)
        self.turns = TurnWatch() if config.detect.look_turned else None  # faces turned in the picture
        self.every = detect_cadence(config, guarded)
        self.idle_every = max(self.every, config.detect.idle_every)
        if lookahead_frames is not None:
            # a face new on a frame the detector skips is covered only by the look-ahead's back-fill: the
            # cadence may skip no more frames than it holds. A live feed at 5 fps has a look-ahead of 1 frame
            # (a quarter of --max-latency) and, idle every 4th frame, left a face bare on 2 of 150 frames. A
            # look-ahead of a frame or two is also lost whenever a live feed stalls or comes in bursts (the
            # frames held are rendered before the next arrives): there every frame is detected.
            reach = lookahead_frames + 1 if lookahead_frames > SHORT_LOOKAHEAD else 1
            self.every = min(self.every, reach)
            self.idle_every = max(self.every, min(self.idle_every, reach))
        hold_frames = round(config.track.hold_seconds * fps)
        self.scan_every = max(1, min(round(config.detect.scan_every * fps), hold_frames - self.every))
        track = config.track
        # Back-fill reaches the frames before a track's second detector run: a small face the fast
        # pass alone sees between scans waits for its second sighting to be reported (see __call__).
        self.defer_small = lookahead_frames is None or lookahead_frames >= self.scan_every + self.every
        if not self.defer_small:
            track = replace(track, confirm_hits=1)  # privacy first: no frame may wait uncovered
        self.tracker = FaceTracker(fps=fps, config=track)
        self.scene_cut = SceneCutDetector()
        self.camera = CameraMotion() if config.track.camera_motion else None
        # templates outlive their track's cover: a track lost long ago is continued only by its own face
        self.templates = TemplateStore(self.tracker.rejoin_frames) if config.track.match_templates else None
        self.guess_check = GuessCheck(self.finder, self._active_turns) if config.track.verify_guesses else None
        self._weak_look = CloserLook(self.finder) if config.track.look_at_weak else None
        self._odd_look = frame_scale_look(self.finder) if config.track.look_at_odd else None
        self.odd_dropped = 0  # odd boxes no closer look found a face on (not tracked)
        self.smallest_face: float | None = None  # set on the first frame
        self.min_face = config.detect.min_face  # asked for (--min-face): a frame size may allow less
        self.scan_gate = scan_gate
        self.scans_skipped = 0
        self._countdown = 0  # frames until the next scheduled detection
        self._since_scan = self.scan_every  # frames since the last small-face scan (scan on the first run)
        self.added_tracks: set[int] = set()  # tracks a reviewer's added box (--edits) went into, so far

    def step(self, image: np.ndarray, last: bool = False) -> CameraStep:
        """The camera's motion and the scene cut for the next frame's ``image`` ([H, W, 3] uint8 BGR). Call
        it once per frame, in order (both remember the previous frame), on any one thread; the result goes
        to ``__call__``. The motion comes first: a fast pan changes the whole picture, and only the motion
        tells it from a cut (scenecut.py). ``last``: the input's last frame (pipeline.flag_last)."""
        motion = self.camera(image) if self.camera is not None else None
        unsure = self.camera is not None and self.camera.unsure
        return CameraStep(motion, self.scene_cut(image, motion), last, unsure)

    def __call__(self, frame: Frame, times: StageTimes, *, force_cut: bool = False,
                 step: CameraStep | None = None) -> FrameResult:
        """Detect (on the cadence's frames) and track ``frame``. ``step``: ``self.step(frame.image)``, worked
        out ahead by the caller for every frame (Pipeline.run); None works it out here, timed as tracking."""
        t0 = time.perf_counter()
        if step is None:
            step = self.step(frame.image)
        camera_s = time.perf_counter() - t0  # timed as tracking
        motion = step.motion
        cut = step.cut or force_cut
        if self.smallest_face is None:
            h, w = frame.image.shape[:2]
            self.smallest_face = self.finder.smallest_face(w, h)
            if 0 < self.min_face < self.smallest_face - 0.5:  # a weaker promise than asked (0: no scan)
                log.warning("%dx%d video: faces are looked for from %.0f px, not from --min-face %d (the small-face "
                            "scan stops at %d px); a face under that size may be left visible",
                            w, h, self.smallest_face, self.min_face, MAX_SCAN_SIDE)
            too_tall = min_face_over_picture(self.min_face, w, h, self.smallest_face, "video")
            if too_tall:  # it was replaced without a word (the summary line named what was looked for)
                log.warning("%s", too_tall)
        provisional = None
        blind_below = 0.0
        added = self.added.get(frame.index)
        scheduled = cut or self._countdown <= 0 or step.last
        if scheduled or added is not None:
            # a reviewer's added box gets a detector run on its frame: the fast pass, off the schedule, which it
            # leaves as it was, so the re-run's other runs fall on the reviewed run's frames (edits/apply.py);
            # off the schedule, the run gives the added boxes their landmarks and nothing else to the tracker
            scan = scheduled and (cut or self._since_scan >= self.scan_every)
            if scan and not cut and self.scan_gate is not None and not self.scan_gate():
                scan = False
                self.scans_skipped += 1
            # an off-schedule run looks at the active turns on a copy, so the schedule's runs see what
            # the reviewed run's saw (detect/turns.py)
            turns = self.turns if scheduled or self.turns is None else self.turns.copy()
            seen = seen_by_detector(frame.image, frame.interlaced)  # one field of a combed frame
            dets = self.finder.find(seen, scan=scan, turns=turns, cut=cut)
            if self._odd_look is not None and len(dets):
                dets = self._without_odd(dets, seen)
            forced = np.zeros(len(dets), bool)
            if added is not None:  # a reviewer's boxes: sure faces, never provisional (edits/apply.py)
                dets, forced = with_added(dets, added)
            h, w = frame.image.shape[:2]
            floor = self.finder.fast_floor(w, h)
            if not scan:
                blind_below = floor  # the fast pass alone: a small face it missed was not looked for (tracker.py)
            if self.defer_small and len(dets):
                provisional = self._provisional(dets, scan, floor) & ~forced
                if self._weak_look is not None:
                    provisional = self._looked_at(provisional, dets, seen)
            if scan:
                self._since_scan = 0
            if scheduled:
                self._countdown = (self.every if len(dets) else self.idle_every) - 1
            else:
                self._countdown -= 1
        else:
            dets, seen = None, frame.image
            self._countdown -= 1
        self._since_scan += 1
        t1 = time.perf_counter()
        if cut:
            motion = None  # the new shot does not continue the old one
        size = (frame.image.shape[1], frame.image.shape[0])
        if dets is not None and not scheduled:  # only the added boxes: the other tracks stay the reviewed run's
            faces = self.tracker.update_added(dets[forced], motion=motion, locate=self._locator(frame.image),
                                              same_face=self._rejoiner(frame.image), frame_size=size)
        else:
            faces = self.tracker.update(dets, cut=cut, motion=motion, provisional=provisional,
                                        blind_below=blind_below, locate=self._locator(frame.image),
                                        verify=self._verifier(seen), same_face=self._rejoiner(frame.image),
                                        frame_size=size, added=forced if added is not None else None)
        if self.templates is not None:
            self.templates.update(frame.image, faces)
        if added is not None:  # the tracks a reviewer's boxes went into: no --keep/--only leaves them visible
            self.added_tracks.update(took_added(faces, added))
        if self.tracker.num_tracks and self._countdown >= self.every:
            self._countdown = self.every - 1  # a tracked face: back to the tracking cadence
        times.add("detect", t1 - t0 - camera_s)
        times.add("track", time.perf_counter() - t1 + camera_s)
        return FrameResult(frame, faces, scene_cut=cut, motion=motion, motion_unsure=step.unsure and not cut,
                           looked_gone=frozenset(self.tracker.looked_gone), searched=dets is not None)

    @staticmethod
    def _provisional(dets: Detections, scan: bool, floor: float) -> np.ndarray:
        """[N] bool: the boxes whose new tracks are reported only from their second detector run (the
        look-ahead covers the frames before; see TrackConfig.confirm_hits for why not every weak track).
        ``floor``: the face height (px) under which the fast pass is unreliable (FaceFinder.fast_floor).

        * Under the floor, between small-face scans: the fast pass also finds "faces" in the gaps of a
          crowd (a camera pan over a synthetic crowd: 8 of its 129 boxes on frame 0, none of them found
          by the scan) and they flicker. (Not left to the scan: it misses some faces the fast pass finds.)
        * From the floor up, scoring under WEAK_SCORE, over another box's centre: a box over a cluster
          of small faces, one of the weak "faces" a crowd makes (on the crowd pan, boxes of 45-120 px
          seen once, whose tracks were held and back-filled for a second each). Every run sees a box
          that large, so a real face is boxed again at the next. A weak box over no other box is
          reported at once as before: hamilton's dark, featureless back-row heads are found once now
          and then, and seven of them were covered only so (see WEAK_SCORE)."""
        height = dets.boxes[:, 3] - dets.boxes[:, 1]
        weak = (dets.scores < WEAK_SCORE) & (height >= floor) & holds_a_centre(dets.boxes)
        return weak if scan else weak | (height < floor)

    def _without_odd(self, dets: Detections, image: np.ndarray) -> Detections:
        """``dets`` with each box under the tracker's high score (a cymbal at the band's top edge scores
        0.53) that is unlike a face among faces (detect/finder.py odd_boxes: far larger than the boxes
        around it) checked by closer looks at the frame's own scale: kept where a look at the box finds a
        face scoring WEAK_SCORE on it, else replaced by the usual-sized faces a look finds inside it (none,
        mostly). A body or an instrument the fast pass boxes again and again would otherwise be held and
        back-filled around every sighting; a face it hides (hamilton frame 66: a dark 55 px face under a
        weak 190 px box) is found by the look inside. A box on a face as large that a detection was once
        sure of is left alone: hamilton's performer, boxed 262 px at 0.50 as he turns at the right edge (frame 70),
        was recognisable in the output when that box was dropped."""
        typical = typical_sizes(dets.boxes)
        odd = (dets.scores < self.tracker.config.high_score) & odd_boxes(dets.boxes, image.shape[1],
                                                                          image.shape[0], typical)
        if not odd.any():
            return dets
        sure = self.tracker.sure_boxes()
        if len(sure):  # on a face as large that a detection was sure of (the performer turning)
            sides = longest_sides(sure)
            as_large = longest_sides(dets.boxes)[:, None] < ODD_SIZE_RATIO * sides[None, :]  # [N, K]
            apart = np.hypot(*(box_centres(dets.boxes)[:, None, :] - box_centres(sure)[None, :, :]).transpose(2, 0, 1))
            near = (iou_matrix(dets.boxes, sure) >= SURE_OVERLAP) | (apart <= SURE_REACH * sides[None, :])
            odd &= ~(near & as_large).any(axis=1)
            if not odd.any():
                return dets
        keep, inside = ~odd, []
        for k in np.flatnonzero(odd):
            found = self._odd_look.look(image, dets.boxes[k], bright=True, turns=self._active_turns())
            # the look must be surer than the pass: at a smaller scale YuNet boxes the same dark suit again
            keep[k] = found is not None and float(found.scores[0]) >= WEAK_SCORE
            if not keep[k]:
                inside.append(self._odd_look.faces_in(image, dets.boxes[k], typical[k]))
        self.odd_dropped += int((~keep).sum())
        kept = dets[keep]
        found = merge(inside, AGREE_IOU)
        if len(found) and len(kept):  # only faces no kept box has already (the kept set is not re-merged)
            found = found[iou_matrix(found.boxes, kept.boxes).max(axis=1) <= AGREE_IOU]
        return concat([kept, found])

    def _looked_at(self, provisional: np.ndarray, dets: Detections, image: np.ndarray) -> Provisional:
        """``provisional`` ([N] bool), and for each weak box (under WEAK_SCORE) that starts a track and is
        not provisional already, a closer look (detect/closer.py, as the still passes'): a box the look
        finds no face in is provisional too (reported from its second detector run, back-filled then)."""

        def decide(starts: np.ndarray) -> np.ndarray:
            out = provisional[starts].copy()
            for k in np.flatnonzero(~out & (dets.scores[starts] < WEAK_SCORE)):
                out[k] = self._weak_look.look(image, dets.boxes[starts[k]], bright=True) is None
            return out
        return decide

    def _active_turns(self) -> tuple[int, ...]:
        """The angles the detector runs look at on every run (detect/turns.py), for the closer looks."""
        return self.turns.active if self.turns is not None else ()

    def _verifier(self, image: np.ndarray) -> Verify | None:
        """The tracker's ``verify`` for this frame (see GuessCheck)."""
        check = self.guess_check
        return None if check is None else (lambda box: check(image, box))

    def _rejoiner(self, image: np.ndarray) -> SameFace | None:
        """The tracker's ``same_face`` for this frame: does a detection show a long-lost track's face?"""
        return self._by_template(image, same_face)

    def _locator(self, image: np.ndarray) -> Locate | None:
        """The tracker's ``locate`` for this frame: a track's template searched near its guessed box."""
        return self._by_template(image, find)

    def _by_template(self, image: np.ndarray, check: Callable) -> Callable | None:
        """(track_id, box) -> ``check(image, the track's template, box)``, or None where the track has no
        template; None without a template store."""
        store = self.templates
        if store is None:
            return None

        def run(track_id: int, box: np.ndarray):
            template = store.get(track_id)
            return check(image, template, box) if template is not None else None
        return run


class RenderStage:
    """Render a tracked frame in place, count it into ``summary``, tell the observers."""

    def __init__(self, renderer: FrameRenderer, observers: Iterable[FrameObserver], summary: RunSummary) -> None:
        self.renderer = renderer
        self.observers = list(observers)
        self.summary = summary
        self.track_ids: set[int] = set()

    def __call__(self, result: FrameResult) -> list[PastedFace]:
        return self.many([result])[0]

    def many(self, results: list[FrameResult]) -> list[list[PastedFace]]:
        """Render frames with one anonymizer batch (``FrameRenderer.render_many``)."""
        t0, paste0 = time.perf_counter(), self.renderer.paste_seconds
        pasted = self.renderer.render_many(results)
        paste = self.renderer.paste_seconds - paste0
        self.summary.times.add("anonymize", time.perf_counter() - t0 - paste)  # align + anonymize
        self.summary.times.add("paste", paste)
        for result, p in zip(results, pasted):
            self.summary.frames += 1
            # faces drawn, as the vault records them (a held face carried wholly out of view is not drawn)
            self.summary.faces += len(p)
            self.track_ids.update(pf.face.track_id for pf in p)
            for obs in self.observers:
                obs(result, p)
        return pasted

    def close(self) -> None:
        """Final counts into the summary."""
        self.summary.tracks = len(self.track_ids)
        self.summary.fallbacks = self.renderer.fallbacks
        self.summary.leak_fallbacks = self.renderer.leak_fallbacks

