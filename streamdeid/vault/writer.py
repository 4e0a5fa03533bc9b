"""Append-only, crash-safe vault writer."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from datetime import datetime, timezone

import cv2
import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from streamdeid.keys import derive
from streamdeid.keys.keyfile import MasterKey, TrackKey
from streamdeid.types import StreamdeidError

from . import format as fmt

# header fields the writer fills in itself (a caller's values are replaced)
RESERVED = ("format", "version", "video_id", "algorithms", "crop_codec", "created", "key_check", "store_crops")


def _master_bytes(master_key) -> bytes:
    if isinstance(master_key, TrackKey):
        raise StreamdeidError("writing a vault needs the master key, not a track key")
    if isinstance(master_key, MasterKey):
        return master_key.key_bytes
    return derive._as_master(master_key)


def _video_id(value) -> bytes:
    if isinstance(value, str):
        try:
            value = bytes.fromhex(value)
        except ValueError:
            raise ValueError("header_meta['video_id'] is not a hex string") from None
    return derive.check_video_id(value)


def source_fingerprint(path, head_bytes: int = 1 << 20) -> str:
    """``"sha256-head:<hex of SHA-256 of the first MiB>:<size in bytes>"`` of an input file."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(head_bytes)
    except OSError as e:
        raise StreamdeidError(f"cannot read {path}: {e.strerror}") from None
    return f"sha256-head:{hashlib.sha256(head).hexdigest()}:{size}"


class VaultWriter:
    """Write ``path`` (normally ``<output>.sdv``) record by record.

    ``header_meta`` must contain ``video_id`` (16 bytes or 32 hex digits, the
    id the track keys were derived with); any other JSON-serialisable items
    (e.g. ``source_fingerprint``, ``output``, ``pipeline``) are stored as-is in
    the clear header. Records are flushed and fsync'ed every ``sync_every``
    records or ``sync_seconds`` seconds, so a crash loses at most that much.
    ``close()`` (or leaving a ``with`` block normally) writes the end records;
    leaving a ``with`` block by an exception calls ``abort()``, which syncs what
    was written but leaves the vault marked incomplete (readers report it as
    truncated).
    """

    def __init__(
        self,
        path,
        header_meta: dict,
        master_key,
        *,
        store_crops: bool = True,
        overwrite: bool = False,
        sync_every: int = 64,
        sync_seconds: float = 1.0,
        png_compression: int = 1,
    ) -> None:
        self.path = os.fspath(path)
        master = _master_bytes(master_key)
        if "video_id" not in header_meta:
            raise ValueError("header_meta needs a 'video_id'")
        self.video_id = _video_id(header_meta["video_id"])
        self.store_crops = bool(store_crops)
        self._sync_every = max(1, int(sync_every))
        self._sync_seconds = float(sync_seconds)
        self._png_params = [cv2.IMWRITE_PNG_COMPRESSION, int(png_compression)]
        self._master = master
        self._tracks: dict[int, list] = {}  # track_id -> [AESGCM, frame record count]
        self._seq = 0
        self._max_frame = 0
        self._closed = False

        meta = {k: v for k, v in header_meta.items() if k not in RESERVED}
        meta.update(
            format="streamdeid-vault",
            version=fmt.VERSION,
            video_id=self.video_id.hex(),
            algorithms=fmt.ALGORITHMS,
            crop_codec="png" if self.store_crops else None,
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            key_check=derive.key_check(master, self.video_id).hex(),
            store_crops=self.store_crops,
        )
        try:
            js = json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise ValueError(f"header_meta is not JSON-serialisable: {e}") from None
        if len(js) > fmt.MAX_JSON:
            raise ValueError("header_meta is too large")
        head = fmt.HEADER_FIXED.pack(fmt.MAGIC, fmt.VERSION, len(js)) + js
        self.header = meta
        self.header_digest = hashlib.sha256(head).digest()
        mac = hmac.new(derive.header_mac_key(master, self.video_id), head, hashlib.sha256).digest()

        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
        flags |= os.O_TRUNC if overwrite else os.O_EXCL
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileExistsError:
            raise StreamdeidError(f"vault already exists, refusing to overwrite it: {self.path}") from None
        except OSError as e:
            raise StreamdeidError(f"cannot create vault {self.path}: {e.strerror}") from None
        self._f = os.fdopen(fd, "wb")
        self._io(self._f.write, head + mac)
        self._sync()
        self._sync_dir()

    # ------------------------------------------------------------------ helpers

    def _io(self, fn, *args):
        try:
            return fn(*args)
        except OSError as e:
            raise StreamdeidError(f"cannot write vault {self.path}: {e.strerror}") from None

    def _sync(self) -> None:
        self._io(self._f.flush)
        self._io(os.fsync, self._f.fileno())
        self._unsynced = 0
        self._last_sync = time.monotonic()

    def _sync_dir(self) -> None:
        try:
            dfd = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

    def _write_record(self, rtype: int, track_id: int, frame_index: int, aes: AESGCM, plaintext: bytes,
                      clear: bytes = b"") -> int:
        seq = self._seq
        nonce = os.urandom(fmt.NONCE_LEN)
        ct = aes.encrypt(nonce, plaintext, fmt.aad(self.header_digest, seq, rtype, track_id, frame_index, clear))
        rest = fmt.REC.pack(rtype, track_id, frame_index) + clear + nonce + ct
        if len(rest) > fmt.MAX_RECORD:
            raise StreamdeidError(f"vault record too large ({len(rest)} bytes)")
        self._io(self._f.write, fmt.LEN.pack(len(rest)) + rest)
        self._seq += 1
        self._unsynced += 1
        if self._unsynced >= self._sync_every or time.monotonic() - self._last_sync >= self._sync_seconds:
            self._sync()
        return seq

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("vault writer is closed")

    # ------------------------------------------------------------------ API

    @property
    def record_count(self) -> int:
        return self._seq

    def append(
        self,
        track_id: int,
        frame_index: int,
        pts: int | None,
        inverse_matrix,
        crop_size,
        crop_bgr: np.ndarray | None = None,
        mask_params=(),
    ) -> int:
        """Store one face of one frame; returns the record's sequence number.

        ``inverse_matrix``: [2, 3] crop -> frame affine (float64, stored exactly).
        ``crop_size``: int S or (width, height) of the aligned crop.
        ``crop_bgr``: the original pixels to restore, uint8 [H, W, 3], or BGRA
        [H, W, 4] whose alpha says which pixels to restore (stored as
        PNG, bit-exact); ignored when the vault was opened with store_crops=False.
        ``mask_params``: any float64 values the blender needs to rebuild its mask.
        """
        self._check_open()
        tid = derive.check_track_id(track_id)
        fi = int(frame_index)
        if not 0 <= fi < 2**64:
            raise ValueError(f"frame_index out of range: {fi}")
        inv = np.asarray(inverse_matrix, dtype=np.float64)
        if inv.shape != (2, 3):
            raise ValueError(f"inverse_matrix must be [2, 3], got {inv.shape}")
        if isinstance(crop_size, (int, np.integer)):
            cs = (int(crop_size), int(crop_size))
        else:
            cs = tuple(int(v) for v in crop_size)
            if len(cs) != 2:
                raise ValueError("crop_size must be an int or (width, height)")
        if not all(0 <= v < 2**32 for v in cs):
            raise ValueError(f"crop_size out of range: {cs}")
        mask = np.asarray(mask_params, dtype=np.float64).reshape(-1)
        if len(mask) >= 2**16:
            raise ValueError("too many mask parameters")
        if pts is not None:
            pts = int(pts)
            if not -(2**63) <= pts < 2**63:
                raise ValueError(f"pts out of range: {pts}")
        png = None
        if self.store_crops and crop_bgr is not None:
            crop = np.asarray(crop_bgr)
            if crop.dtype != np.uint8 or crop.ndim != 3 or crop.shape[2] not in (3, 4) or crop.size == 0:
                raise ValueError(f"crop_bgr must be uint8 [H, W, 3] or BGRA [H, W, 4], got {crop.dtype} {crop.shape}")
            ok, buf = cv2.imencode(".png", np.ascontiguousarray(crop), self._png_params)
            if not ok:
                raise StreamdeidError("could not PNG-encode a face crop")
            png = buf.tobytes()

        state = self._tracks.get(tid)
        if state is None:
            tk = derive.track_key(self._master, self.video_id, tid)
            state = self._tracks[tid] = [AESGCM(derive.vault_key(tk)), 0]
            self._write_record(fmt.TRACK, tid, fi, state[0], b"", clear=derive.track_key_check(tk))
        payload = fmt.pack_payload(pts, inv, cs, mask, png)
        seq = self._write_record(fmt.FRAME, tid, fi, state[0], payload)
        state[1] += 1
        self._max_frame = max(self._max_frame, fi)
        return seq

    def flush(self) -> None:
        """Flush and fsync now."""
        self._check_open()
        self._sync()

    def close(self) -> None:
        """Write one track-end record per track and the end record, then sync and close."""
        if self._closed:
            return
        try:
            for tid in sorted(self._tracks):
                aes, n = self._tracks[tid]
                self._write_record(fmt.TRACK_END, tid, self._max_frame, aes, n.to_bytes(8, "little"))
            end = AESGCM(derive.end_key(self._master, self.video_id))
            body = self._seq.to_bytes(8, "little") + len(self._tracks).to_bytes(4, "little")
            self._write_record(fmt.END, 0, self._max_frame, end, body)
            self._sync()
        finally:
            self._closed = True
            self._f.close()

    def abort(self) -> None:
        """Sync and close without end records: the vault reads as truncated."""
        if self._closed:
            return
        try:
            self._sync()
        finally:
            self._closed = True
            self._f.close()

    def __enter__(self) -> "VaultWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        return f"VaultWriter(path={self.path!r}, video_id={self.video_id.hex()}, records={self._seq})"
