"""Constant-velocity Kalman filter on (cx, cy, aspect, h), as in ByteTrack/DeepSORT.

State ``[cx, cy, a, h, vcx, vcy, va, vh]`` with ``a = w / h``. Process and
measurement noise scale with the box height, so the filter behaves the same
for 15 px and 300 px faces.
"""

from __future__ import annotations

import numpy as np

STD_WEIGHT_POSITION = 1.0 / 20
STD_WEIGHT_VELOCITY = 1.0 / 160


def xyxy_to_xyah(box: np.ndarray) -> np.ndarray:
    """(x1, y1, x2, y2) -> (cx, cy, w / h, h): [4] or batched [N, 4]."""
    b = np.asarray(box, dtype=np.float64)
    w, h = np.maximum(b[..., 2] - b[..., 0], 1e-3), np.maximum(b[..., 3] - b[..., 1], 1e-3)
    return np.stack([b[..., 0] + w / 2, b[..., 1] + h / 2, w / h, h], axis=-1)


def xyah_to_xyxy(xyah: np.ndarray) -> np.ndarray:
    """(cx, cy, a, h, ...) -> (x1, y1, x2, y2): [4] from a state or measurement, or batched [N, 4]."""
    cx, cy, a, h = xyah[..., 0], xyah[..., 1], xyah[..., 2], xyah[..., 3]
    w = a * h
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)


class KalmanFilter:
    ndim = 4

    def __init__(self) -> None:
        self._motion = np.eye(2 * self.ndim)
        self._motion[: self.ndim, self.ndim :] = np.eye(self.ndim)  # dt = 1 frame

    def initiate(self, measurement: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """New track from one (cx, cy, a, h) measurement; velocities start at 0."""
        mean = np.r_[measurement, np.zeros(self.ndim)]
        h = measurement[3]
        std = np.array([
            2 * STD_WEIGHT_POSITION * h, 2 * STD_WEIGHT_POSITION * h, 1e-2, 2 * STD_WEIGHT_POSITION * h,
            10 * STD_WEIGHT_VELOCITY * h, 10 * STD_WEIGHT_VELOCITY * h, 1e-5, 10 * STD_WEIGHT_VELOCITY * h,
        ])
        return mean, np.diag(std**2)

    def predict(self, mean: np.ndarray, covariance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One frame ahead. Also batched: ``mean`` [N, 8], ``covariance`` [N, 8, 8] (a crowd's
        hundreds of tracks in one call instead of one each)."""
        h = mean[..., 3]
        p, v = STD_WEIGHT_POSITION * h, STD_WEIGHT_VELOCITY * h
        std = np.stack([p, p, np.full_like(h, 1e-2), p, v, v, np.full_like(h, 1e-5), v], axis=-1)  # [..., 8]
        mean = mean @ self._motion.T
        covariance = self._motion @ covariance @ self._motion.T
        covariance += np.einsum("...i,ij->...ij", std**2, np.eye(2 * self.ndim))
        return mean, covariance

    def project(self, mean: np.ndarray, covariance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The state in measurement space; batched like ``predict`` ([..., 4], [..., 4, 4])."""
        h = mean[..., 3]
        p = STD_WEIGHT_POSITION * h
        std = np.stack([p, p, np.full_like(h, 1e-1), p], axis=-1)  # [..., 4]
        projected = covariance[..., :self.ndim, :self.ndim] + np.einsum("...i,ij->...ij", std**2, np.eye(self.ndim))
        return mean[..., :self.ndim], projected  # H = [I 0]: its products are slices

    def update(self, mean: np.ndarray, covariance: np.ndarray, measurement: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Correct with a (cx, cy, a, h) measurement; batched like ``predict`` (``measurement`` [..., 4]):
        a crowd's matched tracks in one call."""
        projected_mean, projected_cov = self.project(mean, covariance)
        # K = P H^T S^-1, solved rather than inverted (S is symmetric positive definite); P H^T = P[:, :4]
        cross = covariance[..., :, :self.ndim]  # [..., 8, 4]
        gain = np.swapaxes(np.linalg.solve(projected_cov, np.swapaxes(cross, -1, -2)), -1, -2)  # [..., 8, 4]
        innovation = measurement - projected_mean
        mean = mean + np.einsum("...ij,...j->...i", gain, innovation)
        covariance = covariance - gain @ projected_cov @ np.swapaxes(gain, -1, -2)
        return mean, covariance
