"""Vault reader: keyless inspection, key checks, authenticated record decryption.

Damage API. ``records()`` validates the key eagerly (StreamdeidError before
anything is decrypted) and returns a generator. While iterating:

* a record that fails authentication or is malformed raises StreamdeidError
  ("vault record N (track T, frame F) ...") after every earlier record has
  been yielded;
* a truncated vault (partial last record, or the end record missing) is not
  an exception by default: the generator yields every complete record, stops,
  and sets ``reader.damage`` to a :class:`VaultDamage` (``str(damage)`` is a
  one-line message such as "vault truncated after record 41: the faces
  recorded after it are missing (those on frames after 117, ...)"). Pass ``strict=True`` to get a StreamdeidError instead.
  ``reader.damage`` is None after a complete, intact vault.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import cv2
import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from streamdeid.files import read_error
from streamdeid.keys import derive
from streamdeid.keys.keyfile import KeyFile, MasterKey, TrackKey
from streamdeid.types import StreamdeidError

from . import chunk, fingerprint
from . import format as fmt
from .walk import Problem, Raw, walk


@dataclass(frozen=True)
class VaultRecord:
    """One decrypted face record."""

    seq: int  # position of the record in the vault (format 2: of the chunk holding this face)
    track_id: int
    frame_index: int
    pts: int | None
    inverse: np.ndarray  # [2, 3] float64 crop -> frame
    crop_size: tuple[int, int]  # (width, height)
    mask_params: fmt.MaskParams | None  # None: appended without any
    crop: np.ndarray | None = field(repr=False)  # uint8 [H, W, 3] BGR or [H, W, 4] BGRA; None if geometry-only


@dataclass(frozen=True)
class VaultDamage:
    """How a truncated vault ended."""

    kind: str  # "truncated"
    records_ok: int  # complete records in the file (all tracks)
    last_frame: int | None  # largest frame index among complete frame records (all tracks)
    partial_bytes: int  # bytes of a partial record at the end that were discarded
    message: str

    def __str__(self) -> str:
        return self.message


def _frame_order(records: list[VaultRecord]) -> list[VaultRecord]:
    """One group's records by frame, then by position in the file (stable sort)."""
    return sorted(records, key=lambda rec: rec.frame_index)


def _coerce_key(key) -> KeyFile:
    if isinstance(key, KeyFile):
        return key
    if isinstance(key, (bytes, bytearray, memoryview)):
        return MasterKey(bytes(key))
    raise TypeError(f"expected a MasterKey, TrackKey or 32 master key bytes, got {type(key).__name__}")


class VaultReader:
    """Open a vault. The header (``header``, ``video_id``) is parsed without a key."""

    def __init__(self, path) -> None:
        self.path = os.fspath(path)
        self.damage: VaultDamage | None = None
        try:
            with open(self.path, "rb") as f:
                fixed = f.read(fmt.HEADER_FIXED.size)
                if len(fixed) < fmt.HEADER_FIXED.size or fixed[:7] != fmt.MAGIC:
                    raise StreamdeidError(f"not a streamdeid vault: {self.path}")
                _, version, json_len = fmt.HEADER_FIXED.unpack(fixed)
                if version not in fmt.READABLE_VERSIONS:
                    raise StreamdeidError(
                        f"unsupported vault format version {version} in {self.path} (this streamdeid reads "
                        f"versions {', '.join(map(str, fmt.READABLE_VERSIONS))}; a newer streamdeid wrote it?)"
                    )
                if json_len > fmt.MAX_JSON:
                    raise StreamdeidError(f"vault header is corrupt: {self.path}")
                js = f.read(json_len)
                mac = f.read(fmt.MAC_LEN)
        except OSError as e:
            raise read_error(e, "vault", str(self.path)) from None
        if len(js) != json_len or len(mac) != fmt.MAC_LEN:
            raise StreamdeidError(f"vault header is truncated: {self.path}")
        try:
            meta = json.loads(js.decode("utf-8"))
            if not isinstance(meta, dict):
                raise ValueError
            self.video_id = derive.check_video_id(bytes.fromhex(meta["video_id"]))
            self._key_check = bytes.fromhex(meta["key_check"])
            if len(self._key_check) != derive.CHECK_LEN:
                raise ValueError
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise StreamdeidError(f"vault header is corrupt: {self.path}") from None
        self.header: dict = meta
        self.version = version
        self._head = fixed + js
        self._mac = mac
        self.header_digest = hashlib.sha256(self._head).digest()
        self._data_start = len(self._head) + fmt.MAC_LEN
        # the output's thumbnails (vault/fingerprint.py), read from the END record by the master key (format 4)
        self.output_samples: dict[int, np.ndarray] | None = None

    def __repr__(self) -> str:
        return f"VaultReader(path={self.path!r}, video_id={self.video_id.hex()})"

    # ------------------------------------------------------------------ raw records

    def _iter_raw(self, want_body=lambda rtype, track_id: False) -> Iterator[Raw | Problem]:
        """Walk the records' clear fields; yields Raw items, then at most one Problem.

        Checks structure and record order only (no key). Bodies are read when
        ``want_body(rtype, track_id)`` (always for TRACK records).
        """
        try:
            f = open(self.path, "rb")
        except OSError as e:
            raise StreamdeidError(f"cannot read vault {self.path}: {e.strerror}") from None
        with f:
            try:
                size = os.fstat(f.fileno()).st_size
                if f.read(len(self._head)) != self._head:
                    raise StreamdeidError(f"vault changed while reading: {self.path}")
                f.seek(self._data_start)
                yield from self._walk(f, size, want_body)
            except OSError as e:
                raise StreamdeidError(f"cannot read vault {self.path}: {e.strerror}") from None

    def _walk(self, f, size: int, want_body) -> Iterator[Raw | Problem]:
        return walk(f, size, self._data_start, self.version, self.path, want_body)

    # ------------------------------------------------------------------ inspect

    def inspect(self) -> dict:
        """Header and record statistics, no key needed and nothing secret."""
        tracks: dict[int, dict] = {}
        n_records = n_frames = payload = 0
        first = last = None
        problem = None
        complete = False
        for item in self._iter_raw():
            if isinstance(item, Problem):
                problem = item
                break
            n_records += 1
            if item.rtype in (fmt.FRAME, fmt.CHUNK):
                end, n = item.chunk_range() if item.rtype == fmt.CHUNK else (item.frame_index, 1)
                n_frames += n
                payload += item.body_len
                t = tracks.setdefault(item.track_id, {"frames": 0, "first_frame": item.frame_index,
                                                      "last_frame": end})
                t["frames"] += n
                t["first_frame"] = min(t["first_frame"], item.frame_index)
                t["last_frame"] = max(t["last_frame"], end)
                first = item.frame_index if first is None else min(first, item.frame_index)
                last = end if last is None else max(last, end)
            elif item.rtype == fmt.TRACK:
                tracks.setdefault(item.track_id, {"frames": 0, "first_frame": item.frame_index,
                                                  "last_frame": item.frame_index})
            elif item.rtype == fmt.END:
                complete = True
        fps = self.header.get("fps")
        per_second = None
        if isinstance(fps, (int, float)) and fps > 0 and n_frames:
            per_second = round(payload / (n_frames / fps))
        return {
            "path": self.path,
            "file_size": os.path.getsize(self.path),
            "format_version": self.version,
            "video_id": self.video_id.hex(),
            "header": dict(self.header),
            "record_count": n_records,
            "frame_records": n_frames,
            "encrypted_payload_bytes": payload,
            "bytes_per_face_frame": round(payload / n_frames) if n_frames else None,
            "bytes_per_face_second": per_second,
            "frame_range": None if first is None else [first, last],
            "track_ids": sorted(tracks),
            "tracks": {tid: tracks[tid] for tid in sorted(tracks)},
            "complete": complete and problem is None,
            "damage": None if problem is None else problem.message,
        }

    # ------------------------------------------------------------------ decryption

    def check_key(self, key, tracks: Iterable[int] | None = None) -> tuple[KeyFile, set[int] | None]:
        """Validate ``key`` (and the requested ``tracks``) against this vault without decrypting records.

        Returns (key, selected track ids or None for all). Raises StreamdeidError
        for a wrong key, a key for another video, a track key for another
        track, or a header that fails authentication.
        """
        key = _coerce_key(key)
        wanted = None if tracks is None else {derive.check_track_id(t) for t in tracks}
        if isinstance(key, MasterKey):
            if not hmac.compare_digest(key.key_check(self.video_id), self._key_check):
                raise StreamdeidError(
                    "wrong key: this master key did not make this vault (another key, or a vault of another video)"
                )
            mac = hmac.new(derive.header_mac_key(key.key_bytes, self.video_id), self._head, hashlib.sha256).digest()
            if not hmac.compare_digest(mac, self._mac):
                raise StreamdeidError(f"vault header failed authentication (tampered): {self.path}")
            selected = wanted
        elif isinstance(key, TrackKey):
            if key.video_id != self.video_id:
                raise StreamdeidError(
                    f"wrong key: this track key is for another video ({key.video_id.hex()}, "
                    f"the vault is {self.video_id.hex()})"
                )
            if wanted is not None and wanted - {key.track_id}:
                others = ", ".join(str(t) for t in sorted(wanted - {key.track_id}))
                raise StreamdeidError(f"this track key opens only track {key.track_id}, not track(s) {others}")
            selected = {key.track_id}
        else:
            raise TypeError(f"unsupported key type {type(key).__name__}")

        # Clear-text pass: which tracks exist, and their key-check values.
        checks: dict[int, bytes] = {}
        problem = None
        for item in self._iter_raw():
            if isinstance(item, Problem):
                problem = item
                break
            if item.rtype == fmt.TRACK:
                checks[item.track_id] = item.body[: derive.CHECK_LEN]
        if isinstance(key, TrackKey) and key.track_id in checks:
            if not hmac.compare_digest(checks[key.track_id], derive.track_key_check(key.key_bytes)):
                raise StreamdeidError(f"wrong key: this track key does not open track {key.track_id} of this vault")
        if selected is not None and problem is None:
            missing = selected - checks.keys()
            if missing:
                have = ", ".join(str(t) for t in sorted(checks)) or "none"
                raise StreamdeidError(
                    f"track(s) {', '.join(str(t) for t in sorted(missing))} not in this vault (tracks: {have})"
                )
        return key, selected

    def records(self, key, tracks: Iterable[int] | None = None, *, strict: bool = False) -> Iterator[VaultRecord]:
        """Decrypted frame records, in file order (frame order per track).

        ``key``: a MasterKey (or its 32 bytes) opens all tracks, a TrackKey only
        its own. ``tracks``: track ids to return (None: all the key opens).
        Key problems raise StreamdeidError here, before iteration; see the
        module docstring for tampering and truncation.
        """
        key, selected = self.check_key(key, tracks)
        self.damage = None
        return self._decrypt(key, selected, strict)

    def _decrypt(self, key: KeyFile, selected: set[int] | None, strict: bool) -> Iterator[VaultRecord]:
        """Records in frame order: format 2 chunks of one group are merged (see format.py)."""
        group: list[VaultRecord] = []
        try:
            for rec in self._decrypt_records(key, selected, strict):
                if rec is None:  # a chunk of a new group begins
                    yield from _frame_order(group)
                    group = []
                elif self.version == 1:
                    yield rec
                else:
                    group.append(rec)
        except StreamdeidError:
            yield from _frame_order(group)  # every record before the damaged one, then the error
            raise
        yield from _frame_order(group)

    def _decrypt_records(self, key: KeyFile, selected: set[int] | None, strict: bool) -> Iterator[VaultRecord | None]:
        is_master = isinstance(key, MasterKey)
        digest = hashlib.sha256() if is_master and self.version >= fmt.DIGEST_FROM else None  # see format.py
        state: dict[int, list] = {}  # track_id -> [AESGCM, frame/chunk records seen]
        all_tracks: set[int] = set()  # every track in the vault, for the END record's count
        group, group_end = None, 0  # the group of the chunks merged so far, and its frame end

        def want(rtype, tid):
            return rtype == fmt.END or selected is None or tid in selected

        for item in self._iter_raw(want):
            if isinstance(item, Problem):
                if item.kind == "corrupt":
                    raise StreamdeidError(item.message)
                damage = VaultDamage("truncated", item.seq, item.last_frame, item.partial_bytes, item.message)
                self.damage = damage
                if strict:
                    raise StreamdeidError(damage.message)
                return
            r = item
            where = f"vault record {r.seq} ({fmt.TYPE_NAMES[r.rtype]}, track {r.track_id}, frame {r.frame_index})"
            tampered = f"{where} failed authentication: the vault is damaged or tampered"
            if r.rtype == fmt.END:
                if is_master:  # only the master opens the end record
                    self._check_end(key, r, len(all_tracks), digest, where, tampered)
                continue
            if digest is not None:
                digest.update(fmt.digest_entry(r.body_len + fmt.REC.size, r.rtype, r.track_id, r.frame_index, r.tag))
            if r.rtype == fmt.TRACK:
                all_tracks.add(r.track_id)
            if not want(r.rtype, r.track_id):
                continue
            if r.rtype == fmt.TRACK:
                state[r.track_id] = [self._open_track(key, r, tampered), 0]
                continue
            st = state[r.track_id]  # _walk guarantees TRACK came first
            if r.rtype == fmt.TRACK_END:
                body = self._open(st[0], r, r.body, tampered)
                if int.from_bytes(body, "little") != st[1]:
                    raise StreamdeidError(f"{where}: frame records are missing: the vault is tampered")
                continue
            if r.rtype == fmt.FRAME:
                plain = self._open(st[0], r, r.body, tampered)
                st[1] += 1
                yield self._to_record(r, plain, where)
                continue
            plain = self._open(st[0], r, r.body[len(r.clear):], tampered, extra=r.clear)
            st[1] += 1
            if r.group() != group:
                if group is not None and r.group() < group_end:
                    raise StreamdeidError(f"{where} goes back into an earlier group: the vault is tampered")
                group, group_end = r.group(), r.chunk_range()[0] + 1
                yield None
            group_end = max(group_end, r.chunk_range()[0] + 1)
            yield from self._chunk_records(r, plain, where)

    def _check_end(self, key: MasterKey, r: Raw, tracks: int, digest, where: str, tampered: str) -> None:
        """The END record counts every record before it and every track, and (version 3) holds their digest:
        a cut or spliced vault fails, and so does a record re-encrypted with a track key."""
        body = self._open(AESGCM(derive.end_key(key.key_bytes, self.video_id)), r, r.body, tampered)
        if int.from_bytes(body[:8], "little") != r.seq or int.from_bytes(body[8:12], "little") != tracks:
            raise StreamdeidError(f"{where} does not match the vault's contents: the vault is tampered")
        if digest is not None and not hmac.compare_digest(body[12:12 + fmt.DIGEST_LEN], digest.digest()):
            raise StreamdeidError(f"{where}: a record was rewritten since the vault was made (its digest does not "
                                  "match): the vault is tampered")
        if self.version >= fmt.OUTPUT_FROM:
            try:
                self.output_samples = fingerprint.unpack(body[12 + fmt.DIGEST_LEN:])
            except ValueError:
                raise StreamdeidError(f"{where} is malformed: the vault is damaged or tampered") from None

    def _open_track(self, key: KeyFile, r: Raw, tampered: str) -> AESGCM:
        """The cipher of a TRACK record's track, after checking its key-check value and authenticating it."""
        tk = key.track_key(self.video_id, r.track_id) if isinstance(key, MasterKey) else key.key_bytes
        check = r.body[: derive.CHECK_LEN]
        if not hmac.compare_digest(check, derive.track_key_check(tk)):
            raise StreamdeidError(tampered)
        aes = AESGCM(derive.vault_key(tk))
        self._open(aes, r, r.body[derive.CHECK_LEN:], tampered, extra=check)
        return aes

    def _open(self, aes: AESGCM, r: Raw, body: bytes, tampered: str, extra: bytes = b"") -> bytes:
        nonce, ct = body[: fmt.NONCE_LEN], body[fmt.NONCE_LEN :]
        try:
            return aes.decrypt(nonce, ct, fmt.aad(self.header_digest, r.seq, r.rtype, r.track_id, r.frame_index, extra))
        except InvalidTag:
            raise StreamdeidError(tampered) from None

    def _to_record(self, r: Raw, plain: bytes, where: str) -> VaultRecord:
        try:
            p = fmt.unpack_payload(plain)
        except (ValueError, struct.error):
            raise StreamdeidError(f"{where} has a malformed payload") from None
        crop = None
        if p.png is not None:
            crop = cv2.imdecode(np.frombuffer(p.png, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
            if crop is None or crop.dtype != np.uint8 or crop.ndim != 3 or crop.shape[2] not in (3, 4):
                raise StreamdeidError(f"{where} holds an unreadable crop image")
        return VaultRecord(r.seq, r.track_id, r.frame_index, p.pts, p.inverse, p.crop_size, p.mask_params, crop)

    def _chunk_records(self, r: Raw, plain: bytes, where: str) -> list[VaultRecord]:
        last, n = r.chunk_range()
        try:
            faces = chunk.unpack(plain, n)
        except (ValueError, struct.error):
            raise StreamdeidError(f"{where} has a malformed payload") from None
        frames = [f.frame_index for f in faces]
        if frames != sorted(frames) or frames[0] != r.frame_index or frames[-1] != last:
            raise StreamdeidError(f"{where} does not match its frame range: the vault is tampered")
        return [VaultRecord(r.seq, r.track_id, f.frame_index, f.pts, f.inverse, f.crop_size, f.mask_params, f.crop)
                for f in faces]

    def __enter__(self) -> "VaultReader":
        return self

    def __exit__(self, *exc) -> None:
        pass
