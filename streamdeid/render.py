"""Render one tracked frame: align every face, anonymize the batch, paste back.

Fails closed: when the anonymizer raises, the faces of that batch are covered
with a solid fill instead and the event is counted; nothing is ever pasted
back unanonymized. For generators (dbaf) a leak guard also compares the
original and anonymized faces with SFace and moves a track whose identity
survives to solid fill for good (see ``streamdeid.leakguard``).

Besides the new frame, rendering reports, per face, which frame pixels it
changed and what they were before (``PastedFace``), so the recovery vault can
restore them exactly. Where the soft masks of two faces overlap, each changed
pixel is *owned* by exactly one face (in faces' cores the one whose centre is nearest, elsewhere the
larger mask weight), so
restoring one person never uncovers another.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .align.aligner import (
    box_matrices,
    box_scaled_fits,
    crop_matrix,
    invert_similarities,
    template_fits,
    warp_aligned,
)
from .align.steady import SteadyAlignment
from .anonymizers.base import Anonymizer, guard_every
from .anonymizers.classic import SolidAnonymizer
from .blend import WarpedFace, blend_into, face_mask, mask_support, warp_to_frame
from .blend.paste import paste_rois
from .config import AlignConfig, AnonymizeConfig, BlendConfig, TrackConfig
from .cover_size import drawn_growth
from .types import (
    AlignedFace,
    FaceContext,
    FrameResult,
    TrackedFace,
    longest_sides,
    scaled_about_centre,
)

if TYPE_CHECKING:
    from .leakguard import LeakGuard

log = logging.getLogger(__name__)

# Crop sides a scale-free anonymizer's small faces get, smallest first, and how many crop pixels per
# pixel of face height they must have (the face box spans about 0.57 of the crop: at 2 a 20 px face
# gets a 48 px crop over about 35 px of the frame, still oversampled 1.4x).
SMALL_CROPS = (32, 48, 64, 96)
MIN_CROP_PX_PER_PX = 2.0


def _unwidened(face: TrackedFace, inverse: np.ndarray) -> np.ndarray | None:
    """The crop -> frame map [2, 3] of ``face`` at its own size where its cover is drawn larger (a guess,
    cover_size.py: box and landmarks scaled by g about the box centre c, so the map is scaled by 1/g about c);
    None where it is not."""
    box = np.asarray(face.box, np.float64)
    g = drawn_growth(face.state, face.matched, face.between_runs, float(longest_sides(box[None])[0]), face.still)
    if g == 1.0:
        return None
    c = np.array([(box[0] + box[2]) / 2, (box[1] + box[3]) / 2])
    m = np.asarray(inverse, np.float64) / g
    m[:, 2] += c * (1.0 - 1.0 / g)
    return m


@dataclass
class PastedFace:
    """What pasting one face changed in the frame (for the vault and audits)."""

    face: TrackedFace
    aligned: AlignedFace
    roi: tuple[int, int, int, int]  # x, y, w, h in frame pixels
    owned: np.ndarray  # [h, w] bool: pixels this face changed and owns
    original: np.ndarray  # [h, w, 3] uint8: the frame's pixels in roi before any paste
    method: str  # the method actually applied ("blur", ... or "solid-fallback")


FALLBACK = "solid-fallback"  # PastedFace.method of a face covered by solid fill instead
BLUR = "blur"  # PastedFace.method of a weak track's face an anonymizer that ``blurs_weak`` blurred


class FrameRenderer:
    """Aligns, anonymizes (one batch per frame) and pastes back every face.

    What it reads of the anonymizer is declared by ``streamdeid.anonymizers.Anonymizer``: the leak guard
    (``needs_leak_guard``), colour matching, a persistent fallback and small crops (``scale_free``).
    """

    def __init__(
        self,
        anonymizer: Anonymizer,
        *,
        align: AlignConfig,
        blend: BlendConfig,
        anonymize: AnonymizeConfig,
        key_for_track: Callable[[int], bytes | None] | None = None,
        guard: LeakGuard | None = None,
        sure_score: float = TrackConfig.high_score,
    ) -> None:
        """``guard``: the :class:`~streamdeid.leakguard.LeakGuard` to use; None for the default, one when the
        anonymizer declares ``needs_leak_guard`` and ``anonymize.leak_guard`` is on (off: no guard).
        ``sure_score``: a track is sure (FaceContext.sure) from a face of it scoring this much."""
        self.anonymizer = anonymizer
        self.align_cfg = align
        self.key_for_track = key_for_track or (lambda _tid: None)
        self._fallback = SolidAnonymizer(anonymize)
        # Methods whose crops are one colour (the fallback, and solid when it is the anonymizer).
        self._uniform = {FALLBACK} | ({anonymizer.name} if isinstance(anonymizer, SolidAnonymizer) else set())
        self._blend = blend.resolved(generated=bool(anonymizer.color_match))
        self._masks: dict[int, tuple] = {}  # crop side -> ([S, S] soft mask in [0, 1], its support)
        # Classic anonymizers work relative to the crop (blur sigma and mosaic cells in crop units),
        # so a small face gets a small crop: the warps, the fill and the blur cost what its pixels
        # cost, not a 128 px crop each (a crowd has hundreds of 15-40 px faces).
        self.scale_free = bool(anonymizer.scale_free)
        self.steady = SteadyAlignment() if anonymizer.steadied else None
        self.blurs_weak = bool(anonymizer.blurs_weak)
        self.color_match = bool(anonymizer.color_match)
        self.persistent = bool(anonymizer.persistent_fallback)
        every = guard_every(anonymize, anonymizer)
        if guard is None and every is not None:
            from dataclasses import replace

            from .leakguard import LeakGuard

            guard = LeakGuard(replace(anonymize, leak_every=every))
        self.guard = guard
        # Solid fill with no guard reads no face pixels: its aligned crops are left blank (_align).
        self._blank_crops = isinstance(anonymizer, SolidAnonymizer) and guard is None
        self._blanks: dict[int, np.ndarray] = {}
        self.solid_tracks: set[int] = set()  # tracks on solid fill for good (leak or generator error)
        self.fallbacks = 0  # faces covered by solid fill because the anonymizer failed or leaked
        self.paste_seconds = 0.0  # time spent pasting back (warp + blend), for stage timings
        self.leak_fallbacks = 0  # tracks the leak guard switched to solid fill
        self.sure_score = float(sure_score)
        self._sure: set[int] = set()  # tracks a face of which scored sure_score (in render order or look-ahead)

    def render(self, result: FrameResult) -> list[PastedFace]:
        """Anonymize every face of ``result`` in place; return what changed."""
        return self.render_many([result])[0]

    def render_many(self, results: list[FrameResult]) -> list[list[PastedFace]]:
        """Render several frames with ONE anonymizer call for all their faces (one per crop size).

        A generator is fed its largest batch this way (all tracks of all the
        frames leaving the look-ahead buffer together); per frame, the result
        is the same as ``render``.
        """
        jobs = [self._prepare(r) for r in results]
        by_size: dict[int, list[tuple[_Job, int]]] = {}
        for j in jobs:
            for i in j.live:
                by_size.setdefault(len(j.crops[i]), []).append((j, i))
        for todo in by_size.values():
            crops = np.stack([j.crops[i] for j, i in todo])  # [B, S, S, 3] across frames
            out, method = self._anonymize(crops, [j.contexts[i] for j, i in todo])
            for (j, i), crop in zip(todo, out):
                j.new_crops[i] = crop
                # a weak track the anonymizer blurred is labelled so (the audit log, the review page)
                j.methods[i] = BLUR if self.blurs_weak and method != FALLBACK and not j.contexts[i].sure else method
            if method == FALLBACK and self.persistent:
                self.solid_tracks.update(j.faces[i].track_id for j, i in todo)
        return [self._finish(j) for j in jobs]

    def _prepare(self, result: FrameResult) -> "_Job":
        image = result.frame.image
        # A face whose cover falls wholly outside the picture (held or back-filled where the camera
        # carried it out of view: 18% of the faces of a pan over a crowd) is not rendered.
        found = [(f, *a) for f, a in zip(result.faces, self._align_all(image, result.faces)) if a is not None]
        faces, aligned, rois = [f for f, _, _ in found], [a for _, a, _ in found], [r for _, _, r in found]
        crops = [a.crop for a in aligned]
        self._sure.update(f.track_id for f in faces if f.score >= self.sure_score)
        self._sure.update(result.sure_ahead)  # sure later in the look-ahead (Pipeline._take)
        contexts = [FaceContext(f.track_id, result.frame.index, self.key_for_track(f.track_id),
                                sure=f.track_id in self._sure) for f in faces]
        if self.steady is not None:
            self._steady(result, faces, aligned, contexts)
        live = [i for i, f in enumerate(faces) if f.track_id not in self.solid_tracks]
        return _Job(result, faces, aligned, rois, crops, contexts, live, list(crops), [FALLBACK] * len(faces))

    def _steady(self, result: FrameResult, faces: list[TrackedFace], aligned: list[AlignedFace],
                contexts: list[FaceContext]) -> None:
        """Each face's steady crop -> crop map, for an anonymizer that draws at fixed crop coordinates."""
        if result.scene_cut:
            self.steady.reset()
        for f, a, ctx in zip(faces, aligned, contexts):
            ctx.steady = self.steady.correction(f.track_id, result.frame.index, a.inverse, len(a.crop),
                                                result.motion, _unwidened(f, a.inverse))
        self.steady.forget({f.track_id for f in faces})

    def _finish(self, job: "_Job") -> list[PastedFace]:
        """Solid fill for tracks already on it, the leak guard, then paste back."""
        if not job.faces:
            return []
        faces, crops, contexts, new_crops, methods = job.faces, job.crops, job.contexts, job.new_crops, job.methods
        # A track can have gone solid since _prepare (the guard caught it in an
        # earlier frame of the same batch): its generated crops are discarded too.
        dead = [i for i in range(len(faces)) if i not in job.live or
                (methods[i] != FALLBACK and faces[i].track_id in self.solid_tracks)]
        for i in dead:
            new_crops[i] = self._fallback(crops[i][None], [contexts[i]])[0]
            methods[i] = FALLBACK
        self.fallbacks += len(dead)
        if self.guard is not None:
            # a weak track the anonymizer blurs (blurs_weak) drew no face: blur needs no guard
            due = [i for i in job.live if methods[i] != FALLBACK
                   and (contexts[i].sure or not self.blurs_weak)
                   and self.guard.due(faces[i].track_id, faces[i].state == "detected")]
            if due:
                self._guard(job, due)
        t0 = time.perf_counter()
        pasted = self._paste_all(job.result.frame.image, job)
        self.paste_seconds += time.perf_counter() - t0
        return pasted

    def _guard(self, job: "_Job", due: list[int]) -> None:
        """Compare the original and rendered faces in ``due``; a leaking track goes solid for good."""
        result, faces, crops, contexts, new_crops, methods = (job.result, job.faces, job.crops, job.contexts,
                                                              job.new_crops, job.methods)
        image = result.frame.image
        scratch = image.copy()
        self._paste_all(scratch, job)
        try:
            verdicts = self.guard.find_leaks(image, scratch, [faces[i] for i in due])
            leaked = [(due[v.index], v.describe()) for v in verdicts if v.leaked]
        except Exception as exc:  # fail closed: a guard that cannot judge counts as a leak
            leaked = [(i, f"leak check failed ({exc})") for i in due]
        for i, why in leaked:
            tid = faces[i].track_id
            log.warning("leak guard: track %d still matches the original face in frame %d (%s); "
                        "solid fill for this track from now on", tid, result.frame.index, why)
            self.solid_tracks.add(tid)
            self.leak_fallbacks += 1
            self.fallbacks += 1
            new_crops[i] = self._fallback(crops[i][None], [contexts[i]])[0]
            methods[i] = FALLBACK

    def _align_all(self, image: np.ndarray, faces: list[TrackedFace]
                   ) -> list[tuple[AlignedFace, tuple[int, int, int, int]] | None]:
        """Per face, its aligned crop and the frame rectangle its cover lands on (x, y, w, h), or None
        when the cover would fall wholly outside the image. The geometry of all of a frame's faces is
        computed in one batch (a crowd has hundreds: one face at a time in Python was 14 ms of a pan's
        frame); each face gets what it would get alone (tests/test_render_align.py)."""
        if not faces:
            return []
        sizes, matrices, inverses, rois, inside = self._placements(faces, image.shape[1], image.shape[0])
        out: list[tuple[AlignedFace, tuple[int, int, int, int]] | None] = []
        for k in range(len(faces)):
            if not inside[k]:
                out.append(None)
                continue
            side, matrix, inverse = int(sizes[k]), matrices[k], inverses[k]
            if self._blank_crops:  # solid fill never reads the face's pixels: no warp (a crowd has hundreds)
                aligned = AlignedFace(self._blank(side), matrix, inverse)
            else:
                aligned = warp_aligned(image, matrix, side, inverse)
            out.append((aligned, tuple(rois[k].tolist())))
        return out

    def _placements(self, faces: list[TrackedFace], width: int, height: int) -> tuple[np.ndarray, ...]:
        """For N faces: crop sides [N], frame -> crop matrices [N, 2, 3] and their inverses, the frame
        rectangles their covers land on [N, 4] (x, y, w, h) and whether they land in the frame [N]."""
        margin = self.align_cfg.margin
        boxes = np.array([f.box for f in faces], np.float64)  # [N, 4]
        if not np.isfinite(boxes).all():
            raise ValueError("box contains NaN/inf")
        landmarks = np.array([f.landmarks for f in faces], np.float64)  # [N, 5, 2]
        # A predicted (held) or back-filled position is a guess: the face may have moved, so cover a
        # larger area around it (cover_size.py).
        growth = np.array([drawn_growth(f.state, f.matched, f.between_runs, s, f.still)
                           for f, s in zip(faces, longest_sides(boxes))])
        guess = growth != 1.0
        if guess.any():
            boxes[guess], landmarks[guess] = scaled_about_centre(boxes[guess], landmarks[guess], growth[guess])
        sizes = self._crop_sides(boxes)
        fits, usable = template_fits(landmarks, boxes)
        fits = box_scaled_fits(fits, boxes)
        usable = usable[:, None, None]
        # implausible landmarks (profile, occlusion): a square crop around the box
        matrices = np.where(usable, crop_matrix(np.where(usable, fits, 0.0), sizes, margin),
                            box_matrices(boxes, sizes, margin))
        inverses = invert_similarities(matrices)
        supports = [self._mask_for(int(side))[1] for side in sizes]
        rois, inside = paste_rois(inverses, np.array([sup or (0, 0, 0, 0) for sup in supports]), width, height)
        inside &= np.array([sup is not None for sup in supports])
        return sizes, matrices, inverses, rois, inside

    def _crop_sides(self, boxes: np.ndarray) -> np.ndarray:
        """[N] side of each face's aligned crop (boxes [N, 4]): the configured size, or for a scale-free
        anonymizer the smallest of SMALL_CROPS (or the configured size) that still has
        MIN_CROP_PX_PER_PX crop pixels per frame pixel of the face."""
        size = self.align_cfg.crop_size
        sides = np.full(len(boxes), size, np.int64)
        if not self.scale_free:
            return sides
        face_px = longest_sides(boxes)
        for side in reversed(SMALL_CROPS):  # the smallest that fits wins: it is written last
            if side < size:
                sides = np.where(side >= MIN_CROP_PX_PER_PX * face_px, side, sides)
        return sides

    def _blank(self, side: int) -> np.ndarray:
        """A read-only [S, S, 3] zero crop, one per side."""
        if side not in self._blanks:
            blank = np.zeros((side, side, 3), np.uint8)
            blank.flags.writeable = False
            self._blanks[side] = blank
        return self._blanks[side]

    def _anonymize(self, crops: np.ndarray, contexts: list[FaceContext]) -> tuple[np.ndarray, str]:
        try:
            out = self.anonymizer(crops, contexts)
            if out.shape != crops.shape or out.dtype != np.uint8:
                raise ValueError(f"anonymizer returned {out.dtype} {out.shape}, expected uint8 {crops.shape}")
            return out, self.anonymizer.name
        except Exception as exc:  # fail closed: any anonymizer error becomes a solid fill
            self.fallbacks += len(crops)
            log.warning("anonymizer %s failed (%s); %d face(s) covered with solid fill%s",
                        self.anonymizer.name, exc, len(crops),
                        " for the rest of the run" if self.persistent else "")
            return self._fallback(crops, contexts), FALLBACK

    def _mask_for(self, side: int) -> tuple[np.ndarray, tuple[int, int, int, int] | None]:
        """The soft mask [S, S] for a crop side, and its support (computed once per side)."""
        if side not in self._masks:
            mask = face_mask(side, self._blend, None, align_margin=self.align_cfg.margin)
            self._masks[side] = (mask, mask_support(mask))
        return self._masks[side]

    def _paste_all(self, image: np.ndarray, job: "_Job") -> list[PastedFace]:
        """Paste every face of ``job`` into ``image`` (in place): warp, ownership, blend."""
        faces, aligned, rois, new_crops, methods = job.faces, job.aligned, job.rois, job.new_crops, job.methods
        h, w = image.shape[:2]
        warped = []
        for a, roi, crop, method in zip(aligned, rois, new_crops, methods):
            mask, support = self._mask_for(len(crop))
            fill = crop[0, 0] if method in self._uniform else None  # solid fill: nothing to warp
            warped.append(warp_to_frame(crop, a.inverse, mask, w, h, support, fill, roi))
        owned = _ownership(warped)
        # Copy every ROI before the first paste: overlapping faces would otherwise
        # record each other's anonymized pixels as "original".
        originals = [_cut(image, wf.roi).copy() if wf else None for wf in warped]
        pasted = []
        for face, a, wf, own, orig, method in zip(faces, aligned, warped, owned, originals, methods):
            if wf is None:  # entirely outside the frame
                continue
            blend_into(image, wf, color_match=self.color_match and method not in (FALLBACK, BLUR))
            pasted.append(PastedFace(face, a, wf.roi, own, orig, method))
        return pasted


@dataclass
class _Job:
    """One frame's faces between alignment and paste-back (see ``render_many``)."""

    result: FrameResult
    faces: list[TrackedFace]
    aligned: list[AlignedFace]
    rois: list[tuple[int, int, int, int]]  # N x frame rectangle (x, y, w, h) each face's cover lands on
    crops: list[np.ndarray]  # N x [S, S, 3] uint8, original aligned crops (S per face, see _crop_sides)
    contexts: list[FaceContext]
    live: list[int]  # faces still anonymized by the anonymizer (not on solid fill for good)
    new_crops: list[np.ndarray]  # N x [S, S, 3] uint8, filled by render_many / _finish
    methods: list[str]


def _cut(image: np.ndarray, roi: tuple[int, int, int, int]) -> np.ndarray:
    x, y, w, h = roi
    return image[y:y + h, x:x + w]


def _ownership(warped: list[WarpedFace | None]) -> list[np.ndarray | None]:
    """Per face, the ROI pixels it changes and owns (``_claim``: a pixel in faces' cores, their masks from
    CORE_WEIGHT, goes to the face whose centre is nearest; the rest to the larger mask weight; ties to the earlier
    face).

    What a face owns is what its track key restores (run/recording.py), so this is what keeps restoring one
    person from uncovering another. By mask weight alone, a small face inside a large cover, where both weigh 1,
    went to the large one: recovering one hamilton performer's track restored five audience faces under his
    cover (a security review, 2026-11-27).

    Faces whose rectangles meet are grouped (a face that meets none owns what it changes); each group gets
    one pass with a best-claim and an owner map over its bounding area, so the cost grows with the covered
    pixels, not with pairs of faces (a crowd has hundreds). At 1080p one map over every face spanned most of
    the frame (17 ms a frame, profiled), where the faces that meet are a few pairs."""
    live = [i for i, wf in enumerate(warped) if wf is not None]
    owned: list[np.ndarray | None] = [None] * len(warped)
    rois = np.array([warped[i].roi for i in live], np.int64).reshape(-1, 4)  # [M, 4] x, y, w, h
    for group in _meeting_groups(rois):
        faces = [live[k] for k in group]
        if len(faces) == 1:
            owned[faces[0]] = warped[faces[0]].alpha > 0
            continue
        r = rois[group]
        ox, oy = int(r[:, 0].min()), int(r[:, 1].min())
        width, height = int((r[:, 0] + r[:, 2]).max()) - ox, int((r[:, 1] + r[:, 3]).max()) - oy
        best = np.zeros((height, width), np.float32)  # strongest claim so far per pixel
        owner = np.full((height, width), -1, np.int32)  # face holding it
        for i in faces:
            wf = warped[i]
            x, y, w, h = wf.roi
            sl = np.s_[y - oy:y - oy + h, x - ox:x - ox + w]
            claim = _claim(wf.alpha)
            wins = claim > best[sl]  # strictly: a tie stays with the earlier face
            np.copyto(best[sl], claim, where=wins)  # copyto: a third of boolean indexing's time
            np.copyto(owner[sl], i, where=wins)
        for i in faces:
            x, y, w, h = warped[i].roi
            owned[i] = owner[y - oy:y - oy + h, x - ox:x - ox + w] == i
    return owned


CORE_WEIGHT = 0.5  # a face's mask from this weight is its core (the face; below it, the feathered margin)


def _claim(alpha: np.ndarray) -> np.ndarray:
    """[h, w] float32: how strongly a face with mask ``alpha`` ([h, w] in [0, 1]) claims each pixel. Outside its
    core, its weight (under CORE_WEIGHT); in its core, 1 + 1 / (1 + the pixel's distance in pixels from the
    mask's weighted centre), so a core beats any margin and where cores meet the nearer face's centre wins: a
    small face inside a large cover keeps its own pixels, two neighbours split their overlap down the middle."""
    claim = alpha.astype(np.float32, copy=True)
    core = alpha >= CORE_WEIGHT
    if core.any():
        total = float(alpha.sum())
        ys, xs = np.arange(alpha.shape[0], dtype=np.float32), np.arange(alpha.shape[1], dtype=np.float32)
        cy, cx = float(alpha.sum(axis=1) @ ys) / total, float(alpha.sum(axis=0) @ xs) / total
        dist = np.hypot(xs[None, :] - cx, ys[:, None] - cy)  # [h, w]
        claim[core] = 1.0 + 1.0 / (1.0 + dist[core])
    return claim


def _meeting_groups(rois: np.ndarray) -> list[list[int]]:
    """Indices of ``rois`` ([M, 4] x, y, w, h) grouped by rectangles that meet, directly or through others;
    each group in index order (the order ties are decided in)."""
    x0, y0, x1, y1 = rois[:, 0], rois[:, 1], rois[:, 0] + rois[:, 2], rois[:, 1] + rois[:, 3]
    meets = ((np.minimum(x1[:, None], x1[None]) > np.maximum(x0[:, None], x0[None]))
             & (np.minimum(y1[:, None], y1[None]) > np.maximum(y0[:, None], y0[None])))  # [M, M]
    label = np.full(len(rois), -1)
    for start in range(len(rois)):  # flood each group from its first face
        if label[start] >= 0:
            continue
        label[start], todo = start, [start]
        while todo:
            reached = np.flatnonzero(meets[todo].any(0) & (label < 0))
            label[reached] = start
            todo = reached.tolist()
    return [np.flatnonzero(label == g).tolist() for g in np.unique(label)]
