"""The vault's crop videos made of the source's own 4:2:0 planes (video/planes.py, codecs 4-6).

Real frames of the shared clips, read by the real reader; chunks packed and unpacked as a run and
`recover` do. The end-to-end bit-exact recovery through the CLI is tests/test_recovery.py's
test_lossless_round_trip_bit_identical, whose run now takes this path (checked here too).
"""

from __future__ import annotations

import random

import cv2
import numpy as np
import pytest

from streamdeid.vault import chunk, crops
from streamdeid.vault import format as fmt
from streamdeid.video.planes import cut, planes_to_bgr
from streamdeid.video.reader import open_source
from streamdeid.types import Frame

CLIPS = ("short_hamilton_clip.mp4", "classroom.mp4", "one-by-one-person-detection.mp4")


def _frames(path, n: int, **kw) -> list[Frame]:
    out = []
    with open_source(str(path), **kw) as src:
        for item in src:
            if isinstance(item, Frame):
                out.append(item)
                if len(out) == n:
                    break
    return out


@pytest.mark.parametrize("clip", CLIPS)
def test_a_rectangle_of_planes_converts_to_exactly_the_readers_pixels(media, clip):
    """Recovery converts a face's planes alone; that must give the pixels the whole frame gave the
    reader, at any (odd) position and size: FFmpeg's default conversion reads only a pixel's own 2x2."""
    rng = random.Random(clip)
    for frame in _frames(media / clip, 3, keep_planes=True):
        assert frame.yuv is not None and frame.yuv.y.shape == frame.image.shape[:2]
        h, w = frame.image.shape[:2]
        for _ in range(60):
            cw, ch = rng.randrange(1, min(w, 200)), rng.randrange(1, min(h, 200))
            x, y = rng.randrange(0, w - cw + 1), rng.randrange(0, h - ch + 1)
            patch, ox, oy = cut(frame.yuv, x, y, cw, ch)
            assert patch.y.shape[0] % 2 == 0 and patch.y.shape[1] % 2 == 0 and ox in (0, 1) and oy in (0, 1)
            back = planes_to_bgr(patch)[oy:oy + ch, ox:ox + cw]
            assert np.array_equal(back, frame.image[y:y + ch, x:x + cw]), (x, y, cw, ch)


def test_planes_are_kept_only_when_asked_and_exact(media):
    clip = media / CLIPS[0]
    assert _frames(clip, 1)[0].yuv is None
    assert _frames(clip, 1, keep_planes=True, accurate_color=True)[0].yuv is None  # interpolating: not local


def _faces(media, n=20, at_planes=True, clip=None, at=(301, 41)) -> tuple[list[chunk.ChunkFace], list[np.ndarray]]:
    """A face-sized crop drifting over hamilton (or ``clip``) at odd positions, an ellipse owned, as the
    vault recorder hands them over; and the BGR crops."""
    faces, bgr = [], []
    for i, frame in enumerate(_frames(clip or media / CLIPS[0], n, keep_planes=True)):
        x, y, w, h = at[0] + i, at[1] + (i % 3), 61, 77
        crop = frame.image[y:y + h, x:x + w].copy()
        own = np.zeros((h, w), np.uint8)
        cv2.ellipse(own, (30, 38), (27, 35), 0, 0, 360, 1, -1)
        patch, ox, oy = cut(frame.yuv, x, y, w, h)
        faces.append(chunk.ChunkFace(i, i, np.eye(2, 3), (64, 64), fmt.MaskParams(x, y, False), crop,
                                     own.astype(bool), patch if at_planes else None, (ox, oy)))
        bgr.append(crop)
    return faces, bgr


def _round_trip(faces, quality):
    data = chunk.pack(faces, crops.codec_for(quality))
    return data, chunk.unpack(data, len(faces))


def test_lossless_chunk_on_planes_is_exact_and_a_fraction_of_rgb(media):
    faces, bgr = _faces(media)
    data, back = _round_trip(faces, "lossless")
    assert data[0] == crops.ON_PLANES[crops.QUALITIES["lossless"]]  # the planes codec was used
    for f, b, crop in zip(faces, back, bgr):
        own = f.owned
        assert np.array_equal(b.crop[..., 3] > 0, own)
        assert np.array_equal(b.crop[own][:, :3], crop[own])  # owned pixels bit-exact
        assert not b.crop[~own].any()
    rgb, _ = _round_trip(_faces(media, at_planes=False)[0], "lossless")
    assert rgb[0] == crops.QUALITIES["lossless"]
    print(f"\n[vault planes] lossless chunk: {len(data)} bytes on planes, {len(rgb)} on RGB")
    assert len(data) < 0.6 * len(rgb)  # hamilton's whole vault: 0.38x (benchmarks/vault.py)


def test_high_chunk_on_planes_psnr(media):
    faces, bgr = _faces(media)
    data, back = _round_trip(faces, "high")
    assert data[0] == crops.ON_PLANES[crops.QUALITIES["high"]]
    se = n = 0
    for f, b, crop in zip(faces, back, bgr):
        d = b.crop[f.owned][:, :3].astype(float) - crop[f.owned]
        se, n = se + (d ** 2).sum(), n + d.size
    assert 10 * np.log10(255 ** 2 * n / se) >= 44.0


def test_a_chunk_with_a_face_without_planes_falls_back_to_bgr(media):
    faces, bgr = _faces(media, n=6)
    faces[3].planes = None  # e.g. a live frame that was resized after a reconnect
    data, back = _round_trip(faces, "lossless")
    assert data[0] == crops.QUALITIES["lossless"]
    assert all(np.array_equal(b.crop[f.owned][:, :3], c[f.owned]) for f, b, c in zip(faces, back, bgr))


def test_unowned_pixels_never_reach_the_crop_video(media):
    """A track key must not reveal a neighbour: in the lossless video, every luma sample the face does not
    own holds one value (the owned mean), and chroma only where no pixel of its 2x2 is owned."""
    faces, _ = _faces(media, n=4)
    data, _ = _round_trip(faces, "lossless")
    codec, width, height, side_len = fmt.CHUNK_HEAD.unpack_from(data)
    off = fmt.CHUNK_HEAD.size + side_len + fmt.PLANES.size + len(faces)
    (n_packets,) = fmt.LEN.unpack_from(data, off)
    off += fmt.LEN.size
    packets = []
    for _ in range(n_packets):
        (size,) = fmt.LEN.unpack_from(data, off)
        packets.append(data[off + fmt.LEN.size:off + fmt.LEN.size + size])
        off += fmt.LEN.size + size
    frames = crops._decode_frames(crops.EncodedCrops(codec, width, height, packets), [(height, width)] * len(faces))
    for f, vf in zip(faces, frames):
        luma = vf.to_ndarray(format="gray")
        owned_area = np.zeros((height, width), bool)
        # where the codec put the face: its owned box, shifted into an even rectangle, centred
        x, y, w, h, sx, sy = chunk._planes_rect(chunk.owned_box(f.owned), f.planes_at)
        cx, cy = crops._even_offset(width, height, (h, w))
        bx, by, bw, bh = chunk.owned_box(f.owned)
        owned_area[cy + sy:cy + sy + bh, cx + sx:cx + sx + bw] = f.owned[by:by + bh, bx:bx + bw]
        assert len(np.unique(luma[~owned_area])) == 1


def test_full_range_mjpeg_planes_round_trip_exactly(media, tmp_path):
    """A webcam's MJPEG is yuvj420p (full range, BT.601): its planes come back exactly too."""
    import av

    from conftest import face_frames

    path = tmp_path / "cam.avi"
    with av.open(str(path), "w") as c:
        s = c.add_stream("mjpeg", rate=25)
        s.width, s.height, s.pix_fmt = 320, 240, "yuvj420p"
        for img in face_frames(media, 8):
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="bgr24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    faces, bgr = _faces(media, n=8, clip=path, at=(121, 61))
    assert faces[0].planes.pix_fmt == "yuvj420p"
    data, back = _round_trip(faces, "lossless")
    assert data[0] == crops.ON_PLANES[crops.QUALITIES["lossless"]]
    assert all(np.array_equal(b.crop[f.owned][:, :3], c[f.owned]) for f, b, c in zip(faces, back, bgr))
