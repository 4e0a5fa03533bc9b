"""Chunk payloads of vault format 2: one track's faces over about a second.

The byte layout is in :mod:`streamdeid.vault.format`; the crop video in
:mod:`streamdeid.vault.crops`. ``pack`` and ``unpack`` are pure (no keys):
the writer encrypts what ``pack`` returns, the reader hands ``unpack`` what it
decrypted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

from streamdeid.types import StreamdeidError, Yuv420
from streamdeid.video.planes import PIX_FMTS

from . import crops
from . import format as fmt


@dataclass
class ChunkFace:
    """One face of one frame, as the writer was given it."""

    frame_index: int
    pts: int | None
    inverse: np.ndarray  # [2, 3] float64 crop -> frame
    crop_size: tuple[int, int]  # (width, height) of the aligned crop
    mask_params: fmt.MaskParams | None
    crop: np.ndarray | None = field(repr=False)  # uint8 [h, w, 3] BGR or [h, w, 4] BGRA (alpha: owned)
    owned: np.ndarray | None = field(default=None, repr=False)  # [h, w] bool with a BGR crop (as an alpha)
    # The source's 4:2:0 planes around the crop (video/planes.cut: even coordinates and size) and where
    # the crop's top-left pixel lies in them (x, y, each 0 or 1). Given, the crop video is made of these.
    planes: Yuv420 | None = field(default=None, repr=False)
    planes_at: tuple[int, int] = (0, 0)


def _has_mask(face: ChunkFace) -> bool:
    return face.owned is not None or face.crop.shape[2] == 4


def _owned(face: ChunkFace) -> np.ndarray:
    if face.owned is not None:
        return face.owned
    crop = face.crop
    return crop[..., 3] > 0 if crop.shape[2] == 4 else np.ones(crop.shape[:2], bool)


def owned_box(owned: np.ndarray) -> tuple[int, int, int, int]:
    """(x, y, w, h) of the owned pixels' bounding box; (0, 0, 1, 1) when none is owned.

    Only this box goes through the codec: a face's paste region is an ellipse in
    a rectangle about twice its size, so this halves the pixels to encode."""
    x, y, w, h = cv2.boundingRect(owned.view(np.uint8))  # of the nonzero pixels; (0, 0, 0, 0) for none
    return (int(x), int(y), int(w), int(h)) if w else (0, 0, 1, 1)


def _geo(face: ChunkFace, box: tuple[int, int, int, int]) -> bytes:
    has_crop = face.crop is not None
    alpha = has_crop and _has_mask(face)
    flags = (fmt.FLAG_PTS if face.pts is not None else 0) | (fmt.FLAG_CROP if has_crop else 0)
    flags |= fmt.FLAG_ALPHA if alpha else 0
    ph, pw = face.crop.shape[:2] if has_crop else (0, 0)
    mask = fmt.mask_to_values(face.mask_params)
    head = fmt.GEO.pack(face.frame_index, flags, 0 if face.pts is None else face.pts,
                        *face.inverse.reshape(6).tolist(), face.crop_size[0], face.crop_size[1],
                        len(mask), ph, pw, *box)
    return head + mask.astype("<f8").tobytes()


def pack(faces: list[ChunkFace], codec: crops.Codec | None) -> bytes:
    """Plaintext of one CHUNK record (``codec`` None: geometry only)."""
    with_crop = [f for f in faces if f.crop is not None]
    owned = [_owned(f) for f in with_crop]
    boxes = [owned_box(m) for m in owned]
    box_of = {id(f): b for f, b in zip(with_crop, boxes)}
    masks = [m for f, m in zip(with_crop, owned) if _has_mask(f)]
    side = b"".join(_geo(f, box_of.get(id(f), (0, 0, 0, 0))) for f in faces) + crops.pack_masks(masks).tobytes()
    side = crops.compress(side)
    on_planes = _planes_codec(with_crop, codec)
    planes_head = b""
    if on_planes is not None:
        enc, planes_head = _encode_planes(with_crop, owned, boxes, on_planes)
    elif with_crop and codec is not None:
        cut = [_cut(f.crop, b) for f, b in zip(with_crop, boxes)]
        enc = crops.encode(cut, [_cut(m, b) for m, b in zip(owned, boxes)], codec)
    else:
        enc = crops.EncodedCrops(crops.NO_CODEC, 0, 0, [])
    parts = [fmt.CHUNK_HEAD.pack(enc.codec, enc.width, enc.height, len(side)), side, planes_head,
             fmt.LEN.pack(len(enc.packets))]
    for p in enc.packets:
        parts += [fmt.LEN.pack(len(p)), p]
    return b"".join(parts)


def _planes_codec(faces: list[ChunkFace], codec: crops.Codec | None) -> crops.Codec | None:
    """``codec``'s twin on the source's planes, when every face brought planes of one kind; else None."""
    twin = crops.ON_PLANES.get(codec.id) if codec is not None else None
    if twin is None or not faces or any(f.planes is None for f in faces):
        return None
    if len({(f.planes.pix_fmt, f.planes.color_range, f.planes.colorspace) for f in faces}) != 1:
        return None  # a reconnected live source changed format mid-chunk: the BGR codec takes it
    return crops.CODECS[twin]


def _planes_rect(box: tuple[int, int, int, int], at: tuple[int, int]) -> tuple[int, int, int, int, int, int]:
    """A crop's owned box (x, y, w, h in the crop) -> the even rectangle of its planes holding it:
    (x, y, w, h) in the planes and (sx, sy), where the box starts in that rectangle (0 or 1 each)."""
    bx, by, bw, bh = box
    px, py = bx + at[0], by + at[1]
    sx, sy = px % 2, py % 2
    return px - sx, py - sy, bw + sx + (bw + sx) % 2, bh + sy + (bh + sy) % 2, sx, sy


def _encode_planes(faces: list[ChunkFace], owned: list[np.ndarray], boxes: list[tuple[int, int, int, int]],
                   codec: crops.Codec) -> tuple[crops.EncodedCrops, bytes]:
    """The crop video made of the faces' planes, and the PLANES head that goes with it."""
    patches, masks, shifts = [], [], []
    for f, own, box in zip(faces, owned, boxes):
        x, y, w, h, sx, sy = _planes_rect(box, f.planes_at)
        p = f.planes
        patches.append(Yuv420(p.y[y:y + h, x:x + w], p.u[y // 2:(y + h) // 2, x // 2:(x + w) // 2],
                              p.v[y // 2:(y + h) // 2, x // 2:(x + w) // 2], p.pix_fmt, p.color_range, p.colorspace))
        m = np.zeros((h, w), bool)
        m[sy:sy + box[3], sx:sx + box[2]] = _cut(own, box)
        masks.append(m)
        shifts.append(sx | sy << 1)
    first = faces[0].planes
    head = fmt.PLANES.pack(PIX_FMTS.index(first.pix_fmt), first.color_range, first.colorspace)
    return crops.encode_planes(patches, masks, codec), head + bytes(shifts)


def unpack(data: bytes, n_faces: int) -> list[ChunkFace]:
    """Inverse of :func:`pack`. ValueError/struct.error on a malformed payload;
    StreamdeidError when the crop video does not decode."""
    codec, width, height, side_len = fmt.CHUNK_HEAD.unpack_from(data)
    off = fmt.CHUNK_HEAD.size
    side = crops.decompress(data[off:off + side_len])
    off += side_len
    faces, shaped, used = _parse_geo(side, n_faces)
    codec_info = crops.CODECS.get(codec)
    if codec != crops.NO_CODEC and codec_info is None:
        raise StreamdeidError(f"unknown crop codec {codec} (written by a newer streamdeid?)")
    if codec_info is not None and codec_info.planes:
        colour = fmt.PLANES.unpack_from(data, off)
        off += fmt.PLANES.size
        shifts = data[off:off + len(shaped)]
        off += len(shaped)
        if colour[0] >= len(PIX_FMTS) or len(shifts) != len(shaped) or any(b > 3 for b in shifts):
            raise ValueError("malformed chunk planes head")
    if (len(side) - used) % 4:
        raise ValueError("malformed chunk masks")
    runs = np.frombuffer(side, dtype="<u4", offset=used)
    alpha_shapes = [shape for _, shape, alpha, _ in shaped if alpha]
    masks, used_runs = crops.unpack_masks(runs, alpha_shapes)
    if used_runs != len(runs):
        raise ValueError("malformed chunk masks")
    (n_packets,) = fmt.LEN.unpack_from(data, off)
    off += fmt.LEN.size
    packets = []
    for _ in range(n_packets):
        (n,) = fmt.LEN.unpack_from(data, off)
        off += fmt.LEN.size
        if off + n > len(data):
            raise ValueError("chunk packet runs past the payload")
        packets.append(data[off:off + n])
        off += n
    if off != len(data):
        raise ValueError("unexpected bytes after the chunk's packets")
    if not shaped:
        if codec != crops.NO_CODEC or packets:
            raise ValueError("chunk has a video but no crops")
        return faces
    if codec_info is None:
        raise ValueError("chunk has crops but no video")
    enc = crops.EncodedCrops(codec, width, height, packets)
    if codec_info.planes:
        pixels = _decode_planes(enc, shaped, shifts, colour)
    else:
        pixels = crops.decode(enc, [(b[3], b[2]) for *_, b in shaped])
    mask_iter = iter(masks)
    for (i, shape, alpha, box), part in zip(shaped, pixels):
        faces[i].crop = _restore(part, shape, box, next(mask_iter) if alpha else None)
    return faces


def _decode_planes(enc: crops.EncodedCrops, shaped: list[tuple], shifts: bytes,
                   colour: tuple[int, int, int]) -> list[np.ndarray]:
    """Each owned box [bh, bw, 3] BGR, cut from its decoded even rectangle at its shift."""
    cuts = []
    for (*_, (_, _, bw, bh)), s in zip(shaped, shifts):
        _, _, w, h, sx, sy = _planes_rect((0, 0, bw, bh), (s & 1, s >> 1))  # as pack made it
        cuts.append((sx, sy, bw, bh, (h, w)))
    rects = crops.decode_planes(enc, [c[4] for c in cuts], PIX_FMTS[colour[0]], colour[1], colour[2])
    return [r[sy:sy + bh, sx:sx + bw] for r, (sx, sy, bw, bh, _) in zip(rects, cuts)]


def _parse_geo(side: bytes, n_faces: int) -> tuple[list[ChunkFace], list[tuple], int]:
    """Faces (crops not filled in yet), [(face index, crop shape, alpha, box)] of those with crops,
    and the bytes of ``side`` used."""
    faces, shaped, off = [], [], 0
    for _ in range(n_faces):
        vals = fmt.GEO.unpack_from(side, off)
        off += fmt.GEO.size
        fi, flags, pts = vals[0], vals[1], vals[2]
        inverse = np.array(vals[3:9], dtype=np.float64).reshape(2, 3)
        crop_w, crop_h, n_mask, ph, pw, bx, by, bw, bh = vals[9:18]
        if flags & ~(fmt.FLAG_PTS | fmt.FLAG_CROP | fmt.FLAG_ALPHA) or len(side) < off + 8 * n_mask:
            raise ValueError("malformed chunk geometry")
        if flags & fmt.FLAG_CROP and (ph == 0 or pw == 0 or bw == 0 or bh == 0 or bx + bw > pw or by + bh > ph):
            raise ValueError("malformed chunk geometry")
        mask = fmt.mask_from_values(np.frombuffer(side, dtype="<f8", count=n_mask, offset=off))
        off += 8 * n_mask
        if flags & fmt.FLAG_CROP:
            shaped.append((len(faces), (ph, pw), bool(flags & fmt.FLAG_ALPHA), (bx, by, bw, bh)))
        faces.append(ChunkFace(fi, pts if flags & fmt.FLAG_PTS else None, inverse, (crop_w, crop_h), mask, None))
    return faces, shaped, off


def _cut(a: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    x, y, w, h = box
    return a[y:y + h, x:x + w]


def _restore(part: np.ndarray, shape: tuple[int, int], box: tuple[int, int, int, int],
             owned: np.ndarray | None) -> np.ndarray:
    """The decoded box [bh, bw, 3] back into a crop of ``shape``: BGRA with unowned pixels zeroed
    (as format 1 returned it) when ``owned`` [h, w] is given, else BGR. Nothing outside the box is owned."""
    x, y, w, h = box
    if owned is None:
        bgr = np.zeros(shape + (3,), np.uint8)
        bgr[y:y + h, x:x + w] = part
        return bgr
    own = owned[y:y + h, x:x + w].view(np.uint8)
    bgra = np.zeros(shape + (4,), np.uint8)
    region = bgra[y:y + h, x:x + w]
    cv2.copyTo(cv2.merge((part, own * np.uint8(255))), own, region)
    return bgra
