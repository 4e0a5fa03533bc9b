"""``--keep`` / ``--only`` in the pipeline: judge detected faces against reference photos, per track.

``SelectStage.observe`` runs on each frame right after tracking (on the original pixels, before
anything is rendered): every *detected* face big enough to judge is aligned and embedded by SFace
and its similarity to the references handed to the per-track ``TrackSelector``. ``SelectStage.split``
runs just before rendering (after the look-ahead): faces of tracks the evidence vouches for *on that
frame* leave the render list, so they are not anonymized and put nothing in the vault. Everything
else is rendered as usual: no evidence, no exemption.
"""

from __future__ import annotations

import numpy as np

from .align.aligner import landmarks_usable
from .config import SelectConfig
from .identity.selector import CONFIRM, MIN_JUDGE_PX, TrackSelector
from .types import FrameResult, TrackedFace


# A track left visible whose detected face cannot be judged is covered again (until confirmed anew) when its
# height moved this far from its last judged one: another, smaller person had taken the kept man's track
# (a 36 px look-alike where a 51 px face had been) and was shown for 1.8 s on the open interval's word.
SAME_SIZE = (0.8, 1.25)


def judgeable(face: TrackedFace) -> bool:
    """Detected this frame, tall enough for SFace, and landmarks that fit the box (not a profile)."""
    return (face.state == "detected" and float(face.box[3] - face.box[1]) >= MIN_JUDGE_PX
            and landmarks_usable(face.landmarks, face.box))


class SelectStage:
    """The references' embeddings and the per-track decisions of one video."""

    def __init__(self, select: SelectConfig, fps: float, finder=None, sface=None, confirm: int = CONFIRM) -> None:
        from .config import DetectConfig
        from .detect.finder import FaceFinder
        from .identity.reference import load_references
        from .identity.sface import SFace, align_for_sface

        self._align = align_for_sface
        self.sface = sface or SFace()
        refs = load_references(select.references, finder or FaceFinder(DetectConfig()), self.sface)
        self.mode = select.mode
        self.selector = TrackSelector(select.mode, np.stack([r.embedding for r in refs]), fps=fps, confirm=confirm)
        self._last_ids: set[int] = set()  # tracks on the previous frame
        self._judged_height: dict[int, float] = {}  # track -> its face's height on its last judged frame

    def observe(self, result: FrameResult) -> None:
        ids = {f.track_id for f in result.faces}
        for tid in ids - self._last_ids:
            # back after frames it was not reported (the tracker remembered it): another person may
            # stand where it was lost, so what was judged before no longer vouches for it
            self.selector.resumed(tid)
        self._last_ids = ids
        for f in result.faces:
            if f.state == "detected" and not judgeable(f) and self._taken_over(f, result.scene_cut):
                self.selector.resumed(f.track_id)  # covered until judged anew
        faces = [f for f in result.faces if judgeable(f)]
        if not faces:
            return
        for f in faces:
            self._judged_height[f.track_id] = float(f.box[3] - f.box[1])
        crops = np.stack([self._align(result.frame.image, f.landmarks) for f in faces])  # [N, 112, 112, 3]
        sims = self.selector.similarity(self.sface.embed(crops))
        for face, sim in zip(faces, sims):
            self.selector.observe(face.track_id, result.frame.index, float(sim))

    def _taken_over(self, face: TrackedFace, cut: bool) -> bool:
        """Whether an unjudged detection may be someone else than the track's last judged face: across a scene
        cut, or at another size (SAME_SIZE). What was judged before vouches for the track only while neither."""
        last = self._judged_height.get(face.track_id)
        if last is None:
            return False
        ratio = float(face.box[3] - face.box[1]) / max(last, 1.0)
        return cut or not SAME_SIZE[0] <= ratio <= SAME_SIZE[1]

    def split(self, result: FrameResult) -> None:
        """Move the faces left visible on this frame from ``result.faces`` to ``result.kept``."""
        shown = [self.selector.visible(f.track_id, result.frame.index) for f in result.faces]
        if any(shown):
            result.kept = [f for f, v in zip(result.faces, shown) if v]
            result.faces = [f for f, v in zip(result.faces, shown) if not v]

    def line(self) -> str:
        shown, hidden = self.selector.counts()
        what = "matched a --keep photo, left visible" if self.mode == "keep" else "did not match an --only photo, left visible"
        return f"{shown} of {shown + hidden} judged track(s) {what}"
