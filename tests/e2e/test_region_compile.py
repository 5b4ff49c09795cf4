"""Provider regions end to end: a run of segments handed to OpenVINO / onnxruntime is measured,
verified, built, matches onnxruntime, survives save/load, and can be switched off."""

import sqlite3
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import kernorch
from kernorch.orchestrate.measure import MeasuredCost

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"


def _reference(x):
    s = ort.InferenceSession(str(EXAMPLE), providers=["CPUExecutionProvider"])
    return s.run(None, {"input": x})[0]


def _close(got, want):
    assert np.abs(np.asarray(got) - want).max() <= 1e-4 * max(1.0, float(np.abs(want).max()))


@pytest.fixture
def cheap_regions(monkeypatch):
    """Regions are measured and verified for real, then priced as nearly free, so the solver must
    pick them whatever this noisy machine's timings say."""
    real = MeasuredCost.region

    def region(self, cand):
        seconds = real(self, cand)
        return None if seconds is None else 1e-9

    monkeypatch.setattr(MeasuredCost, "region", region)


def test_region_plan_matches_onnxruntime_and_round_trips(tmp_path, cheap_regions):
    model = kernorch.compile(EXAMPLE, db=tmp_path / "db.sqlite", threads=2, progress=False,
                             providers=("ort", "openvino"))
    plan_regions = [k for k in model.kernels if k.provider in ("ort", "openvino")]
    assert len(model.kernels) == 1 and plan_regions, model.summary()
    assert "provider region" in model.report.plan_summary
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = model(x)
    _close(got, _reference(x))
    model.save(tmp_path / "saved")
    again = kernorch.load(tmp_path / "saved")
    assert np.array_equal(again(x), got)
    with sqlite3.connect(tmp_path / "db.sqlite") as db:
        assert db.execute("select count(*) from costs where key like 'region:%' and status = 'ok'").fetchone()[0]
        # The whole graph went to a region in the first pass: only the per-operator kernels that
        # calibrate the roofline were measured, none of the fused candidates.
        kernel_keys = db.execute("select count(distinct key) from costs where key not like 'region:%'").fetchone()[0]
    per_op = kernorch.compile(EXAMPLE, strategy="per-operator", cost="model", progress=False)
    assert 0 < kernel_keys <= len(per_op.kernels)
    assert model.report.roofline_scale > 0


def test_regions_off_keeps_own_kernels(tmp_path, cheap_regions):
    model = kernorch.compile(EXAMPLE, db=tmp_path / "db.sqlite", threads=2, progress=False,
                             providers=("ort", "openvino"), regions=False)
    assert "provider region" not in model.report.plan_summary
    assert len(model.kernels) > 1
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    _close(model(x), _reference(x))


def test_without_whole_graph_providers_there_are_no_regions(tmp_path, cheap_regions):
    model = kernorch.compile(EXAMPLE, db=tmp_path / "db.sqlite", threads=2, progress=False, providers=("torch",))
    assert "provider region" not in model.report.plan_summary
    assert not any(k.provider in ("ort", "openvino") for k in model.kernels), [k.provider for k in model.kernels]
    with sqlite3.connect(tmp_path / "db.sqlite") as db:
        assert db.execute("select count(*) from costs where key like 'region:%' and status = 'ok'").fetchone()[0] == 0
    x = np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float32)
    _close(model(x), _reference(x))


def test_solver_plan_is_timed_end_to_end_against_the_whole_graph_region(tmp_path, monkeypatch):
    """Regions priced far too high: the solver keeps kernel plans, then the compile times that
    plan against the whole graph as one region and keeps the faster (both medians reported)."""
    real = MeasuredCost.region

    def region(self, cand):
        seconds = real(self, cand)
        return None if seconds is None else 1e3 * seconds

    monkeypatch.setattr(MeasuredCost, "region", region)
    model = kernorch.compile(EXAMPLE, db=tmp_path / "db.sqlite", threads=2, progress=False,
                             providers=("ort", "openvino"))
    e2e = model.report.end_to_end
    # the whole graph as one region, on kernorch's exported graph and on the original ONNX model
    assert {"plan", "whole region", "original model (onnxruntime)"} <= set(e2e) and all(t > 0 for t in e2e.values())
    assert ("provider region" in model.report.plan_summary) == (min(e2e, key=e2e.get) != "plan")
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    _close(model(x), _reference(x))
