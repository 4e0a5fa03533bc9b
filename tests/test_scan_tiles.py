"""The small-face scan over tiles (detect/scan_tiles.py): which tiles a due scan looks at, and that a look at
the tiles finds the faces a look at the whole frame finds."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from streamdeid.config import DetectConfig
from streamdeid.detect.finder import FaceFinder
from streamdeid.detect.scan_tiles import CHANGE_LEVEL, ScanTiles, tile_grid


def test_tiles_cover_the_frame_and_overlap_by_what_is_asked() -> None:
    for width, height, overlap in [(1920, 1080, 152), (640, 360, 56), (1080, 1920, 152), (100, 60, 56)]:
        tiles = tile_grid(width, height, overlap)
        covered = np.zeros((height, width), bool)
        for t in tiles:
            covered[t.y0:t.y1, t.x0:t.x1] = True
            assert (t.x1 - t.x0, t.y1 - t.y0) == (tiles[0].x1 - tiles[0].x0, tiles[0].y1 - tiles[0].y0)  # one size
        assert covered.all()
        xs = sorted({(t.x0, t.x1) for t in tiles})
        ys = sorted({(t.y0, t.y1) for t in tiles})
        for a, b in zip(xs, xs[1:]):
            assert a[1] - b[0] >= overlap
        for a, b in zip(ys, ys[1:]):
            assert a[1] - b[0] >= overlap
    assert len(tile_grid(1920, 1080, 152)) == 12


def _frame() -> np.ndarray:
    rng = np.random.default_rng(0)
    return cv2.resize(rng.integers(0, 255, (27, 48, 3), np.uint8), (1920, 1080), interpolation=cv2.INTER_CUBIC)


def test_a_scan_looks_again_only_where_the_picture_changed() -> None:
    tiles = ScanTiles(1920, 1080, 152, fps=25.0)
    frame = _frame()
    none = np.zeros((0, 4))
    assert tiles.due(frame, none, cut=False) is None  # never looked at: the whole frame
    tiles.tick()
    noisy = np.clip(frame.astype(np.int16) + np.random.default_rng(1).integers(-3, 4, frame.shape), 0, 255)
    assert tiles.due(noisy.astype(np.uint8), none, cut=False) == []  # codec-like noise is no change
    tiles.tick()
    walked_in = frame.copy()
    walked_in[900:940, 100:130] = 255  # a 30 x 40 px change at the bottom left
    assert tiles.due(walked_in, none, cut=False) == [8]  # the bottom-left tile only
    tiles.tick()
    small_face = np.array([[1500, 100, 1520, 124]], np.float64)  # top right
    assert tiles.due(walked_in, small_face, cut=False) == [3]
    assert tiles.due(walked_in, none, cut=True) is None  # a new shot: all of it
    for _ in range(tiles.max_age):
        tiles.tick()
    assert tiles.due(walked_in, none, cut=False) is None  # not looked at for 2 s: all of it
    assert CHANGE_LEVEL > 3


@pytest.mark.parametrize("photo_name", ["crowd_parade.jpg", "crowd_marching_band.jpg"])
def test_tiles_find_the_faces_the_whole_frame_scan_finds(media, photo_name: str) -> None:
    """A crowd photo (about 200 faces, many under the fast pass's floor at 1920 px) scanned whole and
    scanned tile by tile: the same faces. The detector sees each face in another frame of input, so weak
    boxes come and go on both sides as they do from one video frame to the next (weak ones, 0.3-0.57 on
    these photos); 99% of the boxes scoring the tracker's high score (0.6) or more have a box of the other
    look on their face (centre within half its size)."""
    photo = cv2.imread(str(media / photo_name))
    image = cv2.resize(photo, (1920, round(photo.shape[0] * 1920 / photo.shape[1])), interpolation=cv2.INTER_CUBIC)
    image = np.ascontiguousarray(image[:1080])
    finder = FaceFinder(DetectConfig())
    whole = finder.find(image, scan=True)
    tiles = ScanTiles(1920, 1080, int(2 * finder.fast_floor(1920, 1080)) + 8, fps=25.0).tiles
    tiled = finder.find(image, scan=True, tiles=tiles)
    assert len(whole) > 100 and (whole.scores >= 0.6).sum() > 100
    assert _on_faces_of(whole, tiled).mean() >= 0.99
    assert _on_faces_of(tiled, whole).mean() >= 0.99


def _on_faces_of(a, b) -> np.ndarray:
    """[N] bool for ``a``'s boxes scoring 0.6 or more: a box of ``b`` lies on the same face."""
    sure = a[a.scores >= 0.6]
    ca, cb = (sure.boxes[:, :2] + sure.boxes[:, 2:]) / 2, (b.boxes[:, :2] + b.boxes[:, 2:]) / 2
    size = np.maximum(sure.boxes[:, 2] - sure.boxes[:, 0], sure.boxes[:, 3] - sure.boxes[:, 1])
    apart = np.hypot(*(ca[:, None, :] - cb[None, :, :]).transpose(2, 0, 1))  # [N, M]
    return (apart <= 0.5 * size[:, None]).any(axis=1)
