"""SCRFD (insightface) detector run with onnxruntime on the CPU.

Optional backend, never the default: the user supplies the ``.onnx`` file
(e.g. insightface's ``det_10g.onnx`` / ``det_2.5g.onnx``). Only models with
keypoints (9 outputs: scores, boxes, keypoints for strides 8, 16, 32; two
anchors per cell) are supported, because alignment needs the 5 landmarks.
"""

from __future__ import annotations

import os

import cv2
import numpy as np

from streamdeid.config import DetectConfig
from streamdeid.detect.base import as_bgr, nms
from streamdeid.types import Detections, StreamdeidError

STRIDES = (8, 16, 32)
NUM_ANCHORS = 2
INPUT_MEAN = 127.5
INPUT_STD = 128.0


def anchor_centers(height: int, width: int, stride: int, num_anchors: int = NUM_ANCHORS) -> np.ndarray:
    """``[height*width*num_anchors, 2]`` (x, y) anchor centres in input pixels, row-major, anchors innermost."""
    ys, xs = np.mgrid[:height, :width]
    centers = np.stack([xs, ys], axis=-1).reshape(-1, 2).astype(np.float32) * stride
    return np.repeat(centers, num_anchors, axis=0)


def distance2bbox(centers: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """(left, top, right, bottom) distances from the centre -> x1, y1, x2, y2."""
    return np.concatenate([centers - dist[:, 0:2], centers + dist[:, 2:4]], axis=1)


def distance2kps(centers: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """``[N, 10]`` (dx, dy) offsets per keypoint -> ``[N, 5, 2]`` points."""
    return centers[:, None, :] + dist.reshape(len(dist), dist.shape[1] // 2, 2)


def decode_scrfd(outputs: list[np.ndarray], input_hw: tuple[int, int], score_threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode the 9 raw SCRFD outputs (input-pixel coordinates, before NMS).

    ``outputs`` is ordered as the insightface export: scores for strides
    8/16/32, then box distances, then keypoint distances (all in stride units).
    """
    fmc = len(STRIDES)
    if len(outputs) != 3 * fmc:
        raise StreamdeidError(f"SCRFD model has {len(outputs)} outputs; expected 9 (a model with 5 keypoints)")
    height, width = input_hw
    boxes, scores, kps = [], [], []
    for i, stride in enumerate(STRIDES):
        score = np.asarray(outputs[i], dtype=np.float32).reshape(-1)
        dist = np.asarray(outputs[i + fmc], dtype=np.float32).reshape(-1, 4) * stride
        kdist = np.asarray(outputs[i + 2 * fmc], dtype=np.float32).reshape(-1, 10) * stride
        centers = anchor_centers(height // stride, width // stride, stride)
        if not (len(score) == len(dist) == len(kdist) == len(centers)):
            raise StreamdeidError(f"SCRFD output size at stride {stride} does not match a {width}x{height} input with 2 anchors")
        keep = score >= score_threshold
        scores.append(score[keep])
        boxes.append(distance2bbox(centers[keep], dist[keep]))
        kps.append(distance2kps(centers[keep], kdist[keep]))
    return np.concatenate(boxes), np.concatenate(scores), np.concatenate(kps)


def _load_session(model_path: str):
    if not model_path:
        raise StreamdeidError("the insightface (SCRFD) detector needs --model PATH to an scrfd .onnx file")
    if not os.path.isfile(model_path):
        raise StreamdeidError(f"SCRFD model file not found: {model_path}")
    import onnxruntime as ort

    try:
        return ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise StreamdeidError(f"cannot load SCRFD model {model_path}: {str(exc).strip().splitlines()[0]}") from None


class ScrfdDetector:
    """Letterboxes the frame (top-left aligned) into the network input.

    Input size: the model's own if it is fixed, else a square of side
    ``cfg.input_size`` (0: the frame's size), rounded up to a multiple of 32.
    """

    def __init__(self, cfg: DetectConfig, *, session=None) -> None:
        """``session``: an already loaded model with onnxruntime's ``get_inputs``/``get_outputs``/``run``
        (tests pass a double); None loads ``cfg.model_path`` on the CPU."""
        self._session = session if session is not None else _load_session(cfg.model_path)
        self.cfg = cfg
        inp = self._session.get_inputs()[0]
        self._input_name = inp.name
        shape = inp.shape  # [1, 3, H, W], H/W may be symbolic
        self._fixed_hw = (shape[2], shape[3]) if all(isinstance(v, int) and v > 0 for v in shape[2:4]) else None
        self._output_names = [o.name for o in self._session.get_outputs()]
        if len(self._output_names) != 9:
            raise StreamdeidError(f"SCRFD model {cfg.model_path} has {len(self._output_names)} outputs; a 5-keypoint model has 9")

    def _input_hw(self, h: int, w: int) -> tuple[int, int]:
        if self._fixed_hw is not None:
            return self._fixed_hw
        if self.cfg.input_size > 0:
            side = -(-self.cfg.input_size // 32) * 32
            return side, side
        return -(-h // 32) * 32, -(-w // 32) * 32

    def detect(self, image_bgr: np.ndarray) -> Detections:
        image = as_bgr(image_bgr)
        h, w = image.shape[:2]
        if h == 0 or w == 0:
            return Detections.empty()
        in_h, in_w = self._input_hw(h, w)
        scale = min(in_w / w, in_h / h)
        nw, nh = max(1, min(in_w, round(w * scale))), max(1, min(in_h, round(h * scale)))
        canvas = np.zeros((in_h, in_w, 3), np.uint8)
        canvas[:nh, :nw] = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        blob = cv2.dnn.blobFromImage(canvas, 1.0 / INPUT_STD, (in_w, in_h), (INPUT_MEAN,) * 3, swapRB=True)
        outputs = self._session.run(self._output_names, {self._input_name: blob})
        boxes, scores, kps = decode_scrfd(outputs, (in_h, in_w), self.cfg.score_threshold)
        if len(scores) == 0:
            return Detections.empty()
        keep = nms(boxes, scores, self.cfg.nms_threshold)
        sx, sy = nw / w, nh / h
        return Detections(boxes[keep] / (sx, sy, sx, sy), scores[keep], kps[keep] / (sx, sy))
