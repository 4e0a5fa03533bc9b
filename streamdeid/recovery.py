"""Exact recovery: record what each paste changed, and put it back with a key.

At run time ``VaultRecorder`` stores, per anonymized face, the frame
rectangle the paste touched, the original pixels there, and which of them
this face *owns* (alpha channel of a BGRA PNG; pixels outside the face's own
mask are zeroed, so a track key never reveals a neighbour's face). At recover
time ``restore_frame`` copies the owned original pixels back, so with a
lossless anonymized video the face regions come back bit-identical.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .keys import KeyFile, MasterKey, load_key, new_video_id, track_key
from .render import PastedFace
from .types import Frame, FrameResult, StreamdeidError
from .vault import VaultReader, VaultRecord, VaultWriter, source_fingerprint

log = logging.getLogger(__name__)

VIDEO_ID_TAG = "comment"  # container tag that names the vault's video id in the output
VIDEO_ID_PREFIX = "streamdeid-video-id:"


def vault_path_for(output: Path) -> Path:
    return output.with_name(output.name + ".sdv")


def video_id_tag(video_id: bytes) -> dict[str, str]:
    return {VIDEO_ID_TAG: VIDEO_ID_PREFIX + video_id.hex()}


def read_video_id_tag(metadata: dict[str, str]) -> str | None:
    for key, value in metadata.items():
        if key.lower() == VIDEO_ID_TAG and value.startswith(VIDEO_ID_PREFIX):
            return value[len(VIDEO_ID_PREFIX):]
    return None


@dataclass
class RunKeys:
    """The keys of one run: a master key (from the user's file, or ephemeral) and a video id."""

    master: MasterKey | bytes
    video_id: bytes
    ephemeral: bool  # True: the master was drawn for this run and never stored (irreversible)

    def for_track(self, track_id: int) -> bytes:
        return track_key(self.master, self.video_id, track_id)

    def for_next_video(self) -> "RunKeys":
        """Same master, a fresh video id (each video of a folder gets its own)."""
        return RunKeys(self.master, new_video_id(), self.ephemeral)


def run_keys(key_file: str | None, *, new_key: bool = False) -> RunKeys:
    """Keys for ``run``: the master from ``key_file`` (created with ``new_key``), or an ephemeral one."""
    import secrets

    from .keys import generate_master_key

    if key_file is None:
        return RunKeys(secrets.token_bytes(32), new_video_id(), ephemeral=True)
    path = Path(key_file)
    if not path.exists():
        if not new_key:
            raise StreamdeidError(f"{key_file}: no such key file (create one with `streamdeid keygen {key_file}`"
                                  " or pass --new-key)")
        master = generate_master_key(path)
        log.warning("created a new master key in %s: keep it safe, it is the only way to recover faces", path)
    else:
        master = load_key(path)
    if not isinstance(master, MasterKey):
        raise StreamdeidError(f"{key_file} is a track key; run needs a master key")
    return RunKeys(master, new_video_id(), ephemeral=False)


class VaultRecorder:
    """Observer for ``process_frames``: appends one vault record per pasted face.

    ``mask_params`` of a record: (roi x, roi y, generated) where ``generated``
    is 1.0 when the face was made by the reversible anonymizer ``reversible``
    (dbaf: model-mode recovery applies) and 0.0 otherwise (solid fallback, blur).
    """

    def __init__(self, writer: VaultWriter, reversible: str | None = None) -> None:
        self.writer = writer
        self.reversible = reversible

    def __call__(self, result: FrameResult, pasted: list[PastedFace]) -> None:
        self.record(result.frame, pasted)

    def record(self, frame: Frame, pasted: list[PastedFace]) -> None:
        for p in pasted:
            generated = 1.0 if self.reversible is not None and p.method == self.reversible else 0.0
            self.writer.append(
                p.face.track_id, frame.index, frame.pts, p.aligned.inverse, len(p.aligned.crop),
                _owned_bgra(p.original, p.owned) if self.writer.store_crops else None,
                mask_params=(float(p.roi[0]), float(p.roi[1]), generated),
            )


class SegmentVaultWriter:
    """One vault per live recording segment (``live.outputs.SegmentVault``).

    Each segment is a video of its own: a fresh video id (tagged into the
    segment file), frame indices from the segment's first frame, and its
    vault beside it, so ``streamdeid recover SEGMENT`` works on any segment.
    """

    def __init__(self, keys: RunKeys, segment: Path, *, overwrite: bool,
                 reversible: str | None = None, pipeline: dict | None = None) -> None:
        self.keys = keys.for_next_video()
        self.path = vault_path_for(segment)
        if self.path.exists() and not overwrite:
            raise StreamdeidError(f"{self.path} exists; pass --overwrite to replace it")
        writer = open_vault_writer(self.path, self.keys, source="-", output=segment, store_crops=True,
                                   overwrite=overwrite, pipeline=pipeline)
        self._recorder = VaultRecorder(writer, reversible)
        self.metadata = video_id_tag(self.keys.video_id)

    def record(self, index: int, frame: Frame, pasted: list[PastedFace]) -> None:
        self._recorder.record(frame, pasted)

    def close(self, segment: Path, success: bool) -> None:
        """Finish the vault; keep it beside the segment's final (or partial) file."""
        writer = self._recorder.writer
        if success:
            writer.close()
        else:
            writer.abort()
        target = vault_path_for(segment)
        if target != self.path:
            self.path.rename(target)
            self.path = target


def open_vault_writer(path: Path, keys: RunKeys, *, source: str, output: Path, store_crops: bool,
                      overwrite: bool, pipeline: dict | None = None) -> VaultWriter:
    """``pipeline``: clear-text settings model-mode recovery needs to redo the paste
    (anonymizer, model hash, crop size, align margin, blend mask); nothing secret."""
    meta = {"video_id": keys.video_id.hex(), "output": output.name}
    if source != "-" and Path(source).is_file():
        meta["source_fingerprint"] = source_fingerprint(source)
    if pipeline:
        meta["pipeline"] = pipeline
    return VaultWriter(path, meta, keys.master, store_crops=store_crops, overwrite=overwrite)


def pipeline_meta(config, anonymizer) -> dict:
    """What ``recover --mode model`` needs from the run, for the vault header."""
    from dataclasses import asdict

    meta = {
        "anonymizer": anonymizer.name,
        "crop_size": config.align.crop_size,
        "align_margin": config.align.margin,
        "blend": asdict(config.blend),
    }
    model_path = anonymizer.model_path
    if model_path is not None:
        from .anonymize.dbaf import sha256_file

        meta["model"] = {"file": Path(model_path).name, "sha256": sha256_file(model_path),
                         "backend": anonymizer.backend_name or config.anonymize.backend}
    return meta


def _owned_bgra(original: np.ndarray, owned: np.ndarray) -> np.ndarray:
    """[h, w, 3] original + [h, w] bool -> [h, w, 4] BGRA with unowned pixels zeroed."""
    bgra = np.zeros(original.shape[:2] + (4,), np.uint8)
    bgra[owned, :3] = original[owned]
    bgra[owned, 3] = 255
    return bgra


def restore_frame(image: np.ndarray, record: VaultRecord) -> int:
    """Copy a record's owned original pixels into ``image`` (in place); return how many."""
    if record.crop is None:
        raise StreamdeidError("this vault holds geometry only (run --no-crops): exact recovery is impossible;"
                              " use --mode model --model PATH")
    x, y = int(record.mask_params[0]), int(record.mask_params[1])
    crop = record.crop
    h, w = crop.shape[:2]
    region = image[y:y + h, x:x + w]
    if region.shape[:2] != (h, w):
        raise StreamdeidError(f"vault record for frame {record.frame_index} does not fit this video's frame size")
    owned = crop[..., 3] > 0 if crop.shape[2] == 4 else np.ones((h, w), bool)
    region[owned] = crop[owned, :3]
    return int(owned.sum())


def load_recovery_key(key_file: str) -> KeyFile:
    path = Path(key_file)
    if not path.exists():
        raise StreamdeidError(f"{key_file}: no such key file")
    return load_key(path)


def records_by_frame(reader: VaultReader, key: KeyFile, tracks: list[int] | None) -> Iterator[tuple[int, list[VaultRecord]]]:
    """Group the vault's records (written in frame order) by frame index."""
    current, group = None, []
    for rec in reader.records(key, tracks):
        if rec.frame_index != current and group:
            yield current, group
            group = []
        current = rec.frame_index
        group.append(rec)
    if group:
        yield current, group
