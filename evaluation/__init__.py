"""Quality evaluation of anonymizers (``benchmarks/quality.py``): privacy, recovery, utility, video."""

from .heldout import HELDOUT_PER_MILLE, heldout_files, heldout_names, heldout_rule, is_heldout
from .pixels import PIXEL_RANGE, fidelity, mse, psnr, ssim
from .recognizers import (
    DLIB_MATCH_DISTANCE,
    DlibRecognizer,
    FaceGeometry,
    SFaceRecognizer,
    box_iou,
    create_recognizers,
    dlib_available,
)
from .recovery import RECOVERERS, EvalKeys, create_recoverer, keyless, register_recoverer, vault_round_trip

__all__ = [
    "DLIB_MATCH_DISTANCE",
    "DlibRecognizer",
    "EvalKeys",
    "FaceGeometry",
    "HELDOUT_PER_MILLE",
    "PIXEL_RANGE",
    "RECOVERERS",
    "SFaceRecognizer",
    "box_iou",
    "create_recognizers",
    "create_recoverer",
    "dlib_available",
    "fidelity",
    "heldout_files",
    "heldout_names",
    "heldout_rule",
    "is_heldout",
    "keyless",
    "mse",
    "psnr",
    "register_recoverer",
    "ssim",
    "vault_round_trip",
]
