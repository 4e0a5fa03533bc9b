"""Key files: a small versioned binary format, created 0600 and never overwritten.

Layout (all integers big-endian)::

    offset  size  field
    0       5     magic b"SDKEY"
    5       1     format version (1)
    6       1     kind: 1 = master, 2 = track
    7       n     payload
                    master: key (32)                                  n = 32
                    track:  video_id (16) | track_id u32 | key (32)   n = 52
    7+n     8     SHA-256(bytes 0 .. 7+n)[:8]  -- catches typos and corruption, not attackers

A master file is 47 bytes, a track file 67 bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import struct

from streamdeid.files import read_error
from streamdeid.types import StreamdeidError

from . import derive
from .derive import KEY_LEN, VIDEO_ID_LEN

log = logging.getLogger(__name__)

MAGIC = b"SDKEY"
VERSION = 1
KIND_MASTER = 1
KIND_TRACK = 2
CHECKSUM_LEN = 8
_MAX_READ = 4096
_PAYLOAD_LEN = {KIND_MASTER: KEY_LEN, KIND_TRACK: VIDEO_ID_LEN + 4 + KEY_LEN}


class KeyFile:
    """A loaded key. ``key_bytes`` is the secret; ``repr``/``str`` never show it."""

    __slots__ = ("_key", "path")
    kind = ""

    def __init__(self, key: bytes, path: str | None = None) -> None:
        self._key = derive._as_key32(key, "key")
        self.path = None if path is None else os.fspath(path)

    @property
    def key_bytes(self) -> bytes:
        return self._key

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._describe()}, key=<hidden>)"

    __str__ = __repr__

    def _describe(self) -> str:  # pragma: no cover - overridden
        return ""

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields() and hmac.compare_digest(self._key, other._key)

    __hash__ = None  # keys are not dictionary keys

    def _fields(self) -> tuple:
        return ()


class MasterKey(KeyFile):
    """The master key of a key holder: opens every track of every video it made."""

    __slots__ = ()
    kind = "master"

    @property
    def key_id(self) -> str:
        return derive.key_id(self._key)

    def _describe(self) -> str:
        return f"key_id={self.key_id}" + (f", path={self.path!r}" if self.path else "")

    def track_key(self, video_id: bytes, track_id: int) -> bytes:
        return derive.track_key(self._key, video_id, track_id)

    def key_check(self, video_id: bytes) -> bytes:
        return derive.key_check(self._key, video_id)


class TrackKey(KeyFile):
    """The key of a single track of a single video (selective disclosure)."""

    __slots__ = ("video_id", "track_id")
    kind = "track"

    def __init__(self, key: bytes, video_id: bytes, track_id: int, path: str | None = None) -> None:
        super().__init__(key, path)
        self.video_id = derive.check_video_id(video_id)
        self.track_id = derive.check_track_id(track_id)

    def _describe(self) -> str:
        return f"video_id={self.video_id.hex()}, track_id={self.track_id}" + (
            f", path={self.path!r}" if self.path else ""
        )

    def _fields(self) -> tuple:
        return (self.video_id, self.track_id)

    def opens(self, video_id: bytes, track_id: int) -> bool:
        return self.video_id == bytes(video_id) and self.track_id == int(track_id)


# --------------------------------------------------------------------------- encoding


def encode_key(key: KeyFile) -> bytes:
    if isinstance(key, MasterKey):
        body = bytes([VERSION, KIND_MASTER]) + key.key_bytes
    elif isinstance(key, TrackKey):
        body = bytes([VERSION, KIND_TRACK]) + key.video_id + struct.pack(">I", key.track_id) + key.key_bytes
    else:
        raise TypeError(f"cannot encode {type(key).__name__}")
    data = MAGIC + body
    return data + hashlib.sha256(data).digest()[:CHECKSUM_LEN]


def decode_key(data: bytes, path: str = "<bytes>") -> KeyFile:
    """Parse a key file's bytes; StreamdeidError (without key bytes) if they are not valid."""
    if len(data) < len(MAGIC) + 2 + CHECKSUM_LEN or data[: len(MAGIC)] != MAGIC:
        raise StreamdeidError(f"not a streamdeid key file: {path}")
    version, kind = data[len(MAGIC)], data[len(MAGIC) + 1]
    body, checksum = data[:-CHECKSUM_LEN], data[-CHECKSUM_LEN:]
    checksum_ok = hmac.compare_digest(hashlib.sha256(body).digest()[:CHECKSUM_LEN], checksum)
    if version != VERSION:
        if checksum_ok:
            raise StreamdeidError(
                f"unsupported key file version {version} in {path} (this streamdeid reads version {VERSION})"
            )
        raise StreamdeidError(f"key file is corrupt (bad version byte and checksum): {path}")
    if not checksum_ok:
        raise StreamdeidError(f"key file is corrupt (checksum mismatch): {path}")
    payload = body[len(MAGIC) + 2 :]
    if kind not in _PAYLOAD_LEN:
        raise StreamdeidError(f"key file has an unknown kind ({kind}): {path}")
    if len(payload) != _PAYLOAD_LEN[kind]:
        raise StreamdeidError(f"key file is corrupt (wrong length): {path}")
    if kind == KIND_MASTER:
        return MasterKey(payload, path)
    video_id = payload[:VIDEO_ID_LEN]
    (track_id,) = struct.unpack(">I", payload[VIDEO_ID_LEN : VIDEO_ID_LEN + 4])
    return TrackKey(payload[VIDEO_ID_LEN + 4 :], video_id, track_id, path)


# --------------------------------------------------------------------------- files


def _write_new(path, data: bytes, what: str) -> None:
    """Create ``path`` with mode 0600 and write ``data``; never replaces a file."""
    path = os.fspath(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise StreamdeidError(f"{what} already exists, refusing to overwrite it: {path}") from None
    except OSError as e:
        raise StreamdeidError(f"cannot create {what} {path}: {e.strerror}") from None
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    except OSError as e:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        raise StreamdeidError(f"cannot write {what} {path}: {e.strerror}") from None
    os.close(fd)


def generate_master_key(path) -> MasterKey:
    """Create a new master key file at ``path`` (32 CSPRNG bytes, mode 0600, no overwrite)."""
    return write_master_key(MasterKey(secrets.token_bytes(KEY_LEN), os.fspath(path)), path)


def write_master_key(key: MasterKey, path) -> MasterKey:
    """Write ``key`` into a new file at ``path`` (mode 0600, no overwrite): a run's new key written again
    after a failed run removed it (run/runner.py)."""
    _write_new(path, encode_key(key), "key file")
    return key


def export_track_key(master, video_id: bytes, track_id: int, out_path) -> TrackKey:
    """Write a track key file that opens only ``track_id`` of the video ``video_id``."""
    tk = TrackKey(derive.track_key(master, video_id, track_id), video_id, track_id, os.fspath(out_path))
    _write_new(out_path, encode_key(tk), "key file")
    return tk


def load_key(path) -> KeyFile:
    """Read a key file: a :class:`MasterKey` or a :class:`TrackKey`.

    Raises StreamdeidError with a one-line message for a missing, unreadable,
    foreign or corrupt file; the message never contains key bytes.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_READ + 1)
    except OSError as e:
        raise read_error(e, "key file", path) from None
    if len(data) > _MAX_READ:
        raise StreamdeidError(f"not a streamdeid key file (too large): {path}")
    key = decode_key(data, path)
    _warn_if_shared(path)
    return key


def _warn_if_shared(path: str) -> None:
    """Warn (as ssh does) when a key file is readable or writable by anyone but its owner."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & 0o077:
        log.warning("key file %s is accessible by others (mode %o): chmod 600 it", path, mode & 0o777)
