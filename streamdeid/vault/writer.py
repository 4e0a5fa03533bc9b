"""Append-only, crash-safe vault writer (format 2: a crop video per track and second)."""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from streamdeid.keys import derive
from streamdeid.types import StreamdeidError, Yuv420
from streamdeid.video.planes import PIX_FMTS

from . import chunk, crops
from . import format as fmt
from .header import build_header, master_bytes, parse_video_id
from .fingerprint import OutputSamples

log = logging.getLogger(__name__)

# A group is flushed early once one track's crops in it hold MAX_TRACK_BYTES raw bytes, so its
# encoded chunk stays far below format.MAX_RECORD even for 4K faces, or once all tracks' crops hold
# MAX_PENDING_BYTES (memory). The total used to be 32 MiB: a crowd pan at 1280x720 (270 faces a
# frame, about 70 MB of crops a second) then flushed every 12 frames, and paid an x264 encoder and an
# I-frame per track twice a second.
MAX_TRACK_BYTES = 32 << 20
MAX_PENDING_BYTES = 128 << 20
PACK_THREADS = 2


def _checked_inverse(inverse_matrix) -> np.ndarray:
    inv = np.asarray(inverse_matrix, dtype=np.float64)
    if inv.shape != (2, 3):
        raise ValueError(f"inverse_matrix must be [2, 3], got {inv.shape}")
    return inv


def _checked_crop_size(crop_size) -> tuple[int, int]:
    """(width, height) from an int S or a pair, each within the format's u32."""
    if isinstance(crop_size, (int, np.integer)):
        cs = (int(crop_size), int(crop_size))
    else:
        cs = tuple(int(v) for v in crop_size)
        if len(cs) != 2:
            raise ValueError("crop_size must be an int or (width, height)")
    if not all(0 <= v < 2**32 for v in cs):
        raise ValueError(f"crop_size out of range: {cs}")
    return cs


def _checked_pts(pts) -> int | None:
    if pts is not None:
        pts = int(pts)
        if not -(2**63) <= pts < 2**63:
            raise ValueError(f"pts out of range: {pts}")
    return pts


def _checked_crop(crop_bgr) -> np.ndarray:
    """A private copy of a BGR or BGRA crop (the caller's frame buffer is reused)."""
    crop = np.asarray(crop_bgr)
    if crop.dtype != np.uint8 or crop.ndim != 3 or crop.shape[2] not in (3, 4) or crop.size == 0:
        raise ValueError(f"crop_bgr must be uint8 [H, W, 3] or BGRA [H, W, 4], got {crop.dtype} {crop.shape}")
    if max(crop.shape[:2]) >= 2**15:
        raise ValueError(f"crop_bgr is too large: {crop.shape}")
    return crop.copy()


def _checked_owned(owned, crop: np.ndarray) -> np.ndarray:
    """A private [H, W] bool copy of ``owned``, which must match a BGR crop."""
    owned = np.array(owned, dtype=bool)
    if crop.shape[2] != 3 or owned.shape != crop.shape[:2]:
        raise ValueError(f"owned must be [H, W] for a BGR crop_bgr [H, W, 3], got {owned.shape} for {crop.shape}")
    return owned


def _checked_planes(planes, crop: np.ndarray) -> tuple[Yuv420, tuple[int, int]]:
    """``planes`` = (Yuv420, x, y) must hold the crop at (x, y), at even size with half-size chroma."""
    patch, x, y = planes
    if not isinstance(patch, Yuv420) or patch.pix_fmt not in PIX_FMTS:
        raise TypeError("planes must be (Yuv420, x, y) as video.planes.cut gives them")
    h, w = patch.y.shape
    half = (h // 2, w // 2)
    if (h % 2 or w % 2 or patch.u.shape != half or patch.v.shape != half or x not in (0, 1) or y not in (0, 1)
            or y + crop.shape[0] > h or x + crop.shape[1] > w):
        raise ValueError(f"planes {patch.y.shape} at ({x}, {y}) do not hold a crop of {crop.shape[:2]}")
    return patch, (int(x), int(y))


class VaultWriter:
    """Write ``path`` (normally ``<output>.sdv``) record by record.

    ``header_meta`` must contain ``video_id`` (16 bytes or 32 hex digits, the
    id the track keys were derived with); any other JSON-serialisable items
    (e.g. ``source_fingerprint``, ``output``, ``pipeline``) are stored as-is in
    the clear header.

    Faces are buffered per track and written as one CHUNK record per track
    every ``chunk_frames`` frames (all tracks at the same frame, then fsync'ed),
    so a crash loses at most the group in memory (about a second of video; the
    vault may hold a little more than the video, whose encoder buffers frames). Frame indices must not go back
    into a group already written. ``quality`` picks the crop codec
    (:data:`streamdeid.vault.crops.QUALITIES`: high, small, lossless).
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
        quality: str = "high",
        chunk_frames: int = 25,
    ) -> None:
        self.path = os.fspath(path)
        master = master_bytes(master_key)
        if "video_id" not in header_meta:
            raise ValueError("header_meta needs a 'video_id'")
        self.video_id = parse_video_id(header_meta["video_id"])
        self.store_crops = bool(store_crops)
        self.codec = crops.codec_for(quality) if self.store_crops else None
        self.chunk_frames = max(1, int(chunk_frames))
        self._master = master
        self._tracks: dict[int, list] = {}  # track_id -> [AESGCM, CHUNK record count]
        self._pending: dict[int, list[chunk.ChunkFace]] = {}  # track_id -> faces of the open group
        self._pending_bytes = 0
        self._pending_faces = 0
        self._track_bytes: dict[int, int] = {}  # track_id -> raw crop bytes in the open group
        self._group_start = 0  # first frame of the open group; earlier frames are written
        self._group_end = self.chunk_frames
        self._frame = -1  # frame index of the last append/advance
        self._seq = 0
        self._digest = hashlib.sha256()  # of every record written, for the END record (vault/format.py)
        self._output = OutputSamples()  # thumbnails of the output's frames, for the END record (vault/fingerprint.py)
        self._max_frame = 0
        self._closed = False

        self.header, head, mac = build_header(
            header_meta, self.video_id, master, crop_codec=crops.codec_name(self.codec) if self.codec else None,
            chunk_frames=self.chunk_frames, store_crops=self.store_crops)
        self.header_digest = hashlib.sha256(head).digest()
        self._f = self._create(overwrite)
        self._io(self._f.write, head + mac)
        self._sync()
        self._sync_dir()
        self._start_worker()

    def _create(self, overwrite: bool):
        """The vault file, owner-only; an existing one is an error unless ``overwrite``."""
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
        flags |= os.O_TRUNC if overwrite else os.O_EXCL
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileExistsError:
            raise StreamdeidError(f"vault already exists, refusing to overwrite it: {self.path}") from None
        except OSError as e:
            raise StreamdeidError(f"cannot create vault {self.path}: {e.strerror}") from None
        return os.fdopen(fd, "wb")

    def _start_worker(self) -> None:
        # Groups are encoded and written by one thread, in order; at most two wait (back-pressure).
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._failed = False  # a write failed: no end records will be written
        # A group's chunks are packed (x264, LZMA: both release the GIL) by two threads; above all this
        # halves the last group, which the pipeline waits for at close.
        self._packers = ThreadPoolExecutor(max_workers=PACK_THREADS, thread_name_prefix="vault-pack")
        self._worker = threading.Thread(target=self._drain, name="vault-writer", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ helpers

    def _io(self, fn, *args):
        try:
            return fn(*args)
        except OSError as e:
            raise StreamdeidError(f"cannot write vault {self.path}: {e.strerror}") from None

    def _sync(self) -> None:
        self._io(self._f.flush)
        self._io(os.fsync, self._f.fileno())

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
        self._digest.update(fmt.digest_entry(len(rest), rtype, track_id, frame_index, ct[-fmt.TAG_LEN:]))
        self._seq += 1
        return seq

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("vault writer is closed")
        self._raise_worker_error()

    # ------------------------------------------------------------------ API

    @property
    def takes_planes(self) -> bool:
        """Whether ``append`` can use the source's planes (its crop codec has a twin fed them)."""
        return self.codec is not None and self.codec.id in crops.ON_PLANES

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
        mask_params: fmt.MaskParams | None = None,
        owned: np.ndarray | None = None,
        planes: tuple[Yuv420, int, int] | None = None,
    ) -> int:
        """Buffer one face of one frame for the open group.

        ``inverse_matrix``: [2, 3] crop -> frame affine (float64, stored exactly).
        ``crop_size``: int S or (width, height) of the aligned crop.
        ``crop_bgr``: the original pixels to restore, uint8 [H, W, 3], or BGRA
        [H, W, 4] whose alpha says which pixels to restore (the mask is stored
        exactly, the pixels by the vault's crop codec); ignored when the vault
        was opened with store_crops=False.
        ``mask_params``: where the face was pasted and how it was made (recovery reads them back).
        ``owned``: with a BGR ``crop_bgr``, [H, W] bool: which pixels to restore, as a BGRA
        alpha would say (stored the same way; no BGRA needs building on the caller's thread).
        ``planes``: the source's 4:2:0 planes around the crop and where the crop starts in them, as
        ``video.planes.cut`` gives them (taken, not copied): the crop video is then made of these,
        which the crop must be the exact conversion of (a chunk whose faces all have them).
        Returns the number of faces buffered in the open group.
        """
        # Everything is checked here, in the caller's thread: a bad value found by the writer thread
        # would surface groups later, far from the call that gave it.
        self._check_open()
        tid = derive.check_track_id(track_id)
        fi = int(frame_index)
        if not 0 <= fi < 2**64:
            raise ValueError(f"frame_index out of range: {fi}")
        inv = _checked_inverse(inverse_matrix)
        cs = _checked_crop_size(crop_size)
        if mask_params is not None and not isinstance(mask_params, fmt.MaskParams):
            raise TypeError(f"mask_params must be a MaskParams or None, got {type(mask_params).__name__}")
        pts = _checked_pts(pts)
        crop = _checked_crop(crop_bgr) if self.store_crops and crop_bgr is not None else None
        owned = _checked_owned(owned, crop) if crop is not None and owned is not None else None
        patch, at = _checked_planes(planes, crop) if crop is not None and planes is not None else (None, (0, 0))
        self.advance(fi)
        self._pending.setdefault(tid, []).append(
            chunk.ChunkFace(fi, pts, inv.copy(), cs, mask_params, crop, owned, patch, at))
        nbytes = 0 if crop is None else crop.nbytes + (0 if patch is None else patch.y.nbytes * 3 // 2)
        self._pending_bytes += nbytes
        self._track_bytes[tid] = self._track_bytes.get(tid, 0) + nbytes
        self._pending_faces += 1
        return self._pending_faces

    def note_output(self, frame_index: int, image: np.ndarray) -> None:
        """Remember frame ``frame_index`` of the output as written (``image``: [H, W, 3] uint8 BGR, anonymized):
        every EVERY-th frame's thumbnail goes into the END record (vault/fingerprint.py)."""
        self._output.add(int(frame_index), image)

    def advance(self, frame_index: int) -> None:
        """Say that frame ``frame_index`` has begun (call it on every frame, faces or not):
        the open group is written once the frame leaves it."""
        self._check_open()
        fi = int(frame_index)
        if fi < self._group_start:
            raise ValueError(f"frame {fi} is in a group already written (frames must not go back)")
        if fi == self._frame:
            return
        if (fi >= self._group_end or self._pending_bytes >= MAX_PENDING_BYTES
                or max(self._track_bytes.values(), default=0) >= MAX_TRACK_BYTES):
            self._write_group()
            self._group_start = fi
            self._group_end = fi - fi % self.chunk_frames + self.chunk_frames
        self._frame = fi

    def _write_group(self) -> None:
        """Hand the open group to the writer thread (it blocks while two groups wait)."""
        self._raise_worker_error()
        if self._pending:
            self._queue.put((self._group_start, self._pending))
            self._pending = {}
            self._track_bytes = {}
            self._pending_bytes = self._pending_faces = 0

    def _drain(self) -> None:
        """Writer thread: encode, encrypt and write groups in order. PyAV releases the GIL while
        x264 encodes, so this overlaps with the pipeline instead of adding to it."""
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if not self._failed:
                    self._write_chunks(*item)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                self._failed = True  # later groups are dropped: a vault never has a hole in the middle
                self._error = e
            finally:
                self._queue.task_done()

    def _write_chunks(self, group: int, pending: dict[int, list[chunk.ChunkFace]]) -> None:
        """One CHUNK record per track of a group, then fsync."""
        tids = sorted(pending)
        # frame order within the chunk (the reader checks it): a caller may go back inside the open group
        ordered = [sorted(pending[tid], key=lambda f: f.frame_index) for tid in tids]
        payloads = self._packers.map(lambda faces: chunk.pack(faces, self.codec), ordered)
        for tid, faces, payload in zip(tids, ordered, payloads):
            state = self._tracks.get(tid)
            if state is None:
                tk = derive.track_key(self._master, self.video_id, tid)
                state = self._tracks[tid] = [AESGCM(derive.vault_key(tk)), 0]
                self._write_record(fmt.TRACK, tid, faces[0].frame_index, state[0], b"",
                                   clear=derive.track_key_check(tk))
            last = faces[-1].frame_index
            clear = fmt.CHUNK_CLEAR.pack(last, len(faces), group)
            self._write_record(fmt.CHUNK, tid, faces[0].frame_index, state[0], payload, clear=clear)
            state[1] += 1
            self._max_frame = max(self._max_frame, last)
        self._sync()

    def _raise_worker_error(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def _finish_worker(self) -> None:
        """Write the open group and wait for the writer thread to end."""
        try:
            self._write_group()
        finally:
            if self._worker.is_alive():
                self._queue.put(None)
                self._worker.join()
            self._packers.shutdown()
        self._raise_worker_error()

    def flush(self) -> None:
        """Write the open group now (its frames are then closed to further appends) and fsync."""
        self._check_open()
        self._write_group()
        self._queue.join()
        self._raise_worker_error()
        self._group_start = self._frame + 1

    def close(self) -> None:
        """Write the open group, one track-end record per track and the end record, then sync and close.
        After a write error the vault is left without end records (it reads as truncated)."""
        if self._closed:
            return
        try:
            self._finish_worker()
            if self._failed:
                return
            for tid in sorted(self._tracks):
                aes, n = self._tracks[tid]
                self._write_record(fmt.TRACK_END, tid, self._max_frame, aes, n.to_bytes(8, "little"))
            end = AESGCM(derive.end_key(self._master, self.video_id))
            body = (self._seq.to_bytes(8, "little") + len(self._tracks).to_bytes(4, "little") + self._digest.digest()
                    + self._output.pack())
            self._write_record(fmt.END, 0, self._max_frame, end, body)
            self._sync()
        finally:
            self._closed = True
            self._f.close()

    def abort(self) -> None:
        """Write what is buffered (best effort) and close without end records: the vault reads as truncated."""
        if self._closed:
            return
        try:
            try:
                self._finish_worker()
            except Exception as e:  # abort runs while another error unwinds: keep that one
                log.warning("vault %s: the last group could not be written: %s", self.path, e)
            if not self._failed:
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
