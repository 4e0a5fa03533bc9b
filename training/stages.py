"""The five training stages. Each ``train_step`` takes a batch x [B, 3, R, R] in [-1, 1] and returns
its losses as detached tensors on the device (no host sync inside a step).

stylegan2    stage 0a: mapping + decoder, unconditional non-saturating GAN, lazy R1, EMA, DiffAugment
e4e          stage 0b: encoder on the frozen decoder (progressive W+ deltas, delta regularisation)
reconstruct  stage 0 (joint, the cpu-small choice): encoder + decoder as a reconstruction GAN, plus
             random-z samples through the mapping network so the decoder stays a generator
disentangle  stage 1 (paper eq. 10-18): identity swaps through CID with MAAR features injected
anonymize    stage 2 (paper eq. 29-39): KRIA, 2 anonymization keys + 3 recovery keys per sample
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from streamdeid.config import AlignConfig

from . import losses as L
from .trainer import Trainer


class _LossMixin:
    """Loss modules shared by the stages that look at faces."""

    def setup(self) -> None:
        lc = self.cfg.losses
        margin = AlignConfig().margin
        w = self.st.weights
        sface_maps = lc.perceptual == "ssim-sface" and lc.feat_weight > 0
        need_sface = (w.get("id", 0) > 0 or w.get("div", 0) > 0
                      or (sface_maps and (w.get("lpips", 0) > 0 or w.get("rev", 0) > 0)))
        self.face = L.FaceAnalyzer(lc, margin).to(self.device) if need_sface else None
        self.perc = L.Perceptual(lc).to(self.device)
        self.parse = L.Parsing(lc, self.cfg.resolution, margin).to(self.device) if w.get("parse", 0) > 0 else None
        self.aug = L.DiffAugment(self.cfg.augment)
        self.want_maps = self.perc.needs_sface_maps

    def analyze(self, x: torch.Tensor, grad: bool = True):
        """(unit SFace embeddings, feature maps) of the first ``sface_batch`` samples, or (None, None)."""
        if self.face is None:
            return None, None
        k = self.st.sface_batch or x.shape[0]
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            return self.face(x[:k], want_maps=self.want_maps)

    def perceptual(self, y, x, ay, ax) -> torch.Tensor:
        return self.perc(y, x, ay[1] if ay[0] is not None else None, ax[1] if ax[0] is not None else None)

    def d_update(self, real: torch.Tensor, fake: torch.Tensor, step: int) -> dict[str, torch.Tensor]:
        """Discriminator: logistic loss on augmented real/fake; lazy R1 every r1_every steps."""
        self.requires_grad_d(True)
        d_loss = L.d_logistic(self.D(self.aug(real)), self.D(self.aug(fake.detach())))
        self.disc_step(d_loss)
        out = {"d": d_loss.detach()}
        if self.st.r1_every and step % self.st.r1_every == 0:
            gamma = self.cfg.r1_gamma(self.name)
            r1 = L.r1_penalty(self.D, real, self.aug)
            self.disc_step(gamma / 2 * r1 * self.st.r1_every)
            out["r1"] = r1.detach()
        self.requires_grad_d(False)
        return out

    def adv(self, fake: torch.Tensor) -> torch.Tensor:
        return L.g_nonsat(self.D(self.aug(fake)))

    def adversarial_step(self, real, make_fake, terms: dict, w: dict, step: int) -> dict[str, torch.Tensor]:
        """Discriminator update on ``make_fake()`` and its adversarial term (when
        weighted), then one generator step on the weighted ``terms``."""
        out = {}
        if self.D is not None and w.get("adv", 0) > 0:
            fake = make_fake()
            out = self.d_update(real, fake, step)
            terms["adv"] = self.adv(fake)
        return self.generator_step(terms, w, out)

    def generator_step(self, terms: dict, w: dict, out: dict) -> dict[str, torch.Tensor]:
        """Optimise the weighted sum of ``terms``; the step's losses, detached and left on the device
        (the loop turns them into floats once per log interval)."""
        loss = _sum(terms, w)
        self.gen_step(loss)
        return {"loss": loss.detach(), **_detached(terms), **out}


def _sum(terms: dict[str, torch.Tensor], weights: dict[str, float]) -> torch.Tensor:
    return sum(weights.get(k, 0.0) * v for k, v in terms.items())


def _detached(terms: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in terms.items()}


def _mixed_wplus(G, batch: int, mix_prob: float) -> torch.Tensor:
    """Random z -> W+ [B, L, D] through the mapping network, with style mixing."""
    cfg = G.cfg
    dev = G.decoder.input.input.device
    w1 = G.decoder.mapping(torch.randn(batch, cfg.w_dim, device=dev))
    wp = w1[:, None].expand(-1, cfg.n_latent, -1)
    if mix_prob > 0 and torch.rand(()) < mix_prob:
        w2 = G.decoder.mapping(torch.randn(batch, cfg.w_dim, device=dev))
        cut = int(torch.randint(1, cfg.n_latent, ()))
        wp = torch.cat([wp[:, :cut], w2[:, None].expand(-1, cfg.n_latent - cut, -1)], dim=1)
    return wp


# --------------------------------------------------------------------- stage 0a
class StyleGAN2Stage(_LossMixin, Trainer):
    name = "stylegan2"

    def setup(self) -> None:
        self.aug = L.DiffAugment(self.cfg.augment)
        gen = torch.Generator().manual_seed(1234)
        self.sample_z = torch.randn(8, self.mcfg.w_dim, generator=gen).to(self.device)

    def train_step(self, x, step):
        fake = self.G.decode(_mixed_wplus(self.G, x.shape[0], self.st.mix_prob), randomize_noise=True)
        out = self.d_update(x, fake, step)
        g = self.adv(fake)
        self.gen_step(self.st.weights.get("adv", 1.0) * g)
        return {"g_adv": g.detach(), **out}

    def sample_rows(self, x):
        G = self.G_ema or self.G
        w = G.decoder.mapping(self.sample_z)
        return [G.decode(w[:, None].expand(-1, self.mcfg.n_latent, -1))]

    def save(self):
        # e4e's latent_avg: the mapping network's mean w, kept current in the saved generator
        for G in (self.G, self.G_ema):
            if G is not None:
                G.encoder.latent_avg.copy_(G.decoder.mean_latent(4096))
        return super().save()


# --------------------------------------------------------------------- stage 0b / 0
class E4EStage(_LossMixin, Trainer):
    name = "e4e"

    def setup(self) -> None:
        super().setup()
        self.uses_gen_samples = False
        if float(self.G.encoder.latent_avg.abs().sum()) == 0.0:
            with torch.no_grad():
                torch.manual_seed(self.cfg.seed)
                self.G.encoder.latent_avg.copy_(self.G.decoder.mean_latent(4096))
                if self.G_ema is not None:
                    self.G_ema.encoder.latent_avg.copy_(self.G.encoder.latent_avg)

    def open_rows(self, step: int) -> int:
        every = self.st.progressive_every
        return self.mcfg.n_latent if every <= 0 else 1 + step // every

    def reconstruct(self, G, x, step):
        codes, _ = G.encoder(x)  # [B, L, D]
        codes = L.progressive_codes(codes, self.open_rows(step))
        return G.decode(codes), codes

    def train_step(self, x, step):
        w = self.st.weights
        y, codes = self.reconstruct(self.G, x, step)
        ax, ay = self.analyze(x, grad=False), self.analyze(y)
        terms = {"l1": (y - x).abs().mean(), "lpips": self.perceptual(y, x, ay, ax),
                 "reg": L.delta_reg(codes)}
        if ax[0] is not None:
            terms["id"] = (1 - L.cos(ay[0], ax[0])).mean()
        fakes = [y]
        if self.D is not None and w.get("gen_adv", 0) > 0 and self.st.gen_fraction > 0:
            n = max(1, int(round(x.shape[0] * self.st.gen_fraction)))
            gen = self.G.decode(_mixed_wplus(self.G, n, self.st.mix_prob), randomize_noise=True)
            fakes.append(gen)
        out = {}
        if self.D is not None and (w.get("adv", 0) > 0 or w.get("gen_adv", 0) > 0):
            out = self.d_update(x, torch.cat(fakes), step)
            terms["adv"] = self.adv(y)
            if len(fakes) > 1:
                terms["gen_adv"] = self.adv(fakes[1])
        return self.generator_step(terms, w, out)

    def sample_rows(self, x):
        G = self.G_ema or self.G
        return [x, self.reconstruct(G, x, self.step)[0]]


class ReconstructStage(E4EStage):
    name = "reconstruct"


# --------------------------------------------------------------------- stage 1
class DisentangleStage(_LossMixin, Trainer):
    """Eq. 10-18. x1 = batch, x2 = batch rolled by one (identity donors).

    y_rec = Dec(A1 + I1, F1) must reconstruct x1 (perceptual, L1 3.5, identity);
    y_swap = Dec(A1 + I2, F1) must carry x2's identity (cos >= tau+) and not x1's
    (cos <= tau-), keep x1's layout (parsing), and look real (adversarial).
    """

    name = "disentangle"

    def forward_pair(self, G, x1):
        codes, feats = G.encode(x1)
        attrs, idents = G.disentangle(codes)  # [B, L, D] each
        idents2 = idents.roll(1, dims=0)
        both = torch.cat([attrs + idents, attrs + idents2])  # rec, swap
        feats2 = {r: torch.cat([f, f]) for r, f in feats.items()}
        y = G.decode(both, feats2)
        b = x1.shape[0]
        return y[:b], y[b:], both[b:]

    def train_step(self, x1, step):
        w, lc = self.st.weights, self.cfg.losses
        x2 = x1.roll(1, dims=0)
        y_rec, y_swap, swap_codes = self.forward_pair(self.G, x1)
        ax1 = self.analyze(x1, grad=False)
        k = ax1[0].shape[0] if ax1[0] is not None else 0
        terms = {"lpips": None, "l1": (y_rec - x1).abs().mean(), "reg": L.delta_reg(swap_codes)}
        a_rec = self.analyze(y_rec)
        terms["lpips"] = self.perceptual(y_rec, x1, a_rec, ax1)
        if self.face is not None:
            e_swap = self.analyze(y_swap, grad=True)[0]
            e_x2 = ax1[0].roll(1, dims=0) if k == x1.shape[0] else self.analyze(x2, grad=False)[0]
            terms["id"] = (L.must_match(e_swap, e_x2, lc.tau_pos) + L.must_differ(e_swap, ax1[0], lc.tau_neg)
                           + L.must_match(a_rec[0], ax1[0], lc.tau_pos))
            terms["id_swap_cos"] = L.cos(e_swap, e_x2).mean().detach()
        if self.parse is not None:
            terms["parse"] = self.parse(y_swap, x1)
        return self.adversarial_step(x1, lambda: torch.cat([y_swap, y_rec]), terms, w, step)

    def sample_rows(self, x):
        G = self.G_ema or self.G
        y_rec, y_swap, _ = self.forward_pair(G, x)
        return [x, x.roll(1, dims=0), y_swap, y_rec]


# --------------------------------------------------------------------- stage 2
class AnonymizeStage(_LossMixin, Trainer):
    """Eq. 29-39. Keys P1, P2 anonymize (x_a1, x_a2); x_a1 is recovered with P1 (correct),
    P2 and a fresh P3 (wrong). Identity difference: a1, a2 and the wrong recoveries must not
    carry x's identity; diversity: a1 and a2 differ; recovery (eq. 30's L_rev): the correct
    recovery reconstructs x (L1 + perceptual + identity); perceptual, L1 0.05 and parsing keep
    a1/a2's attributes; reg keeps anonymized codes W-like; adversarial on a1, a2 and the recovery.
    """

    name = "anonymize"

    def keys(self, b: int) -> torch.Tensor:
        return torch.randn(b, *self.mcfg.key_shape, device=self.device)  # i.i.d. N(0, 1), as kria_vector

    def generate(self, G, x, keys: list[torch.Tensor], with_codes: bool = False):
        """G(x, P) for several keys at once -> (list of outputs, anonymized codes [n B, L, D]) and, with
        ``with_codes``, x's own codes [B, L, D], identity codes [B, L, D] and encoder features too."""
        codes, feats = G.encode(x)
        attrs, idents = G.disentangle(codes)
        n = len(keys)
        c_hat = G.anonymize_codes(attrs.repeat(n, 1, 1), idents.repeat(n, 1, 1), torch.cat(keys))
        y = G.decode(c_hat, {r: f.repeat(n, 1, 1, 1) for r, f in feats.items()})
        return (list(y.chunk(n)), c_hat, codes, idents, feats) if with_codes else (list(y.chunk(n)), c_hat)

    def train_step(self, x, step):
        w, lc = self.st.weights, self.cfg.losses
        b = x.shape[0]
        p1, p2, p3 = self.keys(b), self.keys(b), self.keys(b)
        (a1, a2), c_hat, codes, idents, feats = self.generate(self.G, x, [p1, p2], with_codes=True)
        (r, w1, w2), _, codes_a1, _, _ = self.generate(self.G, a1, [p1, p2, p3], with_codes=True)
        ax = self.analyze(x, grad=False)
        aa1, aa2, ar, aw1, aw2 = (self.analyze(v) for v in (a1, a2, r, w1, w2))
        terms = {"l1": (torch.cat([a1, a2]) - x.repeat(2, 1, 1, 1)).abs().mean(), "reg": L.delta_reg(c_hat),
                 # the encoder reads back the codes a1 was decoded from: what a reflected KRIA's exact
                 # inverse needs (DBAFConfig.kria_reflect); weight "cycle", 0 in the presets
                 "cycle": (codes_a1 - c_hat[:b]).pow(2).mean(),
                 # how far the batch's identity codes lie from their mean (per code row): the 2026-11-26
                 # lease's encoder shrank it from 2.0 to 0.5 while KRIA's key offsets stayed under 0.1
                 "id_spread": (idents - idents.mean(0)).detach().norm(dim=-1).mean()}
        terms["lpips"] = (self.perceptual(a1, x, aa1, ax) + self.perceptual(a2, x, aa2, ax)) / 2
        rev = (r - x).abs().mean() + self.perceptual(r, x, ar, ax)
        if self.face is not None:
            e = ax[0]
            terms["id"] = sum(L.must_differ(v[0], e, lc.tau_neg) for v in (aa1, aa2, aw1, aw2))
            terms["div"] = L.must_differ(aa1[0], aa2[0], lc.tau_neg)
            rev = rev + L.must_match(ar[0], e, lc.tau_pos)
            terms["cos_ano"] = L.cos(aa1[0], e).mean().detach()
            terms["cos_rec"] = L.cos(ar[0], e).mean().detach()
            terms["cos_wrong"] = L.cos(aw1[0], e).mean().detach()
        terms["rev"] = rev
        if w.get("recon", 0) > 0:
            # x decoded from its own codes (no key): a decoder trained on the cycle alone forgets how to
            # draw a face's own codes (the 2026-11-27 lease: plain readback 0.43 -> 3.5 per row); weight
            # "recon", 0 in the presets, L1 + perceptual as in the reconstruct stage
            own = self.G.decode(codes, feats)  # x's own codes, as generate read them
            terms["recon"] = (own - x).abs().mean() + self.perceptual(own, x, self.analyze(own), ax)
        terms["psnr_rec"] = (10 * torch.log10(4.0 / F.mse_loss(r.detach().clamp(-1, 1), x))).detach()
        if self.parse is not None:
            terms["parse"] = (self.parse(a1, x) + self.parse(a2, x)) / 2
        return self.adversarial_step(x, lambda: torch.cat([a1, a2, r]), terms, w, step)

    def sample_rows(self, x):
        G = self.G_ema or self.G
        gen = torch.Generator().manual_seed(99)
        p1, p2 = (torch.randn(x.shape[0], *self.mcfg.key_shape, generator=gen).to(self.device) for _ in range(2))
        (a1, a2), _ = self.generate(G, x, [p1, p2])
        (r, wr), _ = self.generate(G, a1, [p1, p2])
        return [x, a1, a2, r, wr]


STAGE_CLASSES = {c.name: c for c in (StyleGAN2Stage, E4EStage, ReconstructStage, DisentangleStage, AnonymizeStage)}

#: Default --init chain: where each stage takes its starting weights from (first that exists).
INIT_CHAIN = {
    "stylegan2": [],
    "e4e": ["stylegan2"],
    "reconstruct": [],
    "disentangle": ["reconstruct", "e4e"],
    "anonymize": ["disentangle"],
}
