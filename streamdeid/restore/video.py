"""``recover``: put the original faces of an anonymized video back from its vault, with a key.

Exact mode copies the stored original pixels back (``exact.restore_frame``); model mode (dbaf
outputs, also ``--no-crops`` vaults) regenerates each face with G(x_ano, P_track) (``_ModelRestore``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from ..anonymizers import dbaf_recover_crops
from ..checks import PATH, check_arg
from ..config import PipelineConfig
from ..files import refuse_clobbering

from ..types import Frame, StreamdeidError
from ..vault import VaultReader, read_video_id_tag, vault_path_for
from ..vault import fingerprint
from ..video.images import is_image
from ..video.partial import final_path_for
from ..video.reader import open_source
from ..threads import prefetch
from ..video.writer import VideoWriter
from .exact import load_recovery_key, records_by_frame, restore_frame

log = logging.getLogger(__name__)


@dataclass
class RecoverResult:
    output: Path
    frames: int
    faces_restored: int
    damage: str | None  # what a truncated vault lost (with allow_partial), else None
    mode: str = "exact"
    faces_skipped: int = 0  # model mode: faces that were not generated (solid fallback), left as they are
    notes: list[str] = field(default_factory=list)  # warnings for the user (model mismatch, ...)
    # exact mode: faces whose every changed pixel another face's cover owns (render.py), restored with it
    faces_within_others: int = 0


#: What ``recover --mode model`` says about keys, always.
MODEL_MODE_CAVEAT = ("model mode cannot tell a wrong key from a right one: G(x, P) with a wrong P yields a "
                     "different face, not an error; the faces are regenerated, not the original pixels")


def recover(anonymized: str, dst: str | Path, *, key_file: str, vault: str | Path | None = None,
            tracks: list[int] | None = None, config: PipelineConfig | None = None,
            allow_partial: bool = False, mode: str = "exact", model: str | None = None,
            backend: str = "onnxrt") -> RecoverResult:
    """Restore the original faces of ``anonymized`` from its vault.

    ``mode="exact"`` (default) copies the original pixels stored in the vault
    back. ``mode="model"`` (DBAF outputs, also vaults written with
    ``store_crops=False``): for each face in the vault, the anonymized crop is
    re-aligned with the stored geometry and ``G(x_ano, P_track)`` is pasted
    back with the run's soft mask; ``model``/``backend`` name the generator
    (None: the shipped weights). See ``MODEL_MODE_CAVEAT``.

    ``tracks`` restores only those people. A wrong key, a vault of another
    video, or a tampered vault raise ``StreamdeidError`` and leave no output.
    A truncated vault does too, unless ``allow_partial``: then everything
    before the damage is restored and ``damage`` says what was lost.
    """
    for name, value, hint in (("anonymized", anonymized, PATH), ("dst", dst, PATH), ("key_file", key_file, PATH),
                              ("vault", vault, PATH | None), ("tracks", tracks, list[int] | None),
                              ("config", config, PipelineConfig | None), ("allow_partial", allow_partial, bool),
                              ("mode", mode, str), ("model", model, PATH | None), ("backend", backend, str)):
        check_arg(name, value, hint)  # before any work (ArgumentError: a TypeError and a StreamdeidError)
    if mode not in ("exact", "model"):
        raise StreamdeidError(f"unknown recovery mode {mode!r} (exact or model)")
    config = config or PipelineConfig()
    src = Path(anonymized)
    if not src.exists():
        raise StreamdeidError(f"{anonymized}: no such file")
    vault_path = Path(vault) if vault is not None else _default_vault(src)
    # --overwrite replaces an earlier recovery, never what this one reads
    refuse_clobbering([("input", src), ("key file", key_file), ("vault", vault_path)], [("output", dst)],
                      overwrite=True)
    if not vault_path.exists():
        if vault is None and is_image(src):  # a photo is anonymized with no vault at all
            raise StreamdeidError(f"{anonymized} is a photo: photos get no vault, so their faces cannot be recovered")
        raise StreamdeidError(f"{vault_path}: no such vault (pass --vault)")
    key = load_recovery_key(key_file)
    generator = None
    if mode == "model":
        from ..anonymizers.dbaf import DBAFAnonymizer

        generator = DBAFAnonymizer(model, backend, threads=config.anonymize.threads)
    with VaultReader(vault_path) as reader, open_source(str(src)) as source:
        tag = read_video_id_tag(source.metadata)
        if tag is not None and tag != reader.video_id.hex():
            raise StreamdeidError(f"{vault_path} belongs to another video than {src.name}")
        if tag is None:  # remuxed or re-encoded elsewhere: only the faces' places and frames can tell
            log.warning("%s carries no streamdeid video id (remuxed or re-encoded?): %s is checked against the "
                        "frames it remembers of its output instead, and its faces must fit this video's frames and "
                        "size", src.name, vault_path.name)
        reader.check_key(key, tracks)
        notes: list[str] = []
        if mode == "exact":
            if reader.header.get("store_crops") is False:
                raise StreamdeidError(f"{vault_path} holds geometry only (run --no-crops): exact recovery is "
                                      "impossible; use --mode model --model PATH")
            apply = _ExactRestore()
        else:
            apply = _ModelRestore(generator, key, reader, notes)
        # decoding the vault's crop videos (PyAV releases the GIL) overlaps decoding and encoding the video
        groups = prefetch(records_by_frame(reader, key, tracks), 64, "vault-prefetch")
        # the originals: owner-only, as the vault is (the umask left them readable by every user)
        writer = VideoWriter(dst, source, config.output, metadata=dict(source.metadata), private=True)
        ok = False
        try:
            seen: dict[int, np.ndarray] | None = {} if tag is None else None
            frames, beyond = _restore_frames(source, groups, apply, writer, config.progress, seen)
            if seen is not None:
                _check_samples(reader, seen, src.name, vault_path.name)
            if beyond and not allow_partial:
                raise StreamdeidError(f"{vault_path.name} holds faces on {beyond} frame(s) past this video's "
                                      f"{frames}: it is another video's vault, or this video was cut short "
                                      "(pass --partial to recover what it has)")
            if beyond:
                notes.append(f"the video ends after {frames} frames: the vault's faces on {beyond} later frame(s) "
                             "had no frame to go to")
            damage = str(reader.damage) if reader.damage is not None else None
            if damage and not allow_partial:
                raise StreamdeidError(f"{damage} (pass --partial to write what could be recovered)")
            ok = True
        finally:
            writer.close(success=ok)
    return RecoverResult(Path(dst), frames, apply.restored, damage, mode, apply.skipped, notes,
                         getattr(apply, "within_others", 0))


def _restore_frames(source, groups, apply, writer: VideoWriter, progress: bool,
                    seen: dict[int, np.ndarray] | None = None) -> tuple[int, int]:
    """Every item of ``source`` to ``writer``, each frame with its vault records applied; the frame count, and
    how many frames of the vault lay past the video's end. ``seen``: filled with the thumbnails of the video's
    frames as given (every fingerprint.EVERY-th, before any face is restored)."""
    frames = 0
    pending = next(groups, None)
    for item in tqdm(source, total=source.frame_count, unit="frame", disable=not progress,
                     desc="recover", dynamic_ncols=True):
        if isinstance(item, Frame):
            if seen is not None and item.index % fingerprint.EVERY == 0:
                seen[item.index] = fingerprint.thumbnail(item.image)
            while pending is not None and pending[0] < item.index:
                pending = next(groups, None)
            if pending is not None and pending[0] == item.index:
                apply(item, pending[1])
                pending = next(groups, None)
            frames += 1
        writer.write(item)
    beyond = int(pending is not None)
    for _ in groups:  # drain: a tampered record after the video's last frame still counts
        beyond += 1
    return frames, beyond


def _check_samples(reader: VaultReader, seen: dict[int, np.ndarray], video: str, vault: str) -> None:
    """A video that carries no video id must show the frames the vault's END record remembers of its output
    (vault/fingerprint.py; format 4, read by the master key): else it is another video than the vault's."""
    if reader.output_samples is None:  # an older vault, or a one-person key (the END record is the master's)
        return
    off, both = fingerprint.differing(reader.output_samples, seen)
    if both and off > (1 - fingerprint.MATCH_SHARE) * both:
        raise StreamdeidError(f"{video} is not the video {vault} was made beside: {off} of the {both} frames the "
                              "vault remembers of it differ (another video's vault, or a copy whose frames moved: "
                              "another frame rate, a cut at the start); nothing was written")


class _ExactRestore:
    """Copy each record's stored original pixels back (bit-exact on a lossless video)."""

    def __init__(self) -> None:
        self.restored = 0
        self.skipped = 0
        self.within_others = 0  # records owning no pixel: their face lay under another face's cover

    def __call__(self, frame: Frame, records) -> None:
        for rec in records:
            if restore_frame(frame.image, rec) > 0:
                self.restored += 1
            else:
                self.within_others += 1


class _ModelRestore:
    """X_rec = G(X_ano, P_track) per vault record, pasted back with the run's soft mask."""

    def __init__(self, generator, key, reader: VaultReader, notes: list[str]) -> None:
        from ..blend import face_mask
        from ..config import BlendConfig
        from ..keys import MasterKey

        self.generator = generator
        self.restored = 0
        self.skipped = 0
        self._video_id = reader.video_id
        self._master = key if isinstance(key, MasterKey) else None
        self._track_key = None if self._master is not None else key.key_bytes
        meta = reader.header.get("pipeline") or {}
        method = meta.get("anonymizer")
        if method is not None and method != generator.name:
            raise StreamdeidError(f"{reader.path}: this video was anonymized with {method}, which no model can "
                                  "invert; model mode needs a dbaf output (use --mode exact)")
        self._legacy_generated = method == generator.name  # records without the generated flag
        want = (meta.get("model") or {}).get("sha256")
        if want and generator.model_path is not None:
            from ..files import sha256_file

            if sha256_file(generator.model_path) != want:
                notes.append(f"{generator.model_path} is not the model file the run used "
                             f"({meta['model'].get('file')}); unless it holds the same weights in another "
                             "format, the recovered faces are wrong")
        blend = BlendConfig()
        for name, value in (meta.get("blend") or {}).items():  # the run's mask, so the paste covers the same area
            if hasattr(blend, name):
                setattr(blend, name, value)
        # every vault's header names its feather (0.08 before it was chosen by anonymizer); one that did
        # not would be a generated face's, the only kind model mode restores
        self._blend = blend.resolved(generated=True)
        self._align_margin = float(meta.get("align_margin", 0.4))
        self._masks: dict[int, object] = {}
        self._face_mask = face_mask

    def _mask(self, size: int):
        if size not in self._masks:
            self._masks[size] = self._face_mask(size, self._blend, None, align_margin=self._align_margin)
        return self._masks[size]

    def _key(self, track_id: int) -> bytes:
        if self._master is not None:
            return self._master.track_key(self._video_id, track_id)
        return self._track_key

    def __call__(self, frame: Frame, records) -> None:
        from ..blend import blend_into, warp_to_frame
        from ..types import FaceContext

        image = frame.image
        h, w = image.shape[:2]
        todo = []
        for rec in records:
            params = rec.mask_params
            generated = self._legacy_generated if params is None or params.generated is None else params.generated
            if not generated:
                self.skipped += 1
                continue
            todo.append(rec)
        by_size: dict[int, list] = {}
        for rec in todo:
            by_size.setdefault(int(rec.crop_size[0]), []).append(rec)
        for size, recs in by_size.items():
            crops = np.stack([
                cv2.warpAffine(image, cv2.invertAffineTransform(rec.inverse), (size, size), flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REPLICATE)
                for rec in recs
            ])
            contexts = [FaceContext(rec.track_id, rec.frame_index, self._key(rec.track_id)) for rec in recs]
            out = dbaf_recover_crops(self.generator, crops, contexts)
            mask = self._mask(size)
            for rec, crop in zip(recs, out):
                wf = warp_to_frame(crop, rec.inverse, mask, w, h)
                if wf is not None:
                    blend_into(image, wf, color_match=True)
                    self.restored += 1


def _default_vault(src: Path) -> Path:
    """The vault beside ``src``. A run killed outright leaves ``out.partial.mp4`` with its vault still named
    for the output it never finished (``out.mp4.sdv``; Ctrl-C renames it ``out.partial.mp4.sdv``): found too."""
    own, final = vault_path_for(src), final_path_for(src)
    if own.exists() or final is None:
        return own
    finished = vault_path_for(final)
    return finished if finished.exists() else own

