"""DBAF networks (streamdeid.models): shapes, CID/KRIA/MAAR properties, G(x, P), checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from streamdeid.models import DBAFConfig, latent_split  # noqa: E402
from streamdeid.models.dbaf import CID, DBAF, KRIA, MAAR, count_parameters  # noqa: E402
from streamdeid.models.encoder import Encoder  # noqa: E402
from streamdeid.models.io import (  # noqa: E402
    CheckpointError,
    load_checkpoint,
    read_checkpoint_header,
    save_checkpoint,
)
from streamdeid.models.layers import ModulatedConv2d, StyledConv, ToRGB  # noqa: E402
from streamdeid.models.stylegan2 import Decoder, Discriminator  # noqa: E402

from conftest import trained_kria  # noqa: E402

R = 64


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def cfg() -> DBAFConfig:
    return DBAFConfig.preset("cpu-small", R)


@pytest.fixture(scope="module")
def model(cfg) -> DBAF:
    torch.manual_seed(0)
    return trained_kria(DBAF(cfg)).eval()


def _inputs(cfg, b=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, 3, cfg.resolution, cfg.resolution, generator=g) * 2 - 1
    p = torch.randn(b, *cfg.key_shape, generator=g)
    return x, p


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize("res,split", [(64, (3, 3, 4)), (128, (3, 4, 5)), (256, (4, 4, 6)), (1024, (5, 5, 8))])
def test_latent_split_rule(res, split):
    cfg = DBAFConfig(resolution=res)
    assert cfg.n_latent == 2 * (res.bit_length() - 1) - 2
    assert cfg.split == split == latent_split(cfg.n_latent)
    assert sum(split) == cfg.n_latent


def test_config_roundtrip_primitives(cfg):
    d = json.loads(json.dumps(cfg.to_dict()))
    assert DBAFConfig.from_dict(d) == cfg
    with pytest.raises(ValueError):
        DBAFConfig.from_dict({**d, "bogus": 1})
    with pytest.raises(ValueError):
        DBAFConfig(resolution=96)


def test_parameter_counts():
    for res in (64, 128):
        n = count_parameters(DBAF(DBAFConfig.preset("cpu-small", res)))
        assert 3.5e6 < n < 5.5e6, n


# ----------------------------------------------------------------------------- blocks
def test_stylegan_blocks_shapes():
    x, w = torch.randn(2, 16, 8, 8), torch.randn(2, 32)
    assert ModulatedConv2d(16, 24, 3, 32, upsample=True)(x, w).shape == (2, 24, 16, 16)
    assert StyledConv(16, 24, 3, 32)(x, w, torch.randn(1, 1, 8, 8)).shape == (2, 24, 8, 8)
    rgb = ToRGB(16, 32)(x, w, torch.randn(2, 3, 4, 4))
    assert rgb.shape == (2, 3, 8, 8) and rgb.dtype == torch.float32


def test_modulated_conv_demodulation_matches_per_sample_weights():
    """Activation-side modulation == StyleGAN2's per-sample weight modulation/demodulation."""
    torch.manual_seed(1)
    mc = ModulatedConv2d(8, 6, 3, 16)
    x, w = torch.randn(2, 8, 5, 5), torch.randn(2, 16)
    out = mc(x, w)
    s = mc.modulation(w)
    for b in range(2):
        wb = mc.weight * mc.scale * s[b][None, :, None, None]
        wb = wb * torch.rsqrt(wb.pow(2).sum(dim=(1, 2, 3), keepdim=True) + 1e-8)
        ref = torch.nn.functional.conv2d(x[b : b + 1], wb, padding=1)
        torch.testing.assert_close(out[b : b + 1], ref, atol=1e-5, rtol=1e-4)


def test_encoder_and_decoder_shapes(cfg):
    enc, dec = Encoder(cfg), Decoder(cfg)
    x, _ = _inputs(cfg)
    codes, maps = enc(x)
    assert codes.shape == (2, cfg.n_latent, cfg.w_dim) and codes.dtype == torch.float32
    assert [m.shape[-1] for m in maps] == [R // 16, R // 8, R // 4]
    assert all(m.shape[1] == cfg.channels[m.shape[-1]] for m in maps)
    img = dec(codes)
    assert img.shape == (2, 3, R, R)
    assert torch.equal(dec(codes), img)  # fixed noise buffers: deterministic
    for conv in [dec.conv1, *dec.convs]:
        conv.noise.weight.data.fill_(0.1)
    assert torch.equal(dec(codes), dec(codes))
    assert not torch.equal(dec(codes, randomize_noise=True), dec(codes, randomize_noise=True))
    assert Discriminator(cfg)(img).shape == (2, 1)


def test_cid_identity_plus_attribute_is_code(cfg):
    cid = CID(cfg)
    levels = [torch.randn(2, n, cfg.w_dim) for n in cfg.split]
    attrs, idents = cid(levels)
    for c, a, i in zip(levels, attrs, idents):
        assert a.shape == i.shape == c.shape
        torch.testing.assert_close(i + a, c)
    # one attention module shared by the three levels
    assert sum(isinstance(m, torch.nn.Linear) for m in cid.modules()) == 2


def test_maar_shapes(cfg):
    f = torch.randn(2, 32, 8, 8)
    out = MAAR(32, cfg.maar_reduction, cfg.maar_kernel)(f)
    assert out.shape == f.shape and torch.isfinite(out).all()
    assert (out.abs() <= f.abs() + 1e-6).all()  # attention weights are in (0, 1)


def test_kria_deterministic_and_key_sensitive(cfg):
    kria = KRIA(DBAFConfig.from_dict({**cfg.to_dict(), "kria_residual": False}))  # the paper's plain form
    attrs = [torch.randn(2, n, cfg.w_dim) for n in cfg.split]
    idents = [torch.randn(2, n, cfg.w_dim) for n in cfg.split]
    p1 = [torch.randn(2, n, cfg.w_dim) for n in cfg.split]
    p2 = [torch.randn(2, n, cfg.w_dim) for n in cfg.split]
    a = kria(p1, attrs, idents)
    b = kria([t.clone() for t in p1], attrs, idents)
    c = kria(p2, attrs, idents)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert all((u - v).abs().max() > 1e-3 for u, v in zip(a, c))
    assert all(len([m for m in blk.net]) == cfg.kria_layers for blk in kria.blocks)


def test_residual_kria_starts_as_identity_and_learns_a_key(cfg):
    """cpu-small's residual KRIA: untrained, G(x, P) is the reconstruction whatever P; once its
    last layer moves, the key matters again."""
    torch.manual_seed(0)
    m = DBAF(cfg).eval()
    assert cfg.kria_residual
    x, p = _inputs(cfg)
    with torch.no_grad():
        codes, feats = m.encode(x)
        rec = m.decode(codes, feats)
        torch.testing.assert_close(m(x, p), rec)
        torch.testing.assert_close(m(x, torch.randn_like(p)), rec)
        trained_kria(m)
        assert (m(x, p) - m(x, torch.randn_like(p))).abs().max() > 1e-3


def test_reflected_kria_undoes_itself_with_the_key_and_not_without(cfg):
    """kria_reflect: I' = 2 c(P) - I, so the codes anonymized twice with one key are the codes exactly,
    whatever KRIA learned; another key moves them by 2 (c(P') - c(P))."""
    from dataclasses import replace

    torch.manual_seed(0)
    m = trained_kria(DBAF(replace(cfg, kria_reflect=True))).eval()
    g = torch.Generator().manual_seed(3)
    a, i, p, p2 = (torch.randn(2, cfg.n_latent, cfg.w_dim, generator=g) for _ in range(4))
    with torch.no_grad():
        once = m.anonymize_codes(a, i, p)
        assert (once - (a + i)).abs().mean() > 0.1  # the identity moved
        torch.testing.assert_close(m.anonymize_codes(a, once - a, p), a + i, atol=1e-5, rtol=0)
        assert (m.anonymize_codes(a, once - a, p2) - (a + i)).abs().mean() > 0.1


def test_kria_spread_keeps_two_keys_centres_apart_and_still_undoes_itself(cfg):
    """kria_spread: c(P) = f([P, 0]) + s P / sqrt(D), so even where f ignores the key (zeroed here, the
    way the third lease's KRIA nearly did) two keys' centres lie about s sqrt(2) apart per code row,
    and the reflection is still exact with the key."""
    from dataclasses import replace

    torch.manual_seed(0)
    spread = (0.5, 0.6, 1.0)
    m = DBAF(replace(cfg, kria_reflect=True, kria_spread=spread)).eval()
    for blk in m.kria.blocks:
        blk.reset_residual()  # f = 0: the centre is the key's offset alone
    g = torch.Generator().manual_seed(3)
    a, i, p, p2 = (torch.randn(64, cfg.n_latent, cfg.w_dim, generator=g) for _ in range(4))
    with torch.no_grad():
        once = m.anonymize_codes(a, i, p)
        torch.testing.assert_close(m.anonymize_codes(a, once - a, p), a + i, atol=1e-5, rtol=0)
        wrong = m.anonymize_codes(a, once - a, p2) - (a + i)  # 2 (c(P2) - c(P))
        for level, s in zip(m.split_levels(wrong), spread):
            miss = level.norm(dim=-1).mean().item()
            assert abs(miss - 2 * s * 2 ** 0.5) < 0.15 * 2 * s * 2 ** 0.5, (miss, s)
    with pytest.raises(ValueError, match="kria_spread"):
        replace(cfg, kria_spread=(0.5, -1.0, 0.0))


# ----------------------------------------------------------------------------- G(x, P)
def test_g_anonymize_and_recover_same_weights(model, cfg):
    x, p = _inputs(cfg)
    with torch.no_grad():
        x_ano = model.anonymize(x, p)
        x_rec = model.recover(x_ano, p)
        again = model(x, p)
        other = model(x, torch.randn_like(p))
    assert x_ano.shape == x_rec.shape == (2, 3, R, R)
    assert x_ano.dtype == torch.float32 and torch.isfinite(x_rec).all()
    assert torch.equal(x_ano, again)  # deterministic
    assert (x_ano - other).abs().max() > 1e-4  # key matters
    assert not torch.equal(x_ano, x_rec)


def test_g_pieces_compose(model, cfg):
    x, p = _inputs(cfg)
    with torch.no_grad():
        codes, feats = model.encode(x)
        attrs, idents = model.disentangle(codes)
        torch.testing.assert_close(attrs + idents, codes)
        y = model.decode(model.anonymize_codes(attrs, idents, p), feats)
        torch.testing.assert_close(y, model(x, p))


def test_g_backward_reaches_every_module(cfg):
    # (with an untrained residual KRIA, C_hat = A + I = C and CID gets no gradient: train it first)
    m = trained_kria(DBAF(cfg))
    for inj in m.decoder.injections.values():
        inj.gate.data.fill_(0.5)
    x, p = _inputs(cfg)
    m(x, p, randomize_noise=True).square().mean().backward()
    for name in ("encoder", "cid", "maar", "kria"):
        grads = [q.grad for q in getattr(m, name).parameters()]
        assert any(g is not None and g.abs().sum() > 0 for g in grads), name


def test_maar_injection_gate_zero_is_noop_and_open_gate_changes_output(cfg):
    torch.manual_seed(3)
    m = DBAF(cfg).eval()
    x, p = _inputs(cfg)
    with torch.no_grad():
        codes, feats = m.encode(x)
        c_hat = m.anonymize_codes(*m.disentangle(codes), p)
        base = m.decode(c_hat, None)
        torch.testing.assert_close(m.decode(c_hat, feats), base, atol=0, rtol=0)  # gates start at 0
        for res in cfg.feature_resolutions:
            m.decoder.injections[str(res)].gate.fill_(0.5)
            changed = m.decode(c_hat, {res: feats[res]})
            assert (changed - base).abs().max() > 1e-4, res
            m.decoder.injections[str(res)].gate.zero_()
    assert sorted(int(k) for k in m.decoder.injections) == sorted(cfg.feature_resolutions)


# ----------------------------------------------------------------------------- checkpoints
def test_checkpoint_roundtrip(model, cfg, tmp_path):
    path = tmp_path / "g.safetensors"
    save_checkpoint(path, model, training_commit="abc123", extra={"stage": 2})
    header = read_checkpoint_header(path)
    assert header["schema_version"] == 1 and header["training_commit"] == "abc123"
    assert header["extra"] == {"stage": 2} and DBAFConfig.from_dict(header["model_args"]) == cfg
    loaded, _ = load_checkpoint(path)
    x, p = _inputs(cfg)
    with torch.no_grad():
        assert torch.equal(loaded(x, p), model(x, p))
    assert b"pickle" not in path.read_bytes()[:64]


def test_checkpoint_strict_mismatch(model, tmp_path):
    from safetensors.torch import load_file, save_file

    good = tmp_path / "g.safetensors"
    save_checkpoint(good, model)
    meta = json.loads(good.read_bytes()[8 : 8 + int.from_bytes(good.read_bytes()[:8], "little")])["__metadata__"]
    tensors = load_file(str(good))

    missing = dict(tensors)
    missing.pop("kria.blocks.0.net.0.weight")
    save_file(missing, str(tmp_path / "m.safetensors"), metadata=meta)
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(tmp_path / "m.safetensors")

    extra = {**tensors, "bogus.weight": torch.zeros(1)}
    save_file(extra, str(tmp_path / "u.safetensors"), metadata=meta)
    with pytest.raises(CheckpointError, match="unexpected"):
        load_checkpoint(tmp_path / "u.safetensors")

    shape = {**tensors, "cid.mha.out.bias": torch.zeros(3)}
    save_file(shape, str(tmp_path / "s.safetensors"), metadata=meta)
    with pytest.raises(CheckpointError, match="shape"):
        load_checkpoint(tmp_path / "s.safetensors")

    wrong_cfg = {**meta, "model_args": json.dumps(DBAFConfig(resolution=128).to_dict())}
    save_file(tensors, str(tmp_path / "c.safetensors"), metadata=wrong_cfg)
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "c.safetensors")

    save_file(tensors, str(tmp_path / "v.safetensors"), metadata={**meta, "schema_version": "99"})
    with pytest.raises(CheckpointError, match="schema_version"):
        read_checkpoint_header(tmp_path / "v.safetensors")


def test_runtime_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import streamdeid, streamdeid.backends, streamdeid.backends.onnxrt\n"
        "import streamdeid.cli, streamdeid.pipeline, streamdeid.live\n"
        "assert not [m for m in sys.modules if m.startswith('streamdeid.models')], 'runtime imported models'\n"
        "from streamdeid.models.config import DBAFConfig\n"
        "from streamdeid.models.io import read_checkpoint_header\n"
        "assert DBAFConfig().key_shape == (10, 128)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_g_runs_at_128px():
    cfg = DBAFConfig.preset("cpu-small", 128)
    assert cfg.split == (3, 4, 5) and cfg.key_shape == (12, 128)
    m = DBAF(cfg).eval()
    x, p = _inputs(cfg, b=1)
    with torch.no_grad():
        y = m(x, p)
    assert y.shape == (1, 3, 128, 128) and torch.isfinite(y).all()


def test_torch_backend_from_a_file_or_a_model_runs_the_same(model, cfg, tmp_path):
    """The torch backend's two seams (a checkpoint file, an in-memory model) give the same faces;
    "auto" picks the CPU here (no GPU), and it takes exactly one of the two."""
    from streamdeid.backends.torch import TorchBackend

    path = tmp_path / "g.safetensors"
    save_checkpoint(path, model)
    from_file, in_memory = TorchBackend(path), TorchBackend(model=model)
    assert from_file.device.type == "cpu" and in_memory.device.type == "cpu"
    x, p = (t.numpy() for t in _inputs(cfg, b=2, seed=3))
    assert abs(from_file.run(x, p) - in_memory.run(x, p)).max() < 1e-5
    with pytest.raises(ValueError, match="exactly one"):
        TorchBackend(path, model=model)
    with pytest.raises(ValueError, match="exactly one"):
        TorchBackend()
