"""DBAF model configuration: one dataclass of primitives, no torch.

Kept torch-free so the runtime (and checkpoint headers) can describe a model
without importing the networks. ``DBAFConfig`` round-trips through
``to_dict``/``from_dict`` (JSON primitives only), which is what checkpoints store.

Latent split rule (coarse / medium / fine rows of W+)
-----------------------------------------------------
``n_latent = 2 * log2(R) - 2`` (one row per StyledConv / ToRGB input, as in
StyleGAN2). The paper uses 4/4/6 at 256 px (n = 14). For other resolutions the
*cumulative* boundaries are scaled and rounded::

    coarse = round(n * 4 / 14)
    medium = round(n * 8 / 14) - coarse
    fine   = n - coarse - medium

which gives 64 px -> 3/3/4, 128 px -> 3/4/5, 256 px -> 4/4/6, 1024 px -> 5/5/8.

Key distribution
----------------
``P`` has the shape of ``I`` (``[B, n_latent, w_dim]``); entries are i.i.d.
standard normal, derived deterministically from the per-track key
(``streamdeid.keys.kria_vector(track_key, n_latent * w_dim)`` reshaped).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

SUPPORTED_RESOLUTIONS = (64, 128, 256, 512, 1024)

#: Decoder / encoder widths per resolution for the paper-sized model
#: (StyleGAN2 config-f with channel multiplier 2).
PAPER_CHANNELS = {4: 512, 8: 512, 16: 512, 32: 512, 64: 512, 128: 256, 256: 128, 512: 64, 1024: 32}

#: CPU-sized widths (64/128 px): DBAF generator around 4-5 M parameters.
CPU_SMALL_CHANNELS = {4: 128, 8: 128, 16: 128, 32: 96, 64: 64, 128: 32, 256: 16, 512: 16, 1024: 16}


def latent_split(n_latent: int) -> tuple[int, int, int]:
    """(coarse, medium, fine) row counts, scaled from the paper's 4/4/6 of 14."""
    coarse = round(n_latent * 4 / 14)
    medium = round(n_latent * 8 / 14) - coarse
    fine = n_latent - coarse - medium
    if min(coarse, medium, fine) < 1:
        raise ValueError(f"n_latent={n_latent} too small to split into three levels")
    return coarse, medium, fine


@dataclass
class DBAFConfig:
    resolution: int = 64  # output/input face crop size R (square), a power of two in SUPPORTED_RESOLUTIONS
    w_dim: int = 128  # width D of one W+ row (StyleGAN2: 512); also the width of I, A and the key P
    n_mlp: int = 4  # layers of the StyleGAN2 mapping network z -> w (stage 0 only; not used by G(x, P))
    channels: dict[int, int] = field(default_factory=lambda: dict(CPU_SMALL_CHANNELS))  # feature width per spatial resolution, shared by encoder and decoder
    enc_in_channels: int = 32  # width of the encoder stem at full resolution (capped by channels[R])
    style_head_channels: int = 64  # width of the e4e map2style conv heads (one head per W+ row)
    cid_heads: int = 4  # heads of the shared CID multi-head self-attention (w_dim must divide)
    maar_reduction: int = 8  # channel-attention MLP reduction ratio in MAAR (eq. 6)
    maar_kernel: int = 7  # spatial-attention conv kernel size in MAAR (eq. 7)
    kria_layers: int = 7  # EqualLinear layers of each KRIA block (eq. 19-23)
    # KRIA as I + f([P, I]) with f's last layer zero-initialised, so an untrained
    # KRIA passes the identity through (G(x, P) starts as a reconstruction) instead
    # of sending the decoder random codes. Same parameters as the paper's plain
    # f([P, I]) (False); the cpu-small preset uses it because its short stage 2
    # cannot afford the steps a random KRIA spends before outputs are faces again.
    kria_residual: bool = False
    # KRIA as a point reflection of the identity through a key's centre: I' = 2 c(P) - I, c = f([P, 0]).
    # Applying it twice with the same key gives I back exactly, whatever f learned, so recovery
    # G(G(x, P), P) needs only the encoder and CID to be consistent; with another key P' it gives
    # I + 2 (c(P') - c(P)). The residual form has to learn f(P, I + f(P, I)) = -f(P, I), which the
    # 2026-11-26 runs never did (docs/MODEL_CARD.md, "Second GPU run"). Same parameters; overrides
    # kria_residual.
    kria_reflect: bool = False
    # Reflection form only: c(P) = f([P, 0]) + kria_spread[l] * P_l / sqrt(w_dim) per level (coarse,
    # medium, fine). Each row of P / sqrt(w_dim) has norm about 1, so two keys' centres lie about
    # kria_spread * sqrt(2) apart whatever f learns, and a wrong key misses the original by twice that.
    # Trained freely, f moved c(P) 0.04-0.08 with the key where identities lie 0.5-0.6 apart
    # (docs/MODEL_CARD.md, "Third GPU run"): every key gave one anti-face and every key undid it.
    # Zero (the default) is the plain reflection.
    kria_spread: tuple[float, float, float] = (0.0, 0.0, 0.0)
    lr_mlp: float = 0.01  # learning-rate multiplier of the mapping network (StyleGAN2 default)
    noise_seed: int = 0  # seed of the fixed noise buffers used when noise is not randomized (export, inference)

    def __post_init__(self) -> None:
        # JSON turns int keys into strings; normalise back.
        self.channels = {int(k): int(v) for k, v in self.channels.items()}
        if self.resolution not in SUPPORTED_RESOLUTIONS:
            raise ValueError(f"resolution must be one of {SUPPORTED_RESOLUTIONS}, got {self.resolution}")
        for res in self.resolutions:
            if res not in self.channels:
                raise ValueError(f"channels has no width for resolution {res}")
        if self.w_dim % self.cid_heads:
            raise ValueError(f"w_dim={self.w_dim} not divisible by cid_heads={self.cid_heads}")
        if self.kria_layers < 2:
            raise ValueError("kria_layers must be >= 2")
        spread = tuple(float(v) for v in self.kria_spread)
        if len(spread) != 3 or min(spread) < 0:
            raise ValueError(f"kria_spread needs 3 non-negative values (coarse, medium, fine), got {spread}")
        self.kria_spread = spread

    # ------------------------------------------------------------------ derived
    @property
    def log_size(self) -> int:
        return int(math.log2(self.resolution))

    @property
    def resolutions(self) -> list[int]:
        """Decoder resolutions 4, 8, ..., R."""
        return [2**i for i in range(2, self.log_size + 1)]

    @property
    def n_latent(self) -> int:
        return 2 * self.log_size - 2

    @property
    def split(self) -> tuple[int, int, int]:
        return latent_split(self.n_latent)

    @property
    def feature_resolutions(self) -> tuple[int, int, int]:
        """Encoder feature maps handed to MAAR: (coarse, medium, fine) = (R/16, R/8, R/4)."""
        r = self.resolution
        return (r // 16, r // 8, r // 4)

    @property
    def key_shape(self) -> tuple[int, int]:
        """Shape of one key P (without batch): [n_latent, w_dim]."""
        return (self.n_latent, self.w_dim)

    # ---------------------------------------------------------------- (de)serialise
    def to_dict(self) -> dict:
        d = asdict(self)
        d["channels"] = {str(k): v for k, v in self.channels.items()}
        return d

    #: fields that change no parameter's shape: weights trained under one value load under the other
    SHAPE_NEUTRAL = ("kria_residual", "kria_reflect", "kria_spread")

    @classmethod
    def from_dict(cls, d: dict) -> "DBAFConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown DBAFConfig fields: {sorted(unknown)}")
        return cls(**d)

    @classmethod
    def preset(cls, name: str, resolution: int) -> "DBAFConfig":
        """``cpu-small`` (64/128 px, ~4-5 M params) or ``paper`` (StyleGAN2 widths, w_dim 512)."""
        if name == "cpu-small":
            return cls(resolution=resolution, kria_residual=True)
        if name == "paper":
            return cls(
                resolution=resolution,
                w_dim=512,
                n_mlp=8,
                channels=dict(PAPER_CHANNELS),
                enc_in_channels=64,
                style_head_channels=512,
                cid_heads=8,
                maar_reduction=16,
            )
        raise ValueError(f"unknown preset {name!r}; choose from {PRESETS}")


PRESETS = ("cpu-small", "paper")
