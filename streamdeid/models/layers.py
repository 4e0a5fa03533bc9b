"""StyleGAN2 building blocks (after rosinality's stylegan2-pytorch ``model.py``).

Differences from the reference, all chosen for ONNX/TensorRT export with a
dynamic batch and for CPU runs without custom CUDA ops:

- ``ModulatedConv2d`` modulates the *activations* and demodulates the output
  (NVlabs' ``fused_modconv=False`` path) instead of building per-sample weights
  in a grouped convolution; mathematically identical, but the ONNX ``Conv``
  ``group`` attribute no longer depends on the batch size.
- Up/down-sampling is bilinear interpolation / average pooling instead of
  upfirdn2d with a [1, 3, 3, 1] blur kernel.
- Noise comes from fixed buffers unless ``randomize_noise`` is asked for, so an
  exported graph is deterministic.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

LRELU_SLOPE = 0.2
LRELU_GAIN = math.sqrt(2.0)


def fused_leaky_relu(x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """bias add + leaky ReLU(0.2) * sqrt(2) (StyleGAN2's FusedLeakyReLU, plain torch)."""
    if bias is not None:
        shape = [1, -1] + [1] * (x.dim() - 2)
        x = x + bias.view(shape)
    return F.leaky_relu(x, LRELU_SLOPE) * LRELU_GAIN


def upsample2x(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)  # [B, C, 2H, 2W]


class FusedLeakyReLU(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_leaky_relu(x, self.bias)


class PixelNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, D]
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-8)


class EqualLinear(nn.Module):
    """Linear layer with equalized learning rate: weight ~ N(0, 1/lr_mul), scaled at run time."""

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True, bias_init: float = 0.0,
                 lr_mul: float = 1.0, activation: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))
        self.bias = nn.Parameter(torch.full((out_dim,), float(bias_init))) if bias else None
        self.scale = (1.0 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        bias = self.bias * self.lr_mul if self.bias is not None else None
        out = F.linear(x, self.weight * self.scale, bias)
        return F.leaky_relu(out, LRELU_SLOPE) * LRELU_GAIN if self.activation else out


class EqualConv2d(nn.Module):
    """Conv2d with equalized learning rate."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int = 1, padding: int = 0, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_ch, in_ch, kernel, kernel))
        self.scale = 1.0 / math.sqrt(in_ch * kernel * kernel)
        self.stride, self.padding = stride, padding
        self.bias = nn.Parameter(torch.zeros(out_ch)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, Cin, H, W] -> [B, Cout, H', W']
        return F.conv2d(x, self.weight * self.scale, self.bias, stride=self.stride, padding=self.padding)


class ConvLayer(nn.Module):
    """EqualConv2d (optionally preceded by 2x average-pool downsampling) + fused leaky ReLU."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, downsample: bool = False, activate: bool = True):
        super().__init__()
        self.downsample = downsample
        self.conv = EqualConv2d(in_ch, out_ch, kernel, padding=kernel // 2, bias=not activate)
        self.act = FusedLeakyReLU(out_ch) if activate else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.downsample:
            x = F.avg_pool2d(x, 2)  # [B, C, H/2, W/2]
        x = self.conv(x)
        return self.act(x) if self.act is not None else x


class ResDownBlock(nn.Module):
    """Residual downsampling block: [B, Cin, H, W] -> [B, Cout, H/2, W/2].

    One definition for the encoder backbone and the discriminator; its
    submodule names (conv1, conv2, skip) are the state-dict keys of the shipped
    weights under both ``Encoder.blocks`` and ``Discriminator.convs``.
    """

    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv1 = ConvLayer(in_ch, in_ch, 3)
        self.conv2 = ConvLayer(in_ch, out_ch, 3, downsample=True)
        self.skip = EqualConv2d(in_ch, out_ch, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.conv2(self.conv1(x)) + self.skip(F.avg_pool2d(x, 2))) / math.sqrt(2.0)


class ModulatedConv2d(nn.Module):
    """StyleGAN2 modulated convolution (Karras et al. 2020, eq. 1-3).

    w'_ijk = s_i * w_ijk ;  w''_ijk = w'_ijk / sqrt(sum_ik w'_ijk^2 + eps)
    computed as conv(x * s, w) * d with d_j = rsqrt(sum_i s_i^2 sum_k w_ijk^2 + eps).
    """

    def __init__(self, in_ch: int, out_ch: int, kernel: int, style_dim: int,
                 demodulate: bool = True, upsample: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_ch, in_ch, kernel, kernel))
        self.scale = 1.0 / math.sqrt(in_ch * kernel * kernel)
        self.modulation = EqualLinear(style_dim, in_ch, bias_init=1.0)
        self.demodulate, self.upsample, self.padding = demodulate, upsample, kernel // 2

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        # x: [B, Cin, H, W], style: [B, D]
        s = self.modulation(style)  # [B, Cin]
        w = self.weight * self.scale  # [Cout, Cin, k, k]
        if self.upsample:
            x = upsample2x(x)  # [B, Cin, 2H, 2W]
        out = F.conv2d(x * s[:, :, None, None], w, padding=self.padding)  # [B, Cout, H', W']
        if self.demodulate:
            d = torch.rsqrt((s * s) @ w.pow(2).sum(dim=(2, 3)).t() + 1e-8)  # [B, Cout]
            out = out * d[:, :, None, None]
        return out


class NoiseInjection(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return x + self.weight * noise  # noise: [B or 1, 1, H, W]


class ConstantInput(nn.Module):
    def __init__(self, channels: int, size: int = 4):
        super().__init__()
        self.input = nn.Parameter(torch.randn(1, channels, size, size))

    def forward(self, ref: torch.Tensor) -> torch.Tensor:
        return self.input.expand(ref.shape[0], -1, -1, -1)  # [B, C, 4, 4]


class StyledConv(nn.Module):
    """ModulatedConv2d -> noise -> bias + leaky ReLU."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, style_dim: int, upsample: bool = False):
        super().__init__()
        self.conv = ModulatedConv2d(in_ch, out_ch, kernel, style_dim, demodulate=True, upsample=upsample)
        self.noise = NoiseInjection()
        self.activate = FusedLeakyReLU(out_ch)

    def forward(self, x: torch.Tensor, style: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        out = self.conv(x, style)  # [B, Cout, H, W]
        out = self.noise(out, noise)
        return self.activate(out)


class ToRGB(nn.Module):
    """1x1 modulated conv (no demodulation) to RGB, added to the upsampled skip image."""

    def __init__(self, in_ch: int, style_dim: int, upsample: bool = True):
        super().__init__()
        self.upsample = upsample
        self.conv = ModulatedConv2d(in_ch, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, x: torch.Tensor, style: torch.Tensor, skip: torch.Tensor | None = None) -> torch.Tensor:
        out = self.conv(x, style) + self.bias  # [B, 3, H, W]
        if skip is not None:
            out = out + (upsample2x(skip) if self.upsample else skip)
        return out
