"""ONNX export parity, the backend interface, and the TensorRT path (skipped without a GPU)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from streamdeid.backends import BACKENDS, INPUT_IMAGE, INPUT_KEY, OUTPUT_IMAGE, create_backend

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from streamdeid.models import DBAFConfig  # noqa: E402
from streamdeid.models.dbaf import DBAF, DBAFRuntime  # noqa: E402
from streamdeid.models.io import save_checkpoint  # noqa: E402

from conftest import trained_kria  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _load_engine_module(name: str):
    spec = importlib.util.spec_from_file_location(f"engines.{name}", ROOT / "engines" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model() -> DBAF:
    torch.manual_seed(0)
    m = trained_kria(DBAF(DBAFConfig.preset("cpu-small", 64))).eval()
    with torch.no_grad():  # open the MAAR gates and noise so the exported graph exercises every path
        for inj in m.decoder.injections.values():
            inj.gate.fill_(0.3)
        for conv in [m.decoder.conv1, *m.decoder.convs]:
            conv.noise.weight.fill_(0.1)
    return m


@pytest.fixture(scope="module")
def onnx_path(model, tmp_path_factory) -> Path:
    export = _load_engine_module("export_onnx")
    return export.export_dbaf(model, tmp_path_factory.mktemp("onnx") / "dbaf64.onnx", batch=2)


def _inputs(cfg, b, seed=5):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (b, 3, cfg.resolution, cfg.resolution)).astype(np.float32)
    p = rng.standard_normal((b, *cfg.key_shape)).astype(np.float32)
    return x, p


def test_onnx_graph_io_and_opset(onnx_path, model):
    m = onnx.load(str(onnx_path))
    onnx.checker.check_model(m)
    assert max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) >= 17
    assert [i.name for i in m.graph.input] == [INPUT_IMAGE, INPUT_KEY]
    assert [o.name for o in m.graph.output] == [OUTPUT_IMAGE]
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in m.graph.input]
    cfg = model.cfg
    assert dims == [["batch", 3, 64, 64], ["batch", *cfg.key_shape]]
    assert not any(n.op_type.startswith("Random") for n in m.graph.node)  # fixed noise buffers


def test_onnx_parity_dynamic_batch(onnx_path, model):
    """Exported with batch 2, run with batch 3 (and 1): max |ORT - torch| <= 1e-3."""
    backend = create_backend("onnxrt", onnx_path, intra_op_threads=1)
    assert backend.resolution == 64 and backend.key_shape == model.cfg.key_shape
    for b in (3, 1):
        x, p = _inputs(model.cfg, b)
        with torch.no_grad():
            ref = DBAFRuntime(model)(torch.from_numpy(x), torch.from_numpy(p)).numpy()
            raw = model(torch.from_numpy(x), torch.from_numpy(p)).numpy()
        got = backend.run(x, p)
        assert got.shape == (b, 3, 64, 64) and got.dtype == np.float32
        assert np.abs(got - ref).max() <= 1e-3
        assert got.min() >= -1 and got.max() <= 1
        assert np.abs(np.clip(raw, -1, 1) - got).max() <= 1e-3


def test_onnx_backend_rejects_bad_inputs(onnx_path, model):
    backend = create_backend("onnxrt", onnx_path, providers=["CPUExecutionProvider"], intra_op_threads=1)
    x, p = _inputs(model.cfg, 2)
    with pytest.raises(ValueError):
        backend.run(x[:, :, :32, :32], p)
    with pytest.raises(ValueError):
        backend.run(x, p[:1])
    with pytest.raises(ValueError):
        backend.run(x, p[:, :5])


def test_torch_backend_matches_onnx(onnx_path, model, tmp_path):
    ckpt = tmp_path / "g.safetensors"
    save_checkpoint(ckpt, model)
    tb = create_backend("torch", ckpt, device="cpu")
    ob = create_backend("onnxrt", onnx_path, intra_op_threads=1)
    x, p = _inputs(model.cfg, 2, seed=9)
    a, b = tb.run(x, p), ob.run(x, p)
    assert a.shape == (2, 3, 64, 64) and a.dtype == np.float32
    assert np.abs(a - b).max() <= 1e-3
    assert np.array_equal(tb.run(x, p), a)  # same key, same output


def test_linked_fp16_export_reads_its_weights_from_the_checkpoint(model, tmp_path):
    """What ships: one fp16 safetensors copy of the weights, and an ONNX graph that reads them (external
    data, Cast to float32); both backends then run the same generator, close to the fp32 one."""
    from streamdeid.models.io import load_checkpoint, tensor_layout
    from streamdeid.models.onnx_export import export_dbaf, link_weights

    ckpt, graph = tmp_path / "dbaf64.safetensors", tmp_path / "dbaf64.onnx"
    save_checkpoint(ckpt, model, half=True)
    assert {t["dtype"] for t in tensor_layout(ckpt).values()} == {"F16"}
    stored, _ = load_checkpoint(ckpt)
    assert all(t.dtype == torch.float32 for t in stored.state_dict().values())
    with pytest.raises(ValueError, match="fold_constants=False"):  # folded constants are not checkpoint tensors
        link_weights(export_dbaf(stored, graph), ckpt)
    link_weights(export_dbaf(stored, graph, fold_constants=False), ckpt)
    inits = onnx.load(str(graph), load_external_data=False).graph.initializer
    assert inits and all(i.data_location == onnx.TensorProto.EXTERNAL for i in inits)
    assert graph.stat().st_size < ckpt.stat().st_size
    x, p = _inputs(model.cfg, 3, seed=7)
    got = create_backend("onnxrt", graph, intra_op_threads=1).run(x, p)
    # (two runtimes' float32 kernels sum in other orders: 1.2e-5 apart in one clean-clone CI run)
    assert np.abs(got - create_backend("torch", ckpt, device="cpu").run(x, p)).max() <= 5e-5
    with torch.no_grad():
        fp32 = DBAFRuntime(model)(torch.from_numpy(x), torch.from_numpy(p)).numpy()
    assert np.abs(got - fp32).max() <= 1e-2  # fp16 storage: about 1e-3 on the shipped weights


def test_create_backend_unknown_name():
    assert set(BACKENDS) == {"onnxrt", "torch", "tensorrt"}
    with pytest.raises(ValueError, match="unknown backend"):
        create_backend("nope", "model.onnx")


def test_export_cli_parity(tmp_path, capsys):
    export = _load_engine_module("export_onnx")
    args = ["--preset", "cpu-small", "--resolution", "64", "--out", str(tmp_path / "g.onnx")]
    assert export.main(args) == 0
    assert "parity" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:  # the file it wrote is not replaced without --overwrite
        export.main(args)
    assert stop.value.code == 2 and "--overwrite" in capsys.readouterr().err

    build = _load_engine_module("build_trt")  # one line, no traceback: a missing file, then no TensorRT here
    with pytest.raises(SystemExit) as stop:
        build.main([str(tmp_path / "missing.onnx"), str(tmp_path / "g.engine")])
    assert stop.value.code == 2 and "no such ONNX file" in capsys.readouterr().err
    if importlib.util.find_spec("tensorrt") is None:
        with pytest.raises(SystemExit) as stop:
            build.main([str(tmp_path / "g.onnx"), str(tmp_path / "g.engine")])
        assert stop.value.code == 2 and "TensorRT is not installed" in capsys.readouterr().err


def test_tensorrt_code_imports_without_tensorrt():
    """Both TensorRT modules import lazily; argument checks run before TensorRT is needed."""
    build = _load_engine_module("build_trt")
    with pytest.raises(ValueError, match="batch"):
        build.build_engine("x.onnx", "x.engine", min_batch=4, opt_batch=2, max_batch=8)
    importlib.import_module("streamdeid.backends.tensorrt")


@pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("tensorrt") is None,
                    reason="TensorRT needs a CUDA GPU and the tensorrt package")
def test_tensorrt_fp16_engine_matches_onnx(onnx_path, model, tmp_path):
    build = _load_engine_module("build_trt")
    engine = build.build_engine(onnx_path, tmp_path / "dbaf64.engine", min_batch=1, opt_batch=8, max_batch=32)
    trt_backend = create_backend("tensorrt", engine)
    ort_backend = create_backend("onnxrt", onnx_path)
    for b in (1, 8, 32):
        x, p = _inputs(model.cfg, b)
        assert np.abs(trt_backend.run(x, p) - ort_backend.run(x, p)).max() < 5e-2  # FP16
