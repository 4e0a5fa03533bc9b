"""Byte layout of a vault file (``<output>.sdv``). All integers little-endian.

Header::

    "SDVAULT" (7) | version u8 (4; 1-3 are still read) | json_len u32 | JSON metadata (UTF-8) | HMAC-SHA256 (32)

The HMAC key is ``header_mac_key(master, video_id)``; ``header_digest`` =
SHA-256 of everything before the HMAC and is bound into every record's AAD.

Records, appended one after another::

    length u32 (bytes after this field) | type u8 | track_id u32 | frame_index u64 | body

    TRACK     (1) body = check (16, clear) | nonce (12) | GCM(vault_key, b"")       first record of a track
    FRAME     (2) body = nonce (12) | GCM(vault_key, frame payload)                 version 1 only
    CHUNK     (5) body = last_frame u64 | n_faces u32 | group u64 (clear) | nonce (12)  versions 2 and 3
                         | GCM(vault_key, chunk payload)
                  frame_index = the chunk's first frame; the clear fields are in the AAD
    TRACK_END (3) body = nonce (12) | GCM(vault_key, u64 number of FRAME/CHUNK records of this track)
    END       (4) body = nonce (12) | GCM(end_key, u64 records before END | u32 track count | DIGEST)
                  track_id = 0, frame_index = largest frame index in the vault
                  DIGEST (32, versions 3 and 4) = SHA-256 over every record before END of
                  length u32 | type u8 | track_id u32 | frame_index u64 | the GCM tag (its body's last 16)
                  then (version 4) OUTPUT = every u32 | count u32 | (frame_index u64 | thumbnail 144)*:
                  the anonymized output's frames, vault/fingerprint.py

    AAD = header_digest | seq u64 | type u8 | track_id u32 | frame_index u64 [| check or CHUNK clear fields]

The DIGEST binds every record to the master key: a track key opens and can re-encrypt its own records
(someone given one person's key), and without it a record forged so would pass recovery with the master key.
``seq`` is the record's position (0, 1, 2, ...), not stored. ``vault_key`` is
``vault_key(track_key(master, video_id, track_id))``; ``check`` is
``track_key_check(track_key)``. Every track's records are TRACK, FRAME* (or
CHUNK*), TRACK_END; END is last and nothing may follow it. Version 2 writers
flush every track's pending chunk at the same frame, so the chunks in the file
come in groups whose frame ranges do not overlap the next group's; ``group``
(the group's first frame) names the group, and a reader merges one group at a
time into frame order.

Chunk payload (plaintext, versions 2 and 3)::

    codec u8 (crops.CODECS, 0: geometry only) | canvas_w u16 | canvas_h u16 | side_len u32
    | side data (raw LZMA2) | [PLANES] | n_packets u32 | (len u32 | H.264 packet)*

    PLANES (codecs fed the source's 4:2:0 planes, 4-6, only) = pix_fmt u8 (video.planes.PIX_FMTS index)
          | color_range u8 | colorspace u8 (the source frame's, for the conversion back to BGR)
          | per face with a crop: shift u8 (bit 0: x, bit 1: y; where its box starts in the even
            rectangle of planes the video holds for it, see chunk._planes_rect)

    side data = per face, in frame order: GEO | mask n_mask x f64
                then, for the faces with an alpha mask: crops.pack_masks runs (u32)
    GEO = frame_index u64 | flags u8 (1: pts, 2: crop, 4: alpha) | pts i64 | inverse 6 x f64
          | crop_w u32 | crop_h u32 | n_mask u16 | pixels_h u16 | pixels_w u16
          | box_x u16 | box_y u16 | box_w u16 | box_h u16
    (pixels: the stored crop's size; box: the part of it the video holds, the
    bounding box of its owned pixels; outside it nothing is owned)

Frame payload (plaintext, version 1)::

    flags u8 (1: pts present, 2: crop present) | pts i64 | inverse 6 x f64 (row-major [2, 3])
    | crop_w u32 | crop_h u32 | n_mask u16 | mask n_mask x f64 | PNG bytes of the crop (rest)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"SDVAULT"
VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
DIGEST_FROM = 3  # the first version whose END record holds the records' digest
OUTPUT_FROM = 4  # ... and the output's thumbnails after it (variable length)
ALGORITHMS = "HKDF-SHA256/AES-256-GCM/HMAC-SHA256"
NONCE_LEN = 12
TAG_LEN = 16
MAC_LEN = 32
MAX_JSON = 1 << 20
MAX_RECORD = 64 << 20

HEADER_FIXED = struct.Struct("<7sBI")  # magic, version, json_len
LEN = struct.Struct("<I")
REC = struct.Struct("<BIQ")  # type, track_id, frame_index
AAD = struct.Struct("<QBIQ")  # seq, type, track_id, frame_index

TRACK, FRAME, TRACK_END, END, CHUNK = 1, 2, 3, 4, 5
TYPE_NAMES = {TRACK: "track", FRAME: "frame", TRACK_END: "track-end", END: "end", CHUNK: "chunk"}
DATA_TYPE = {1: FRAME, 2: CHUNK, 3: CHUNK, 4: CHUNK}  # the face-data record type of each version
CHECK_LEN = 16
# exact body sizes of the fixed-size record types
BODY_LEN = {
    TRACK: CHECK_LEN + NONCE_LEN + TAG_LEN,
    TRACK_END: NONCE_LEN + 8 + TAG_LEN,
    END: NONCE_LEN + 12 + TAG_LEN,
}
DIGEST_LEN = 32
MIN_FRAME_BODY = NONCE_LEN + TAG_LEN
CHUNK_CLEAR = struct.Struct("<QIQ")  # last_frame, n_faces, group (first frame of the chunk's group)
MIN_CHUNK_BODY = CHUNK_CLEAR.size + NONCE_LEN + TAG_LEN
CHUNK_HEAD = struct.Struct("<BHHI")  # codec, canvas_w, canvas_h, side_len
PLANES = struct.Struct("<BBB")  # pix_fmt, color_range, colorspace
GEO = struct.Struct("<QBq6dIIHHHHHHH")
FLAG_ALPHA = 4

PAYLOAD = struct.Struct("<Bq6dIIH")
FLAG_PTS, FLAG_CROP = 1, 2


def aad(header_digest: bytes, seq: int, rtype: int, track_id: int, frame_index: int, extra: bytes = b"") -> bytes:
    return header_digest + AAD.pack(seq, rtype, track_id, frame_index) + extra


@dataclass(frozen=True)
class MaskParams:
    """Where a face was pasted and how it was made: what recovery needs besides the crop.

    Stored after each face's geometry as ``n_mask`` float64 values in field
    order. Vaults written before the ``generated`` flag existed hold two values
    (it reads as None); a face appended without parameters holds none (its
    ``mask_params`` reads as None)."""

    roi_x: float  # frame position of the crop's top-left pixel: exact recovery copies the crop back there
    roi_y: float
    generated: bool | None = None  # made by the reversible anonymizer, so model-mode recovery applies


def mask_to_values(params: MaskParams | None) -> np.ndarray:
    """The float64 values stored for ``params`` (none for None)."""
    if params is None:
        return np.zeros(0, np.float64)
    flag = [] if params.generated is None else [1.0 if params.generated else 0.0]
    return np.array([params.roi_x, params.roi_y, *flag], np.float64)


def mask_from_values(values: np.ndarray) -> MaskParams | None:
    """Inverse of :func:`mask_to_values`. Values past the third are ignored, so a later version can
    add fields; ValueError for a single value, which no writer stores."""
    if len(values) == 0:
        return None
    if len(values) == 1:
        raise ValueError("malformed mask parameters")
    generated = bool(values[2]) if len(values) >= 3 else None
    return MaskParams(float(values[0]), float(values[1]), generated)


def pack_payload(pts, inverse: np.ndarray, crop_size: tuple[int, int], mask_params: MaskParams | None,
                 png: bytes | None) -> bytes:
    flags = (FLAG_PTS if pts is not None else 0) | (FLAG_CROP if png is not None else 0)
    mask = mask_to_values(mask_params)
    head = PAYLOAD.pack(
        flags, 0 if pts is None else int(pts), *inverse.reshape(6).tolist(), crop_size[0], crop_size[1], len(mask)
    )
    return head + mask.astype("<f8").tobytes() + (png or b"")


@dataclass
class FramePayload:
    pts: int | None
    inverse: np.ndarray
    crop_size: tuple[int, int]
    mask_params: MaskParams | None
    png: bytes | None = field(repr=False)


def unpack_payload(data: bytes) -> FramePayload:
    """Raises ValueError/struct.error on malformed data."""
    vals = PAYLOAD.unpack_from(data)
    flags, pts = vals[0], vals[1]
    inverse = np.array(vals[2:8], dtype=np.float64).reshape(2, 3)
    crop_w, crop_h, n_mask = vals[8:11]
    off = PAYLOAD.size
    if flags & ~(FLAG_PTS | FLAG_CROP) or len(data) < off + 8 * n_mask:
        raise ValueError("malformed frame payload")
    mask = mask_from_values(np.frombuffer(data, dtype="<f8", count=n_mask, offset=off))
    off += 8 * n_mask
    png = data[off:] if flags & FLAG_CROP else None
    if png is None and off != len(data):
        raise ValueError("malformed frame payload")
    return FramePayload(pts if flags & FLAG_PTS else None, inverse, (crop_w, crop_h), mask, png)


def body_len(rtype: int, version: int) -> int | None:
    """The exact body size of a fixed-size record type in a vault of ``version`` (None: variable)."""
    size = BODY_LEN.get(rtype)
    if size is not None and rtype == END and version >= OUTPUT_FROM:
        return None  # (its OUTPUT part: min_body_len)
    if size is not None and rtype == END and version >= DIGEST_FROM:
        size += DIGEST_LEN
    return size


def min_body_len(rtype: int, version: int) -> int:
    """The smallest body a variable-size record type may have in a vault of ``version`` (0: no bound here)."""
    if rtype == END and version >= OUTPUT_FROM:
        return BODY_LEN[END] + DIGEST_LEN + 8
    return {FRAME: MIN_FRAME_BODY, CHUNK: MIN_CHUNK_BODY}.get(rtype, 0)


def digest_entry(length: int, rtype: int, track_id: int, frame_index: int, tag: bytes) -> bytes:
    """What one record adds to the END record's DIGEST (see the top)."""
    return LEN.pack(length) + REC.pack(rtype, track_id, frame_index) + tag
