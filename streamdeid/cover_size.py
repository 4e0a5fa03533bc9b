"""How large a face's cover is, by what is known of where the face is: the rule in one place.

A face's cover is the aligned crop's face zone (AlignConfig.margin around the 5-point template) grown
by BlendConfig.margin, with a soft edge (BlendConfig.feather) outside it. Around that, how sure the
run is of the face's position sets how much larger the cover is drawn:

* detected on this frame: as it is (growth 1);
* held or back-filled, and its own pixels found there by template matching
  (TrackedFace.matched, track/appearance.py): MATCHED_GROWTH;
* held only because the detector skipped this frame (TrackedFace.between_runs; the runs before and
  after found it): BETWEEN_RUNS_GROWTH, or MATCHED_GROWTH where its track is still (TrackedFace.still);
* any other guess (a held face a detector run missed, a back-filled one): UNCERTAIN_GROWTH, and its
  box is widened with every frame unseen too (``unseen_scale``, TrackedFace.widened).

How long a guess is drawn at all is the tracker's (hold, closer looks: track/tracker.py) and the
look-ahead's (lookahead.py); this module says only how large.
"""

from __future__ import annotations

# A held or back-filled face's cover grows by this share of its size per frame unseen: on
# short_hamilton_clip.mp4 a fast woman at the frame edge was back-filled 11 frames at a box 30 px
# off her face and held 7 frames at a box drifting the wrong way, leaving her recognisable (SFace
# 0.57-0.89) under covers that missed half her face.
UNSEEN_GROWTH = 0.05
MAX_UNSEEN_SCALE = 1.6
# ... but a large face that vanishes has usually turned away or left: the performer's 190 px face, held
# 15 frames at up to 1.6x, covered hamilton's audience (solid fill over 80% of frame 54).
MAX_UNSEEN_GROWTH_PX = 40

# Held and back-filled faces are covered this much larger than their predicted
# box: measured on short_hamilton_clip.mp4 with --detect-every 2, a fast head
# turn moved a face out from under its predicted position (one SFace leak).
UNCERTAIN_GROWTH = 1.3
# A face predicted between two detector runs that both found it (--detect-every N, the default 2)
# was seen a frame or two ago, and camera motion is compensated (track/camera_motion.py): a smaller
# margin. Those frames are half of all covers, so the margin sets most of the covered area (a crowd
# pan: 1.3 made the covers 2.4x the face box, 1.15 1.9x, deface's ellipses 1.3x).
BETWEEN_RUNS_GROWTH = 1.15
# A held or back-filled face whose pixels were found where it is drawn (TrackedFace.matched,
# track/appearance.py) is where a detection would put it, to a template pixel (3% of a large face).
MATCHED_GROWTH = 1.05
# ... and so is a face between runs whose track moves under this share of its height a frame, the camera's
# motion taken out (TrackedFace.still; the Kalman filter's velocity, track/tracker.py): a detection put it
# there a frame ago. In a crowd under a moving camera nearly every face is still so, and its covers between
# runs were the largest share of the marching band pan's cover off every face (benchmarks/precision.py).
STILL_SPEED = 0.05


def unseen_scale(size: float, frames_unseen: int) -> float:
    """How much a guessed face's box (longest side ``size`` px) is widened ``frames_unseen`` frames away
    from its last (or first) detection: 1 + UNSEEN_GROWTH a frame, at most MAX_UNSEEN_SCALE and at most
    MAX_UNSEEN_GROWTH_PX larger."""
    return min(1.0 + UNSEEN_GROWTH * max(frames_unseen, 0), MAX_UNSEEN_SCALE, 1.0 + MAX_UNSEEN_GROWTH_PX / max(size, 1.0))


# ... and a guess is drawn at most this many px larger than its (widened) box: a large face is near the
# camera and moves fast, but 1.3x of hamilton's 290 px performer, leaving at the frame's edge, was 87 px
# of audience on each axis for every held and back-filled frame.
MAX_GUESS_GROWTH_PX = 40


def drawn_growth(state: str, matched: bool, between_runs: bool, size: float = 0.0, still: bool = False) -> float:
    """How much larger than its (possibly widened) box, of longest side ``size`` px, a face in ``state`` is
    drawn (see the top)."""
    if state == "detected":
        return 1.0
    if matched or still:
        return MATCHED_GROWTH
    growth = BETWEEN_RUNS_GROWTH if between_runs else UNCERTAIN_GROWTH
    return min(growth, 1.0 + MAX_GUESS_GROWTH_PX / size) if size > 0 else growth
