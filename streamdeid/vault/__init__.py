"""The vault (``<output>.sdv``): encrypted original face crops and paste geometry.

Format 2 stores each track's crops as a small H.264 video per second
(:mod:`.crops`, :mod:`.chunk`); format 1 (a PNG per face) is still read.

Writer side (``run``)::

    with VaultWriter(path, {"video_id": vid, "output": name}, master, quality="high") as vw:
        vw.advance(frame_index)            # every frame: closes a chunk group on time
        vw.append(track_id, frame_index, pts, inverse, crop_size, crop_bgra, MaskParams(x, y, generated))

Reader side (``recover``/``inspect``)::

    vr = VaultReader(path)                 # header only, no key
    vr.inspect()                           # dict, nothing secret
    for rec in vr.records(key, tracks=None):   # key checked here (StreamdeidError)
        ...                                # VaultRecord; tampering -> StreamdeidError mid-way
    if vr.damage: print(vr.damage)         # truncated vault: one-line message

The byte layout is documented in :mod:`streamdeid.vault.format`.
"""

from .format import ALGORITHMS, MAGIC, VERSION, MaskParams
from .reader import VaultDamage, VaultReader, VaultRecord
from .header import source_fingerprint, source_fingerprints
from .naming import read_edits_tag, read_video_id_tag, vault_path_for, video_id_tag
from .writer import VaultWriter

__all__ = [
    "ALGORITHMS",
    "MAGIC",
    "MaskParams",
    "VERSION",
    "VaultDamage",
    "VaultReader",
    "VaultRecord",
    "VaultWriter",
    "read_edits_tag",
    "read_video_id_tag",
    "source_fingerprint",
    "source_fingerprints",
    "vault_path_for",
    "video_id_tag",
]
