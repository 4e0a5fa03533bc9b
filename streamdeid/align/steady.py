"""A steadier place for a drawn face inside its crop: per track, the frame -> crop alignment smoothed over frames.

Every frame's crop is aligned from that frame's five landmarks, which jitter by a few pixels even on a
face that does not move. Blur hides it; a composite face drawn at fixed crop coordinates moves with it,
its eyes and mouth trembling (docs/composite.md: flicker 0.92 of the original's against blur's 0.45,
same-track identity 83%). The crop itself must stay where the landmarks put it: it is what covers the
face. So only what is drawn inside it is steadied: :class:`SteadyAlignment` keeps, per track, an
exponentially smoothed crop -> frame similarity (carried along the camera's motion), and gives the
anonymizer ``C`` [2, 3], the map from the steady crop to this frame's crop (near the identity). Where the
raw alignment moves further than ``snap`` (of the crop's side) from the steady one, the face really moved
(or a cut, a hold, a new size): the steady alignment jumps to it, so what is drawn is never further than
that from where the cover is.

A similarity crop -> frame is kept in unit crop coordinates ([0, 1]^2, so a crop of another side is the
same face) as (a, b, tx, ty): ``[[a, -b, tx], [b, a, ty]]``; a blend of two such maps is one too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALPHA = 0.3  # weight of this frame's alignment in the steady one (per frame)
SNAP = 0.04  # of the crop's side: a larger move is a real one, followed at once
_PROBES = np.array([[0.5, 0.5], [0.3, 0.4], [0.7, 0.4], [0.5, 0.75]])  # unit crop points compared (eyes, mouth)


@dataclass
class _Steady:
    frame_index: int
    params: np.ndarray  # [4] a, b, tx, ty of the unit crop -> frame similarity


def _as3(m: np.ndarray) -> np.ndarray:
    return np.vstack([np.asarray(m, np.float64), [0.0, 0.0, 1.0]])


def _params(unit_to_frame: np.ndarray) -> np.ndarray:
    m = unit_to_frame
    return np.array([(m[0, 0] + m[1, 1]) / 2, (m[1, 0] - m[0, 1]) / 2, m[0, 2], m[1, 2]])


def _matrix(p: np.ndarray) -> np.ndarray:
    a, b, tx, ty = p
    return np.array([[a, -b, tx], [b, a, ty], [0.0, 0.0, 1.0]])


class SteadyAlignment:
    def __init__(self, alpha: float = ALPHA, snap: float = SNAP) -> None:
        self.alpha, self.snap = float(alpha), float(snap)
        self._tracks: dict[int, _Steady] = {}

    def reset(self) -> None:
        """A scene cut: nothing continues."""
        self._tracks.clear()

    def correction(self, track_id: int, frame_index: int, inverse: np.ndarray, side: int,
                   motion: np.ndarray | None = None, face_inverse: np.ndarray | None = None) -> np.ndarray:
        """C [2, 3]: steady crop -> this frame's crop (pixels of a ``side`` crop), for a face whose crop ->
        frame map this frame is ``inverse`` [2, 3]. ``motion``: the camera's, previous frame -> this one.
        ``face_inverse``: the map of the face itself where the crop is widened around a guess (a held or
        back-filled face is covered larger, cover_size.py): what is drawn keeps the face's size, and only
        the cover grows and shrinks as the detector finds and misses it."""
        unit = np.diag([side, side, 1.0])
        raw = _params(_as3(inverse if face_inverse is None else face_inverse) @ unit)  # unit crop -> frame
        prev = self._tracks.get(track_id)
        steady = raw
        if prev is not None and prev.frame_index == frame_index - 1:
            carried = _params(_as3(motion) @ _matrix(prev.params)) if motion is not None else prev.params
            blended = carried + self.alpha * (raw - carried)
            if self._apart(blended, raw) <= self.snap:
                steady = blended
        self._tracks[track_id] = _Steady(frame_index, steady)
        # steady unit crop -> frame -> this frame's crop (pixels), then pixels -> unit of the steady crop
        c = np.linalg.inv(_as3(inverse)) @ _matrix(steady) @ np.diag([1.0 / side, 1.0 / side, 1.0])
        return c[:2]

    @staticmethod
    def _apart(p: np.ndarray, q: np.ndarray) -> float:
        """Largest distance between the probe points under two unit crop -> frame maps, in crop sides."""
        a, b = _matrix(p), _matrix(q)
        pts = np.hstack([_PROBES, np.ones((len(_PROBES), 1))])
        d = np.linalg.norm((pts @ a.T - pts @ b.T)[:, :2], axis=1).max()
        return float(d / max(np.hypot(q[0], q[1]), 1e-9))  # |(a, b)| is the crop side in frame px

    def forget(self, keep: set[int]) -> None:
        """Drop the tracks not in ``keep`` (bounded memory over a long stream)."""
        for tid in [t for t in self._tracks if t not in keep]:
            del self._tracks[tid]
