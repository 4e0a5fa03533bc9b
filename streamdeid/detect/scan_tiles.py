"""Which parts of a frame the small-face scan looks at again: the tiles whose picture changed.

The small-face scan (detect/finder.py) upscales the whole frame: at 1920x1080 it looks at 3840x2160 px,
36 fast passes' worth, every ``DetectConfig.scan_every`` seconds, and that is most of a 1080p run's
detection time. A fixed camera (surveillance, a lecture, an audience) shows mostly the same pixels from one
scan to the next, and the detector finds in the same pixels what it found there before. So the frame is
cut into overlapping tiles (TILES_ACROSS x TILES_DOWN), and at a due scan a tile is looked at again only if

* its picture changed since it was last looked at (a grey thumbnail at 1/THUMB_STEP of the frame, each
  pixel the mean of a THUMB_STEP x THUMB_STEP block; a CHANGE_BLOCK x CHANGE_BLOCK mean of its change
  reaches CHANGE_LEVEL), or
* it holds a tracked face under the fast pass's floor, which only the scan finds (the tracker holds such a
  face from one scan to the next: a skipped scan would let its hold run out), or
* it was last looked at MAX_AGE_SECONDS ago or more, or never, or the frame starts a shot.

Tiles overlap by more than the largest face the scan is trusted for (FaceFinder.scan_trusted: twice the
fast pass's floor), so every face the whole-frame scan keeps lies whole in some tile. Looking at every tile
costs more than one look at the whole frame (the overlaps), so when tiles of WHOLE_SHARE of the frame's
area or more need a look, the whole frame is scanned as before. A moving camera changes every tile: it
costs what it did without tiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

# For a landscape frame (swapped for a portrait one). A person walking through a fixed camera's 1080p frame
# changes 1-3 of 3 x 2 tiles (a third to a half of the frame: with the overlaps, little saved), 2-4 of 4 x 3.
TILES_ACROSS, TILES_DOWN = 4, 3
THUMB_STEP = 8  # the change thumbnail's pixel is the mean of an 8 x 8 px block of the frame
# A change this large (grey levels, mean over CHANGE_BLOCK x CHANGE_BLOCK thumbnail pixels: 16 x 16 px
# of the frame) is a change of the picture. On store-aisle-detection.mp4 scaled to 1080p (480x270 H.264
# blown up) the still tiles' thumbnails differ by up to 8-17 levels a pixel between scans (99th percentile
# 3-8); a 12 px face walking in over a wall changes its 16 x 16 px block by tens of levels.
CHANGE_BLOCK = 2
CHANGE_LEVEL = 12.0
MAX_AGE_SECONDS = 2.0  # a tile is looked at again at least this often, changed or not
WHOLE_SHARE = 1.0  # of the frame's area: tiles adding up to this much cost more than one look at the whole


@dataclass(frozen=True)
class Tile:
    """A tile of the frame, in frame pixels: [y0:y1, x0:x1]."""

    x0: int
    y0: int
    x1: int
    y1: int

    def overlaps(self, boxes: np.ndarray) -> bool:
        """Whether any box ([K, 4] x1 y1 x2 y2) overlaps this tile."""
        b = np.asarray(boxes, np.float64).reshape(-1, 4)
        return bool(np.any((b[:, 0] < self.x1) & (b[:, 2] > self.x0) & (b[:, 1] < self.y1) & (b[:, 3] > self.y0)))


def tile_grid(width: int, height: int, overlap: int) -> list[Tile]:
    """TILES_ACROSS x TILES_DOWN tiles of one size covering a ``width`` x ``height`` frame, neighbours
    overlapping by ``overlap`` px (fewer tiles along a side too short for that)."""
    across, down = (TILES_ACROSS, TILES_DOWN) if width >= height else (TILES_DOWN, TILES_ACROSS)

    def spans(length: int, count: int) -> list[tuple[int, int]]:
        count = max(1, min(count, math.floor(length / max(2 * overlap, 1))))
        size = min(length, math.ceil((length + (count - 1) * overlap) / count))
        starts = [round(i * (length - size) / (count - 1)) for i in range(count)] if count > 1 else [0]
        return [(s, s + size) for s in starts]

    return [Tile(x0, y0, x1, y1) for y0, y1 in spans(height, down) for x0, x1 in spans(width, across)]


def thumbnail(image: np.ndarray) -> np.ndarray:
    """[H / THUMB_STEP, W / THUMB_STEP] float32 grey means of ``image`` (BGR)."""
    h, w = image.shape[:2]
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image
    return cv2.resize(grey, (max(1, w // THUMB_STEP), max(1, h // THUMB_STEP)),
                      interpolation=cv2.INTER_AREA).astype(np.float32)


class ScanTiles:
    """One video's tiles and what each looked like when last scanned (see the top)."""

    def __init__(self, width: int, height: int, overlap: int, fps: float) -> None:
        self.tiles = tile_grid(width, height, overlap)
        self.max_age = max(1, round(MAX_AGE_SECONDS * fps))
        self.area = float(width * height)
        self._seen: list[np.ndarray | None] = [None] * len(self.tiles)  # each tile's thumbnail when looked at
        self._age = [0] * len(self.tiles)  # frames since each was looked at
        self.looked = 0  # tiles looked at, over the run
        self.skipped = 0  # tiles a due scan did not look at, over the run

    def tick(self) -> None:
        """One frame passed."""
        self._age = [a + 1 for a in self._age]

    def due(self, image: np.ndarray, small_faces: np.ndarray, cut: bool) -> list[int] | None:
        """The tiles a scan of ``image`` must look at, or None: the whole frame. ``small_faces``: [K, 4]
        boxes of tracked faces only the scan refreshes. Records them as looked at."""
        thumb = thumbnail(image)
        need = [i for i, t in enumerate(self.tiles) if cut or self._needs(i, t, thumb, small_faces)]
        area = sum((self.tiles[i].x1 - self.tiles[i].x0) * (self.tiles[i].y1 - self.tiles[i].y0) for i in need)
        whole = area >= WHOLE_SHARE * self.area
        if whole:
            need = list(range(len(self.tiles)))
        for i in need:
            self._seen[i], self._age[i] = self._crop(thumb, self.tiles[i]), 0
        self.looked += len(need)
        self.skipped += len(self.tiles) - len(need)
        return None if whole else need

    def _needs(self, i: int, tile: Tile, thumb: np.ndarray, small_faces: np.ndarray) -> bool:
        seen = self._seen[i]
        if seen is None or self._age[i] >= self.max_age or tile.overlaps(small_faces):
            return True
        now = self._crop(thumb, tile)
        if now.shape != seen.shape:
            return True
        change = cv2.blur(np.abs(now - seen), (CHANGE_BLOCK, CHANGE_BLOCK))
        return float(change.max(initial=0.0)) >= CHANGE_LEVEL

    @staticmethod
    def _crop(thumb: np.ndarray, tile: Tile) -> np.ndarray:
        s = THUMB_STEP
        return thumb[tile.y0 // s:max(tile.y0 // s + 1, tile.y1 // s), tile.x0 // s:max(tile.x0 // s + 1, tile.x1 // s)]
