"""The one interface every DBAF backend implements, and the exported graph's I/O names.

Torch-free: the runtime imports this without torch or TensorRT installed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

#: ONNX / TensorRT tensor names of the exported DBAF generator G(x, P) -> y.
INPUT_IMAGE = "x"  # [B, 3, R, R] float32, RGB in [-1, 1]
INPUT_KEY = "p"  # [B, n_latent, w_dim] float32 key
OUTPUT_IMAGE = "y"  # [B, 3, R, R] float32, RGB in [-1, 1]
BATCH_AXIS_NAME = "batch"


class Backend(ABC):
    """Runs G(x, P): ``run(x [B,3,R,R] float32, p [B,L,D] float32) -> [B,3,R,R] float32``."""

    name: str = "base"
    resolution: int | None = None  # R, when the model declares it
    key_shape: tuple[int, int] | None = None  # (L, D), when the model declares it

    @abstractmethod
    def run(self, x: np.ndarray, p: np.ndarray) -> np.ndarray: ...

    def close(self) -> None:
        """Release sessions / device memory (optional)."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check_inputs(self, x: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Validate shapes and return C-contiguous float32 arrays."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        p = np.ascontiguousarray(p, dtype=np.float32)
        if x.ndim != 4 or x.shape[1] != 3 or x.shape[2] != x.shape[3]:
            raise ValueError(f"x must be [B, 3, R, R], got {x.shape}")
        if p.ndim != 3 or p.shape[0] != x.shape[0]:
            raise ValueError(f"p must be [B, L, D] with the batch of x ({x.shape[0]}), got {p.shape}")
        if self.resolution is not None and x.shape[2] != self.resolution:
            raise ValueError(f"model resolution is {self.resolution}, got crops of {x.shape[2]}")
        if self.key_shape is not None and tuple(p.shape[1:]) != tuple(self.key_shape):
            raise ValueError(f"model key shape is {self.key_shape}, got {tuple(p.shape[1:])}")
        return x, p
