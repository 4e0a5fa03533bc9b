"""A track's face crops as one small video (vault format 2).

Format 1 stored each face of each frame as its own PNG: 6-46x the size of the
source video. Consecutive crops of one track look alike, so a video codec's
temporal prediction pays off: one chunk (about a second of one track) is
encoded as one short H.264 stream, every crop centred on a canvas as large as
the chunk's largest crop. The pixels a crop does not own (its BGRA alpha is 0:
background or a neighbour's face) are replaced by the mean of its owned pixels
before encoding, so they cost few bits and reveal nothing.

Qualities (``QUALITIES``):

* ``high`` (default for lossy outputs): H.264 4:4:4, crf 8 (superfast, see ``CODECS``);
* ``small``: H.264 4:4:4, crf 14 (about half the size, a few dB lower);
* ``lossless``: H.264 RGB, qp 0 (libx264rgb): the owned pixels come back
  bit-exact, as format 1's PNGs did.

Which pixels a crop owns is stored exactly, as run lengths of its alpha mask
(see :func:`pack_masks`), never through the lossy codec.
"""

from __future__ import annotations

import lzma
from dataclasses import dataclass
from fractions import Fraction

import av
import cv2
import numpy as np
from av.video.reformatter import VideoReformatter

from streamdeid.types import StreamdeidError, Yuv420
from streamdeid.video.planes import plane_view, planes_to_bgr, to_bgr


@dataclass(frozen=True)
class Codec:
    id: int  # stored in the chunk
    encoder: str  # PyAV/FFmpeg encoder name
    decoder: str
    pix_fmt: str  # what the encoder is fed
    options: dict[str, str]
    lossless: bool
    planes: bool = False  # fed the source's own 4:2:0 planes (video/planes.py), not the BGR crop


CODECS = {
    # superfast with mbtree and a 20-frame lookahead back, aq and 8x8 transforms off, at crf 8, against
    # veryfast crf 6: x264's time -35% on hamilton; bytes / crop PSNR (benchmarks/vault.py): hamilton
    # -8.5% / +0.4 dB, head-pose-male -2% / -0.03 dB, face-demographics +2% / +0.4 dB, head-pose-female-
    # and-male +5% / +0.6 dB, classroom +11% / +1.2 dB. crf 8.5 or 9 would be smaller on most clips but
    # falls under test_lossy_crops_psnr_and_exact_masks's 44 dB.
    1: Codec(1, "libx264", "h264", "yuv444p", {"crf": "8", "preset": "superfast",
                                               "x264-params": "aq-mode=0:mbtree=1:rc-lookahead=20:8x8dct=0"}, False),
    2: Codec(2, "libx264", "h264", "yuv444p", {"crf": "14", "preset": "veryfast"}, False),
    3: Codec(3, "libx264rgb", "h264", "bgr24", {"qp": "0", "preset": "veryfast"}, True),
    # The same qualities fed the decoder's own 4:2:0 planes (when the frames carry them: Frame.yuv).
    # benchmarks/vault.py on the six shared clips, against 1-3: high (crf 8 here too) 10-16% fewer bytes
    # and +0.3 to +1.5 dB crop PSNR (crf 9 on hamilton / head-pose-male: 6.42x / 1.07x of the source at
    # 45.7 / 44.6 dB, against 4:4:4's 8.35x / 1.34x at 45.9 / 44.6); small (crf 16) 16-24% fewer bytes
    # for 0.2-0.9 dB less; lossless 2.1-2.7x fewer bytes, still bit-exact.
    4: Codec(4, "libx264", "h264", "yuv420p", {"crf": "8", "preset": "superfast",
                                               "x264-params": "aq-mode=0:mbtree=1:rc-lookahead=20:8x8dct=0"},
             False, planes=True),
    5: Codec(5, "libx264", "h264", "yuv420p", {"crf": "16", "preset": "veryfast"}, False, planes=True),
    6: Codec(6, "libx264", "h264", "yuv420p", {"qp": "0", "preset": "veryfast"}, True, planes=True),
}
QUALITIES = {"high": 1, "small": 2, "lossless": 3}
ON_PLANES = {1: 4, 2: 5, 3: 6}  # a quality's codec when the source's planes are at hand
NO_CODEC = 0  # a geometry-only chunk (--no-crops)

# lzma without the xz container: a chunk's side data is a few hundred bytes,
# the container would add ~60 of them.
# A small dictionary: the data is small, and preset 9's 64 MiB dictionary costs 40 ms to set up per chunk.
_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9, "dict_size": 1 << 18}]
# The encoder's effort (a raw LZMA2 decoder needs only the dictionary size, so any setting reads back):
# preset 0, LZMA's fast mode. On hamilton's 2,855 ownership masks: 0.68 -> 0.14 s of CPU for 337 -> 382 KB
# (+0.9% of the vault); on a crowd pan the side data took 3.7 s of a key-file run's CPU.
_LZMA_ENCODE = [{"id": lzma.FILTER_LZMA2, "preset": 0, "dict_size": _LZMA_FILTERS[0]["dict_size"]}]
MAX_SIDE_DATA = 64 << 20


def codec_for(quality: str) -> Codec:
    try:
        return CODECS[QUALITIES[quality]]
    except KeyError:
        raise ValueError(f"unknown vault quality {quality!r} (choose from {', '.join(QUALITIES)})") from None


def codec_name(codec: Codec) -> str:
    """Human-readable, for the vault header: e.g. ``h264-yuv444p-crf8``; with its twin on the source's
    planes, e.g. ``h264-yuv444p-crf8/source-yuv420p-crf8`` (each chunk names the one it used)."""
    name = _one_name(codec)
    twin = ON_PLANES.get(codec.id)
    return name if twin is None else f"{name}/source-{_one_name(CODECS[twin])}"


def _one_name(codec: Codec) -> str:
    if codec.planes:
        return "yuv420p-" + ("lossless" if codec.lossless else f"crf{codec.options['crf']}")
    if codec.lossless:
        return "h264-rgb-lossless"
    return f"h264-{codec.pix_fmt}-crf{codec.options['crf']}"


@dataclass
class EncodedCrops:
    codec: int
    width: int  # canvas
    height: int
    packets: list[bytes]


def canvas_size(shapes: list[tuple[int, int]]) -> tuple[int, int]:
    """(width, height) holding every (h, w) in ``shapes``, rounded up to even (x264 wants even sizes)."""
    h = max(s[0] for s in shapes)
    w = max(s[1] for s in shapes)
    return w + w % 2, h + h % 2


def _offset(width: int, height: int, shape: tuple[int, int]) -> tuple[int, int]:
    return (width - shape[1]) // 2, (height - shape[0]) // 2


def _to_frame(crop: np.ndarray, owned: np.ndarray, width: int, height: int, codec: Codec) -> av.VideoFrame:
    """[h, w, 3|4] BGR(A) crop + [h, w] owned mask (bool or uint8, nonzero: owned; a BGRA crop's alpha is
    not read) -> the encoder's frame: the crop centred on a [height, width] canvas, unowned pixels set to
    the owned mean. Written straight into the frame's planes. For 4:4:4 YUV, OpenCV's full-range YCrCb
    (20x faster than swscale on small frames); :func:`_from_frame` inverts it the same way."""
    own8 = owned.view(np.uint8) if owned.dtype == bool else owned
    fill = np.round(cv2.mean(crop, mask=own8)[:3]) if cv2.countNonZero(own8) else (128, 128, 128)
    fill = np.array([[fill]], np.uint8)  # [1, 1, 3] BGR
    x, y = _offset(width, height, owned.shape)
    h, w = owned.shape
    frame = av.VideoFrame(width, height, codec.pix_fmt)
    if codec.pix_fmt == "bgr24":
        canvas = plane_view(frame, 0, width, height, 3)
        canvas[:] = fill
        cv2.copyTo(crop if crop.shape[2] == 3 else cv2.cvtColor(crop, cv2.COLOR_BGRA2BGR), own8,
                   canvas[y:y + h, x:x + w])
        return frame
    ycc = cv2.split(cv2.cvtColor(crop, cv2.COLOR_BGR2YCrCb))  # Y, Cr, Cb (a 4th channel is ignored)
    fill_ycc = cv2.cvtColor(fill, cv2.COLOR_BGR2YCrCb)[0, 0]
    for i, ch in enumerate((0, 2, 1)):  # yuv444p planes: Y, Cb, Cr
        plane = plane_view(frame, i, width, height)
        plane[:] = fill_ycc[ch]
        cv2.copyTo(ycc[ch], own8, plane[y:y + h, x:x + w])
    return frame


def _from_frame(frame: av.VideoFrame, codec: Codec, shape: tuple[int, int]) -> np.ndarray:
    """The crop of ``shape`` (h, w) centred in a decoded frame, as BGR [h, w, 3]. Only that box is
    converted, read straight from the frame's planes (the decoder gives yuv444p, or gbrp for libx264rgb)."""
    width, height = frame.width, frame.height
    x, y = _offset(width, height, shape)
    box = (slice(y, y + shape[0]), slice(x, x + shape[1]))
    name = frame.format.name
    if name == "gbrp" and codec.pix_fmt == "bgr24":
        g, b, r = (plane_view(frame, i, width, height)[box] for i in range(3))
        return cv2.merge((b, g, r))
    if name == "yuv444p" and codec.pix_fmt == "yuv444p":
        y_, cb, cr = (plane_view(frame, i, width, height)[box] for i in range(3))
        return cv2.cvtColor(cv2.merge((y_, cr, cb)), cv2.COLOR_YCrCb2BGR)
    if codec.pix_fmt == "bgr24":  # any other decoder output: the general (slower) path
        return frame.to_ndarray(format="bgr24")[box]
    y_, cb, cr = frame.to_ndarray(format="yuv444p")  # planes [3, H, W]
    return cv2.cvtColor(cv2.merge((y_[box], cr[box], cb[box])), cv2.COLOR_YCrCb2BGR)


def encode(crops: list[np.ndarray], owned: list[np.ndarray], codec: Codec) -> EncodedCrops:
    """BGR(A) crops [h_i, w_i, 3|4] uint8 and their owned masks [h_i, w_i] -> one H.264 stream."""
    width, height = canvas_size([c.shape[:2] for c in crops])
    return _encode((_to_frame(crop, own, width, height, codec) for crop, own in zip(crops, owned)),
                   width, height, codec)


def _encode(frames, width: int, height: int, codec: Codec) -> EncodedCrops:
    ctx = av.CodecContext.create(codec.encoder, "w")
    ctx.width, ctx.height, ctx.pix_fmt = width, height, codec.pix_fmt
    ctx.time_base = Fraction(1, 25)
    # one thread: chunks are small and many, thread start-up would cost more than it saves
    ctx.options = {**codec.options, "threads": "1"}
    packets: list[bytes] = []
    for i, frame in enumerate(frames):
        frame.pts = i
        packets.extend(bytes(p) for p in ctx.encode(frame))
    packets.extend(bytes(p) for p in ctx.encode(None))
    return EncodedCrops(codec.id, width, height, packets)


def decode(enc: EncodedCrops, shapes: list[tuple[int, int]]) -> list[np.ndarray]:
    """The chunk's crops back: [h_i, w_i, 3] uint8 BGR for each (h_i, w_i) in ``shapes``
    (a BGR codec's; see :func:`decode_planes` for the others)."""
    codec = CODECS[enc.codec]
    return [_from_frame(frame, codec, shape) for frame, shape in zip(_decode_frames(enc, shapes), shapes)]


def _decode_frames(enc: EncodedCrops, shapes: list[tuple[int, int]]) -> list[av.VideoFrame]:
    codec = CODECS.get(enc.codec)
    if codec is None:
        raise StreamdeidError(f"unknown crop codec {enc.codec} (written by a newer streamdeid?)")
    frames: list[av.VideoFrame] = []
    try:
        ctx = av.CodecContext.create(codec.decoder, "r")
        ctx.options = {"threads": "1"}
        for data in enc.packets:
            frames.extend(ctx.decode(av.Packet(data)))
        frames.extend(ctx.decode(None))
    except av.FFmpegError as e:
        raise StreamdeidError(f"a crop video in the vault does not decode: {e}") from None
    if len(frames) != len(shapes) or any((f.height, f.width) != (enc.height, enc.width) for f in frames):
        raise StreamdeidError("a crop video in the vault does not match its frame list")
    if any(h > enc.height or w > enc.width for h, w in shapes):
        raise StreamdeidError("a crop in the vault is larger than its crop video")
    return frames


# ---------------------------------------------------------------------- the source's planes


def _even_offset(width: int, height: int, shape: tuple[int, int]) -> tuple[int, int]:
    """Where a 4:2:0 rectangle of ``shape`` (h, w), both even, sits centred on the canvas: at even
    coordinates, so its chroma samples stay whole."""
    return (width - shape[1]) // 4 * 2, (height - shape[0]) // 4 * 2


def _planes_frame(yuv: Yuv420, owned: np.ndarray, width: int, height: int, codec: Codec) -> av.VideoFrame:
    """[h, w] planes + [h, w] owned mask -> the encoder's frame: centred on the canvas, unowned samples
    set to the owned mean. A chroma sample is owned when any of its 2x2 pixels is, so along the mask's
    edge a sample also carries the colour of up to three unowned pixels (as the source video does; no
    luma of them, which holds the detail)."""
    h, w = yuv.y.shape
    own8 = owned.view(np.uint8) if owned.dtype == bool else owned
    # [h/2, w/2]: the max of the four pixels of each 2x2 (cv2 on strided views: 7x numpy's reshape-max)
    own_c = cv2.max(cv2.max(own8[0::2, 0::2], own8[1::2, 0::2]), cv2.max(own8[0::2, 1::2], own8[1::2, 1::2]))
    any_owned = cv2.countNonZero(own8) > 0
    x, y = _even_offset(width, height, (h, w))
    frame = av.VideoFrame(width, height, codec.pix_fmt)
    for i, (src, own) in enumerate(((yuv.y, own8), (yuv.u, own_c), (yuv.v, own_c))):
        ph, pw = src.shape
        plane = plane_view(frame, i, width >> (i > 0), height >> (i > 0))
        plane[:] = round(cv2.mean(src, mask=own)[0]) if any_owned else 128
        cv2.copyTo(src, own, plane[y >> (i > 0):(y >> (i > 0)) + ph, x >> (i > 0):(x >> (i > 0)) + pw])
    return frame


def encode_planes(patches: list[Yuv420], owned: list[np.ndarray], codec: Codec) -> EncodedCrops:
    """Rectangles of the source's planes (even sizes) and their [h, w] owned masks -> one H.264 stream."""
    width, height = canvas_size([p.y.shape for p in patches])
    return _encode((_planes_frame(p, own, width, height, codec) for p, own in zip(patches, owned)),
                   width, height, codec)


def decode_planes(enc: EncodedCrops, shapes: list[tuple[int, int]], pix_fmt: str, color_range: int,
                  colorspace: int) -> list[np.ndarray]:
    """The chunk's rectangles back as BGR [h_i, w_i, 3], converted as the reader converted the source
    (``pix_fmt``, range and matrix: the source frame's)."""
    frames = _decode_frames(enc, shapes)
    out = []
    reformatter = VideoReformatter()  # one canvas size: swscale's context is made once per chunk
    for f, (h, w) in zip(frames, shapes):
        x, y = _even_offset(enc.width, enc.height, (h, w))
        if f.format.name == pix_fmt:
            # the whole canvas, tagged as the source was, then the rectangle: exact, as conversion is local
            f.color_range, f.colorspace = color_range, colorspace
            out.append(to_bgr(f, reformatter=reformatter)[y:y + h, x:x + w])
            continue
        box = [plane_view(f, i, enc.width >> (i > 0), enc.height >> (i > 0))
               [y >> (i > 0):(y + h) >> (i > 0), x >> (i > 0):(x + w) >> (i > 0)] for i in range(3)]
        out.append(planes_to_bgr(Yuv420(*box, pix_fmt, color_range, colorspace)))  # a yuvj420p source
    return out


# ---------------------------------------------------------------------- side data


def pack_masks(masks: list[np.ndarray]) -> np.ndarray:
    """Owned masks [h, w] bool -> run lengths (u32), each mask's runs prefixed by their count.

    Runs alternate unowned/owned in row-major order, starting with unowned
    (0 when the first pixel is owned). An ellipse of 150 rows is ~300 runs,
    which lzma then shrinks ~4x; a packed bitmap compresses worse.
    """
    parts = []
    for m in masks:
        flat = m.reshape(-1)
        edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1
        bounds = np.concatenate(([0], edges, [flat.size]))
        runs = np.diff(bounds)
        if flat.size and flat[0]:
            runs = np.concatenate(([0], runs))
        parts.append(np.concatenate(([len(runs)], runs)))
    return np.concatenate(parts).astype("<u4") if parts else np.zeros(0, "<u4")


def unpack_masks(runs: np.ndarray, shapes: list[tuple[int, int]]) -> tuple[list[np.ndarray], int]:
    """Inverse of :func:`pack_masks`; returns (masks, values consumed). ValueError if malformed."""
    masks, pos = [], 0
    for h, w in shapes:
        if pos >= len(runs):
            raise ValueError("mask runs end early")
        n = int(runs[pos])
        seg = runs[pos + 1:pos + 1 + n].astype(np.int64)
        pos += 1 + n
        if len(seg) != n or seg.sum() != h * w:
            raise ValueError("mask runs do not fit the crop")
        values = np.arange(n) % 2 == 1  # unowned, owned, unowned, ...
        masks.append(np.repeat(values, seg).reshape(h, w))
    return masks, pos


def compress(data: bytes) -> bytes:
    return lzma.compress(data, format=lzma.FORMAT_RAW, filters=_LZMA_ENCODE)


def decompress(data: bytes) -> bytes:
    dec = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    try:
        out = dec.decompress(data, max_length=MAX_SIDE_DATA)
    except lzma.LZMAError:
        raise ValueError("side data does not decompress") from None
    if not dec.eof:
        raise ValueError("side data is incomplete or too large")
    return out
