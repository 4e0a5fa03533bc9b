"""Composite anonymizer: every person gets one k-Same-style composite face, chosen by the track's key.

    anon = CompositeAnonymizer()              # the bank shipped in streamdeid/composites/
    out = anon(crops, contexts)               # crops [B, S, S, 3] uint8 BGR, aligned

The bank (``streamdeid/composites/bank.png`` + ``manifest.json``, built by ``python -m training
composites``, docs/composite.md) holds composites that are each the pixel average of k >= 10 different
faces, aligned to the same canonical 5-point crop the renderer gives an anonymizer: a composite is
already in place on the face, nothing is warped.

Per track (``FaceContext.track_id`` and ``.key``), on its first crop:

- **fit**: the composites closest to the face in skin colour (mean Lab of the cheeks and nose), in
  coarse shading (an 8x8 grey thumbnail of the face, correlation) and by the bank's light classifier
  (gender, age), less those SFace finds alike to the face (``SFACE_UNLIKE``), are the candidates
  (``CANDIDATES``);
- **choice**: HMAC-SHA256 of the track's key picks one of them, so a person keeps one face for the clip,
  another key gives (most likely) another face. A track key is derived from the master key with the
  run's random video id (keys/derive.py), so another run of the same clip draws other faces, even with
  the same key file. Without a key a random salt of this run stands in (still one face per track).

Per crop: the composite's Lab colour is moved to the face's (mean and standard deviation per channel
inside the face ellipse, plus the left-right / top-bottom slope of the lightness: the direction of
the light), with the statistics smoothed per track (EMA) so the face does not shimmer; it is laid with
a feathered ellipse over the crop blurred as ``--anonymizer blur`` does (hair, ears and the border
around the composite stay covered). Eyes and mouth are the composite's.

A track no detection of which has scored the tracker's high score yet (``FaceContext.sure`` False: a dark
face, and as often a hand, a microphone or a shoulder the detector scored 0.3-0.6) is blurred as
``--anonymizer blur`` blurs, until one does: on short_hamilton_clip.mp4 such tracks drew faces on the
performer's hands, his chest and beside him.

Not model-reversible (``reversible = False``, like blur): recovery goes through the vault, which stores
the original pixels. Any error raises; the renderer then covers the batch with solid fill.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ..config import AlignConfig, AnonymizeConfig
from ..types import FaceContext, StreamdeidError
from .base import AnonymizerBase, check_batch
from .classic import strong_blur

BANK_DIR = Path(__file__).resolve().parents[1] / "composites"
MANIFEST = "manifest.json"
MIN_K = 10  # a composite of fewer faces could be too close to one of them: refused at load
CANDIDATES = 6  # composites that fit a face; the key picks one
SFACE_UNLIKE = 0.2  # a candidate SFace finds this alike to the face (cosine; its match threshold is 0.363) is skipped
EMA = 0.25  # weight of the newest crop in a track's colour statistics
_TRACKS = 1024  # tracks remembered (LRU)
_HMAC_INFO = b"streamdeid composite choice v1"
# Face ellipse in crop units for AlignConfig.margin (0.4): centre and semi-axes (x, y). The inner one is
# where the colour statistics are taken; the paste one where the composite is laid (feathered).
_STATS_ELLIPSE = ((0.5, 0.55), (0.13, 0.17))
_PASTE_ELLIPSE = ((0.5, 0.535), (0.225, 0.29))
_FEATHER = 0.05  # of the crop side
# The face box of ``face_thumb`` (centre, half sides), the input of the bank's classifier: fixed by the bank's
# manifest, whatever the paste ellipse becomes.
_THUMB_BOX = ((0.5, 0.535), (0.225, 0.29))
AGE_MIDDLE = {"child": 9.0, "young": 23.0, "adult": 37.0, "middle": 52.0, "senior": 68.0}  # years, per age band


def _ellipse(side: int, centre, axes, feather: float = 0.0) -> np.ndarray:
    """[S, S] float32 mask: 1 inside the ellipse, a Gaussian feather of ``feather`` x S around it."""
    m = np.zeros((side, side), np.float32)
    c = (round(centre[0] * side * 16), round(centre[1] * side * 16))
    a = (round(axes[0] * side * 16), round(axes[1] * side * 16))
    cv2.ellipse(m, c, a, 0, 0, 360, 1.0, -1, cv2.LINE_AA, shift=4)
    if feather > 0:
        sigma = max(feather * side, 0.5)
        # shrink first so the feathered edge ends at the ellipse, not beyond it
        k = max(1, round(sigma))
        m = cv2.erode(m, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * k + 1, 2 * k + 1)))
        m = cv2.GaussianBlur(m, (0, 0), sigma)
    return m


@dataclass
class _Geometry:
    """Everything per crop side: masks and the slope regressors of the statistics region."""

    paste: np.ndarray  # [S, S, 1] float32 feathered paste mask
    stats_idx: np.ndarray  # flat indices of the statistics region
    design_pinv: np.ndarray  # [3, n] least-squares projection onto (1, x, y) over the region
    design_slopes: np.ndarray  # [n, 2] x, y of the region's pixels (centred, crop units)
    ramp: np.ndarray  # [2, S, S] float32 x and y (centred, crop units)


@dataclass
class _Track:
    index: int  # the chosen composite
    stats: np.ndarray | None = None  # [3, 2] smoothed (mean, std) per Lab channel
    slope: np.ndarray | None = None  # [2] smoothed lightness slope (x, y), per crop side unit


def load_bank(folder: str | Path | None = None) -> tuple[np.ndarray, dict]:
    """The composites ``[N, S, S, 3]`` uint8 BGR and the manifest; StreamdeidError if missing, damaged, or
    if the manifest does not say every composite averages >= MIN_K faces."""
    folder = Path(folder) if folder is not None else BANK_DIR
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        entries = manifest["composites"]
        size = int(manifest["size"])
        png = (folder / "bank.png").read_bytes()
    except (OSError, ValueError, KeyError, TypeError):
        raise StreamdeidError(f"the composite bank in {folder} is missing or unreadable; reinstall, "
                              "or build one with python -m training composites") from None
    if hashlib.sha256(png).hexdigest() != manifest.get("bank_sha256"):
        raise StreamdeidError(f"{folder / 'bank.png'} does not match the sha256 in {manifest_path}")
    if not entries or any(int(e.get("k", 0)) < MIN_K for e in entries):
        raise StreamdeidError(f"{manifest_path}: every composite must average at least {MIN_K} faces")
    atlas = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    if atlas is None or atlas.shape != (size, size * len(entries), 3):
        raise StreamdeidError(f"{folder / 'bank.png'} is not {len(entries)} composites of {size} px")
    faces = atlas.reshape(size, len(entries), size, 3).transpose(1, 0, 2, 3)
    return np.ascontiguousarray(faces), manifest


def _at(crop: np.ndarray, side: int) -> np.ndarray:
    """``crop`` at ``side`` px (area-downscaled or bilinear)."""
    if crop.shape[0] == side:
        return crop
    return cv2.resize(crop, (side, side), interpolation=cv2.INTER_AREA if crop.shape[0] > side else cv2.INTER_LINEAR)


def face_thumb(crop: np.ndarray, n: int) -> np.ndarray:
    """The face's grey ``n`` x ``n`` thumbnail (``_THUMB_BOX``), zero mean, unit norm [n*n]: the features of
    the bank's light classifier (training/composites.py) and of the shading fit."""
    s = crop.shape[0]
    (cx, cy), (ax, ay) = _THUMB_BOX
    face = crop[int((cy - ay) * s):int((cy + ay) * s), int((cx - ax) * s):int((cx + ax) * s)]
    t = cv2.resize(cv2.cvtColor(face, cv2.COLOR_BGR2GRAY), (n, n), interpolation=cv2.INTER_AREA)
    t = t.astype(np.float32).ravel()
    t -= t.mean()
    t /= float(np.linalg.norm(t)) or 1.0
    return t


def _arcface_crop(crop: np.ndarray) -> np.ndarray:
    """The 112 px ArcFace-aligned crop SFace reads, cut from an aligned crop (the template fills its middle
    ``1 - AlignConfig.margin``)."""
    s = crop.shape[0]
    b = round(s * AlignConfig.margin / 2)
    return _at(np.ascontiguousarray(crop[b:s - b, b:s - b]), 112)


def composite_embeddings(sface, faces: np.ndarray) -> np.ndarray:
    """[N, 128] SFace embeddings of aligned composites ``[N, S, S, 3]`` (stored as ``sface.npy`` by the builder)."""
    return sface.embed(np.stack([_arcface_crop(f) for f in faces]))


def _lab(img: np.ndarray) -> np.ndarray:
    """uint8 BGR -> float32 Lab (OpenCV's 8-bit scale: L, a, b in 0-255)."""
    return cv2.cvtColor(img, cv2.COLOR_BGR2LAB).astype(np.float32)


class CompositeAnonymizer(AnonymizerBase):
    """See the module docstring; registered as ``composite``."""

    name = "composite"
    scale_free = True  # the composite is resized to any crop side: small faces get small crops
    steadied = True  # drawn where the track's steady alignment puts it (align/steady.py), not each frame's
    blurs_weak = True  # a weak track (FaceContext.sure False) is blurred, no face drawn (see _render)
    # The leak guard (leakguard.py) on a track's first frames, then every GUARD_EVERY frames: a track whose
    # composite still matches the person (SFace) goes to solid fill for good. On every frame it cost 15x the
    # speed (2.7 fps instead of 40 on short_hamilton_clip); a track keeps one composite, so a sample suffices.
    needs_leak_guard = True
    guard_every = 8

    def __init__(self, cfg: AnonymizeConfig | None = None, *, bank: str | Path | None = None) -> None:
        cfg = cfg or AnonymizeConfig()
        self.sigma = float(cfg.blur_sigma)  # the cover around the composite, as --anonymizer blur
        bank = bank if bank is not None else cfg.model_path  # --model DIR: a bank the user built
        self.faces, self.manifest = load_bank(bank)
        self._bank_dir = Path(bank) if bank is not None else BANK_DIR
        margin = float(self.manifest.get("align_margin", AlignConfig.margin))
        if abs(margin - AlignConfig.margin) > 1e-6:
            raise StreamdeidError(f"the composite bank is aligned with margin {margin}, the renderer uses "
                                  f"{AlignConfig.margin}")
        self.size = self.faces.shape[1]
        self._salt = os.urandom(32)  # keyless runs: one face per track, not repeatable across runs
        self._tracks: OrderedDict[tuple[int, bytes | None], _Track] = OrderedDict()
        self._geometry: dict[int, _Geometry] = {}
        self._sface = None  # loaded on the first track (SFace, streamdeid.identity)
        self._embeddings: np.ndarray | None = None  # [N, 128] the composites' SFace embeddings
        self._sized: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        feats = [self._features(f) for f in self.faces]
        self._skin = np.stack([f[0] for f in feats])  # [N, 3]
        self._thumbs = np.stack([f[1] for f in feats])  # [N, 64]
        entries = self.manifest["composites"]
        self._female = np.array([e.get("gender") == "female" for e in entries], np.float32)
        self._age = np.array([AGE_MIDDLE.get(e.get("age_band"), 35.0) for e in entries], np.float32)

    # --- choosing a composite -------------------------------------------------------------------

    def _features(self, crop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean Lab of the skin region [3], the face's grey 8x8 thumbnail, normalised [64])."""
        crop = _at(crop, self.size)
        skin = _lab(crop).reshape(-1, 3)[self._geom(self.size).stats_idx].mean(axis=0)
        return skin, face_thumb(crop, 8)

    def hints(self, crop: np.ndarray) -> tuple[float, float] | None:
        """(how female 0..1, age in years) of a face by the bank's ridge classifier; None without one."""
        c = self.manifest.get("classifier")
        if not c:
            return None
        x = np.append(face_thumb(_at(crop, self.size), int(c["thumb"])), 1.0)
        return (float(np.clip(x @ np.asarray(c["female"], np.float32), 0.0, 1.0)),
                float(np.clip(x @ np.asarray(c["age"], np.float32), 0.0, 100.0)))

    def candidates(self, crop: np.ndarray, n: int = CANDIDATES) -> np.ndarray:
        """Indices of the ``n`` composites that fit this face best, best first: skin colour, coarse
        shading, and (when the bank ships its classifier) gender and age."""
        skin, thumb = self._features(crop)
        d = np.linalg.norm((self._skin - skin) * (1.0, 1.5, 1.5), axis=1) / 20.0  # ~1 per 20 Lab units
        d += 1.0 - self._thumbs @ thumb  # 0 (same shading) .. 2
        hint = self.hints(crop)
        if hint is not None:
            d += 1.5 * np.abs(self._female - hint[0]) + np.abs(self._age - hint[1]) / 20.0
        return np.argsort(d, kind="stable")[:n]

    def choose(self, crop: np.ndarray, context: FaceContext) -> int:
        """The composite of this crop's track: fixed on the track's first crop, the key's pick among the
        candidates that fit the face and that SFace does not take for the person."""
        tk = (int(context.track_id), context.key)
        state = self._tracks.get(tk)
        if state is None:
            secret = context.key if context.key is not None else self._salt + str(context.track_id).encode()
            digest = hmac.new(bytes(secret), _HMAC_INFO, hashlib.sha256).digest()
            cands = self.unlike(crop, self.candidates(crop, 4 * CANDIDATES))[:CANDIDATES]
            state = _Track(int(cands[int.from_bytes(digest[:8], "big") % len(cands)]))
            self._tracks[tk] = state
            while len(self._tracks) > _TRACKS:
                self._tracks.popitem(last=False)
        else:
            self._tracks.move_to_end(tk)
        return state.index

    def unlike(self, crop: np.ndarray, cands: np.ndarray) -> np.ndarray:
        """``cands`` without the composites SFace finds closest to this face (cosine >= SFACE_UNLIKE); the
        least alike one if none is left. One SFace call per track (the composites' are computed once)."""
        if self._sface is None:
            from ..identity.sface import shared_sface

            self._sface = shared_sface()  # the leak guard's too
            self._embeddings = self._shipped_embeddings()
            if self._embeddings is None:  # another bank or SFace model: 26 ms per composite, once
                self._embeddings = composite_embeddings(self._sface, self.faces)
        sims = self._embeddings[cands] @ self._sface.embed(_arcface_crop(crop)[None])[0]
        keep = cands[sims < SFACE_UNLIKE]
        return keep if len(keep) else cands[[int(np.argmin(sims))]]

    def _shipped_embeddings(self) -> np.ndarray | None:
        """The composites' SFace embeddings stored beside the bank (``sface.npy``), if they were made by the
        SFace model in use; None otherwise."""
        from ..files import sha256_file
        from ..identity.sface import default_model_path

        entry = self.manifest.get("sface") or {}
        path = self._bank_dir / str(entry.get("file", ""))
        try:
            if not entry or not path.is_file() or sha256_file(path) != entry.get("sha256") \
                    or sha256_file(default_model_path()) != entry.get("model_sha256"):
                return None
            emb = np.load(path).astype(np.float32)
        except (OSError, ValueError):
            return None
        return emb if emb.shape == (len(self.faces), 128) else None

    # --- rendering ------------------------------------------------------------------------------

    def _geom(self, side: int) -> _Geometry:
        g = self._geometry.get(side)
        if g is None:
            stats = _ellipse(side, *_STATS_ELLIPSE) > 0.5
            idx = np.flatnonzero(stats.ravel())
            ys, xs = np.divmod(idx, side)
            x = (xs + 0.5) / side - 0.5
            y = (ys + 0.5) / side - 0.5
            design = np.stack([np.ones_like(x), x, y], axis=1)  # [n, 3]
            grid = (np.arange(side, dtype=np.float32) + 0.5) / side - 0.5
            ramp = np.stack(np.meshgrid(grid, grid))  # [2, S, S]: x, y
            paste = _ellipse(side, *_PASTE_ELLIPSE, feather=_FEATHER)[..., None]
            g = _Geometry(paste, idx, np.linalg.pinv(design).astype(np.float32),
                          design[:, 1:].astype(np.float32), ramp.astype(np.float32))
            self._geometry[side] = g
        return g

    def _composite_at(self, index: int, side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The composite at ``side`` px in Lab with its lightness slope removed, its (mean, std) [3, 2] and
        its slope [2] (cached)."""
        key = (index, side)
        hit = self._sized.get(key)
        if hit is None:
            face = self.faces[index]
            if side != self.size:
                face = cv2.resize(face, (side, side), interpolation=cv2.INTER_AREA if side < self.size
                                  else cv2.INTER_LINEAR)
            lab = _lab(face)
            stats, slope = self._stats(lab, side)
            g = self._geom(side)
            flat = lab.copy()
            flat[..., 0] -= slope[0] * g.ramp[0] + slope[1] * g.ramp[1]
            hit = (flat, stats, slope)
            if len(self._sized) > 4096:
                self._sized.clear()
            self._sized[key] = hit
        return hit

    def _stats(self, lab: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) per Lab channel [3, 2] inside the statistics ellipse (lightness with its slope
        removed) and the lightness slope [2] (x, y)."""
        g = self._geom(side)
        px = lab.reshape(-1, 3)[g.stats_idx]  # [n, 3]
        coef = g.design_pinv @ px[:, 0]  # L ~ c0 + c1 x + c2 y
        flat = px.copy()
        flat[:, 0] -= g.design_slopes @ coef[1:]  # lightness without its slope
        return np.stack([flat.mean(axis=0), flat.std(axis=0)], axis=1), coef[1:].astype(np.float32)

    def _render(self, crop: np.ndarray, context: FaceContext) -> np.ndarray:
        side = crop.shape[0]
        if not context.sure:  # a weak track: maybe a hand or a shoulder, where a drawn face would be a ghost
            return strong_blur(crop, self.sigma * side)
        index = self.choose(crop, context)
        state = self._tracks[(int(context.track_id), context.key)]
        comp, cstats, _ = self._composite_at(index, side)
        stats, slope = self._stats(_lab(crop), side)
        if state.stats is None:
            state.stats, state.slope = stats, slope
        else:
            state.stats = (1 - EMA) * state.stats + EMA * stats
            state.slope = (1 - EMA) * state.slope + EMA * slope
        tm, ts = state.stats[:, 0], state.stats[:, 1]
        cm, cs = cstats[:, 0], cstats[:, 1]
        gain = np.clip(ts / np.maximum(cs, 1.0), 0.5, 2.0)
        g = self._geom(side)
        lab = (comp - cm) * gain + tm
        lab[..., 0] += state.slope[0] * g.ramp[0] + state.slope[1] * g.ramp[1]
        face = cv2.cvtColor(np.clip(lab + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_LAB2BGR)
        paste = g.paste
        if context.steady is not None:  # the face and its mask where the steady alignment puts them
            face = cv2.warpAffine(face, context.steady, (side, side), flags=cv2.INTER_LINEAR,
                                  borderMode=cv2.BORDER_REPLICATE)
            paste = cv2.warpAffine(paste, context.steady, (side, side), flags=cv2.INTER_LINEAR)[..., None]
        base = strong_blur(crop, self.sigma * side).astype(np.float32)
        out = base + (face.astype(np.float32) - base) * paste
        return np.clip(out + 0.5, 0, 255).astype(np.uint8)

    def __call__(self, crops: np.ndarray, contexts: Sequence[FaceContext]) -> np.ndarray:
        single = np.ndim(crops) == 3
        batch = check_batch(crops, contexts)
        if contexts is None:
            raise ValueError("the composite anonymizer needs each crop's FaceContext (its track)")
        out = np.empty_like(batch)
        for i, (crop, ctx) in enumerate(zip(batch, contexts)):
            out[i] = self._render(crop, ctx)
        return out[0] if single else out
