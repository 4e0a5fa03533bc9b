"""Torch backend: runs a DBAF safetensors checkpoint directly (CPU or a CUDA device).

Optional (``--backend torch``, needs the ``train`` extra): the one runtime module
that imports ``streamdeid.models``, and only inside the constructor, so importing
``streamdeid.backends`` needs no torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import Backend


class TorchBackend(Backend):
    name = "torch"

    def __init__(self, model_path: str | Path | None = None, *, model=None, device: str = "auto",
                 threads: int | None = None):
        """Load ``model_path`` (a DBAF safetensors checkpoint), or wrap an in-memory DBAF ``model``
        (tests, training previews). ``device``: any torch device string ("cpu", "cuda", "cuda:1"), or
        "auto": the GPU when torch sees one (what ``--backend torch`` is for), else the CPU.
        ``threads`` sets torch's intra-op thread count for this process when given."""
        import torch

        from ..models.dbaf import DBAFRuntime
        from ..models.io import load_checkpoint

        if (model_path is None) == (model is None):
            raise ValueError("TorchBackend needs exactly one of model_path and model")
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if threads:
            torch.set_num_threads(int(threads))
        self._torch = torch
        self.device = torch.device(device)
        if model is None:
            model, self.header = load_checkpoint(model_path, device=str(self.device))
        else:
            model, self.header = model.to(self.device), {}
        self.model = model.eval()
        self.runtime = DBAFRuntime(self.model).eval()
        self.resolution = self.model.cfg.resolution
        self.key_shape = self.model.cfg.key_shape

    @classmethod
    def from_model(cls, model, device: str = "cpu") -> "TorchBackend":
        """Wrap an in-memory DBAF (tests, training previews)."""
        return cls(model=model, device=device)

    def run(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        x, p = self.check_inputs(x, p)
        torch = self._torch
        with torch.inference_mode():
            y = self.runtime(torch.from_numpy(x).to(self.device), torch.from_numpy(p).to(self.device))
            return y.float().cpu().numpy()
