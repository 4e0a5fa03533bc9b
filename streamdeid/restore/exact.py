"""Exact recovery: put back, with a key, what each paste changed.

What a run records is run/recording.py (``VaultRecorder``: per face, the touched rectangle, its original
pixels and which of them the face owns). At recover time ``restore_frame`` copies the owned original
pixels back, so with a lossless anonymized video the face regions come back bit-identical. The run's
keys are keys/run.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

from ..keys import KeyFile, load_key
from ..types import StreamdeidError
from ..vault import VaultReader, VaultRecord

__all__ = ["load_recovery_key", "records_by_frame", "restore_frame"]


def restore_frame(image: np.ndarray, record: VaultRecord) -> int:
    """Copy a record's owned original pixels into ``image`` (in place); return how many."""
    if record.crop is None:
        raise StreamdeidError("this vault holds geometry only (run --no-crops): exact recovery is impossible;"
                              " use --mode model --model PATH")
    x, y = int(record.mask_params.roi_x), int(record.mask_params.roi_y)
    crop = record.crop
    h, w = crop.shape[:2]
    region = image[y:y + h, x:x + w]
    if region.shape[:2] != (h, w):
        raise StreamdeidError(f"vault record for frame {record.frame_index} does not fit this video's frame size")
    if crop.shape[2] == 3:
        region[:] = crop
        return h * w
    # cv2.copyTo with the alpha as mask: boolean indexing cost ~1 ms a face, on the recover main thread
    alpha = cv2.extractChannel(crop, 3)
    cv2.copyTo(cv2.cvtColor(crop, cv2.COLOR_BGRA2BGR), alpha, region)
    return cv2.countNonZero(alpha)


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
