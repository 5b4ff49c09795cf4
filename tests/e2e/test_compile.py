"""compile() end to end: every strategy against onnxruntime, the tuning database, save/load."""

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import kernorch
from kernorch.orchestrate.tuning_db import TuningDB

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"


def _ort(path, feeds):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _feeds(seed=0):
    return {"input": np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)}


def _close(got, want):
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(np.asarray(got) - want).max() <= 1e-4 * scale


@pytest.mark.parametrize("strategy", ["unfused", "per-operator", "greedy", "optimal"])
def test_every_strategy_matches_onnxruntime(strategy, tmp_path):
    model = kernorch.compile(EXAMPLE, strategy=strategy, cost="model", db=tmp_path / "db.sqlite", progress=False)
    feeds = _feeds()
    (want,) = _ort(EXAMPLE, feeds)
    _close(model(feeds["input"]), want)
    _close(model.run(feeds)[model.output_names[0]].numpy(), want)


def test_measured_compile_then_warm_database_measures_nothing(tmp_path):
    db = tmp_path / "tune.sqlite"
    first = kernorch.compile(EXAMPLE, db=db, progress=False)
    assert first.report.measured > 0 and first.report.cached == 0
    assert TuningDB(db).count() >= first.report.measured
    second = kernorch.compile(EXAMPLE, db=db, progress=False)
    assert second.report.measured == 0
    # the plan kept for this model (runtime/plan_cache.py) unless the first plan had provider regions
    assert second.report.plan_reused or second.report.cached == first.report.measured
    assert len(second.kernels) == len(first.kernels)
    feeds = _feeds(1)
    (want,) = _ort(EXAMPLE, feeds)
    _close(second(feeds["input"]), want)


def test_save_load_roundtrip_is_bit_identical(tmp_path):
    model = kernorch.compile(EXAMPLE, cost="model", db=tmp_path / "db.sqlite", progress=False)
    x = _feeds(2)["input"]
    before = model(x)
    model.save(tmp_path / "saved")
    loaded = kernorch.load(tmp_path / "saved")
    after = loaded(x)
    assert np.array_equal(before, after)
    assert [k.provider for k in loaded.kernels] == [k.provider for k in model.kernels]


def test_load_of_a_non_model_directory_is_one_clear_error(tmp_path):
    with pytest.raises(kernorch.KernorchError, match="not a saved kernorch model"):
        kernorch.load(tmp_path)


def test_wrong_input_shape_names_the_input(tmp_path):
    model = kernorch.compile(EXAMPLE, cost="model", db=tmp_path / "db.sqlite", progress=False)
    with pytest.raises(kernorch.KernorchError, match="input 'input' has shape"):
        model(np.zeros((1, 3, 8, 8), np.float32))


TUNER = """
import sys
import time
import kernorch
from kernorch.orchestrate import tuning_db

put, stored = tuning_db.TuningDB.put, []


def put_then_stall(self, *args, **kwargs):
    put(self, *args, **kwargs)
    stored.append(1)
    if len(stored) == 5:  # mid-tuning, five measurements committed: the parent kills us here
        print("ready", flush=True)
        time.sleep(600)


tuning_db.TuningDB.put = put_then_stall
kernorch.compile(sys.argv[1], db=sys.argv[2], progress=False)
"""


def test_sigkill_during_tuning_leaves_a_usable_database(tmp_path):
    """A tuning run killed midway keeps what it measured; the next run reuses it and finishes.
    The tuner stalls after its fifth stored measurement, so the kill always lands mid-run (never
    skipped because tuning happened to be fast)."""
    import os
    import signal
    import sqlite3
    import subprocess
    import sys

    db = tmp_path / "killed.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", TUNER, str(EXAMPLE), str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", "the tuning run ended before storing 5 measurements"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        kept = c.execute("SELECT COUNT(*) FROM costs").fetchone()[0]
    assert kept == 5
    model = kernorch.compile(EXAMPLE, db=db, progress=False)
    assert model.report.cached >= 1          # what the killed run measured is reused
    feeds = _feeds(3)
    (want,) = _ort(EXAMPLE, feeds)
    _close(model(feeds["input"]), want)


def test_rank0_constants_keep_their_rank_when_measured():
    """A linear kernel with a scalar bias is verified and timed on feeds of the declared shapes."""
    from kernorch import codegen
    from kernorch.ir.graph import Builder
    from kernorch.ir.prims import Op
    from kernorch.orchestrate.measure import random_feeds, time_kernel, verify

    b = Builder()
    x = b.input((4, 8))
    w = b.constant(np.ones((8, 8), np.float32))
    y = b.binary(Op.ADD, b.matmul(x, w), b.constant(np.array(0.5, np.float32)))
    b.g.outputs = [y]
    members = {p.output for p in b.g.prims}
    k = codegen.build_kernel(b.g, members, [y])
    feeds = random_feeds(b.g, k.inputs)
    assert [f.shape for f in feeds] == [b.g.types[v].shape for v in k.inputs]
    assert verify(b.g, k, members)[0]
    assert time_kernel(k, feeds).seconds > 0
