"""MTCNN as a reference detector for benchmarks/precision.py (``--mtcnn WHEEL``).

Neither tool that precision.py compares runs it (streamdeid runs YuNet, deface CenterFace), so a reference set
of MTCNN, dlib's HOG and dlib's CNN grades neither by its own detector. With CenterFace among the references,
deface's covers lie inside reference regions by construction (docs/precision.md, "References that grade
neither tool by its own detector").

The weights are facenet-pytorch 2.6.0's (MIT). That package pins a torch this project does not use, and
imports torchvision and Pillow for one call each, so its wheel is read, never installed:

    pip download facenet-pytorch==2.6.0 --no-deps -d ~/wheels
    python benchmarks/precision.py --references dlib-hog,hand --mtcnn ~/wheels/facenet_pytorch-2.6.0-py3-none-any.whl \\
        pan:crowd_marching_band.jpg pan:crowd_parade.jpg

While its module loads, the two missing names are stood in for: torchvision's ``batched_nms`` (greedy NMS per
class, in torch) and PIL's ``Image`` (the module only tests ``isinstance`` against it; frames go in as arrays).
"""

from __future__ import annotations

import sys
import types
import zipfile
from pathlib import Path

import numpy as np

CACHE = Path.home() / ".cache" / "streamdeid" / "facenet-pytorch"


def _batched_nms(boxes, scores, classes, threshold: float):
    """torchvision.ops.batched_nms: indices kept by greedy NMS at IoU ``threshold``, per class, best first
    (the detectors' own NMS, streamdeid.detect.base.nms, on boxes shifted apart by class)."""
    import torch

    from streamdeid.detect.base import nms

    if boxes.numel() == 0:
        return torch.zeros(0, dtype=torch.long)
    shifted = boxes + (classes.to(boxes) * (boxes.max() + 1))[:, None]  # classes never overlap
    return torch.as_tensor(nms(shifted.detach().numpy(), scores.detach().numpy(), threshold))


def _stand_ins() -> dict[str, types.ModuleType]:
    """The modules facenet-pytorch's mtcnn imports and this environment lacks, stood in for."""
    mods = {name: types.ModuleType(name) for name in (
        "torchvision", "torchvision.ops", "torchvision.ops.boxes", "torchvision.transforms",
        "torchvision.transforms.functional", "PIL", "PIL.Image")}
    mods["torchvision.ops.boxes"].batched_nms = _batched_nms
    mods["torchvision.ops"].boxes = mods["torchvision.ops.boxes"]
    mods["torchvision.transforms"].functional = mods["torchvision.transforms.functional"]
    mods["torchvision"].ops, mods["torchvision"].transforms = mods["torchvision.ops"], mods["torchvision.transforms"]
    mods["PIL.Image"].Image = type("Image", (), {})
    mods["PIL"].Image = mods["PIL.Image"]
    return mods


def load_mtcnn(wheel: Path, min_face: int = 12):
    """facenet-pytorch's MTCNN (all faces kept, faces from ``min_face`` px, its default thresholds), from the
    wheel at ``wheel``, extracted once under CACHE."""
    root = CACHE / Path(wheel).stem
    if not (root / "facenet_pytorch" / "data" / "onet.pt").exists():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(root)
    missing = {n: m for n, m in _stand_ins().items() if n.split(".")[0] not in _importable()}
    package = types.ModuleType("facenet_pytorch")  # its __init__ imports the recognition model too: skipped
    package.__path__ = [str(root / "facenet_pytorch")]
    saved = {n: sys.modules.get(n) for n in [*missing, "facenet_pytorch"]}
    sys.modules.update(missing)
    sys.modules["facenet_pytorch"] = package
    try:
        from facenet_pytorch.models.mtcnn import MTCNN
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return MTCNN(keep_all=True, min_face_size=min_face, device="cpu")


def _importable() -> set[str]:
    import importlib.util

    return {n for n in ("torchvision", "PIL") if importlib.util.find_spec(n) is not None}


def mtcnn_faces(mtcnn, image: np.ndarray) -> np.ndarray:
    """[N, 4] x1 y1 x2 y2 face boxes MTCNN finds in ``image`` (BGR uint8)."""
    rgb = np.ascontiguousarray(image[..., ::-1]).astype(np.float32)
    boxes, _ = mtcnn.detect(rgb)
    return np.zeros((0, 4)) if boxes is None else np.asarray(boxes, np.float64).reshape(-1, 4)
