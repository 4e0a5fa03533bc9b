"""The vault (``<output>.sdv``): encrypted original face crops and paste geometry.

Writer side (``run``)::

    with VaultWriter(path, {"video_id": vid, "source_fingerprint": fp, "output": name}, master) as vw:
        vw.append(track_id, frame_index, pts, inverse, crop_size, crop_bgr, mask_params=())

Reader side (``recover``/``inspect``)::

    vr = VaultReader(path)                 # header only, no key
    vr.inspect()                           # dict, nothing secret
    for rec in vr.records(key, tracks=None):   # key checked here (StreamdeidError)
        ...                                # VaultRecord; tampering -> StreamdeidError mid-way
    if vr.damage: print(vr.damage)         # truncated vault: one-line message

The byte layout is documented in :mod:`streamdeid.vault.format`.
"""

from .format import ALGORITHMS, MAGIC, VERSION
from .reader import VaultDamage, VaultReader, VaultRecord
from .writer import VaultWriter, source_fingerprint

__all__ = [
    "ALGORITHMS",
    "MAGIC",
    "VERSION",
    "VaultDamage",
    "VaultReader",
    "VaultRecord",
    "VaultWriter",
    "source_fingerprint",
]
