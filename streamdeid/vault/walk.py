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
    pos, seq = data_start, 0
    data_type = fmt.DATA_TYPE[version]
    open_tracks: set[int] = set()
    ended: set[int] = set()
    last_frame: int | None = None

    def where(rtype=None, tid=None, fi=None) -> str:
        s = f"vault record {seq}"
        if rtype in (fmt.TRACK, fmt.FRAME, fmt.CHUNK, fmt.TRACK_END):
            s += f" (track {tid}, frame {fi})"
        return s

    def truncated(partial: int) -> Problem:
        lf = "" if last_frame is None else f" (last complete frame {last_frame})"
        lost = (
            f"frames after {last_frame} are missing" if last_frame is not None else "no frame records survived"
        )
        tail = f"; a partial record of {partial} bytes was discarded" if partial else "; the end record is missing"
        return Problem("truncated", seq, f"vault truncated after record {seq}{lf}: {lost}{tail}",
                        partial, last_frame)

    while True:
        remaining = size - pos
        if remaining == 0:
            yield truncated(0)
            return
        if remaining < fmt.LEN.size + fmt.REC.size:
            yield truncated(remaining)
            return
        head = f.read(fmt.LEN.size + fmt.REC.size)
        if len(head) != fmt.LEN.size + fmt.REC.size:  # file shrank under us
            yield truncated(len(head))
            return
        (length,) = fmt.LEN.unpack_from(head)
        rtype, tid, fi = fmt.REC.unpack_from(head, fmt.LEN.size)
        body_len = length - fmt.REC.size
        if body_len < 0 or length > fmt.MAX_RECORD:
            yield Problem("corrupt", seq, f"{where()} is corrupt (bad length): the vault is damaged or tampered")
            return
        if remaining < fmt.LEN.size + length:
            yield truncated(remaining)
            return
        if rtype not in fmt.TYPE_NAMES or rtype in (fmt.FRAME, fmt.CHUNK) and rtype != data_type:
            yield Problem("corrupt", seq, f"{where()} has an unknown type: the vault is damaged or tampered")
            return
        expected = fmt.BODY_LEN.get(rtype)
        if ((expected is not None and body_len != expected) or (rtype == fmt.FRAME and body_len < fmt.MIN_FRAME_BODY)
                or (rtype == fmt.CHUNK and body_len < fmt.MIN_CHUNK_BODY)):
            yield Problem("corrupt", seq, f"{where(rtype, tid, fi)} is corrupt (bad size): "
                           "the vault is damaged or tampered")
            return
        bad_order = (
            (rtype == fmt.TRACK and (tid in open_tracks or tid in ended))
            or (rtype in (fmt.FRAME, fmt.CHUNK, fmt.TRACK_END) and tid not in open_tracks)
            or (rtype == fmt.END and (open_tracks or tid != 0))
        )
        if bad_order:
            yield Problem("corrupt", seq, f"{where(rtype, tid, fi)} is out of order: "
                           "the vault is damaged or tampered")
            return
        if rtype == fmt.TRACK or want_body(rtype, tid):
            body = f.read(body_len)
            if len(body) != body_len:
                yield truncated(fmt.LEN.size + fmt.REC.size + len(body))
                return
        elif rtype == fmt.CHUNK:
            body = None
            clear = f.read(fmt.CHUNK_CLEAR.size)
            f.seek(body_len - fmt.CHUNK_CLEAR.size, os.SEEK_CUR)
        else:
            body = None
            f.seek(body_len, os.SEEK_CUR)
        clear = (body[:fmt.CHUNK_CLEAR.size] if body is not None else clear) if rtype == fmt.CHUNK else b""
        raw = Raw(seq, pos, rtype, tid, fi, body_len, body, clear)
        if rtype == fmt.CHUNK and not raw.group() <= fi <= raw.chunk_range()[0]:
            yield Problem("corrupt", seq, f"{where(rtype, tid, fi)} is corrupt (bad frame range): "
                           "the vault is damaged or tampered")
            return
        yield raw
        pos += fmt.LEN.size + length
        if rtype == fmt.TRACK:
            open_tracks.add(tid)
        elif rtype == fmt.TRACK_END:
            open_tracks.discard(tid)
            ended.add(tid)
        elif rtype in (fmt.FRAME, fmt.CHUNK):
            end = raw.chunk_range()[0] if rtype == fmt.CHUNK else fi
            last_frame = end if last_frame is None else max(last_frame, end)
        seq += 1
        if rtype == fmt.END:
            if pos != size:
                yield Problem("corrupt", seq, f"{size - pos} bytes of unexpected data after the end record "
                               f"of {path}: the vault is damaged or tampered")
            return
