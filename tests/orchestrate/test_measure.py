"""MeasuredCost's bookkeeping: which kernels are built, verified, timed and stored, the record each
attempt leaves, which price is used, and the statistics. The code generator and the providers
are replaced by hand-written NumPy/torch kernels (the reference interpreter judges them), the
timer by a fake that returns given figures; nothing here depends on real speed."""

import types

import numpy as np
import pytest
import torch

from kernorch.errors import KernorchError
from kernorch.options import Env
from kernorch.ir import oracle
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from kernorch.orchestrate import measure
from kernorch.orchestrate.candidate import Candidate, multi_output
from kernorch.orchestrate.from_graph import dag_from_graph
from kernorch.orchestrate.measure import MeasuredCost
from kernorch.orchestrate.measure_stats import MeasureStats
from kernorch.orchestrate.tuning_db import FAR_ABOVE_ROOFLINE, UNSETTLED, Record, TuningDB
from kernorch.providers import BuiltKernel, Provider
from kernorch.providers.select import ProviderRecord
from kernorch.providers.timing import Measurement

SETTLED = Measurement(1e-4, 9e-5, 0.1, 5, 1, load=0.5)
UNSETTLED_M = Measurement(9e-3, 9e-3, 0.0, 0, 20, load=1.5, settled=False)


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch):
    monkeypatch.setattr(measure, "REMEASURE_PAUSE_S", 0.0)


# ---------------------------------------------------------------------------------------------
# Fakes
# ---------------------------------------------------------------------------------------------

def _chain():
    """x -> neg -> exp (two elementwise prims)."""
    b = Builder()
    x = b.input((4, 4))
    n = b.unary(Op.NEG, x)
    e = b.unary(Op.EXP, n)
    b.g.outputs = [e]
    return b.g, n, e


class FakeKernel:
    """What codegen.build_many returns: ``run`` (arrays or tensors in, results out) and ``_run``
    (into preallocated outputs). Computes neg/exp by NumPy, ``off`` added to make it wrong."""

    def __init__(self, g, members, outputs, off=0.0, crash=None, provider="c"):
        sub = g.subgraph(members, outputs)
        self.inputs, self.outputs, self.members = list(sub.inputs), list(outputs), set(members)
        self.ops = {p.output: p.op for p in g.prims}
        self.off, self.crash, self.provider = off, crash, provider
        self.timed_with = []

    def _eval(self, x):
        vals, x = {}, np.asarray(x, dtype=np.float32)
        for v in sorted(self.members):
            src = vals.get(v - 1, x)
            vals[v] = -src if self.ops[v] is Op.NEG else np.exp(src)
        return [vals[v] + self.off for v in self.outputs]

    def run(self, xs):
        if self.crash:
            raise self.crash
        return self._eval(xs[0])

    def _run(self, ins, outs):
        assert all(t.is_contiguous() for t in ins), "kernels read C-contiguous buffers"
        self.timed_with.append([t.numpy().copy() for t in ins])


class FakeCodegen:
    """Stands in for kernorch.codegen: ``can`` decides can_generate, ``make`` builds each item."""

    def __init__(self, can=lambda members: True, make=None):
        self.can, self.make = can, make or (lambda g, m, o: FakeKernel(g, m, o))
        self.batches, self.envs, self.asked = [], [], []

    def can_generate(self, g, members, outputs):
        self.asked.append((g, set(members), list(outputs)))
        return self.can(set(members))

    def build_many(self, items, threads, env=None, options=None):
        self.envs.append((threads, env))
        self.options = options
        self.batches.append([sorted(m) for _, m, _ in items])
        return [self.make(*it) for it in items]


class Timer:
    """Returns the scripted figures in turn (the last forever); records who was timed."""

    def __init__(self, *script):
        self.script, self.who = list(script) or [SETTLED], []

    def __call__(self, fn, provider=""):
        fn()
        self.who.append(provider)
        return self.script[min(len(self.who), len(self.script)) - 1]


def _measurer(tmp_path, monkeypatch, g, fake=None, providers=(), **kw):
    fake = fake or FakeCodegen()
    monkeypatch.setattr(measure, "codegen", fake)
    m = MeasuredCost(g, TuningDB(tmp_path / "t.sqlite"), threads=1, providers=list(providers), **kw)
    m.timer = Timer()
    return m, fake


def _cands(g, *node_sets):
    dag = dag_from_graph(g)
    return [multi_output(dag, ns) for ns in node_sets]


# ---------------------------------------------------------------------------------------------
# Small functions
# ---------------------------------------------------------------------------------------------

def test_stats_count_and_add():
    s = MeasureStats(measured=1, seconds=0.25, remeasured=1, unsettled=2)
    s.count({"a": Record("a", 1.0, "ok", disturbed=3, load=0.5), "b": Record("b", None, "run_failed")})
    s.count({"a": Record("a", 1.0, "ok", disturbed=2, load=0.25)})
    assert (s.disturbed, s.max_load) == (5, 0.5)
    other = MeasureStats(measured=2, cached=7, failed=1, seconds=1.5, disturbed=4, remeasured=3, unsettled=1,
                         max_load=0.75)
    s.add(other)
    assert (s.measured, s.seconds, s.disturbed, s.remeasured, s.unsettled, s.max_load) == (3, 1.75, 9, 4, 3, 0.75)
    assert (s.cached, s.failed, s.failures) == (0, 0, [])  # the driver counts those itself
    s.add(MeasureStats(max_load=0.1))
    assert s.max_load == 0.75


def test_random_feeds_are_the_oracles_in_order():
    b = Builder()
    x, c = b.input((3,)), b.constant(np.array([1.0, 2.0, 3.0], np.float32))
    y = b.binary(Op.ADD, x, c)
    b.g.outputs = [y]
    want = oracle.random_feeds(b.g, [x], 0)[x]
    got = measure.random_feeds(b.g, [c, x])
    np.testing.assert_array_equal(got[0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(got[1], want)
    assert not np.array_equal(measure.random_feeds(b.g, [x], 1)[0], want)


def test_time_kernel_times_run_into_buffers_on_contiguous_copies():
    g, n, e = _chain()
    k = FakeKernel(g, {n, e}, [e], provider="omp")
    feed = np.asfortranarray(np.arange(16, dtype=np.float32).reshape(4, 4))
    seen = []
    t = measure.time_kernel(k, [feed], lambda fn, p: (seen.append(p), fn(), 2e-3)[2])
    assert t == Measurement.exact(2e-3) and seen == ["omp"]
    (ins,) = k.timed_with
    np.testing.assert_array_equal(ins[0], feed)
    del k.provider  # a kernel without a provider name is timed as "c"
    measure.time_kernel(k, [feed], lambda fn, p: (seen.append(p), 1.0)[1])
    assert seen[-1] == "c"


def test_time_kernel_without_a_timer_takes_a_median():
    g, n, e = _chain()
    k = FakeKernel(g, {n, e}, [e])
    t = measure.time_kernel(k, [np.ones((4, 4), np.float32)])
    assert isinstance(t, Measurement) and t.seconds >= 0 and len(k.timed_with) > 1  # warm-up, then samples


def test_priced_keeps_the_evidence_and_flags_an_unsettled_one():
    r = measure.priced("codegen:c", SETTLED, 5e-5, "why")
    assert r == Record("codegen:c", 1e-4, "ok", "why", 5, 1, 9e-5, 0.1, 0.5, 5e-5, "")
    r = measure.priced("x", UNSETTLED_M)
    assert (r.flags, r.roofline_s, r.detail, r.samples, r.disturbed, r.load) == (UNSETTLED, None, "", 0, 20, 1.5)


def test_db_record_of_each_provider_status():
    ok = ProviderRecord("ort", "ok", seconds=2e-3, reason="r" * 400, timing=SETTLED)
    assert measure._db_record(ok, 1e-5) == measure.priced("ort", SETTLED, 1e-5, "r" * 300)
    bare = measure._db_record(ProviderRecord("ort", "ok", seconds=2e-3, reason=None))
    assert (bare.seconds, bare.samples, bare.detail, bare.flags) == (2e-3, 1, "", "")
    wrong = measure._db_record(ProviderRecord("ort", "wrong", max_err=1.0, reason="w" * 400))
    assert wrong == Record("ort", None, "verify_failed", "w" * 300)
    assert measure._db_record(ProviderRecord("ov", "build_failed", reason=None)) == Record("ov", None, "build_failed")


def test_codegen_provider_names():
    assert measure.codegen_provider(types.SimpleNamespace(provider="triton")) == "codegen:triton"
    assert measure.codegen_provider(object()) == "codegen:c"


class Named(Provider):
    def __init__(self, name, available=True, own_pool=False):
        self.name, self._available, self.own_pool = name, available, own_pool

    def available(self):
        return self._available


def test_external_providers_by_name(monkeypatch):
    every = [Named("ort"), Named("openvino", available=False), Named("torch"), Named("torch_onednn"),
             Named("torch_jit")]
    threads = []
    monkeypatch.setattr(measure, "default_providers", lambda t, bf16_tolerance=None: threads.append(t) or every)
    assert [p.name for p in measure.external_providers(2, None)] == ["ort", "torch", "torch_onednn", "torch_jit"]
    assert [p.name for p in measure.external_providers(2, ["torch", "openvino"])] == ["torch"]
    assert [p.name for p in measure.external_providers(2)] == ["ort", "torch", "torch_onednn"]
    assert measure.external_providers(2, []) == [] and threads == [2, 2, 2, 2]
    with pytest.raises(KernorchError) as e:
        measure.external_providers(2, ["tvm", "ort", "aaa"])
    assert str(e.value) == "unknown provider(s) aaa, tvm; choose from ort, openvino, torch, torch_onednn, torch_jit"


def test_constructor_defaults(tmp_path, monkeypatch):
    g, n, e = _chain()
    seen = []
    monkeypatch.setattr(measure, "external_providers", lambda threads: seen.append(threads) or [Named("p")])
    env = Env.read({"KERNORCH_NUM_THREADS": "3", "CC": "my-cc"})
    monkeypatch.setattr(Env, "read", classmethod(lambda cls, environ=None: env))
    monkeypatch.setattr(measure, "target_name", lambda t, threads, cc=None, cflags=(): f"{t}|{threads}|{cc}")
    m = MeasuredCost(g, TuningDB(tmp_path / "t.sqlite"))
    assert m.threads == 3 and seen == [3] and [p.name for p in m.providers] == ["p"] and m.env is env
    assert m.target == "cpu|3|my-cc"
    assert (m.batch, m.kernel_overhead_s, m.roofline, m.require_quiet, m.cluster) == (32, 25e-6, None, False, None)
    t = m.timer
    assert (t.warmup, t.repeats, t.min_sample_s, t.min_warmup_s) == (2, 5, 1e-4, 0.002)
    m = MeasuredCost(g, TuningDB(tmp_path / "u.sqlite"), target="cuda", threads=2, providers=())
    assert m.target == "cuda|2|my-cc" and m.providers == []


# ---------------------------------------------------------------------------------------------
# Generated kernels
# ---------------------------------------------------------------------------------------------

def test_a_generated_kernel_is_verified_timed_on_the_reference_data_and_stored(tmp_path, monkeypatch):
    g, n, e = _chain()
    (cand,) = _cands(g, [n, e])
    progress = []
    fake = FakeCodegen(make=lambda *it: FakeKernel(*it, provider="omp"))
    m, fake = _measurer(tmp_path, monkeypatch, g, fake, roofline=lambda c: 3.5e-5 * len(c.nodes),
                        progress=lambda *a: progress.append(a))
    assert m(cand) == pytest.approx(1e-4 + 25e-6)
    assert fake.batches == [[[n, e]]] and m.timer.who == ["omp"] and progress == [(1, 1)]
    assert fake.envs == [(1, m.env)]
    (rec,) = m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert rec == measure.priced("codegen:omp", SETTLED, 7e-5)
    assert m.best[m.key(cand)] == rec
    assert (m.stats.measured, m.stats.cached, m.stats.failed, m.stats.disturbed, m.stats.max_load) == (1, 0, 0, 1, 0.5)
    assert m.stats.seconds > 0
    # a second measurer on the same database measures nothing
    m2, fake2 = _measurer(tmp_path, monkeypatch, g)
    assert m2(cand) == pytest.approx(1e-4 + 25e-6) and fake2.batches == [] and m2.stats.cached == 1


def test_the_timed_data_is_the_reference_feeds(tmp_path, monkeypatch):
    g, n, e = _chain()
    (cand,) = _cands(g, [n, e])
    made = []
    fake = FakeCodegen(make=lambda *it: made.append(FakeKernel(*it)) or made[-1])
    m, _ = _measurer(tmp_path, monkeypatch, g, fake)
    m(cand)
    want = oracle.reference(g, g.subgraph({n, e}, [e]))[0]
    np.testing.assert_array_equal(made[0].timed_with[0][0], want[g.inputs[0]])


@pytest.mark.parametrize("how,status,detail", [
    ("wrong", "verify_failed", "output %{e}: max abs error"),
    ("crash", "run_failed", "ZeroDivisionError: no\nmore"),
    ("build", "build_failed", "compiler said no"),
    ("build_empty", "build_failed", "KeyError"),
])
def test_a_failed_generated_kernel_is_recorded_and_counted(tmp_path, monkeypatch, how, status, detail):
    g, n, e = _chain()
    (cand,) = _cands(g, [n, e])

    def make(g, m, o):
        if how == "wrong":
            return FakeKernel(g, m, o, off=1.0)
        if how == "crash":
            return FakeKernel(g, m, o, crash=ZeroDivisionError("no\nmore"))
        raise RuntimeError("compiler said no\nline 2") if how == "build" else KeyError()

    m, fake = _measurer(tmp_path, monkeypatch, g, FakeCodegen(make=make))
    assert m(cand) is None
    (rec,) = m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert rec.status == status and rec.seconds is None and rec.detail.startswith(detail.format(e=e))
    assert rec.provider == ("codegen" if how.startswith("build") else "codegen:c")
    assert m.stats.failed == 1 and m.stats.failures == [f"{m.key(cand)[:12]} {rec.provider} {status}: {rec.detail}"]
    assert m.timer.who == []


def test_a_failed_batch_is_built_again_one_by_one(tmp_path, monkeypatch):
    g, n, e = _chain()
    cands = _cands(g, [n], [e], [n, e])

    class Picky(FakeCodegen):
        def build_many(self, items, threads, env=None, options=None):
            self.envs.append((threads, env))
            self.batches.append([sorted(m) for _, m, _ in items])
            if any(m == {e} for _, m, _ in items):
                raise RuntimeError("exp is broken" if len(items) == 1 else "the batch failed")
            return [FakeKernel(*it) for it in items]

    m, fake = _measurer(tmp_path, monkeypatch, g, Picky())
    m.prefetch(cands)
    assert fake.batches == [[[n], [e], [n, e]], [[n]], [[e]], [[n, e]]]
    assert fake.envs == [(1, m.env)] * 4
    assert m(cands[0]) is not None and m(cands[2]) is not None and m(cands[1]) is None
    (rec,) = m.db.get(m.key(cands[1]), m.target, measure.CODEGEN_VERSION).values()
    assert (rec.provider, rec.status, rec.detail) == ("codegen", "build_failed", "exp is broken")


def test_kernels_the_generator_cannot_build_are_left_out_of_the_batch(tmp_path, monkeypatch):
    g, n, e = _chain()
    cands = _cands(g, [n], [e], [n, e])
    m, fake = _measurer(tmp_path, monkeypatch, g, FakeCodegen(can=lambda ms: ms != {e}))
    m.batch = 2
    m.prefetch(cands)
    assert sorted(fake.batches) == [[[n]], [[n, e]]]
    assert m(cands[0]) is not None and m(cands[2]) is not None and m(cands[1]) is None
    (rec,) = m.db.get(m.key(cands[1]), m.target, measure.CODEGEN_VERSION).values()
    assert (rec.provider, rec.status, rec.detail) == ("codegen", "cannot_generate", "no provider can run it")


def test_batches_and_progress_count_every_candidate(tmp_path, monkeypatch):
    g, n, e = _chain()
    cands = _cands(g, [n], [e], [n, e])
    progress = []
    m, fake = _measurer(tmp_path, monkeypatch, g, progress=lambda d, t: progress.append((d, t)))
    m.batch = 2
    m.prefetch(cands + cands)  # duplicates are measured once
    assert sorted(map(len, fake.batches)) == [1, 2] and progress == [(1, 3), (2, 3), (3, 3)]
    assert m.stats.measured == 3 and all(m.has(c) for c in cands)


def test_a_failing_reference_interpreter_records_why(tmp_path, monkeypatch):
    g, n, e = _chain()
    (cand,) = _cands(g, [n, e])
    m, fake = _measurer(tmp_path, monkeypatch, g)

    def broken(*a, **k):
        raise ValueError("interpreter broke\nline 2")

    monkeypatch.setattr(measure.oracle, "reference", broken)
    assert m(cand) is None
    (rec,) = m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert (rec.provider, rec.status) == ("codegen", "build_failed")
    assert rec.detail == "reference interpreter failed: interpreter broke"


# ---------------------------------------------------------------------------------------------
# External providers
# ---------------------------------------------------------------------------------------------

W = np.arange(12, dtype=np.float32).reshape(3, 4) / 10 - 0.5


def _linear():
    """x @ w -> relu -> transposed (one linear prim and its epilogue); w a constant."""
    b = Builder()
    x = b.input((2, 3))
    mm = b.matmul(x, b.constant(W))
    r = b.unary(Op.RELU, mm)
    s = b.reduce(Op.SUM, r, (1,), True)
    b.g.outputs = [s]
    return b.g, mm, r, s


class TorchLike(Provider):
    """relu(x @ w) by torch; ``wrong`` adds 1; ``refuse`` says no; logs can_run answers."""

    def __init__(self, name, own_pool=False, wrong=False, refuse=False, available=True):
        self.name, self.own_pool, self.wrong, self.refuse, self._available = name, own_pool, wrong, refuse, available

    def available(self):
        return self._available

    def can_run(self, g, members, outputs):
        return "refused" if self.refuse else True

    def build(self, g, members, outputs):
        sub = g.subgraph(members, outputs)
        return BuiltKernel(self.name, list(sub.inputs), list(sub.outputs),
                           lambda xs: [torch.relu(xs[0] @ xs[1]) + (1.0 if self.wrong else 0.0)])


def _timer_by_name(times):
    def timer(fn, provider):
        fn()
        return times[provider]
    return timer


def test_a_linear_kernel_is_priced_by_providers_and_the_own_pool_is_preferred(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    provs = [TorchLike("ort"), TorchLike("torch", own_pool=True), TorchLike("onednn", own_pool=True, wrong=True),
             TorchLike("jit", refuse=True)]
    m, fake = _measurer(tmp_path, monkeypatch, g, FakeCodegen(can=lambda ms: False), providers=provs,
                        roofline=lambda c: 3e-6)
    assert m.can_generate(cand)
    assert [p.name for p in m.kernel_providers(cand)] == ["torch", "onednn"]
    m.timer = _timer_by_name({"ort": 1e-4, "torch": 3e-4, "onednn": 1e-5})
    assert m(cand) == pytest.approx(3e-4 + 25e-6)  # ort is cheaper, but on a pool of its own
    recs = m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION)
    assert set(recs) == {"torch", "onednn"}  # ort was not asked: an own-pool provider can run it
    assert recs["torch"] == measure.priced("torch", Measurement.exact(3e-4), 3e-6)
    assert recs["onednn"].status == "verify_failed" and recs["onednn"].detail.startswith("output %")
    assert m.best[m.key(cand)].provider == "torch"


def test_a_foreign_pool_provider_runs_what_the_own_pool_cannot(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    provs = [TorchLike("ort"), TorchLike("torch", own_pool=True, refuse=True)]
    m, fake = _measurer(tmp_path, monkeypatch, g, FakeCodegen(can=lambda ms: False), providers=provs)
    assert [p.name for p in m.kernel_providers(cand)] == ["ort"]
    m.timer = _timer_by_name({"ort": 1e-4})
    # its price carries the switch to its pool and back, which its isolated timing never sees
    assert m(cand) == pytest.approx(1e-4 + 25e-6 + measure.POOL_SWITCH_S)
    assert set(m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION)) == {"ort"}  # the refusal is not stored
    region = measure.REGION_PREFIX + m.key(cand)  # a region's timing includes its one switch
    m._remember(region, {"ort": Record("ort", 1e-4, "ok")})
    assert m._memo[region] == pytest.approx(1e-4 + 25e-6)


def test_generated_and_provider_kernels_compete(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])

    class LinearKernel(FakeKernel):
        def run(self, xs):
            return [np.maximum(np.asarray(xs[0]) @ np.asarray(xs[1]), 0)]

    provs = [TorchLike("torch", own_pool=True)]
    m, fake = _measurer(tmp_path, monkeypatch, g, FakeCodegen(make=lambda *it: LinearKernel(*it)), providers=provs)
    m.timer = _timer_by_name({"c": 2e-4, "torch": 3e-4})
    assert m(cand) == pytest.approx(2e-4 + 25e-6)
    assert set(m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION)) == {"codegen:c", "torch"}
    m.kernel_overhead_s = 0.0
    m._remember(m.key(cand), {"torch": Record("torch", 1e-4, "ok"), "codegen:c": Record("codegen:c", 2e-4, "ok")})
    assert m._memo[m.key(cand)] == 1e-4


@pytest.mark.parametrize("nodes,external", [("mm r", True), ("mm", True), ("r", False), ("mm r s", False)])
def test_which_kernels_providers_are_asked_for(tmp_path, monkeypatch, nodes, external):
    """One linear prim with elementwise, broadcast and layout prims around it; not a reduction."""
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [{"mm": mm, "r": r, "s": s}[k] for k in nodes.split()])
    m, fake = _measurer(tmp_path, monkeypatch, g, FakeCodegen(can=lambda ms: False), providers=[TorchLike("t")])
    assert m._external(cand) is external and m.can_generate(cand) is external
    m0, _ = _measurer(tmp_path, monkeypatch, g, FakeCodegen(can=lambda ms: False), providers=[])
    assert m0._external(cand) is False


def test_two_linear_prims_are_not_for_providers(tmp_path, monkeypatch):
    b = Builder()
    x = b.input((2, 3))
    a = b.matmul(x, b.constant(W))
    c = b.matmul(a, b.constant(W.T.copy()))
    b.g.outputs = [c]
    (cand,) = _cands(b.g, [a, c])
    m, _ = _measurer(tmp_path, monkeypatch, b.g, providers=[TorchLike("t")])
    assert m._external(cand) is False


def test_a_price_of_a_provider_left_out_of_this_run_is_not_used(tmp_path, monkeypatch):
    g, n, e = _chain()
    (cand,) = _cands(g, [n, e])
    m, _ = _measurer(tmp_path, monkeypatch, g, providers=[Named("ort")])
    m.kernel_overhead_s = 0.0
    k = m.key(cand)
    m._remember(k, {"tvm": Record("tvm", 1e-6, "ok"), "codegen:c": Record("codegen:c", 2e-4, "ok")})
    assert m._memo[k] == 2e-4 and m.best[k].provider == "codegen:c"
    m._remember(k, {"ort": Record("ort", 1e-6, "ok"), "codegen:c": Record("codegen:c", 2e-4, "ok")})
    assert m._memo[k] == 2e-4  # ort is on a foreign pool: the generated kernel is preferred
    m._remember(k, {"ort": Record("ort", 1e-6, "ok"), "codegen:c": Record("codegen:c", None, "run_failed")})
    assert m._memo[k] == 1e-6 + measure.POOL_SWITCH_S  # ... unless nothing on the own pool runs it
    m._remember(k, {"ort": Record("ort", None, "run_failed")})
    assert m._memo[k] is None


# ---------------------------------------------------------------------------------------------
# Regions
# ---------------------------------------------------------------------------------------------

def test_a_region_is_priced_by_whole_graph_providers_only(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    provs = [TorchLike("ort"), TorchLike("openvino", wrong=True), TorchLike("torch", own_pool=True)]
    m, fake = _measurer(tmp_path, monkeypatch, g, providers=provs, roofline=lambda c: 2e-6)
    m.timer = _timer_by_name({"ort": 5e-4})
    key = m.region_key(cand)
    assert key == "region:" + m.key(cand)
    assert m.region(cand) == pytest.approx(5e-4 + 25e-6)
    recs = m.db.get(key, m.target, measure.CODEGEN_VERSION)
    assert set(recs) == {"ort", "openvino"} and recs["ort"].roofline_s == 2e-6
    assert recs["openvino"].status == "verify_failed"
    assert (m.stats.measured, m.stats.failed, fake.batches) == (1, 0, [])
    assert m.region(cand) == pytest.approx(5e-4 + 25e-6) and m.stats.measured == 1  # memo
    m2, _ = _measurer(tmp_path, monkeypatch, g, providers=provs)
    assert m2.region(cand) == pytest.approx(5e-4 + 25e-6) and m2.stats.cached == 1 and m2.stats.measured == 0


def test_a_region_nobody_can_run_is_not_a_failure(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    m, _ = _measurer(tmp_path, monkeypatch, g, providers=[TorchLike("torch", own_pool=True)])
    assert m.region(cand) is None and m.stats.failed == 0
    (rec,) = m.db.get(m.region_key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert (rec.provider, rec.status, rec.detail) == ("codegen", "cannot_generate", "no provider runs whole regions")


def test_a_region_whose_reference_fails_records_why(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    m, _ = _measurer(tmp_path, monkeypatch, g, providers=[TorchLike("ort")])

    def broken(*a, **k):
        raise ValueError("no oracle")

    monkeypatch.setattr(measure.oracle, "reference", broken)
    assert m.region(cand) is None
    (rec,) = m.db.get(m.region_key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert (rec.provider, rec.status, rec.detail) == ("codegen", "cannot_generate",
                                                      "reference interpreter failed: no oracle")


def test_a_doubtful_region_is_measured_again_at_once(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    m, _ = _measurer(tmp_path, monkeypatch, g, providers=[TorchLike("ort")])
    m.timer = Timer(UNSETTLED_M, UNSETTLED_M, SETTLED)
    assert m.region(cand) == pytest.approx(1e-4 + 25e-6)
    assert len(m.timer.who) == 3 and m.stats.remeasured == 2 and m.stats.measured == 1


def test_a_region_still_doubtful_after_the_rounds_is_stored_flagged(tmp_path, monkeypatch):
    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    m, _ = _measurer(tmp_path, monkeypatch, g, providers=[TorchLike("ort")])
    m.timer = Timer(UNSETTLED_M)
    m.region(cand)
    assert len(m.timer.who) == 1 + measure.REMEASURE_ROUNDS
    (rec,) = m.db.get(m.region_key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert UNSETTLED in rec.flag_set


# ---------------------------------------------------------------------------------------------
# Re-measuring, the cluster
# ---------------------------------------------------------------------------------------------

def test_require_quiet_names_the_count_and_the_load(tmp_path, monkeypatch):
    g, n, e = _chain()
    cands = _cands(g, [n], [e])
    m, _ = _measurer(tmp_path, monkeypatch, g, require_quiet=True)
    m.timer = Timer(UNSETTLED_M)
    with pytest.raises(KernorchError) as err:
        m.prefetch(cands)
    assert str(err.value).startswith("2 kernel(s) could not be timed without interference (other processes kept "
                                     "1.5 cores busy); their prices were not stored.")
    assert m.db.get(m.key(cands[0]), m.target, measure.CODEGEN_VERSION) == {}


def test_far_above_the_roofline_stays_flagged_when_stored(tmp_path, monkeypatch):
    g, n, e = _chain()
    (cand,) = _cands(g, [n, e])
    m, _ = _measurer(tmp_path, monkeypatch, g, roofline=lambda c: 1e-7)
    m.timer = Timer(Measurement(5e-3, 5e-3, 0.0, 5, 0))
    assert m(cand) == pytest.approx(5e-3 + 25e-6)
    (rec,) = m.db.get(m.key(cand), m.target, measure.CODEGEN_VERSION).values()
    assert rec.flag_set == {FAR_ABOVE_ROOFLINE} and m.stats.unsettled == 0 and m.stats.remeasured == 1


def test_a_cluster_measures_and_this_process_stores(tmp_path, monkeypatch):
    g, n, e = _chain()
    cands = _cands(g, [n], [n, e])
    asked = []

    class Cluster:
        def measure(self, measurer, items):
            asked.append((measurer, [k for k, _ in items]))
            return [(k, {"codegen:c": Record("codegen:c", 1e-3, "ok")}) for k, _ in items]

    m, fake = _measurer(tmp_path, monkeypatch, g, cluster=Cluster())
    m.kernel_overhead_s = 0.0
    m.prefetch(cands)
    assert asked == [(m, [m.key(c) for c in cands])] and fake.batches == []
    assert [m(c) for c in cands] == [1e-3, 1e-3]
    assert m.db.get(m.key(cands[1]), m.target, measure.CODEGEN_VERSION)["codegen:c"].seconds == 1e-3
    m.prefetch(cands)
    assert len(asked) == 1  # nothing left to measure


def test_ordered_outputs_follow_the_graph():
    g, n, e = _chain()
    c = Candidate(frozenset({n, e}), frozenset({e, n}), frozenset())
    assert measure.ordered_outputs({n: 0, e: 1}, c) == [n, e]
    assert measure.ordered_outputs({n: 1, e: 0}, c) == [e, n]


def test_generated_and_library_kernels_are_compared_with_their_own_dispatch_costs(tmp_path, monkeypatch):
    """A generated C kernel runs inside a native run; a library kernel is called from Python: the
    cheaper kernel in the model wins, not the cheaper isolated timing."""
    g, n, e = _chain()
    (cand,) = _cands(g, [n, e])
    m, _ = _measurer(tmp_path, monkeypatch, g, providers=[TorchLike("torch", own_pool=True)])
    m.kernel_overhead_s, m._native_overhead_s = 25e-6, 1e-6
    k = m.key(cand)
    m._remember(k, {"torch": Record("torch", 10e-6, "ok"), "codegen:c": Record("codegen:c", 30e-6, "ok")})
    assert m.best[k].provider == "codegen:c" and m._memo[k] == pytest.approx(31e-6)
    m._remember(k, {"torch": Record("torch", 5e-6, "ok"), "codegen:c": Record("codegen:c", 30e-6, "ok")})
    assert m.best[k].provider == "torch" and m._memo[k] == pytest.approx(30e-6)
    m._native_overhead_s = None  # the same dispatch cost for both
    assert m.native_overhead_s == 25e-6


def test_a_provider_whose_check_raises_is_not_asked(tmp_path, monkeypatch):
    class Raises(TorchLike):
        def can_run(self, g, members, outputs):
            raise RuntimeError("looked and fell over")

    g, mm, r, s = _linear()
    (cand,) = _cands(g, [mm, r])
    provs = [Raises("bad", own_pool=True), TorchLike("torch", own_pool=True)]
    m, _ = _measurer(tmp_path, monkeypatch, g, FakeCodegen(can=lambda ms: False), providers=provs)
    assert [p.name for p in m.kernel_providers(cand)] == ["torch"]


def test_retime_times_the_candidates_in_turn_and_keeps_each_ones_cheapest_attempt(tmp_path, monkeypatch):
    g, n, e = _chain()
    cands = _cands(g, [n], [e], [n, e])
    m, fake = _measurer(tmp_path, monkeypatch, g)
    m.timer = Timer(*(Measurement(s, s, 0.0, 5, 0) for s in (3e-4, 3e-4, 9e-4)))
    m.prefetch(cands)  # the fused kernel's first timing came from a slow phase
    figures = [5e-4, 4e-4, 2e-4,   1e-4, 6e-4, 3e-4,   4e-4, 5e-4, 4e-4]  # round by round
    m.timer = Timer(*(Measurement(s, s, 0.0, 5, 0) for s in figures))
    m.retime(cands, rounds=3)
    assert fake.batches[1:] == [[[n], [e], [n, e]]] * 3  # each round times all three in turn
    stored = [m.db.get(m.key(c), m.target, measure.CODEGEN_VERSION)["codegen:c"].seconds for c in cands]
    assert stored == [1e-4, 3e-4, 2e-4]  # the cheapest attempt, the first one included
    assert [m(c) for c in cands] == [s + 25e-6 for s in stored]
    assert m.stats.remeasured == 3


def test_retimed_prices_are_settled_for_a_later_compile_on_the_same_database(tmp_path, monkeypatch):
    """retime stores its prices flagged ``retimed``; a new measurer on the same database reads them
    as settled (recheck.py skips them), not as doubtful, and a plain measurement clears the flag."""
    g, n, e = _chain()
    cands = _cands(g, [n], [e], [n, e])
    m, _ = _measurer(tmp_path, monkeypatch, g)
    m.prefetch(cands)
    assert not any(m.settled(c) for c in cands)
    m.retime(cands, rounds=1)
    later, _ = _measurer(tmp_path, monkeypatch, g)
    later.prefetch(cands)
    assert all(later.settled(c) for c in cands)
    rec = later.db.get(later.key(cands[2]), later.target, measure.CODEGEN_VERSION)["codegen:c"]
    assert "retimed" in rec.flag_set and not rec.doubtful
    retune, _ = _measurer(tmp_path, monkeypatch, g)
    retune.db.distrust([retune.key(cands[2])])  # kernorch db retune: measured again, plainly
    retune.prefetch(cands)
    again, _ = _measurer(tmp_path, monkeypatch, g)
    again.prefetch(cands)
    assert [again.settled(c) for c in cands] == [True, True, False]
