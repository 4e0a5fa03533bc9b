"""DBAF anonymizer: G(x, P) on a batch of aligned crops, one key P per track.

    anon = DBAFAnonymizer("dbaf64.onnx")              # backend "onnxrt" by default
    out = anon(crops, contexts)                        # crops [B, S, S, 3] uint8 BGR
    back = dbaf_recover_crops(anon, out, contexts)     # the same G with the same P

Every crop's P comes from its ``FaceContext.key`` (the per-track key derived
with HKDF from the master key and the video id), so one person keeps one fake
identity in every frame and two tracks never share one:
``P = kria_vector(track_key, n_latent * w_dim).reshape(n_latent, w_dim)``.
A crop without a key raises (the renderer then covers the batch with solid
fill: fail closed). Crops of size S != R (the model resolution) are resized to
R for the generator and back to S.

Model files: an explicit path, or ``None`` for the weights shipped in
``streamdeid/weights/`` (``manifest.json`` names one file per backend with its
sha256; written by ``python -m training export --out streamdeid/weights``).
The weights ship once, in fp16, in ``dbaf64.safetensors`` (what the torch
backend loads); ``dbaf64.onnx`` is the graph alone and reads them from there.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from ..files import sha256_file
from ..keys import kria_vector
from ..registry import BACKENDS
from ..types import FaceContext, StreamdeidError
from .base import AnonymizerBase, check_batch

log = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights"
MANIFEST = "manifest.json"
BACKEND_NAMES = tuple(BACKENDS)
NO_WEIGHTS = ("the shipped DBAF weights are missing from this installation (streamdeid/weights/manifest.json); "
              "reinstall, pass --model PATH, or choose --anonymizer blur")
_P_CACHE = 512  # keys remembered (one per live track is plenty)


def resolve_model_path(model_path: str | Path | None, backend: str = "onnxrt") -> Path:
    """The model file to load: ``model_path`` if given (it must exist), else the
    shipped default for ``backend`` from ``streamdeid/weights/manifest.json``,
    checked against its sha256. StreamdeidError with a one-line reason otherwise.

    Manifest: ``{"models": {"onnxrt": {"file": "dbaf64.onnx", "sha256": "...", "weights": {"file":
    "dbaf64.safetensors", "sha256": "..."}}, ...}}``; ``weights``, when present, is the file the
    model reads its weights from, checked too.
    """
    if backend not in BACKEND_NAMES:
        raise StreamdeidError(f"unknown DBAF backend {backend!r} (choose from {', '.join(BACKEND_NAMES)})")
    if model_path is not None:
        path = Path(model_path)
        if not path.is_file():
            raise StreamdeidError(f"{model_path}: {'a folder, not' if path.is_dir() else 'no such'} DBAF model file")
        return path
    manifest = WEIGHTS_DIR / MANIFEST
    if not manifest.is_file():
        raise StreamdeidError(NO_WEIGHTS)
    try:
        entry = json.loads(manifest.read_text())["models"][backend]
        files = [entry] + ([entry["weights"]] if "weights" in entry else [])
        checks = [(WEIGHTS_DIR / e["file"], str(e["sha256"]).lower()) for e in files]
    except (ValueError, KeyError, TypeError):
        raise StreamdeidError(f"{manifest} names no {backend} model; pass --model PATH") from None
    for path, want in checks:
        if not path.is_file():
            raise StreamdeidError(f"{path} (listed in {manifest}) is missing; pass --model PATH")
        if sha256_file(path) != want:
            raise StreamdeidError(f"{path} does not match the sha256 in {manifest} (damaged or replaced)")
    return checks[0][0]


def key_tensor(key: bytes, key_shape: tuple[int, int]) -> np.ndarray:
    """P for one track: ``kria_vector(key, L * D)`` as float32 [L, D]."""
    n_latent, w_dim = key_shape
    return kria_vector(key, n_latent * w_dim).reshape(n_latent, w_dim)


class DBAFAnonymizer(AnonymizerBase):
    """Batched DBAF anonymizer (see the module docstring); registered as ``dbaf``.

    ``needs_leak_guard``: the renderer checks its output with SFace;
    ``color_match``: pasting matches the crop's colours to the frame.
    """

    name = "dbaf"
    needs_leak_guard = True
    color_match = True
    reversible = True  # model-mode recovery: G(G(x, P), P)
    batch_frames = 8  # frames leaving the look-ahead buffer rendered in one generator batch

    def __init__(self, model_path: str | Path | None = None, backend: str = "onnxrt", *, threads: int = 0,
                 generator=None) -> None:
        """``generator``: an already built ``streamdeid.backends.Backend`` (tests, training previews);
        otherwise ``backend`` is created on ``model_path`` (see :func:`resolve_model_path`)."""
        if generator is None:
            from ..backends import create_backend

            self.model_path = resolve_model_path(model_path, backend)
            kwargs = {}
            if backend == "onnxrt":
                kwargs["intra_op_threads"] = int(threads)
            elif backend == "torch" and threads:
                kwargs["threads"] = int(threads)
            try:
                generator = create_backend(backend, self.model_path, **kwargs)
            except StreamdeidError:
                raise
            except Exception as exc:  # wrong file type for the backend, corrupt file, missing engine
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise StreamdeidError(f"cannot load DBAF model {self.model_path} with backend {backend}: "
                                      f"{msg}") from exc
        else:
            self.model_path = Path(model_path) if model_path is not None else None
        self.generator = generator
        self.backend_name = getattr(generator, "name", backend)
        self.resolution = generator.resolution
        self.key_shape = generator.key_shape
        if self.resolution is None or self.key_shape is None:
            raise StreamdeidError(f"DBAF model {self.model_path} does not declare its resolution and key shape "
                                  "(export it with engines/export_onnx.py)")
        self._p_cache: OrderedDict[bytes, np.ndarray] = OrderedDict()

    # ------------------------------------------------------------------ keys
    def keys_for(self, contexts: Sequence[FaceContext]) -> np.ndarray:
        """[B, L, D] float32: one P per crop from its track key (raises on a missing key)."""
        out = np.empty((len(contexts), *self.key_shape), np.float32)
        for i, ctx in enumerate(contexts):
            key = ctx.key
            if key is None:
                raise StreamdeidError(f"DBAF needs a per-track key; track {ctx.track_id} has none")
            key = bytes(key)
            p = self._p_cache.get(key)
            if p is None:
                p = key_tensor(key, self.key_shape)
                self._p_cache[key] = p
                if len(self._p_cache) > _P_CACHE:
                    self._p_cache.popitem(last=False)
            else:
                self._p_cache.move_to_end(key)
            out[i] = p
        return out

    # ------------------------------------------------------------------ pixels
    def to_model(self, crops: np.ndarray) -> np.ndarray:
        """[B, S, S, 3] uint8 BGR -> [B, 3, R, R] float32 RGB in [-1, 1]."""
        r, s = self.resolution, crops.shape[1]
        if s != r:
            interp = cv2.INTER_AREA if s > r else cv2.INTER_LINEAR
            crops = np.stack([cv2.resize(c, (r, r), interpolation=interp) for c in crops])
        x = crops[..., ::-1].transpose(0, 3, 1, 2).astype(np.float32)
        x *= 1.0 / 127.5
        x -= 1.0
        return np.ascontiguousarray(x)

    @staticmethod
    def from_model(y: np.ndarray, size: int) -> np.ndarray:
        """[B, 3, R, R] float RGB in [-1, 1] -> [B, S, S, 3] uint8 BGR."""
        y = np.asarray(y, dtype=np.float32)
        if not np.isfinite(y).all():
            raise ValueError("DBAF generator returned NaN/inf")
        img = np.clip((y + 1.0) * 127.5 + 0.5, 0, 255).astype(np.uint8)
        img = np.ascontiguousarray(img.transpose(0, 2, 3, 1)[..., ::-1])  # RGB -> BGR
        if img.shape[1] != size:
            img = np.stack([cv2.resize(c, (size, size), interpolation=cv2.INTER_LINEAR) for c in img])
        return img

    def __call__(self, crops: np.ndarray, contexts: Sequence[FaceContext]) -> np.ndarray:
        """G(x, P): ``crops`` [B, S, S, 3] uint8 BGR -> [B, S, S, 3] uint8 BGR, one generator call."""
        single = np.ndim(crops) == 3
        batch = check_batch(crops, contexts)
        if len(batch) == 0:
            return batch.copy()
        p = self.keys_for(contexts)
        y = self.generator.run(self.to_model(batch), p)
        if y.shape != (len(batch), 3, self.resolution, self.resolution):
            raise ValueError(f"DBAF generator returned {y.shape}")
        out = self.from_model(y, batch.shape[1])
        return out[0] if single else out

    def recover(self, crops: np.ndarray, contexts: Sequence[FaceContext]) -> np.ndarray:
        """Model-mode recovery: the same function G with the same P on anonymized crops."""
        return self(crops, contexts)

    def close(self) -> None:
        close = getattr(self.generator, "close", None)
        if close:
            close()


def dbaf_recover_crops(anonymizer: DBAFAnonymizer, crops_ano: np.ndarray,
                       contexts: Sequence[FaceContext]) -> np.ndarray:
    """X_rec = G(X_ano, P): recover anonymized crops with the tracks' keys.

    A wrong key gives a different face, not an error: nothing in G can tell."""
    return anonymizer.recover(crops_ano, contexts)


def create_dbaf(cfg) -> DBAFAnonymizer:
    """Registry factory: ``AnonymizeConfig`` -> DBAFAnonymizer."""
    return DBAFAnonymizer(cfg.model_path, cfg.backend, threads=cfg.threads)
