"""The clear header a vault writer puts first, and the keyed source fingerprint it may hold.

Readers parse the header without a key (``VaultReader``, ``inspect``); its MAC
and the digest bound into every record's AAD make it tamper-evident.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from datetime import datetime, timezone

from streamdeid.keys import derive
from streamdeid.keys.keyfile import MasterKey, TrackKey
from streamdeid.types import StreamdeidError

from . import format as fmt

# header fields the writer fills in itself (a caller's values are replaced)
RESERVED = ("format", "version", "video_id", "algorithms", "crop_codec", "created", "key_check", "store_crops",
            "chunk_frames")


def master_bytes(master_key) -> bytes:
    if isinstance(master_key, TrackKey):
        raise StreamdeidError("writing a vault needs the master key, not a track key")
    if isinstance(master_key, MasterKey):
        return master_key.key_bytes
    return derive.as_master(master_key)


def parse_video_id(value) -> bytes:
    if isinstance(value, str):
        try:
            value = bytes.fromhex(value)
        except ValueError:
            raise ValueError("header_meta['video_id'] is not a hex string") from None
    return derive.check_video_id(value)


def source_fingerprint(path, master_key, video_id: bytes | None, head_bytes: int = 1 << 20) -> str:
    """``"hmac-sha256-head:<hex>"``: HMAC (key from the master, salted with the vault's ``video_id``; None: the
    unsalted form of older vaults) of an input file's size and first MiB.

    Keyed, so only the key's holder can tell whether a file is this vault's
    source (a plain hash would let anyone holding a candidate original confirm it).
    """
    return source_fingerprints(path, master_key, [video_id], head_bytes)[0]


def source_fingerprints(path, master_key, video_ids: list[bytes | None], head_bytes: int = 1 << 20) -> list[str]:
    """``source_fingerprint`` for each of ``video_ids``, the file read once."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(head_bytes)
    except OSError as e:
        raise StreamdeidError(f"cannot read {path}: {e.strerror}") from None
    master = master_bytes(master_key)
    return ["hmac-sha256-head:" + hmac.new(derive.fingerprint_key(master, vid), size.to_bytes(8, "little") + head,
                                           hashlib.sha256).hexdigest() for vid in video_ids]


def build_header(header_meta: dict, video_id: bytes, master: bytes, *, crop_codec: str | None,
                 chunk_frames: int, store_crops: bool) -> tuple[dict, bytes, bytes]:
    """The header's items (the caller's, with the RESERVED ones filled in), its bytes (fixed part and
    JSON: what every record's AAD digests) and their MAC."""
    meta = {k: v for k, v in header_meta.items() if k not in RESERVED}
    meta.update(
        format="streamdeid-vault",
        version=fmt.VERSION,
        video_id=video_id.hex(),
        algorithms=fmt.ALGORITHMS,
        crop_codec=crop_codec,
        chunk_frames=chunk_frames,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        key_check=derive.key_check(master, video_id).hex(),
        store_crops=store_crops,
    )
    try:
        js = json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise ValueError(f"header_meta is not JSON-serialisable: {e}") from None
    if len(js) > fmt.MAX_JSON:
        raise ValueError("header_meta is too large")
    head = fmt.HEADER_FIXED.pack(fmt.MAGIC, fmt.VERSION, len(js)) + js
    return meta, head, hmac.new(derive.header_mac_key(master, video_id), head, hashlib.sha256).digest()
