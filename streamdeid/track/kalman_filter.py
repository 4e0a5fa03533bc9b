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
    x1, y1, x2, y2 = np.asarray(box, dtype=np.float64)
    w, h = max(x2 - x1, 1e-3), max(y2 - y1, 1e-3)
    return np.array([x1 + w / 2, y1 + h / 2, w / h, h])


def xyah_to_xyxy(xyah: np.ndarray) -> np.ndarray:
    cx, cy, a, h = xyah[:4]
    w = a * h
    return np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])


class KalmanFilter:
    ndim = 4

    def __init__(self) -> None:
        self._motion = np.eye(2 * self.ndim)
        self._motion[: self.ndim, self.ndim :] = np.eye(self.ndim)  # dt = 1 frame
        self._update = np.eye(self.ndim, 2 * self.ndim)

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
        h = mean[3]
        std = np.array([STD_WEIGHT_POSITION * h, STD_WEIGHT_POSITION * h, 1e-1, STD_WEIGHT_POSITION * h])
        return self._update @ mean, self._update @ covariance @ self._update.T + np.diag(std**2)

    def update(self, mean: np.ndarray, covariance: np.ndarray, measurement: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        projected_mean, projected_cov = self.project(mean, covariance)
        # K = P H^T S^-1, solved rather than inverted (S is symmetric positive definite)
        gain = np.linalg.solve(projected_cov, (covariance @ self._update.T).T).T
        mean = mean + gain @ (measurement - projected_mean)
        covariance = covariance - gain @ projected_cov @ gain.T
        return mean, covariance
