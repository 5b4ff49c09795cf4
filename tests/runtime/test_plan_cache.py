"""runtime/plan_cache.py: a measured compile keeps its final plan in the tuning database; compiling
the same model with the same options again builds that plan without orchestrating or measuring,
and still computes what onnxruntime computes. Other options, or a stored plan that no longer fits,
plan afresh."""

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

import kernorch
from kernorch.orchestrate.measure import CODEGEN_VERSION
from kernorch.orchestrate.tuning_db import Record, TuningDB
from kernorch.runtime import plan_cache

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"
KW = dict(threads=2, progress=False, regions=False, providers=("torch",))


def _members(model) -> list[tuple[int, ...]]:
    return [i.members for i in model.executable.infos]


def _matches_onnxruntime(model) -> None:
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(str(EXAMPLE), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.testing.assert_allclose(model(x), want, rtol=1e-4, atol=1e-4)


def _plan_rows(db_path):
    return [r for r in TuningDB(db_path).rows() if r.record.provider == plan_cache.PROVIDER]


def test_a_warm_compile_builds_the_kept_plan_and_measures_nothing(tmp_path):
    db = tmp_path / "db.sqlite"
    first = kernorch.compile(EXAMPLE, db=db, **KW)
    assert not first.report.plan_reused and first.report.measured > 0
    [row] = _plan_rows(db)
    assert row.key == first.report.plan_key
    second = kernorch.compile(EXAMPLE, db=db, **KW)
    rep = second.report
    assert rep.plan_reused and rep.measured == 0 and rep.context_rounds == []
    assert _members(second) == _members(first)
    assert "the plan of an earlier compile of this model" in second.summary()
    _matches_onnxruntime(second)
    assert len(_plan_rows(db)) == 1  # nothing new to keep


def test_other_options_plan_afresh(tmp_path):
    db = tmp_path / "db.sqlite"
    first = kernorch.compile(EXAMPLE, db=db, **KW)
    other = kernorch.compile(EXAMPLE, db=db, **{**KW, "strategy": "optimal", "tuning_budget": 50})
    assert not other.report.plan_reused and other.report.plan_key != first.report.plan_key
    assert len(_plan_rows(db)) == 2


def test_a_stored_plan_that_no_longer_fits_is_planned_again(tmp_path):
    """A database that distrusts prices (kernorch db retune), a garbled row and a row whose kernels
    do not make a plan of this graph are all planned afresh, and the compile stores a good plan again."""
    db = tmp_path / "db.sqlite"
    first = kernorch.compile(EXAMPLE, db=db, **KW)
    [row] = _plan_rows(db)
    kernels = json.loads(row.record.detail)
    store = TuningDB(db)
    store.distrust({r.key for r in store.rows() if r.record.provider != plan_cache.PROVIDER})
    again = kernorch.compile(EXAMPLE, db=store, **KW)
    assert not again.report.plan_reused and again.report.measured > 0
    store = TuningDB(db)  # a new process: nothing distrusted
    for detail in ("not json", json.dumps([kernels[0]])):  # garbled; a plan missing most of the graph
        store.put(row.key, row.target, CODEGEN_VERSION, Record(plan_cache.PROVIDER, None, plan_cache.PROVIDER, detail))
        model = kernorch.compile(EXAMPLE, db=store, **KW)
        assert not model.report.plan_reused
        _matches_onnxruntime(model)
        assert kernorch.compile(EXAMPLE, db=store, **KW).report.plan_reused  # stored again, good
