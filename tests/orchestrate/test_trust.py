"""Doubtful prices are measured again before they are stored, and flagged when they stay doubtful."""

import pytest

from kernorch.errors import KernorchError
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from kernorch.orchestrate import measure, trust
from kernorch.orchestrate.candidate import multi_output
from kernorch.orchestrate.from_graph import dag_from_graph
from kernorch.orchestrate.measure import MeasuredCost
from kernorch.orchestrate.tuning_db import FAR_ABOVE_ROOFLINE, UNSETTLED, Record, TuningDB
from kernorch.providers.timing import Measurement

SETTLED = Measurement(1e-4, 1e-4, 0.0, 5, 1)
UNSETTLED_M = Measurement(9e-3, 9e-3, 0.0, 0, 20, load=1.0, settled=False)


def _graph():
    b = Builder()
    x = b.input((64, 64))
    y = b.unary(Op.EXP, b.unary(Op.NEG, x))
    b.g.outputs = [y]
    return b.g


class ScriptedTimer:
    """Returns the scripted measurements in turn (the last one forever after)."""

    def __init__(self, *script):
        self.script = list(script)
        self.calls = 0

    def __call__(self, fn, provider=""):
        fn()
        self.calls += 1
        return self.script[min(self.calls, len(self.script)) - 1]


def _measure(tmp_path, timer, roofline=None, require_quiet=False, monkeypatch=None):
    g = _graph()
    dag = dag_from_graph(g)
    cand = multi_output(dag, dag.nodes)
    db = TuningDB(tmp_path / "t.sqlite")
    m = MeasuredCost(g, db, threads=1, providers=[], roofline=roofline, require_quiet=require_quiet)
    m.timer = timer
    return m, cand, db


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch):
    monkeypatch.setattr("kernorch.orchestrate.measure.REMEASURE_PAUSE_S", 0.0)


def test_an_unsettled_price_is_measured_again_and_the_settled_one_stored(tmp_path):
    timer = ScriptedTimer(UNSETTLED_M, SETTLED)
    m, cand, db = _measure(tmp_path, timer)
    assert m(cand) == pytest.approx(1e-4 + m.kernel_overhead_s)
    assert m.stats.remeasured == 1 and m.stats.unsettled == 0 and m.stats.disturbed == 21
    (rec,) = db.get(m.key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert rec.seconds == 1e-4 and rec.flags == "" and rec.samples == 5 and rec.disturbed == 1


def test_a_price_that_never_settles_is_stored_flagged_after_bounded_retries(tmp_path):
    timer = ScriptedTimer(UNSETTLED_M)
    m, cand, db = _measure(tmp_path, timer)
    assert m(cand) is not None
    assert timer.calls == 2  # first attempt + one round: a round that settles nothing ends the rounds
    assert m.stats.unsettled == 1
    (rec,) = db.get(m.key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert UNSETTLED in rec.flag_set and rec.load == 1.0


def test_require_quiet_refuses_to_store_an_unsettled_price(tmp_path):
    m, cand, db = _measure(tmp_path, ScriptedTimer(UNSETTLED_M), require_quiet=True)
    with pytest.raises(KernorchError, match="could not be timed without interference"):
        m(cand)
    assert db.get(m.key(cand), m.target, measure.CODEGEN_VERSION) == {}


def test_a_price_far_above_its_roofline_is_remeasured_then_flagged(tmp_path):
    slow = Measurement(5e-3, 5e-3, 0.0, 5, 0)
    timer = ScriptedTimer(slow)
    m, cand, db = _measure(tmp_path, timer, roofline=lambda c: 1e-6)
    m(cand)
    assert timer.calls == 2
    (rec,) = db.get(m.key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert FAR_ABOVE_ROOFLINE in rec.flag_set and rec.roofline_s == 1e-6
    assert "roofline" in trust.doubt(rec)


def test_rounds_go_on_while_they_settle_kernels(tmp_path, monkeypatch):
    monkeypatch.setattr("kernorch.orchestrate.measure.REMEASURE_ROUNDS", 3)
    g = _graph()
    dag = dag_from_graph(g)
    cands = [multi_output(dag, [n]) for n in dag.nodes]  # two kernels: neg, exp
    db = TuningDB(tmp_path / "t.sqlite")
    m = MeasuredCost(g, db, threads=1, providers=[])
    # first pass: both unsettled; round 1 settles the first, round 2 the second
    m.timer = ScriptedTimer(UNSETTLED_M, UNSETTLED_M, SETTLED, UNSETTLED_M, SETTLED)
    m.prefetch(cands)
    assert m.timer.calls == 5 and m.stats.unsettled == 0


def test_a_price_near_its_roofline_is_measured_once(tmp_path):
    timer = ScriptedTimer(SETTLED)
    m, cand, db = _measure(tmp_path, timer, roofline=lambda c: 5e-5)
    m(cand)
    assert timer.calls == 1 and m.stats.remeasured == 0


def test_better_prefers_a_price_then_settled_then_cheaper():
    ok = Record("c", 2e-3, "ok", samples=5)
    cheap_unsettled = Record("c", 1e-3, "ok", flags=UNSETTLED)
    failed = Record("c", None, "run_failed")
    assert trust.better(failed, ok) is ok and trust.better(ok, failed) is ok
    assert trust.better(cheap_unsettled, ok) is ok
    assert trust.better(Record("c", 3e-3, "ok"), ok) is ok
    assert trust.merge({"c": ok}, {"c": cheap_unsettled, "ort": failed}) == {"c": ok, "ort": failed}


def test_doubt_names_each_reason():
    assert trust.doubt(Record("c", 1e-4, "ok", samples=5, min_s=9e-5, roofline_s=5e-5)) is None
    assert "unsettled" in trust.doubt(Record("c", 1e-4, "ok", samples=0, disturbed=20, flags=UNSETTLED))
    assert "above the fastest sample" in trust.doubt(Record("c", 5e-3, "ok", min_s=1e-3))
    assert trust.doubt(Record("c", 3e-6, "ok", min_s=1e-6)) is None  # microsecond jitter is harmless
    assert trust.doubt(Record("c", None, "build_failed")) is None
