"""Export the DBAF generator G(x, P) to ONNX (opset >= 17, dynamic batch) and check parity.

    python engines/export_onnx.py --checkpoint dbaf64.safetensors --out dbaf64.onnx
    python engines/export_onnx.py --preset cpu-small --resolution 64 --out dbaf64.onnx  # random weights

The command line over ``streamdeid.models.onnx_export`` (export, parity check
and the graph's contract live there, so packaged code never imports engines/).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from streamdeid.models.config import PRESETS, DBAFConfig
from streamdeid.models.dbaf import DBAF
from streamdeid.models.onnx_export import DEFAULT_OPSET, PARITY_ATOL, check_parity, export_dbaf

__all__ = ["DEFAULT_OPSET", "PARITY_ATOL", "check_parity", "export_dbaf", "main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", type=Path, help="DBAF safetensors checkpoint")
    src.add_argument("--preset", choices=PRESETS, help="random weights of a preset config (smoke tests, speed)")
    ap.add_argument("--resolution", type=int, default=64, help="with --preset")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    ap.add_argument("--no-check", action="store_true", help="skip the ONNX Runtime parity check")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    args = ap.parse_args(argv)
    if args.checkpoint and not args.checkpoint.is_file():
        ap.exit(2, f"error: {args.checkpoint}: no such checkpoint file\n")
    if args.out.exists() and not args.overwrite:
        ap.exit(2, f"error: {args.out} exists; pass --overwrite to replace it\n")
    if args.checkpoint:
        from streamdeid.models.io import load_checkpoint

        model, _ = load_checkpoint(args.checkpoint)
    else:
        model = DBAF(DBAFConfig.preset(args.preset, args.resolution)).eval()
    export_dbaf(model, args.out, opset=args.opset)
    print(f"wrote {args.out}")
    if not args.no_check:
        diff = check_parity(model, args.out)
        print(f"parity: max |onnxruntime - torch| = {diff:.2e} (batch 3)")
        if diff > PARITY_ATOL:
            print(f"FAILED: above {PARITY_ATOL}")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
