"""Walking a vault's records by their clear fields (no key): structure, order, truncation.

``VaultReader`` decrypts what this yields; ``inspect`` counts it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from . import format as fmt


@dataclass
class Raw:
    seq: int
    offset: int
    rtype: int
    track_id: int
    frame_index: int
    body_len: int
    body: bytes | None
    clear: bytes = b""  # CHUNK: the clear fields (last frame, face count), also the start of ``body``
    tag: bytes = b""  # the GCM tag, the body's last TAG_LEN bytes (read for the END record's digest)

    def chunk_range(self) -> tuple[int, int]:
        """CHUNK: (last frame, number of faces)."""
        return fmt.CHUNK_CLEAR.unpack(self.clear)[:2]

    def group(self) -> int:
        """CHUNK: first frame of the group the chunk was written with."""
        return fmt.CHUNK_CLEAR.unpack(self.clear)[2]


@dataclass
class Problem:
    kind: str  # "corrupt" | "truncated"
    seq: int
    message: str
    partial_bytes: int = 0
    last_frame: int | None = None


def walk(f, size: int, data_start: int, version: int, path: str, want_body) -> Iterator[Raw | Problem]:
    """Walk the records' clear fields from ``data_start``; yields Raw items, then at most one Problem.

    Checks structure and record order only (no key). Bodies are read when ``want_body(rtype, track_id)``
    (always for TRACK records); a CHUNK's clear fields always."""
    w = _Walk(f, size, data_start, version, want_body)
    while True:
        item = w.next()
        yield item
        if isinstance(item, Problem):
            return
        w.passed(item)
        if item.rtype == fmt.END:
            if w.pos != size:
                yield Problem("corrupt", w.seq, f"{size - w.pos} bytes of unexpected data after the end record "
                               f"of {path}: the vault is damaged or tampered")
            return


_HEAD = fmt.LEN.size + fmt.REC.size  # a record's length and clear fields


class _Walk:
    """Where a walk is in the file, and what the records so far allow next."""

    def __init__(self, f, size: int, data_start: int, version: int, want_body) -> None:
        self.f, self.size, self.want_body = f, size, want_body
        self.pos, self.seq = data_start, 0
        self.data_type = fmt.DATA_TYPE[version]
        self.version = version
        self.open_tracks: set[int] = set()
        self.ended: set[int] = set()
        self.last_frame: int | None = None

    def where(self, rtype=None, tid=None, fi=None) -> str:
        s = f"vault record {self.seq}"
        if rtype in (fmt.TRACK, fmt.FRAME, fmt.CHUNK, fmt.TRACK_END):
            s += f" (track {tid}, frame {fi})"
        return s

    def corrupt(self, what: str, rtype=None, tid=None, fi=None) -> Problem:
        return Problem("corrupt", self.seq, f"{self.where(rtype, tid, fi)} {what}: the vault is damaged or tampered")

    def truncated(self, partial: int) -> Problem:
        seq, last_frame = self.seq, self.last_frame
        # records are written per track and group of frames: a frame up to the last one seen can have lost
        # the faces of tracks whose records came after the cut (the old wording read as "nothing lost" when
        # the last frame seen was the video's last)
        lost = (
            f"the faces recorded after it are missing (those on frames after {last_frame}, and possibly some on "
            f"frames up to it)" if last_frame is not None else "no frame records survived"
        )
        tail = f"; a partial record of {partial} bytes was discarded" if partial else "; the end record is missing"
        return Problem("truncated", seq, f"vault truncated after record {seq}: {lost}{tail}",
                       partial, last_frame)

    def next(self) -> Raw | Problem:
        """The record at ``pos``, or the Problem that ends the walk there."""
        remaining = self.size - self.pos
        if remaining == 0:
            return self.truncated(0)
        if remaining < _HEAD:
            return self.truncated(remaining)
        head = self.f.read(_HEAD)
        if len(head) != _HEAD:  # file shrank under us
            return self.truncated(len(head))
        (length,) = fmt.LEN.unpack_from(head)
        rtype, tid, fi = fmt.REC.unpack_from(head, fmt.LEN.size)
        body_len = length - fmt.REC.size
        if body_len < 0 or length > fmt.MAX_RECORD:
            return self.corrupt("is corrupt (bad length)")
        if remaining < fmt.LEN.size + length:
            return self.truncated(remaining)
        return self._check(rtype, tid, fi, body_len) or self._read(rtype, tid, fi, body_len)

    def _check(self, rtype: int, tid: int, fi: int, body_len: int) -> Problem | None:
        """A record's type, size and place in the order."""
        if rtype not in fmt.TYPE_NAMES or rtype in (fmt.FRAME, fmt.CHUNK) and rtype != self.data_type:
            return self.corrupt("has an unknown type")
        expected = fmt.body_len(rtype, self.version)
        if (expected is not None and body_len != expected) or body_len < fmt.min_body_len(rtype, self.version):
            return self.corrupt("is corrupt (bad size)", rtype, tid, fi)
        bad_order = (
            (rtype == fmt.TRACK and (tid in self.open_tracks or tid in self.ended))
            or (rtype in (fmt.FRAME, fmt.CHUNK, fmt.TRACK_END) and tid not in self.open_tracks)
            or (rtype == fmt.END and (self.open_tracks or tid != 0))
        )
        if bad_order:
            return self.corrupt("is out of order", rtype, tid, fi)
        return None

    def _read(self, rtype: int, tid: int, fi: int, body_len: int) -> Raw | Problem:
        """The record's body if wanted (else skipped, but for a CHUNK's clear fields)."""
        body, clear = None, b""
        if rtype == fmt.TRACK or self.want_body(rtype, tid):
            body = self.f.read(body_len)
            if len(body) != body_len:
                return self.truncated(_HEAD + len(body))
            if rtype == fmt.CHUNK:
                clear = body[:fmt.CHUNK_CLEAR.size]
            tag = body[-fmt.TAG_LEN:]
        else:  # skipped, but for a CHUNK's clear fields and the tag (every body ends with one: sizes checked)
            if rtype == fmt.CHUNK:
                clear = self.f.read(fmt.CHUNK_CLEAR.size)
            self.f.seek(body_len - len(clear) - fmt.TAG_LEN, os.SEEK_CUR)
            tag = self.f.read(fmt.TAG_LEN)
        raw = Raw(self.seq, self.pos, rtype, tid, fi, body_len, body, clear, tag)
        if rtype == fmt.CHUNK and not raw.group() <= fi <= raw.chunk_range()[0]:
            return self.corrupt("is corrupt (bad frame range)", rtype, tid, fi)
        return raw

    def passed(self, raw: Raw) -> None:
        """Step over a record the walk yielded: its track opens or ends, its frames are complete."""
        self.pos += _HEAD + raw.body_len
        if raw.rtype == fmt.TRACK:
            self.open_tracks.add(raw.track_id)
        elif raw.rtype == fmt.TRACK_END:
            self.open_tracks.discard(raw.track_id)
            self.ended.add(raw.track_id)
        elif raw.rtype in (fmt.FRAME, fmt.CHUNK):
            end = raw.chunk_range()[0] if raw.rtype == fmt.CHUNK else raw.frame_index
            self.last_frame = end if self.last_frame is None else max(self.last_frame, end)
        self.seq += 1
