"""A decoded frame's own 4:2:0 planes, kept beside its BGR image for the recovery vault.

The vault stores each face's original pixels with a video codec. Fed the BGR image, it has to
re-encode the colour conversion's rounding and full-resolution chroma that the decoder never had;
fed the decoder's 4:2:0 planes it encodes what the source video holds: about a fifth fewer bytes at
the same PSNR, and 0.37-0.48x of the bytes when lossless, on the shared clips (benchmarks/vault.py).

Recovery turns the planes back into BGR with the very conversion the reader used (:func:`to_bgr`),
which is exact because FFmpeg's default YUV 4:2:0 -> BGR conversion is local: each pixel reads its
own luma and its 2x2 block's chroma, so a rectangle at even coordinates converts to exactly the
pixels the whole frame converts to there (tests/test_vault_planes.py checks it on the shared clips).
``accurate_color``'s interpolating conversion is not local; frames read with it keep no planes.
"""

from __future__ import annotations

import av
import numpy as np
from av.video.reformatter import Interpolation, VideoReformatter

from streamdeid.types import Yuv420

PIX_FMTS = ("yuv420p", "yuvj420p")  # what the vault can store natively (index: its stored id)


def to_bgr(vf: av.VideoFrame, interpolation: Interpolation | None = None,
           reformatter: VideoReformatter | None = None, size: tuple[int, int] | None = None) -> np.ndarray:
    """[H, W, 3] uint8 BGR of a decoded frame, with its own matrix and range so full-range (JPEG)
    sources are not crushed; odd sizes are handled by swscale. ``reformatter``: one kept across
    frames of one size, which keeps swscale's context (setting a range costs ~0.5 ms otherwise).
    ``size``: (width, height) to scale to, for a stream whose picture changes size."""
    kwargs: dict[str, object] = {"interpolation": interpolation}
    if size is not None and size != (vf.width, vf.height):
        kwargs["width"], kwargs["height"] = size
    if not vf.format.is_rgb and vf.color_range:
        kwargs["src_color_range"] = int(vf.color_range)
    if reformatter is not None:
        return np.ascontiguousarray(reformatter.reformat(vf, format="bgr24", **kwargs).to_ndarray())
    return np.ascontiguousarray(vf.to_ndarray(format="bgr24", **kwargs))


def plane_view(vf: av.VideoFrame, i: int, width: int, height: int, channels: int = 1) -> np.ndarray:
    """Plane ``i`` of ``vf`` as a writable [height, width(, channels)] view, its row padding left out."""
    p = vf.planes[i]
    rows = np.frombuffer(p, np.uint8).reshape(-1, p.line_size)[:height, :width * channels]
    return rows if channels == 1 else rows.reshape(height, width, channels)


def planes_of(vf: av.VideoFrame) -> Yuv420 | None:
    """A copy of ``vf``'s planes (1.5 bytes a pixel), or None when the vault cannot use them: not
    4:2:0 8-bit, or an odd size (the last chroma column/row would cover a single pixel)."""
    w, h = vf.width, vf.height
    if vf.format.name not in PIX_FMTS or w % 2 or h % 2:
        return None
    y, u, v = (plane_view(vf, i, *size).copy() for i, size in enumerate(((w, h), (w // 2, h // 2), (w // 2, h // 2))))
    return Yuv420(y, u, v, vf.format.name, int(vf.color_range), int(vf.colorspace))


def cut(yuv: Yuv420, x: int, y: int, w: int, h: int) -> tuple[Yuv420, int, int]:
    """The smallest rectangle at even coordinates holding [x, x + w) x [y, y + h) (inside the frame),
    and where (x, y) lies in it: (planes, x offset, y offset), each offset 0 or 1. Copies."""
    x0, y0 = x - x % 2, y - y % 2
    x1, y1 = x + w + (x + w) % 2, y + h + (y + h) % 2
    return Yuv420(yuv.y[y0:y1, x0:x1].copy(), yuv.u[y0 // 2:y1 // 2, x0 // 2:x1 // 2].copy(),
                  yuv.v[y0 // 2:y1 // 2, x0 // 2:x1 // 2].copy(), yuv.pix_fmt, yuv.color_range,
                  yuv.colorspace), x - x0, y - y0


def frame_of(yuv: Yuv420) -> av.VideoFrame:
    """``yuv`` as a VideoFrame tagged like its source frame (format, range, matrix)."""
    h, w = yuv.y.shape
    vf = av.VideoFrame(w, h, yuv.pix_fmt)
    for i, plane in enumerate((yuv.y, yuv.u, yuv.v)):
        plane_view(vf, i, plane.shape[1], plane.shape[0])[:] = plane
    vf.color_range = yuv.color_range
    vf.colorspace = yuv.colorspace
    return vf


def planes_to_bgr(yuv: Yuv420) -> np.ndarray:
    """[h, w, 3] BGR of a rectangle of planes: what the reader's image holds there."""
    return to_bgr(frame_of(yuv))
