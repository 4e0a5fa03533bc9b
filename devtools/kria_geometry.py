"""Where a reflected KRIA sends identities, per code level (docs/MODEL_CARD.md, "Third/Fourth GPU run").

    python devtools/kria_geometry.py GEN.safetensors ~/runs/gpu/data/crops.npy [--faces 64] [--keys 16]

For N training crops and K random keys it prints, per level (coarse, medium, fine), the mean distance
per code row of:
- spread:    an identity code from the batch's mean identity (two people lie about sqrt(2) x this apart);
- key move:  the key's centre c(P) between two keys (a wrong key misses by twice this, if the codes
             read back exactly);
- readback:  the anonymized identity code against the code the encoder reads back from the decoded
             anonymized face (what recovery actually starts from);
- plain:     the same loop without the key: a face decoded from its own codes and read back, its
             identity code against the original's (what the decoder and encoder carry at best);
- right/wrong: the recovered identity code (read back, reflected with the right or a wrong key) from the
             original's.
Recovery tells keys apart only where readback is small against key move.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from streamdeid.models.io import load_checkpoint  # noqa: E402


def row_dist(a: torch.Tensor, b: torch.Tensor) -> float:  # [B, n, D] x2 -> mean L2 per row
    return float((a - b).norm(dim=-1).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("crops", type=Path, help="crops.npy of a prepared run ([N, R, R, 3] uint8 RGB)")
    ap.add_argument("--faces", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    G, _ = load_checkpoint(args.checkpoint)
    crops = np.load(args.crops, mmap_mode="r")
    pick = np.random.default_rng(args.seed).choice(len(crops), args.faces, replace=False)
    x = torch.from_numpy(np.stack([crops[i] for i in sorted(pick)])).permute(0, 3, 1, 2).float() / 127.5 - 1
    b, sp = x.shape[0], G.split_levels
    with torch.no_grad():
        codes, feats = G.encode(x)
        attrs, idents = G.disentangle(codes)
        p, q = (torch.randn(b, *G.cfg.key_shape) for _ in range(2))
        c_hat = G.anonymize_codes(attrs, idents, p)
        a_ident = c_hat - attrs  # I' = 2 c(P) - I
        y = G.decode(c_hat, feats)
        codes_y, _ = G.encode(y)
        _, idents_plain = G.disentangle(G.encode(G.decode(codes, feats))[0])
        attrs_y, idents_y = G.disentangle(codes_y)
        zeros = torch.zeros_like(idents)
        cent_p = G.anonymize_codes(zeros, zeros, p) / 2  # (2 c(P) - 0) / 2 = c(P)
        cent_q = G.anonymize_codes(zeros, zeros, q) / 2
        rec_right = G.anonymize_codes(attrs_y, idents_y, p) - attrs_y
        rec_wrong = G.anonymize_codes(attrs_y, idents_y, q) - attrs_y
    names = ("coarse", "medium", "fine")
    print(f"{'level':8} {'spread':>7} {'key move':>9} {'readback':>9} {'plain':>7} {'right':>7} {'wrong':>7}")
    for i, name in enumerate(names):
        spread = row_dist(sp(idents)[i], sp(idents)[i].mean(0, keepdim=True))
        move = row_dist(sp(cent_p)[i], sp(cent_q)[i])
        readback = row_dist(sp(idents_y)[i], sp(a_ident)[i])
        plain = row_dist(sp(idents_plain)[i], sp(idents)[i])
        right = row_dist(sp(rec_right)[i], sp(idents)[i])
        wrong = row_dist(sp(rec_wrong)[i], sp(idents)[i])
        print(f"{name:8} {spread:7.2f} {move:9.2f} {readback:9.2f} {plain:7.2f} {right:7.2f} {wrong:7.2f}")


if __name__ == "__main__":
    main()
