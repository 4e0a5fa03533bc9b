"""Keys and recovery for the evaluation: who can undo an anonymizer, and with what.

A *recoverer* has the anonymizer's batched signature,
``recover(anonymized_crops [B,S,S,3] uint8, contexts) -> crops``, and reads the
key from ``FaceContext.key`` (DBAF: ``X_rec = G(X_ano, P)`` with the same P).
Register one per method with :func:`register_recoverer`; blur, mosaic and solid
have none (recovery "not applicable").

Vault mode needs no model: the original crops are stored encrypted and are
restored bit-exactly with the right key. :func:`vault_round_trip` measures that
through the real vault writer and reader (lossless H.264 inside AES-GCM), so a lossless
result (PSNR ``inf``) is a measurement, not an assumption.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from streamdeid.config import AnonymizeConfig
from streamdeid.keys import derive
from streamdeid.keys.keyfile import MasterKey
from streamdeid.types import FaceContext, StreamdeidError

RecoverFn = Callable[[np.ndarray, Sequence[FaceContext]], np.ndarray]

#: method name -> factory(AnonymizeConfig) -> RecoverFn (or None when not recoverable)
RECOVERERS: dict[str, Callable[[AnonymizeConfig], RecoverFn | None]] = {}


def register_recoverer(method: str, factory: Callable[[AnonymizeConfig], RecoverFn | None]) -> None:
    """Make :func:`create_recoverer` return ``factory(cfg)`` for ``cfg.method == method``."""
    RECOVERERS[method] = factory


def create_recoverer(cfg: AnonymizeConfig, anonymizer=None) -> RecoverFn | None:
    """The recoverer of ``cfg.method``, or None (recovery not applicable). A registered
    method whose ``anonymizer`` inverts itself (``.recover``, e.g. DBAF) reuses it
    instead of loading the model a second time."""
    factory = RECOVERERS.get(cfg.method)
    if factory is not None and callable(getattr(anonymizer, "recover", None)):
        return anonymizer.recover
    return None if factory is None else factory(cfg)


class EvalKeys:
    """Two independent master keys: ``right`` (the owner's) and ``wrong`` (an attacker's guess).

    Face ``i`` is treated as track ``i + 1`` of one video, so every face gets its
    own track key, as in the pipeline. Deterministic for a given ``seed``.
    """

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.right = rng.bytes(32)
        self.wrong = rng.bytes(32)
        self.video_id = rng.bytes(derive.VIDEO_ID_LEN)

    def contexts(self, n: int, which: str = "right") -> list[FaceContext]:
        master = self.right if which == "right" else self.wrong
        return [FaceContext(i + 1, 0, derive.track_key(master, self.video_id, i + 1)) for i in range(n)]


def vault_round_trip(crops: np.ndarray, keys: EvalKeys, which: str = "right",
                     quality: str = "lossless") -> np.ndarray | None:
    """Store ``crops`` in a vault under ``keys.right`` (crop codec ``quality``: lossless, as a lossless
    output's vault is), read them back with ``which`` key.

    Returns the recovered crops, or None when the vault refuses the key (a wrong
    key recovers nothing)."""
    from streamdeid.vault import VaultReader, VaultWriter

    crops = np.asarray(crops)
    s = crops.shape[1]
    with tempfile.TemporaryDirectory(prefix="sdeid-eval-") as tmp:
        path = Path(tmp) / "eval.sdv"
        with VaultWriter(path, {"video_id": keys.video_id.hex()}, keys.right, quality=quality) as vw:
            for i, crop in enumerate(crops):
                vw.append(i + 1, 0, None, np.eye(2, 3), s, crop)
        reader = VaultReader(path)
        key = MasterKey(keys.right if which == "right" else keys.wrong)
        try:
            records = list(reader.records(key, strict=True))
        except StreamdeidError:
            return None
        finally:
            close = getattr(reader, "close", None)
            if close:
                close()
    out = np.empty_like(crops)
    for r in records:
        out[r.track_id - 1] = r.crop
    if len(records) != len(crops):
        raise StreamdeidError(f"vault round trip returned {len(records)} of {len(crops)} crops")
    return out


def keyless(anonymizer, crops: np.ndarray, keys: EvalKeys) -> bool:
    """True when the anonymizer's output does not depend on the key (blur, mosaic, solid)."""
    probe = np.asarray(crops[: min(4, len(crops))])
    if not len(probe):
        return True
    a = anonymizer(probe, keys.contexts(len(probe), "right"))
    b = anonymizer(probe, keys.contexts(len(probe), "wrong"))
    return bool(np.array_equal(a, b))


def _dbaf_recoverer(cfg: AnonymizeConfig) -> RecoverFn:
    """DBAF model mode: X_rec = G(X_ano, P), the same generator with the track's P."""
    from streamdeid.anonymizers.dbaf import DBAFAnonymizer

    return DBAFAnonymizer(cfg.model_path, cfg.backend, threads=cfg.threads).recover


register_recoverer("dbaf", _dbaf_recoverer)

__all__ = ["RECOVERERS", "EvalKeys", "RecoverFn", "create_recoverer", "keyless", "register_recoverer",
           "vault_round_trip"]
