"""StyleGAN2 decoder (generator synthesis network), mapping network and discriminator."""

from __future__ import annotations

import torch
from torch import nn

from .config import DBAFConfig
from .layers import (
    ConstantInput,
    ConvLayer,
    EqualConv2d,
    EqualLinear,
    PixelNorm,
    ResDownBlock,
    StyledConv,
    ToRGB,
)


class MappingNetwork(nn.Module):
    """z -> w: PixelNorm + n_mlp EqualLinear layers with lr multiplier (stage 0 / latent_avg only)."""

    def __init__(self, w_dim: int, n_mlp: int, lr_mul: float = 0.01):
        super().__init__()
        layers: list[nn.Module] = [PixelNorm()]
        layers += [EqualLinear(w_dim, w_dim, lr_mul=lr_mul, activation=True) for _ in range(n_mlp)]
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:  # [B, D] -> [B, D]
        return self.net(z)


class FeatureInjection(nn.Module):
    """Adds a MAAR-enhanced encoder map to the decoder feature at the same resolution.

    h <- h + gate * Conv1x1(F_maar). ``gate`` is a learnable scalar initialised to
    0, so an untrained injection is an exact no-op and stage 1 learns how much
    spatial attribute detail to let through.
    """

    def __init__(self, feat_ch: int, dec_ch: int):
        super().__init__()
        self.proj = EqualConv2d(feat_ch, dec_ch, 1)
        self.gate = nn.Parameter(torch.zeros(1))

    def forward(self, h: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
        return h + self.gate * self.proj(feat)  # [B, C_dec, r, r]


class Decoder(nn.Module):
    """StyleGAN2 synthesis network driven by W+ codes [B, n_latent, w_dim].

    Latent row usage follows rosinality: row 0 -> conv1 (4x4), row 1 -> to_rgb1;
    for the block at resolution r = 2^k (k >= 3), rows 2k-5, 2k-4 drive its two
    StyledConvs and row 2k-3 its ToRGB. Feature maps given as ``{r: [B, C_r, r, r]}``
    are injected (``FeatureInjection``) after the second StyledConv at r (after
    conv1 for r = 4), before the ToRGB.
    """

    def __init__(self, cfg: DBAFConfig):
        super().__init__()
        self.cfg = cfg
        ch, D = cfg.channels, cfg.w_dim
        self.n_latent = cfg.n_latent
        self.mapping = MappingNetwork(D, cfg.n_mlp, cfg.lr_mlp)
        self.input = ConstantInput(ch[4])
        self.conv1 = StyledConv(ch[4], ch[4], 3, D)
        self.to_rgb1 = ToRGB(ch[4], D, upsample=False)
        self.convs = nn.ModuleList()
        self.to_rgbs = nn.ModuleList()
        in_ch = ch[4]
        for res in cfg.resolutions[1:]:
            self.convs.append(StyledConv(in_ch, ch[res], 3, D, upsample=True))
            self.convs.append(StyledConv(ch[res], ch[res], 3, D))
            self.to_rgbs.append(ToRGB(ch[res], D))
            in_ch = ch[res]
        self.injections = nn.ModuleDict({str(r): FeatureInjection(ch[r], ch[r]) for r in cfg.feature_resolutions})
        # Fixed noise, one map per StyledConv: deterministic export and inference.
        gen = torch.Generator().manual_seed(cfg.noise_seed)
        self.num_noise = 2 * (cfg.log_size - 2) + 1
        for i in range(self.num_noise):
            r = 2 ** ((i + 5) // 2)
            self.register_buffer(f"noise_{i}", torch.randn(1, 1, r, r, generator=gen))

    def fixed_noise(self) -> list[torch.Tensor]:
        return [getattr(self, f"noise_{i}") for i in range(self.num_noise)]

    @torch.no_grad()
    def mean_latent(self, n: int = 4096) -> torch.Tensor:
        """Average w of the mapping network (e4e's latent_avg) -> [D]."""
        z = torch.randn(n, self.cfg.w_dim, device=self.input.input.device)
        return self.mapping(z).mean(0)

    def _inject(self, h: torch.Tensor, res: int, features: dict[int, torch.Tensor] | None) -> torch.Tensor:
        if features is not None and res in features:
            return self.injections[str(res)](h, features[res])
        return h

    def forward(self, w_plus: torch.Tensor, features: dict[int, torch.Tensor] | None = None,
                randomize_noise: bool = False) -> torch.Tensor:
        # w_plus: [B, L, D] -> image [B, 3, R, R] (unbounded, ~[-1, 1] when trained)
        if randomize_noise:
            noise = [torch.randn(w_plus.shape[0], 1, n.shape[2], n.shape[3], device=n.device, dtype=n.dtype)
                     for n in self.fixed_noise()]
        else:
            noise = self.fixed_noise()
        h = self.input(w_plus)  # [B, C4, 4, 4]
        h = self.conv1(h, w_plus[:, 0], noise[0])
        h = self._inject(h, 4, features)
        skip = self.to_rgb1(h, w_plus[:, 1])  # [B, 3, 4, 4]
        i = 1
        for k, to_rgb in enumerate(self.to_rgbs):
            res = 2 ** (k + 3)
            h = self.convs[2 * k](h, w_plus[:, i], noise[2 * k + 1])  # [B, C, res, res]
            h = self.convs[2 * k + 1](h, w_plus[:, i + 1], noise[2 * k + 2])
            h = self._inject(h, res, features)
            skip = to_rgb(h, w_plus[:, i + 2], skip)
            i += 2
        return skip


class Discriminator(nn.Module):
    """StyleGAN2 residual discriminator with minibatch standard deviation."""

    def __init__(self, cfg: DBAFConfig, stddev_group: int = 4):
        super().__init__()
        ch = cfg.channels
        self.stddev_group = stddev_group
        blocks: list[nn.Module] = [ConvLayer(3, ch[cfg.resolution], 1)]
        for res in reversed(cfg.resolutions[1:]):
            blocks.append(ResDownBlock(ch[res], ch[res // 2]))
        self.convs = nn.Sequential(*blocks)
        self.final_conv = ConvLayer(ch[4] + 1, ch[4], 3)
        self.final_linear = nn.Sequential(EqualLinear(ch[4] * 16, ch[4], activation=True), EqualLinear(ch[4], 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, 3, R, R] -> [B, 1]
        out = self.convs(x)  # [B, C4, 4, 4]
        b, c, h, w = out.shape
        g = min(b, self.stddev_group)
        while b % g:
            g -= 1
        std = out.reshape(g, -1, 1, c, h, w)
        std = torch.sqrt(std.var(0, unbiased=False) + 1e-8).mean(dim=(2, 3, 4), keepdim=True).squeeze(2)
        std = std.repeat(g, 1, h, w)  # [B, 1, 4, 4]
        out = self.final_conv(torch.cat([out, std], 1))
        return self.final_linear(out.reshape(b, -1))  # reshape: a channels_last map is not viewable
