"""e4e-style encoder (Tov et al. 2021): image -> W+ codes + three spatial feature maps.

A residual conv backbone downsamples R -> R/16; a small FPN builds the coarse
(R/16), medium (R/8) and fine (R/4) maps; one map2style head per W+ row reads
the map of its level (coarse/medium/fine rows as split by ``DBAFConfig.split``).
As in e4e, row 0 is a base code and every other row is a delta on it, all
around ``latent_avg`` (set from the mapping network's mean in stage 0).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import DBAFConfig
from .layers import ConvLayer, EqualConv2d, EqualLinear, ResDownBlock, fused_leaky_relu, upsample2x


class StridedConv(nn.Module):
    """3x3 stride-2 EqualConv2d + leaky ReLU."""

    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = EqualConv2d(in_ch, out_ch, 3, stride=2, padding=1, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_leaky_relu(self.conv(x), self.bias)  # [B, Cout, H/2, W/2]


class Map2Style(nn.Module):
    """e4e's GradualStyleBlock: log2(r) stride-2 convs down to 1x1, then EqualLinear -> one W+ row."""

    def __init__(self, in_ch: int, head_ch: int, w_dim: int, spatial: int):
        super().__init__()
        n_down = int(math.log2(spatial))
        convs = [StridedConv(in_ch, head_ch)] + [StridedConv(head_ch, head_ch) for _ in range(n_down - 1)]
        self.convs = nn.Sequential(*convs)
        self.linear = EqualLinear(head_ch, w_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, r, r] -> [B, D]
        return self.linear(self.convs(x).flatten(1))


class Encoder(nn.Module):
    def __init__(self, cfg: DBAFConfig):
        super().__init__()
        self.cfg = cfg
        ch, R = cfg.channels, cfg.resolution
        stem_ch = min(cfg.enc_in_channels, ch[R])
        self.stem = ConvLayer(3, stem_ch, 3)
        self.blocks = nn.ModuleList()
        in_ch = stem_ch
        for k in range(1, 5):  # R -> R/16
            self.blocks.append(ResDownBlock(in_ch, ch[R >> k]))
            in_ch = ch[R >> k]
        rc, rm, rf = cfg.feature_resolutions
        # FPN top-down path (e4e: p2 = up(p1) + lateral(c2) ...)
        self.lat_medium = EqualConv2d(ch[rm], ch[rm], 1)
        self.td_medium = EqualConv2d(ch[rc], ch[rm], 1)
        self.lat_fine = EqualConv2d(ch[rf], ch[rf], 1)
        self.td_fine = EqualConv2d(ch[rm], ch[rf], 1)
        n_c, n_m, n_f = cfg.split
        head = cfg.style_head_channels
        self.heads = nn.ModuleList(
            [Map2Style(ch[rc], head, cfg.w_dim, rc) for _ in range(n_c)]
            + [Map2Style(ch[rm], head, cfg.w_dim, rm) for _ in range(n_m)]
            + [Map2Style(ch[rf], head, cfg.w_dim, rf) for _ in range(n_f)]
        )
        self.register_buffer("latent_avg", torch.zeros(cfg.w_dim))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        # x: [B, 3, R, R] in [-1, 1]
        h = self.stem(x)  # [B, C_stem, R, R]
        maps = []
        for block in self.blocks:
            h = block(h)
            maps.append(h)  # R/2, R/4, R/8, R/16
        c_fine, c_medium, c_coarse = maps[1], maps[2], maps[3]
        p_coarse = c_coarse  # [B, C, R/16, R/16]
        p_medium = self.lat_medium(c_medium) + upsample2x(self.td_medium(p_coarse))  # [B, C, R/8, R/8]
        p_fine = self.lat_fine(c_fine) + upsample2x(self.td_fine(p_medium))  # [B, C, R/4, R/4]
        n_c, n_m, _ = self.cfg.split
        rows = []
        for i, head in enumerate(self.heads):
            src = p_coarse if i < n_c else (p_medium if i < n_c + n_m else p_fine)
            rows.append(head(src))  # [B, D]
        base = rows[0]
        codes = torch.stack([base] + [base + r for r in rows[1:]], dim=1)  # [B, L, D]
        codes = codes + self.latent_avg
        return codes, (p_coarse, p_medium, p_fine)
