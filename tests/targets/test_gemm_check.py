"""The per-machine check of the generated GEMM against oneDNN (targets/gemm_check.py) and
``kernorch doctor``: measured once per machine signature and code-generator version, said in one
line by a compile when the generated GEMM is far behind."""

import pytest

import kernorch
from kernorch.cli import main
from kernorch.options import Env
from kernorch.targets import gemm_check


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """gemm_check.measure replaced by a counter returning ``ratios[0]``; a build cache of its own."""
    calls, ratios = [], [{"matmul": 1.2, "conv1x1": 0.9, "NHWC 1x1": 1.0}]
    monkeypatch.setattr(gemm_check, "measure", lambda threads, repeat=20, env=None: calls.append(threads)
                        or dict(ratios[0]))
    monkeypatch.setenv("KERNORCH_CACHE_DIR", str(tmp_path / "cache"))
    return calls, ratios


def test_measured_once_per_machine_and_threads(counted, monkeypatch):
    calls, _ = counted
    env = Env.read()
    first = gemm_check.cached(2, env)
    assert gemm_check.cached(2, env) == first and calls == [2]
    gemm_check.cached(1, env)
    assert calls == [2, 1]
    from kernorch.orchestrate import machine

    machine.machine_signature.cache_clear()
    try:
        gemm_check.cached(2, Env.read({**__import__("os").environ, "KERNORCH_CFLAGS": "-mtune=generic"}))
    finally:
        machine.machine_signature.cache_clear()
    assert calls == [2, 1, 2]  # other flags: another machine signature, measured again
    gemm_check.cached(2, env, refresh=True)
    assert calls == [2, 1, 2, 2]


def test_behind_note():
    assert gemm_check.behind_note({"a": 1.0, "b": 0.6}) == ""
    assert gemm_check.behind_note({"a": 0.3, "b": 0.3}).startswith("generated GEMMs run at 0.30x oneDNN's speed")


def test_doctor_prints_the_machine_and_the_ratios(counted, capsys):
    assert main(["doctor", "--threads", "2"]) == 0
    out = capsys.readouterr().out
    for head in ("cpu ", "isa ", "compiler ", "flags ", "bf16 ", "signature ", "gemm "):
        assert any(line.startswith(head) for line in out.splitlines()), head
    assert "-O3 -march=native" in out and "2 threads" in out
    assert "matmul 1.20x, conv1x1 0.90x, NHWC 1x1 1.00x; geomean 1.03x" in out and "warning" not in out


def test_a_compile_on_a_slow_machine_says_so(counted, tmp_path):
    _, ratios = counted
    ratios[0] = {"matmul": 0.2, "conv1x1": 0.3, "NHWC 1x1": 0.25}
    m = kernorch.compile("examples/tiny_cnn.onnx", threads=1, regions=False, progress=False,
                         db=tmp_path / "db.sqlite", strategy="greedy")
    assert "warning   generated GEMMs run at 0.25x oneDNN's speed on this CPU" in m.summary()


def test_the_real_check_runs():
    """One real (short) measurement: three positive ratios."""
    ratios = gemm_check.measure(1, repeat=3)
    assert set(ratios) == {label for label, _, _ in gemm_check.CALIBRATION} and min(ratios.values()) > 0
