"""IoU cost and optimal one-to-one assignment (no scipy at runtime).

Frames hold a handful of faces, so an exact O(n^3) Hungarian solver in
pure Python/numpy costs microseconds and, unlike greedy highest-IoU-first
matching, does not swap identities when two faces overlap (the greedy choice
for one pair can steal the only good partner of another).
"""

from __future__ import annotations

import numpy as np


def intersection_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[len(a), len(b)]`` intersection areas of x1, y1, x2, y2 boxes (float64 [N, 4] and [M, 4])."""
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    return np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[len(a), len(b)]`` IoU of x1, y1, x2, y2 boxes."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    inter = intersection_matrix(a, b)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


# near_matrix score a pair needs: the detection's centre inside the track's box.
NEAR_GATE = 1e-9
NEAR_SIZE_RATIO = 0.5  # and the smaller box at least this share of the larger one's height


def near_matrix(tracks: np.ndarray, dets: np.ndarray) -> np.ndarray:
    """``[len(tracks), len(dets)]`` nearness in [0, 1]: 1 - the detection centre's distance from the
    track box's centre in half-box units (Chebyshev), 0 when the centre lies outside the track's box
    or the heights differ by more than 1 / NEAR_SIZE_RATIO. A face's centre is inside no other face's
    box unless one hides the other, so neighbours in a crowd do not pair."""
    t = np.asarray(tracks, dtype=np.float64).reshape(-1, 4)
    d = np.asarray(dets, dtype=np.float64).reshape(-1, 4)
    if len(t) == 0 or len(d) == 0:
        return np.zeros((len(t), len(d)))
    half = np.maximum((t[:, 2:] - t[:, :2]) / 2, 1e-6)  # [T, 2]
    offset = np.abs((d[None, :, :2] + d[None, :, 2:]) / 2 - (t[:, None, :2] + t[:, None, 2:]) / 2)  # [T, D, 2]
    dist = (offset / half[:, None, :]).max(axis=2)
    ht, hd = t[:, 3] - t[:, 1], d[:, 3] - d[:, 1]
    ratio = np.minimum(ht[:, None], hd[None, :]) / np.maximum(np.maximum(ht[:, None], hd[None, :]), 1e-6)
    return np.where((dist < 1.0) & (ratio >= NEAR_SIZE_RATIO), 1.0 - dist, 0.0)


def hungarian(cost: np.ndarray) -> list[tuple[int, int]]:
    """Minimum-cost assignment of a rectangular cost matrix (rows <-> columns).

    Shortest augmenting path with potentials (Kuhn-Munkres, O(n^2 m)).
    Returns ``min(n_rows, n_cols)`` pairs ``(row, col)``.
    """
    cost = np.asarray(cost, dtype=np.float64)
    transposed = cost.shape[0] > cost.shape[1]
    if transposed:
        cost = cost.T
    n, m = cost.shape  # n <= m
    if n == 0:
        return []
    inf = np.inf
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    p = np.zeros(m + 1, dtype=np.int64)  # p[j]: row (1-based) assigned to column j; column 0 is virtual
    way = np.zeros(m + 1, dtype=np.int64)
    for i in range(1, n + 1):
        p[0] = i
        j0 = 0
        minv = np.full(m + 1, inf)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = p[j0]
            free = ~used[1:]
            cur = cost[i0 - 1] - u[i0] - v[1:]
            better = free & (cur < minv[1:])
            minv[1:][better] = cur[better]
            way[1:][better] = j0
            cand = np.where(free, minv[1:], inf)
            j1 = int(np.argmin(cand)) + 1
            delta = cand[j1 - 1]
            used_idx = np.flatnonzero(used)
            u[p[used_idx]] += delta
            v[used_idx] -= delta
            minv[1:][free] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    pairs = [(int(p[j]) - 1, j - 1) for j in range(1, m + 1) if p[j] > 0]
    if transposed:
        pairs = [(c, r) for r, c in pairs]
    return sorted(pairs)


def linear_assignment(iou: np.ndarray, min_iou: float) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Match rows (tracks) to columns (detections) maximising total IoU.

    Pairs below ``min_iou`` are never matched. Returns ``(matches,
    unmatched_rows, unmatched_cols)``.
    """
    iou = np.asarray(iou, dtype=np.float64)
    n, m = iou.shape
    if n == 0 or m == 0:
        return [], list(range(n)), list(range(m))
    gated = iou >= min_iou
    matches = []
    for rows, cols in _components(gated):
        if len(rows) == 1 or len(cols) == 1:  # most of a crowd: one track, or one detection, alone
            sub = iou[rows][:, cols]
            r, c = np.unravel_index(int(np.argmax(sub)), sub.shape)
            matches.append((rows[r], cols[c]))
            continue
        sub, ok = iou[np.ix_(rows, cols)], gated[np.ix_(rows, cols)]
        # Forbidden pairs cost more than any feasible matching, so they are only
        # chosen when nothing else is left; they are then dropped below.
        cost = np.where(ok, 1.0 - sub, float(min(len(rows), len(cols))) + 1.0)
        matches += [(rows[r], cols[c]) for r, c in hungarian(cost) if ok[r, c]]
    matches.sort()
    rows = {r for r, _ in matches}
    cols = {c for _, c in matches}
    return matches, [r for r in range(n) if r not in rows], [c for c in range(m) if c not in cols]


def _components(gated: np.ndarray) -> list[tuple[list[int], list[int]]]:
    """The connected components (rows, columns) of the bipartite graph of allowed pairs.

    The optimal assignment is the union of each component's, and in a crowd of
    hundreds of faces the components are a face or two each: solving them apart
    costs microseconds where one Hungarian run over the whole matrix, in Python,
    costs a tenth of a second."""
    n, m = gated.shape
    parent = list(range(n + m))  # union-find over rows 0..n-1 and columns n..n+m-1

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for r, c in zip(*np.nonzero(gated)):
        a, b = root(int(r)), root(n + int(c))
        if a != b:
            parent[a] = b
    groups: dict[int, tuple[list[int], list[int]]] = {}
    for r in range(n):
        groups.setdefault(root(r), ([], []))[0].append(r)
    for c in range(m):
        groups.setdefault(root(n + c), ([], []))[1].append(c)
    return [(rows, cols) for rows, cols in groups.values() if rows and cols]
