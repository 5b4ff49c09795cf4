"""MeasuredCost's edges: what reaches the code generator, the providers and the oracle (the graph,
the candidate, the shared reference and its data), records of odd failures, and the statistics
summed over several kernels. Fakes as in test_measure (NumPy/torch kernels, a fake timer); a fake
clock where the statistics count seconds."""

import types

import numpy as np
import pytest
import torch

from kernorch.ir import oracle
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from kernorch.orchestrate import measure
from kernorch.orchestrate.tuning_db import Record
from kernorch.providers import BuiltKernel, Provider

from test_measure import SETTLED, UNSETTLED_M, W, FakeCodegen, FakeKernel, Timer, TorchLike, _cands, _chain, \
    _linear, _measurer, _timer_by_name


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch):
    monkeypatch.setattr(measure, "REMEASURE_PAUSE_S", 0.0)


def _clock(monkeypatch):
    """measure's clock ticks one second per reading; sleeps are recorded, not slept."""
    ticks = iter(range(10**6))
    sleeps = []
    monkeypatch.setattr(measure, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks)),
                                                               sleep=sleeps.append))
    return sleeps


def _reference_of_seed(monkeypatch, seed):
    """Make the shared reference distinguishable from any data a provider would draw itself."""
    real = oracle.reference
    monkeypatch.setattr(measure.oracle, "reference", lambda g, sub, s=0: real(g, sub, seed))
    return lambda g, sub: real(g, sub, seed)[0]


def _broken_reference(monkeypatch, message):
    def broken(*a, **k):
        raise ValueError(message)
    monkeypatch.setattr(measure.oracle, "reference", broken)


class Logged(TorchLike):
    """TorchLike that logs can_run's arguments and the inputs of every run."""

    def __init__(self, name, **kw):
        super().__init__(name, **kw)
        self.asked, self.runs = [], []

    def can_run(self, g, members, outputs):
        self.asked.append((g, set(members), list(outputs)))
        return super().can_run(g, members, outputs)

    def build(self, g, members, outputs):
        k = super().build(g, members, outputs)
        run = k.run
        k.run = lambda xs: (self.runs.append([t.numpy().copy() for t in xs]), run(xs))[1]
        return k


# ---------------------------------------------------------------------------------------------
# What the oracle, the generator and the providers are asked
# ---------------------------------------------------------------------------------------------

def test_verify_uses_the_shared_reference_or_computes_one():
    g, n, e = _chain()
    k = FakeKernel(g, {n, e}, [e])
    assert measure.verify(g, k, {n, e}) == (True, "ok")
    feeds, outs = oracle.reference(g, g.subgraph({n, e}, [e]))
    ok, detail = measure.verify(g, k, {n, e}, (feeds, {e: outs[e] + 1}))
    assert not ok and detail.startswith(f"output %{e}: max abs error 1 >")


def test_can_generate_and_kernel_providers_ask_about_the_candidate(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (lin,) = _cands(g, [mm, r])
    p = Logged("torch", own_pool=True)
    m, fake = _measurer(tmp_path, monkeypatch, g, FakeCodegen(can=lambda ms: ms == {s}), providers=[p])
    assert m.can_generate(lin) and m.kernel_providers(lin) == [p]
    assert fake.asked[0] == (g, {mm, r}, [r]) and all(a == (g, {mm, r}, [r]) for a in p.asked)
    (red,) = _cands(g, [s])
    assert m.can_generate(red) is True  # the generator can: no provider is asked
    assert len(p.asked) == 2


def test_layout_and_broadcast_prims_around_a_linear_one_are_for_providers(tmp_path, monkeypatch):
    b = Builder()
    xt = b.permute(b.input((3, 2)), (1, 0))
    mm = b.matmul(xt, b.constant(W))
    y = b.binary(Op.ADD, mm, b.constant(np.ones((1, 4), np.float32)))  # broadcasts the bias
    b.g.outputs = [y]
    kinds = {p.output: p.kind.value for p in b.g.prims}
    assert {"layout", "broadcast", "linear", "elementwise"} <= set(kinds.values())
    (cand,) = _cands(b.g, list(kinds))
    m, _ = _measurer(tmp_path, monkeypatch, b.g, providers=[TorchLike("t")])
    assert m._external(cand) is True


def test_the_timed_data_is_the_shared_reference_for_every_kind_of_kernel(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    feeds_of = _reference_of_seed(monkeypatch, 5)
    want = feeds_of(g, g.subgraph({mm, r}, [r]))
    made = []

    class LinearKernel(FakeKernel):
        def run(self, xs):
            return [np.maximum(np.asarray(xs[0]) @ np.asarray(xs[1]), 0)]

    fake = FakeCodegen(make=lambda *it: made.append(LinearKernel(*it)) or made[-1])
    p, q = Logged("torch", own_pool=True), Logged("ort")
    m, _ = _measurer(tmp_path, monkeypatch, g, fake, providers=[p, q])
    m(cand)
    x = g.inputs[0]
    np.testing.assert_array_equal(made[0].timed_with[0][0], want[x])
    assert p.runs and all(np.array_equal(run[0], want[x]) for run in p.runs)
    m.region(cand)  # regions: ort only
    assert q.runs and all(np.array_equal(run[0], want[x]) for run in q.runs)


def test_a_scalar_constant_a_generated_kernel_takes_as_input_gets_its_value(tmp_path, monkeypatch):
    b = Builder()
    x = b.input((4, 4))
    c = b.scalar(3.0)
    y = b.binary(Op.MUL, x, c)
    b.g.outputs = [y]
    g = b.g

    class TakesScalar(FakeKernel):
        def __init__(self, g, members, outputs):
            super().__init__(g, members, outputs)
            self.inputs = [x, c]  # the immediate as an input, as generated C kernels take it

        def run(self, xs):
            return [np.asarray(xs[0]) * np.asarray(xs[1])]

    made = []
    fake = FakeCodegen(make=lambda *it: made.append(TakesScalar(*it)) or made[-1])
    m, _ = _measurer(tmp_path, monkeypatch, g, fake)
    (cand,) = _cands(g, [y])
    assert m(cand) is not None, m.stats.failures
    assert made[0].timed_with[0][1] == 3.0


def test_a_sink_nobody_reads_is_verified_too(tmp_path, monkeypatch):
    """A multi-output candidate writes its sinks; the reference must hold them even when the
    subgraph's boundary (what the graph reads) does not include them."""
    g, n, e = _chain()
    g.outputs = [n]  # exp is read by nobody
    (cand,) = _cands(g, [n, e])
    assert cand.outputs == {n, e} and g.subgraph({n, e}).outputs == [n]
    m, _ = _measurer(tmp_path, monkeypatch, g)
    assert m(cand) is not None, m.stats.failures

    b = Builder()
    x = b.input((2, 3))
    mm = b.matmul(x, b.constant(W))
    r = b.unary(Op.RELU, mm)
    b.g.outputs = [mm]  # relu is read by nobody

    class Both(TorchLike):
        def build(self, g, members, outputs):
            sub = g.subgraph(members, outputs)
            return BuiltKernel(self.name, list(sub.inputs), list(sub.outputs),
                               lambda xs: [xs[0] @ xs[1], torch.relu(xs[0] @ xs[1])])

    (cand,) = _cands(b.g, [mm, r])
    m, _ = _measurer(tmp_path / "r", monkeypatch, b.g, providers=[Both("ort")])
    m.timer = _timer_by_name({"ort": 1e-4})
    assert m.region(cand) is not None


# ---------------------------------------------------------------------------------------------
# Records of odd failures
# ---------------------------------------------------------------------------------------------

def test_long_failure_messages_are_cut_to_300_characters(tmp_path, monkeypatch):
    g, n, e = _chain()
    (cand,) = _cands(g, [n, e])
    m, _ = _measurer(tmp_path, monkeypatch, g, FakeCodegen(make=lambda *it: FakeKernel(*it, crash=OSError("x" * 400))))
    m(cand)
    (rec,) = m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert rec.status == "run_failed" and rec.detail == ("OSError: " + "x" * 400)[:300]
    assert len(m.stats.failures[0]) <= 400 + 13  # key prefix, then at most 400 characters

    _broken_reference(monkeypatch, "y" * 400)
    m, _ = _measurer(tmp_path / "a", monkeypatch, g)
    m(cand)
    (rec,) = m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert rec.status == "build_failed" and rec.detail == ("reference interpreter failed: " + "y" * 400)[:300]
    gl, mm, r, s = _linear()
    (lin,) = _cands(gl, [mm, r])
    m, _ = _measurer(tmp_path / "b", monkeypatch, gl, providers=[TorchLike("ort")])
    m.region(lin)
    (rec,) = m.db.get(m.region_key(lin), m.target, measure.CODEGEN_VERSION).values()
    assert rec.detail == ("reference interpreter failed: " + "y" * 400)[:300]


def test_a_failing_reference_leaves_providers_unasked(tmp_path, monkeypatch):
    """No reference, nothing to verify against: providers are not tried, and a kernel the
    generator cannot build is still 'cannot generate', not a build failure."""
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    p = Logged("torch", own_pool=True)
    m, _ = _measurer(tmp_path, monkeypatch, g, FakeCodegen(can=lambda ms: False), providers=[p])
    _broken_reference(monkeypatch, "no oracle")
    assert m(cand) is None and p.runs == []
    (rec,) = m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert (rec.provider, rec.status, rec.detail) == ("codegen", "cannot_generate", "no provider can run it")


def test_providers_are_not_tried_on_kernels_without_a_linear_prim(tmp_path, monkeypatch):
    g, n, e = _chain()
    (cand,) = _cands(g, [n, e])

    class Anything(Provider):
        name, own_pool = "torch", True

        def can_run(self, g, members, outputs):
            return True

        def build(self, g, members, outputs):
            raise AssertionError("never built")

    m, _ = _measurer(tmp_path, monkeypatch, g, providers=[Anything()])
    m(cand)
    assert set(m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION)) == {"codegen:c"}


def test_providers_that_are_missing_or_cannot_look_leave_no_record(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])

    class Shy(TorchLike):
        def available(self):
            raise RuntimeError("cannot even ask")

    provs = [TorchLike("missing", own_pool=True, available=False), Shy("shy", own_pool=True),
             TorchLike("torch", own_pool=True)]
    m, _ = _measurer(tmp_path, monkeypatch, g, FakeCodegen(can=lambda ms: False), providers=provs)
    m.timer = _timer_by_name({"torch": 1e-4})
    assert m(cand) is not None
    assert set(m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION)) == {"torch"}


# ---------------------------------------------------------------------------------------------
# Statistics over several kernels
# ---------------------------------------------------------------------------------------------

def test_region_statistics_add_up(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    a, b = _cands(g, [mm, r], [mm, r, s])
    provs = [TorchLike("ort")]
    m, _ = _measurer(tmp_path, monkeypatch, g, providers=provs, roofline=lambda c: 1e-6 * len(c.nodes))
    m.timer = Timer(SETTLED)
    _clock(monkeypatch)
    m.region(a)
    m.region(b)
    assert (m.stats.measured, m.stats.seconds) == (2, 2.0)  # one tick each
    assert m.db.get(m.region_key(a), m.target, measure.CODEGEN_VERSION)["ort"].roofline_s == 2e-6
    m2, _ = _measurer(tmp_path, monkeypatch, g, providers=provs)
    m2.region(a)
    m2.region(b)
    assert (m2.stats.cached, m2.stats.measured) == (2, 0)


def test_kernel_statistics_add_up(tmp_path, monkeypatch):
    g, n, e = _chain()
    cands = _cands(g, [n], [e], [n, e])
    m, _ = _measurer(tmp_path, monkeypatch, g, FakeCodegen(make=lambda *it: FakeKernel(*it, off=1.0)))
    _clock(monkeypatch)
    m.prefetch(cands)
    assert (m.stats.measured, m.stats.seconds, m.stats.failed) == (3, 3.0, 3)
    assert len(m.stats.failures) == 3


def test_a_failure_lists_every_providers_record(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    fake = FakeCodegen(make=lambda *it: FakeKernel(*it, off=1.0))
    m, _ = _measurer(tmp_path, monkeypatch, g, fake, providers=[TorchLike("torch", own_pool=True, wrong=True)])
    assert m(cand) is None
    (line,) = m.stats.failures
    recs = m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION)
    parts = [f"{p} verify_failed: {recs[p].detail}" for p in ("codegen:c", "torch")]
    assert recs["torch"].detail.startswith("output %") and line == f"{m.key(cand)[:12]} {parts[0]}; {parts[1]}"


def test_a_failure_line_is_cut_to_400_characters(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])

    class Broken(TorchLike):
        def build(self, g, members, outputs):
            raise RuntimeError("z" * 400)

    fake = FakeCodegen(make=lambda *it: FakeKernel(*it, crash=OSError("x" * 400)))
    m, _ = _measurer(tmp_path, monkeypatch, g, fake, providers=[Broken("torch", own_pool=True)])
    assert m(cand) is None
    (line,) = m.stats.failures
    want = "; ".join([f"codegen:c run_failed: {('OSError: ' + 'x' * 400)[:300]}",
                      f"torch build_failed: {('RuntimeError: ' + 'z' * 400)[:300]}"])[:400]
    assert line == f"{m.key(cand)[:12]} {want}"


def test_remeasure_statistics_add_up(tmp_path, monkeypatch):
    g, n, e = _chain()
    a, b, c = _cands(g, [n], [e], [n, e])
    m, _ = _measurer(tmp_path, monkeypatch, g)
    sleeps = _clock(monkeypatch)
    m.timer = Timer(UNSETTLED_M, UNSETTLED_M, SETTLED)  # both doubtful, both settle in round 1
    m.prefetch([a, b])
    assert (m.stats.remeasured, m.stats.unsettled) == (2, 0) and sleeps == [0.0]
    m.timer = Timer(UNSETTLED_M)
    m.prefetch([c])
    assert (m.stats.remeasured, m.stats.unsettled) == (3, 1)
    m.timer = Timer(UNSETTLED_M)
    m._memo.clear()
    m.db = type(m.db)(tmp_path / "other.sqlite")
    m.prefetch([a])
    assert m.stats.unsettled == 2
    assert isinstance(m.db.get(m.key(a), m.target, measure.CODEGEN_VERSION)["codegen:c"], Record)


# ---------------------------------------------------------------------------------------------
# How a generated kernel is timed and priced
# ---------------------------------------------------------------------------------------------

class Recording(FakeKernel):
    """Logs the buffers ``_run`` writes into (the outputs of a first ``run``)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.into = []

    def _run(self, ins, outs):
        self.into.append([np.asarray(o).shape for o in outs])
        super()._run(ins, outs)


def test_time_kernel_runs_into_the_outputs_of_a_first_run():
    g, n, e = _chain()
    k = Recording(g, {n, e}, [n, e])
    measure.time_kernel(k, [np.ones((4, 4), np.float32)], lambda fn, p: (fn(), 1e-3)[1])
    assert k.into == [[(4, 4), (4, 4)]]


def test_a_prepared_kernel_is_timed_through_its_prepared_call():
    """A C kernel with ``prepared`` is timed as a native run calls it, not through ``_run``."""
    g, n, e = _chain()

    class Prepared(Recording):
        def prepared(self, ins, outs):
            self.prepared_with = (ins, [np.asarray(o).shape for o in outs])
            return lambda: self.into.append("prepared call")

    k = Prepared(g, {n, e}, [e])
    feed = np.arange(16, dtype=np.float32).reshape(4, 4)
    t = measure.time_kernel(k, [feed], lambda fn, p: (fn(), fn(), 2e-3)[2])
    assert t.seconds == 2e-3 and k.into == ["prepared call"] * 2 and k.timed_with == []
    ins, out_shapes = k.prepared_with
    np.testing.assert_array_equal(ins[0].numpy(), feed)
    assert out_shapes == [(4, 4)]


def test_generated_c_kernels_may_have_their_own_dispatch_cost(tmp_path, monkeypatch):
    g, n, e = _chain()
    (cand,) = _cands(g, [n, e])
    m, _ = _measurer(tmp_path, monkeypatch, g, native_overhead_s=5e-6)
    assert m.native_overhead_s == 5e-6 and m(cand) == pytest.approx(1e-4 + 5e-6)
    m, _ = _measurer(tmp_path / "d", monkeypatch, g, kernel_overhead_s=7e-6)
    assert m.native_overhead_s == 7e-6  # by default the same as every kernel's
