"""compile(target="cuda") end to end against onnxruntime: candy (fast-neural-style) through the
whole pipeline, measured costs with the tuning database, the executable's calling conventions,
save/load. Without a GPU everything runs on CPU tensors through Triton's interpreter."""

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

import kernorch
from kernorch.orchestrate.tuning_db import TuningDB

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"


def _ort(path, x):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _close(got, want, tol=1e-4):
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(np.asarray(got) - want).max())
    assert err <= tol * scale, f"max abs err {err:.3g} (scale {scale:.3g})"


@pytest.fixture(scope="module")
def candy(tmp_path_factory):
    from bench.export import export_onnx

    path = export_onnx("candy", "torchscript", size=64, verbose=False)
    db = tmp_path_factory.mktemp("db") / "tune.sqlite"
    return path, kernorch.compile(path, target="cuda", cost="model", db=db, progress=False)


def test_candy_matches_onnxruntime(candy):
    path, model = candy
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    _close(model(x), _ort(path, x))
    providers = {k.provider for k in model.kernels}
    assert providers == {"triton", "linear"}, providers  # convolutions through cuDNN, the rest fused Triton
    fused = [i for i in model.executable.infos if i.provider == "triton" and {"sum", "sqrt", "relu"} <= set(i.ops)]
    assert fused, "instance norm + relu should be one Triton kernel"


def test_candy_save_load_is_bit_identical(candy, tmp_path):
    _, model = candy
    x = np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)
    before = model(x)
    model.save(tmp_path / "saved")
    loaded = kernorch.load(tmp_path / "saved")
    assert [k.provider for k in loaded.kernels] == [k.provider for k in model.kernels]
    if model.executable.device.type == "cuda":  # same kernels; cuDNN may pick another algorithm
        _close(loaded(x), before, tol=1e-6)
    else:
        assert np.array_equal(loaded(x), before)


def test_measured_compile_uses_the_tuning_database(tmp_path):
    db = tmp_path / "tune.sqlite"  # greedy: few candidates to time under the interpreter
    first = kernorch.compile(EXAMPLE, target="cuda", strategy="greedy", db=db, progress=False)
    assert first.report.measured > 0 and first.report.failed == 0, first.report.failures
    with TuningDB(db) as tdb:
        targets = {r[0] for r in tdb._conn.execute("SELECT DISTINCT target FROM costs")}
    assert all(t.startswith("cuda-") for t in targets), targets
    second = kernorch.compile(EXAMPLE, target="cuda", strategy="greedy", db=db, progress=False)
    assert second.report.measured == 0 and second.report.cached == first.report.measured
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    _close(second(x), _ort(EXAMPLE, x))


def test_answers_on_the_device_of_the_inputs(tmp_path):
    model = kernorch.compile(EXAMPLE, target="cuda", cost="model", db=tmp_path / "db.sqlite", progress=False)
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = _ort(EXAMPLE, x)
    got_np = model(x)
    assert isinstance(got_np, np.ndarray)
    got_t = model(torch.from_numpy(x))
    assert isinstance(got_t, torch.Tensor) and got_t.device.type == "cpu"
    named = model.run({"input": x})[model.output_names[0]]
    for got in (got_np, got_t.numpy(), named.numpy()):
        _close(got, want)
    if torch.cuda.is_available() and model.executable.device.type == "cuda":
        got_cuda = model(torch.from_numpy(x).cuda())
        assert got_cuda.device.type == "cuda"
        _close(got_cuda.cpu().numpy(), want)
    again = model(x)  # a second call (a graph replay on a GPU) gives the same answer
    assert np.array_equal(again, got_np)


def test_wrong_input_names_the_input_on_cuda(tmp_path):
    model = kernorch.compile(EXAMPLE, target="cuda", cost="model", db=tmp_path / "db.sqlite", progress=False)
    with pytest.raises(kernorch.KernorchError, match="input 'input' has shape"):
        model(np.zeros((1, 3, 8, 8), np.float32))


def test_unknown_target_is_one_clear_error(tmp_path):
    with pytest.raises(kernorch.KernorchError, match="unknown target 'tpu'"):
        kernorch.compile(EXAMPLE, target="tpu", cost="model", db=tmp_path / "db.sqlite", progress=False)


def test_compile_workers_answer_every_job():
    # the parallel-compile protocol: one answer per job, failures reported, nothing hangs
    from kernorch.codegen.triton_warm import Workers, wait

    workers = Workers(2)
    try:
        jobs = [{"path": f"/nonexistent/k{i}.py", "fns": [["f", 4]], "dtypes": ["float32"], "device": 0}
                for i in range(3)]
        errors = wait(workers.submit(jobs))
        assert len(errors) == 3 and all(e for e in errors)
    finally:
        workers.close()


def test_a_kernel_that_cannot_be_built_runs_on_the_host(tmp_path, monkeypatch):
    # a Triton kernel failing on some GPU must not sink the model: its prims run on the host, reported
    from kernorch.targets import cuda as cuda_target

    real, calls = cuda_target.build_cuda, []

    def flaky(g, members, outputs, device, config=None, env=None):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("simulated Triton compile error")
        return real(g, members, outputs, device, config, env)

    monkeypatch.setattr(cuda_target, "build_cuda", flaky)
    with pytest.warns(UserWarning, match="run on the host"):
        model = kernorch.compile(EXAMPLE, target="cuda", cost="model", db=tmp_path / "db.sqlite", progress=False)
    assert [k.provider for k in model.kernels].count("host") == 1
    assert model.report.failed == 1 and "simulated" in model.report.failures[0]
    assert not model.executable.use_graph
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    _close(model(x), _ort(EXAMPLE, x))
    model.save(tmp_path / "saved")
    _close(kernorch.load(tmp_path / "saved")(x), _ort(EXAMPLE, x))
