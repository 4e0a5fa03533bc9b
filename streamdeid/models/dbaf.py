"""DBAF (Disentangle Before Anonymize): CID, MAAR, KRIA and the generator G(x, P).

One function serves anonymization and recovery (paper eq. 19-23, 24):
    X_ano = G(X, P)      X_rec = G(X_ano, P)
G encodes x to W+ codes C and feature maps, splits C into coarse/medium/fine
levels, disentangles each level into attribute A and identity I (CID), replaces
the identity with KRIA([P, I]), and decodes A + KRIA([P, I]) with the StyleGAN2
decoder, into which the MAAR-enhanced feature maps are injected.

MAAR injection (not specified by the paper; chosen here): each enhanced map
(R/16, R/8, R/4) goes through a 1x1 EqualConv2d to the decoder's width at that
resolution and is added to the decoder feature after that resolution's second
StyledConv (after conv1 at 4x4), scaled by a learnable scalar gate initialised
to 0 (``stylegan2.FeatureInjection``). An untrained MAAR path is therefore an
exact no-op, and the decoder behaves as a plain StyleGAN2 until stage 1 opens
the gates.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import DBAFConfig
from .encoder import Encoder
from .layers import EqualConv2d, EqualLinear
from .stylegan2 import Decoder


# ----------------------------------------------------------------------------- CID
class MultiHeadSelfAttention(nn.Module):
    """Plain multi-head self-attention over the rows of one level: [B, n, D] -> [B, n, D]."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        b, n, d = c.shape
        q, k, v = self.qkv(c).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 x [B, h, n, dh]
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim), dim=-1)  # [B, h, n, n]
        y = (att @ v).transpose(1, 2).reshape(b, n, d)  # [B, n, D]
        return self.out(y)


class CID(nn.Module):
    """Code Identity Disentanglement: A_l = MHA(C_l), I_l = C_l - A_l (eq. 1-4).

    One attention module, shared by the coarse, medium and fine levels; each
    level attends only within its own rows.
    """

    def __init__(self, cfg: DBAFConfig):
        super().__init__()
        self.mha = MultiHeadSelfAttention(cfg.w_dim, cfg.cid_heads)

    def forward(self, levels: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        attrs = [self.mha(c) for c in levels]  # A_l: [B, n_l, D]
        idents = [c - a for c, a in zip(levels, attrs)]  # I_l = C_l - A_l
        return attrs, idents


# ---------------------------------------------------------------------------- MAAR
class ChannelAttention(nn.Module):
    """M_c(F) = sigmoid(MLP(AvgPool(F)) + MLP(MaxPool(F))) (eq. 6)."""

    def __init__(self, channels: int, reduction: int):
        super().__init__()
        hidden = max(channels // reduction, 4)
        self.fc1 = EqualConv2d(channels, hidden, 1)
        self.fc2 = EqualConv2d(hidden, channels, 1)

    def forward(self, f: torch.Tensor) -> torch.Tensor:  # [B, C, H, W] -> [B, C, 1, 1]
        avg = self.fc2(F.relu(self.fc1(f.mean(dim=(2, 3), keepdim=True))))
        mx = self.fc2(F.relu(self.fc1(f.amax(dim=(2, 3), keepdim=True))))
        return torch.sigmoid(avg + mx)


class SpatialAttention(nn.Module):
    """M_s(F) = sigmoid(conv_kxk([mean_c(F); max_c(F)])) (eq. 7)."""

    def __init__(self, kernel: int):
        super().__init__()
        self.conv = EqualConv2d(2, 1, kernel, padding=kernel // 2)

    def forward(self, f: torch.Tensor) -> torch.Tensor:  # [B, C, H, W] -> [B, 1, H, W]
        pooled = torch.cat([f.mean(dim=1, keepdim=True), f.amax(dim=1, keepdim=True)], dim=1)  # [B, 2, H, W]
        return torch.sigmoid(self.conv(pooled))


class MAAR(nn.Module):
    """Multi-level Attribute-Aware Refinement of one encoder map: F' = M_c(F) F, F'' = M_s(F') F' (eq. 8)."""

    def __init__(self, channels: int, reduction: int, kernel: int):
        super().__init__()
        self.channel = ChannelAttention(channels, reduction)
        self.spatial = SpatialAttention(kernel)

    def forward(self, f: torch.Tensor) -> torch.Tensor:  # [B, C, H, W]
        f = self.channel(f) * f
        return self.spatial(f) * f


# ---------------------------------------------------------------------------- KRIA
class KRIABlock(nn.Module):
    """Key-Related Identity Anonymization for one level: [P_l, I_l] -> I'_l, row-wise MLP (eq. 19-21)."""

    def __init__(self, w_dim: int, n_layers: int, residual: bool = False, reflect: bool = False,
                 spread: float = 0.0):
        super().__init__()
        layers = [EqualLinear(2 * w_dim, w_dim, activation=True)]
        layers += [EqualLinear(w_dim, w_dim, activation=True) for _ in range(n_layers - 2)]
        layers += [EqualLinear(w_dim, w_dim)]
        self.net = nn.Sequential(*layers)
        self.residual, self.reflect = residual, reflect
        self.spread = float(spread) / math.sqrt(w_dim)  # DBAFConfig.kria_spread, per row of P
        if residual or reflect:
            self.reset_residual()

    def reset_residual(self) -> None:
        """Zero the last layer: the block then returns ``ident`` unchanged (residual form)."""
        with torch.no_grad():
            self.net[-1].weight.zero_()
            self.net[-1].bias.zero_()

    def forward(self, p: torch.Tensor, ident: torch.Tensor) -> torch.Tensor:  # [B, n, D] x2 -> [B, n, D]
        if self.reflect:  # I' = 2 c(P) - I: its own inverse for one key (DBAFConfig.kria_reflect)
            centre = self.net(torch.cat([p, torch.zeros_like(ident)], dim=-1))  # [B, n, D]
            if self.spread:  # a key-set offset f cannot shrink (DBAFConfig.kria_spread)
                centre = centre + self.spread * p
            return 2 * centre - ident
        out = self.net(torch.cat([p, ident], dim=-1))
        return ident + out if self.residual else out


class KRIA(nn.Module):
    """One KRIABlock per level; C_hat_l = A_l + KRIA_l([P_l, I_l]) (eq. 22-23)
    (residual form: A_l + I_l + f_l([P_l, I_l]), see ``DBAFConfig.kria_residual``)."""

    def __init__(self, cfg: DBAFConfig):
        super().__init__()
        self.blocks = nn.ModuleList([KRIABlock(cfg.w_dim, cfg.kria_layers, cfg.kria_residual, cfg.kria_reflect,
                                               spread) for spread in cfg.kria_spread])

    def forward(self, keys: list[torch.Tensor], attrs: list[torch.Tensor],
                idents: list[torch.Tensor]) -> list[torch.Tensor]:
        return [a + blk(p, i) for blk, p, a, i in zip(self.blocks, keys, attrs, idents)]


# ---------------------------------------------------------------------------- DBAF
class DBAF(nn.Module):
    """The DBAF generator G(x, P) -> x_out.

    x: [B, 3, R, R] float in [-1, 1] (RGB); P: [B, n_latent, w_dim] key (standard
    normal, shape of I). Output [B, 3, R, R], unclamped (clamp for display).
    """

    def __init__(self, cfg: DBAFConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.cid = CID(cfg)
        self.maar = nn.ModuleList(
            [MAAR(cfg.channels[r], cfg.maar_reduction, cfg.maar_kernel) for r in cfg.feature_resolutions]
        )
        self.kria = KRIA(cfg)
        self.decoder = Decoder(cfg)

    # -- pieces, for training ------------------------------------------------
    def split_levels(self, codes: torch.Tensor) -> list[torch.Tensor]:
        """[B, L, D] -> [coarse [B, n_c, D], medium [B, n_m, D], fine [B, n_f, D]]."""
        return list(torch.split(codes, list(self.cfg.split), dim=1))

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """x -> (codes C [B, L, D], MAAR-enhanced maps {r: [B, C_r, r, r]} for r in R/16, R/8, R/4)."""
        codes, maps = self.encoder(x)
        feats = {r: m(f) for r, m, f in zip(self.cfg.feature_resolutions, self.maar, maps)}
        return codes, feats

    def disentangle(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """C -> (A, I), each [B, L, D], with A + I == C (eq. 1-4)."""
        attrs, idents = self.cid(self.split_levels(codes))
        return torch.cat(attrs, dim=1), torch.cat(idents, dim=1)

    def anonymize_codes(self, attrs: torch.Tensor, idents: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """C_hat = A + KRIA([P, I]) per level (eq. 19-23) -> [B, L, D]."""
        sp = self.split_levels
        return torch.cat(self.kria(sp(p), sp(attrs), sp(idents)), dim=1)

    def decode(self, codes: torch.Tensor, feats: dict[int, torch.Tensor] | None = None,
               randomize_noise: bool = False) -> torch.Tensor:
        return self.decoder(codes, feats, randomize_noise=randomize_noise)  # [B, 3, R, R]

    # -- G(x, P) ----------------------------------------------------------------
    def forward(self, x: torch.Tensor, p: torch.Tensor, randomize_noise: bool = False) -> torch.Tensor:
        codes, feats = self.encode(x)  # [B, L, D], {r: map}
        attrs, idents = self.disentangle(codes)
        c_hat = self.anonymize_codes(attrs, idents, p)  # [B, L, D]
        return self.decode(c_hat, feats, randomize_noise=randomize_noise)  # [B, 3, R, R]

    def anonymize(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return self(x, p)

    def recover(self, x_ano: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """Same function, same weights, same key: X_rec = G(X_ano, P)."""
        return self(x_ano, p)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


class DBAFRuntime(nn.Module):
    """What the runtime runs (ONNX export, torch backend): G(x, P) with fixed noise, clamped to [-1, 1]."""

    def __init__(self, model: DBAF):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return self.model(x, p, randomize_noise=False).clamp(-1.0, 1.0)  # [B, 3, R, R]
