"""Losses: identity (SFace as F_arc), perceptual, parsing, W+ regularisation, GAN + R1, DiffAugment.

Substitutions (no LPIPS backbone or face parser can be downloaded here), each
switchable back to the paper's form by ``LossConfig``:

* perceptual ``ssim-sface`` (default) replaces LPIPS(VGG):
  ``ssim_weight * (1 - SSIM over 3 scales) + grad_weight * L1(Sobel) +
  feat_weight * LPIPS-style distance of SFace feature maps`` (channel-unit-normalised
  maps, squared difference, spatial mean, averaged over ``sface_layers``).
  ``lpips-vgg`` is LPIPS v0.1 (VGG16 + learned linear heads) built here and
  loaded from the two weight files the user supplies.
* parsing ``region`` (default) replaces the BiSeNet parsing loss: crops are
  aligned to a fixed 5-point template, so face / hair+background / neck regions
  sit at known places; the loss compares the outside-face region at 1/4
  resolution (layout of hair, background, clothes) and the mean colour of the
  face region (skin tone). ``module`` runs any TorchScript parser the user
  supplies and uses the paper's form, cross-entropy of the parser's label map
  on the generated image against its label map on the reference.
"""

from __future__ import annotations

import functools
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from .config import AugmentConfig, LossConfig


def fp32(fn):
    """Run a loss in fp32 under any autocast (its tensor arguments cast up, lists of tensors too).

    bf16 keeps 8 bits of mantissa: SSIM's variances, E[x^2] - E[x]^2, cancel to zero or below
    and its ratio goes to -inf (seen on the first step of the bf16 dry run)."""

    def up(a):
        if isinstance(a, torch.Tensor):
            return a.float()
        if isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a):
            return [t.float() for t in a]
        return a

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        dev = next(a.device.type for a in args if isinstance(a, torch.Tensor))
        with torch.autocast(dev, enabled=False):
            return fn(*(up(a) for a in args), **{k: up(v) for k, v in kwargs.items()})

    return wrapper


# --------------------------------------------------------------------- SFace
@lru_cache(maxsize=2)
def _load_sface(path: str):
    from streamdeid.models.sface import SFace

    model = SFace.from_onnx(path or None).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


class FaceAnalyzer(nn.Module):
    """SFace pass returning the unit embedding and the maps of selected layers.

    Input [B, 3, R, R] in [-1, 1] (RGB aligned crops, the framing of
    ``streamdeid.align`` with its margin): the ArcFace 112 box is cut from the
    middle ``1 - margin`` of the crop and resized to 112x112, which is where
    SFace's template puts the face.
    """

    def __init__(self, cfg: LossConfig, margin: float):
        super().__init__()
        self.sface = _load_sface(cfg.sface_path)
        self.layers = set(cfg.sface_layers)
        self.margin = margin

    def forward(self, x: torch.Tensor, want_maps: bool = True) -> tuple[torch.Tensor, list[torch.Tensor]]:
        r = x.shape[-1]
        b = int(round(r * self.margin / 2))
        face = x[:, :, b:r - b, b:r - b]  # the ArcFace template box
        data = self.sface.from_unit_range(F.interpolate(face, size=(112, 112), mode="bilinear", align_corners=False))
        s = self.sface
        h = (data - s.mean) * s.scale
        maps = []
        for name, layer in s.layers.items():
            h = layer(h)
            if want_maps and name in self.layers:
                maps.append(h)
        emb = s.fc1(s.pre_fc1(s.bn1(h).flatten(1)))  # [B, 128]
        return F.normalize(emb, dim=1), maps


def feature_distance(fa: list[torch.Tensor], fb: list[torch.Tensor]) -> torch.Tensor:
    """LPIPS-style: unit-normalise channels, squared difference, mean over space and layers -> [B]."""
    out = 0.0
    for a, b in zip(fa, fb):
        a = a / (a.pow(2).sum(1, keepdim=True).sqrt() + 1e-8)
        b = b / (b.pow(2).sum(1, keepdim=True).sqrt() + 1e-8)
        out = out + (a - b).pow(2).sum(1).mean(dim=(1, 2))
    return out / max(len(fa), 1)


def cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(1)  # unit embeddings -> [B]


def must_match(e: torch.Tensor, target: torch.Tensor, tau_pos: float) -> torch.Tensor:
    """Positive term of the contrastive identity loss: relu(tau+ - cos) -> scalar."""
    return F.relu(tau_pos - cos(e, target)).mean()


def must_differ(e: torch.Tensor, other: torch.Tensor, tau_neg: float) -> torch.Tensor:
    """Negative term: relu(cos - tau-) -> scalar."""
    return F.relu(cos(e, other) - tau_neg).mean()


# --------------------------------------------------------------- perceptual
def _gauss_window(size: int = 7, sigma: float = 1.5, device=None) -> torch.Tensor:
    g = torch.arange(size, dtype=torch.float32, device=device) - (size - 1) / 2
    g = torch.exp(-g * g / (2 * sigma * sigma))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).expand(3, 1, size, size).contiguous()  # [3, 1, k, k]


def ssim(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean SSIM per sample of [-1, 1] images -> [B] (7x7 Gaussian window, reflect padding)."""
    x, y = (x + 1) / 2, (y + 1) / 2
    w = _gauss_window(device=x.device)
    pad = w.shape[-1] // 2

    def blur(t):
        return F.conv2d(F.pad(t, (pad,) * 4, mode="reflect"), w, groups=3)

    mx, my = blur(x), blur(y)
    sxx, syy, sxy = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
    c1, c2 = 0.01**2, 0.03**2
    s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))
    return s.mean(dim=(1, 2, 3))


def ms_ssim_loss(x: torch.Tensor, y: torch.Tensor, scales: int = 3) -> torch.Tensor:
    out = 0.0
    for i in range(scales):
        out = out + (1 - ssim(x, y))
        if i + 1 < scales:
            x, y = F.avg_pool2d(x, 2), F.avg_pool2d(y, 2)
    return out / scales  # [B]


def gradient_l1(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], device=x.device) / 4
    k = torch.stack([kx, kx.t()])[:, None].repeat(3, 1, 1, 1)  # [6, 1, 3, 3]

    def grad(t):
        return F.conv2d(F.pad(t, (1, 1, 1, 1), mode="replicate"), k, groups=3)

    return (grad(x) - grad(y)).abs().mean(dim=(1, 2, 3))  # [B]


class LPIPSVGG(nn.Module):
    """LPIPS v0.1 (Zhang et al. 2018) with a VGG16 trunk, for users who have the weights.

    ``vgg_path``: torchvision ``vgg16`` state dict (keys ``features.N.weight``);
    ``lin_path``: the LPIPS ``vgg.pth`` heads (keys ``lin{0..4}.model.1.weight``).
    Both are read with ``torch.load(weights_only=True)``. Empty paths give random
    weights (tests only).
    """

    CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512]
    TAPS = (3, 8, 15, 22, 29)  # relu1_2, relu2_2, relu3_3, relu4_3, relu5_3 in torchvision numbering

    def __init__(self, vgg_path: str = "", lin_path: str = ""):
        super().__init__()
        layers: list[nn.Module] = []
        c = 3
        for v in self.CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=False)]
                c = v
        self.features = nn.Sequential(*layers)
        self.lins = nn.ModuleList([nn.Conv2d(ch, 1, 1, bias=False) for ch in (64, 128, 256, 512, 512)])
        self.register_buffer("shift", torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1))
        self.register_buffer("scale", torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1))
        if vgg_path:
            sd = torch.load(vgg_path, map_location="cpu", weights_only=True)
            self.features.load_state_dict({k[len("features."):]: v for k, v in sd.items()
                                           if k.startswith("features.")}, strict=True)
        if lin_path:
            sd = torch.load(lin_path, map_location="cpu", weights_only=True)
            for i, lin in enumerate(self.lins):
                lin.weight.data.copy_(sd[f"lin{i}.model.1.weight"])
        elif not vgg_path:
            for lin in self.lins:
                nn.init.constant_(lin.weight, 1.0 / lin.weight.shape[1])
        for p in self.parameters():
            p.requires_grad_(False)
        self.eval()

    def _taps(self, x):
        h, out = (x - self.shift) / self.scale, []
        for i, layer in enumerate(self.features):
            h = layer(h)
            if i in self.TAPS:
                out.append(h)
            if i == self.TAPS[-1]:
                break
        return out

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # [-1, 1] -> [B]
        out = 0.0
        for lin, a, b in zip(self.lins, self._taps(x), self._taps(y)):
            a = a / (a.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
            b = b / (b.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
            out = out + lin((a - b).pow(2)).mean(dim=(1, 2, 3))
        return out


class Perceptual(nn.Module):
    def __init__(self, cfg: LossConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.perceptual == "lpips-vgg":
            self.lpips = LPIPSVGG(cfg.lpips_vgg_path, cfg.lpips_lin_path)
        elif cfg.perceptual != "ssim-sface":
            raise ValueError(f"unknown perceptual loss {cfg.perceptual!r} (ssim-sface | lpips-vgg)")

    @property
    def needs_sface_maps(self) -> bool:
        return self.cfg.perceptual == "ssim-sface" and self.cfg.feat_weight > 0

    @fp32
    def forward(self, y: torch.Tensor, x: torch.Tensor, maps_y=None, maps_x=None) -> torch.Tensor:
        """Scalar perceptual distance of y to x ([B, 3, R, R] in [-1, 1])."""
        if self.cfg.perceptual == "lpips-vgg":
            return self.lpips(y, x).mean()
        c = self.cfg
        out = c.ssim_weight * ms_ssim_loss(y, x).mean() + c.grad_weight * gradient_l1(y, x).mean()
        if self.needs_sface_maps and maps_y is not None and maps_x is not None:
            n = min(len(maps_y[0]), len(maps_x[0]))
            out = out + c.feat_weight * feature_distance([m[:n] for m in maps_y], [m[:n] for m in maps_x]).mean()
        return out


# ------------------------------------------------------------------ parsing
@lru_cache(maxsize=8)
def region_masks(resolution: int, margin: float) -> torch.Tensor:
    """[3, R, R] soft masks from the canonical 5-point template: face, above/beside (hair,
    background), below (neck, clothes). Face = ellipse through the landmarks' hull, grown a little."""
    from streamdeid.align import canonical_template

    lm = torch.tensor(canonical_template(resolution, margin), dtype=torch.float32)  # [5, 2]
    eyes, mouth = lm[:2].mean(0), lm[3:].mean(0)
    cx = float(lm[:, 0].mean())
    cy = float((eyes[1] + mouth[1]) / 2)
    eye_dist = float((lm[1] - lm[0]).norm())
    ax, ay = 1.05 * eye_dist, 1.45 * eye_dist  # half-axes: cheek to cheek, brow to chin
    yy, xx = torch.meshgrid(torch.arange(resolution) + 0.5, torch.arange(resolution) + 0.5, indexing="ij")
    d = ((xx - cx) / ax) ** 2 + ((yy - cy) / ay) ** 2
    face = torch.sigmoid((1.0 - d) * 8.0)
    below = (1 - face) * torch.sigmoid((yy - (cy + ay)) / (0.05 * resolution))
    above = (1 - face) - below
    return torch.stack([face, above, below])


class Parsing(nn.Module):
    def __init__(self, cfg: LossConfig, resolution: int, margin: float):
        super().__init__()
        self.form = cfg.parsing
        if self.form == "region":
            self.register_buffer("masks", region_masks(resolution, margin).clone())
        elif self.form == "module":
            if not cfg.parser_path:
                raise ValueError("parsing 'module' needs losses.parser_path (a TorchScript face parser)")
            self.parser = torch.jit.load(cfg.parser_path, map_location="cpu").eval()
            for p in self.parser.parameters():
                p.requires_grad_(False)
        else:
            raise ValueError(f"unknown parsing loss {self.form!r} (region | module)")

    @fp32
    def forward(self, y: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
        if self.form == "module":
            with torch.no_grad():
                target = self.parser(ref).argmax(1)  # [B, H, W]
            return F.cross_entropy(self.parser(y), target)
        face, above, below = self.masks[0], self.masks[1], self.masks[2]
        outside = (above + below)[None, None]
        low_y, low_r = F.avg_pool2d(y * outside, 4), F.avg_pool2d(ref * outside, 4)
        layout = (low_y - low_r).abs().mean()
        fm = face[None, None]
        skin_y = (y * fm).sum(dim=(2, 3)) / fm.sum()
        skin_r = (ref * fm).sum(dim=(2, 3)) / fm.sum()
        return layout + (skin_y - skin_r).abs().mean()


# -------------------------------------------------------------------- W+ reg
def delta_reg(codes: torch.Tensor) -> torch.Tensor:
    """e4e's delta regularisation ||w_i - w_0||_2 over rows i >= 1, here as a mean over rows and
    divided by sqrt(w_dim) so one weight suits any width (e4e's 2e-4 * sum ~ 0.05 * this at 18 x 512)."""
    return ((codes[:, 1:] - codes[:, :1]).norm(dim=2) / codes.shape[-1] ** 0.5).mean()


def progressive_codes(codes: torch.Tensor, n_open: int) -> torch.Tensor:
    """e4e progressive training: rows >= n_open are replaced by the base row (their deltas closed)."""
    if n_open >= codes.shape[1]:
        return codes
    return torch.cat([codes[:, :n_open], codes[:, :1].expand(-1, codes.shape[1] - n_open, -1)], dim=1)


# ----------------------------------------------------------------------- GAN
def g_nonsat(fake_logits: torch.Tensor) -> torch.Tensor:
    return F.softplus(-fake_logits).mean()


def d_logistic(real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
    return F.softplus(fake_logits).mean() + F.softplus(-real_logits).mean()


def r1_penalty(disc: nn.Module, real: torch.Tensor, augment) -> torch.Tensor:
    # R1 on the augmented reals, as StyleGAN2-ADA does: the penalty's backward then never
    # differentiates the augmentation twice (CUDA has no double backward for grid_sample).
    real = augment(real.detach()).detach().requires_grad_(True)
    logits = disc(real)
    (grad,) = torch.autograd.grad(logits.sum(), real, create_graph=True)
    return grad.pow(2).flatten(1).sum(1).mean()


class DiffAugment:
    """Differentiable colour / translation / cutout (Zhao et al. 2020), the same transform
    for real and fake within one call order; randomness from the global torch RNG (seeded per step)."""

    def __init__(self, cfg: AugmentConfig):
        self.cfg = cfg

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        c, b = self.cfg, x.shape[0]
        if c.color:
            x = x + (torch.rand(b, 1, 1, 1, device=x.device) - 0.5)
            m = x.mean(1, keepdim=True)
            x = (x - m) * (torch.rand(b, 1, 1, 1, device=x.device) * 2) + m
            m = x.mean(dim=(1, 2, 3), keepdim=True)
            x = (x - m) * (torch.rand(b, 1, 1, 1, device=x.device) + 0.5) + m
        r = x.shape[-1]
        if c.translation > 0:
            s = int(r * c.translation + 0.5)
            shift = torch.randint(-s, s + 1, (b, 2), device=x.device).float() * 2 / r
            theta = torch.zeros(b, 2, 3, device=x.device)
            theta[:, 0, 0] = theta[:, 1, 1] = 1.0
            theta[:, :, 2] = shift
            grid = F.affine_grid(theta, list(x.shape), align_corners=False)
            x = F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)
        if c.cutout > 0:
            s = int(r * c.cutout + 0.5)
            cxy = torch.randint(0, r, (b, 2), device=x.device)
            cx, cy = cxy[:, 0].view(b, 1, 1), cxy[:, 1].view(b, 1, 1)
            yy = torch.arange(r, device=x.device).view(1, r, 1)
            xx = torch.arange(r, device=x.device).view(1, 1, r)
            hole = ((yy - cy).abs() <= s // 2) & ((xx - cx).abs() <= s // 2)  # [B, R, R]
            x = x * (~hole).unsqueeze(1).float()
        return x
