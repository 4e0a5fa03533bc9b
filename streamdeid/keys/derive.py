"""Key derivation: everything below a master key comes from HKDF-SHA256.

Tree (``PREFIX = b"streamdeid/v1/"``)::

    master (32 B, CSPRNG)
     |- track_key   = HKDF(master, salt=video_id, info=PREFIX + b"track/" + decimal track id)
     |    |- vault_key       = HKDF(track_key, info=PREFIX + b"vault-key")      AES-256-GCM key
     |    |- kria_vector     = HKDF(track_key, info=PREFIX + b"kria-seed") -> HKDF-Expand blocks
     |    |                    -> Box-Muller -> float32 standard normal [dim]
     |    '- track_key_check = HKDF(track_key, info=PREFIX + b"track-check")[:16]
     |- key_check       = HKDF(master, salt=video_id, info=PREFIX + b"key-check")[:16]
     |- header_mac_key  = HKDF(master, salt=video_id, info=PREFIX + b"header-mac")
     |- end_key         = HKDF(master, salt=video_id, info=PREFIX + b"vault-end")
     |- fingerprint_key = HKDF(master, info=PREFIX + b"source-fingerprint")  HMAC key of a vault's source fingerprint
     '- key_id          = HKDF(master, info=PREFIX + b"key-id")[:8]  (a printable name, not a secret)

Every function takes the master as a :class:`~streamdeid.keys.MasterKey` or as
32 raw bytes. The Box-Muller transform is done here (not with numpy's
generators) so the KRIA vectors stay identical across numpy versions.
"""

from __future__ import annotations

import secrets

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

PREFIX = b"streamdeid/v1/"
KEY_LEN = 32
VIDEO_ID_LEN = 16
CHECK_LEN = 16
MAX_TRACK_ID = 2**32 - 1  # track ids are stored as u32 in key files and vaults

_HKDF_MAX = 255 * 32  # largest single HKDF-SHA256 output


def _hkdf(ikm: bytes, *, info: bytes, salt: bytes | None = None, length: int = KEY_LEN) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


def as_master(master) -> bytes:
    """Raw bytes of a master key given as ``MasterKey`` or 32 bytes."""
    if isinstance(master, (bytes, bytearray, memoryview)):
        raw = bytes(master)
    elif getattr(master, "kind", None) == "master":
        raw = master.key_bytes
    else:
        raise TypeError(f"expected a master key (MasterKey or 32 bytes), got {type(master).__name__}")
    if len(raw) != KEY_LEN:
        raise ValueError(f"a master key is {KEY_LEN} bytes, got {len(raw)}")
    return raw


def _fixed_bytes(value, length: int, what: str) -> bytes:
    """``value`` as bytes of exactly ``length``; TypeError/ValueError naming ``what`` otherwise."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be bytes, got {type(value).__name__}")
    raw = bytes(value)
    if len(raw) != length:
        raise ValueError(f"{what} must be {length} bytes, got {len(raw)}")
    return raw


def _as_key32(key, what: str = "track key") -> bytes:
    return _fixed_bytes(key, KEY_LEN, f"a {what}")


def check_video_id(video_id) -> bytes:
    return _fixed_bytes(video_id, VIDEO_ID_LEN, "video_id")


def check_track_id(track_id) -> int:
    if isinstance(track_id, bool) or not isinstance(track_id, (int, np.integer)):
        raise TypeError(f"track_id must be an int, got {type(track_id).__name__}")
    tid = int(track_id)
    if not 0 <= tid <= MAX_TRACK_ID:
        raise ValueError(f"track_id must be in 0..{MAX_TRACK_ID}, got {tid}")
    return tid


def new_video_id() -> bytes:
    """16 random bytes naming one run (the HKDF salt of all its track keys)."""
    return secrets.token_bytes(VIDEO_ID_LEN)


def track_key(master, video_id: bytes, track_id: int) -> bytes:
    """The 32-byte key of one track of one video."""
    info = PREFIX + b"track/" + str(check_track_id(track_id)).encode("ascii")
    return _hkdf(as_master(master), salt=check_video_id(video_id), info=info)


def vault_key(track_key: bytes) -> bytes:
    """AES-256-GCM key for this track's vault records."""
    return _hkdf(_as_key32(track_key), info=PREFIX + b"vault-key")


def track_key_check(track_key: bytes) -> bytes:
    """16-byte value stored in the vault that tells a wrong track key from tampering."""
    return _hkdf(_as_key32(track_key), info=PREFIX + b"track-check", length=CHECK_LEN)


def kria_vector(track_key: bytes, dim: int) -> np.ndarray:
    """Deterministic standard-normal float32 vector ``[dim]`` for the DBAF KRIA key.

    Same track key -> same vector; different tracks/videos -> independent vectors.
    """
    tk = _as_key32(track_key)
    dim = int(dim)
    if dim < 0:
        raise ValueError(f"dim must be >= 0, got {dim}")
    if dim == 0:
        return np.zeros(0, dtype=np.float32)
    seed = _hkdf(tk, info=PREFIX + b"kria-seed")
    n_pairs = (dim + 1) // 2
    need = n_pairs * 16  # two u64 uniforms per pair of normals
    chunks, have, block = [], 0, 0
    while have < need:
        n = min(_HKDF_MAX - _HKDF_MAX % 16, need - have)
        info = PREFIX + b"kria/block/" + str(block).encode("ascii")
        chunks.append(HKDFExpand(algorithm=hashes.SHA256(), length=n, info=info).derive(seed))
        have += n
        block += 1
    raw = np.frombuffer(b"".join(chunks), dtype="<u8").reshape(n_pairs, 2)
    scale = 2.0**-53
    u1 = ((raw[:, 0] >> np.uint64(11)).astype(np.float64) + 1.0) * scale  # (0, 1]
    u2 = (raw[:, 1] >> np.uint64(11)).astype(np.float64) * scale  # [0, 1)
    r = np.sqrt(-2.0 * np.log(u1))
    theta = 2.0 * np.pi * u2
    z = np.empty(2 * n_pairs, dtype=np.float64)
    z[0::2] = r * np.cos(theta)
    z[1::2] = r * np.sin(theta)
    return z[:dim].astype(np.float32)


def key_check(master, video_id: bytes) -> bytes:
    """16-byte value in the vault header: does this master key open this video's vault?"""
    return _hkdf(as_master(master), salt=check_video_id(video_id), info=PREFIX + b"key-check", length=CHECK_LEN)


def header_mac_key(master, video_id: bytes) -> bytes:
    """HMAC-SHA256 key authenticating a vault header."""
    return _hkdf(as_master(master), salt=check_video_id(video_id), info=PREFIX + b"header-mac")


def end_key(master, video_id: bytes) -> bytes:
    """AES-256-GCM key of a vault's final "end" record."""
    return _hkdf(as_master(master), salt=check_video_id(video_id), info=PREFIX + b"vault-end")


def fingerprint_key(master, video_id: bytes | None = None) -> bytes:
    """HMAC-SHA256 key of the source fingerprint in a vault's clear header: without the master key,
    holding a candidate original does not confirm that the vault was made from it. Salted with the vault's
    video id, so two vaults made from one input with one key do not show it (None: the unsalted key of vaults
    written before 2026-11-27, which a security review found linkable that way)."""
    if video_id is None:
        return _hkdf(as_master(master), info=PREFIX + b"source-fingerprint")
    return _hkdf(as_master(master), salt=check_video_id(video_id), info=PREFIX + b"source-fingerprint")


def key_id(master) -> str:
    """Short printable name of a master key (16 hex digits); reveals nothing about it."""
    return _hkdf(as_master(master), info=PREFIX + b"key-id", length=8).hex()
