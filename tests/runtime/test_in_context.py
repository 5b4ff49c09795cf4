"""Pricing in context: kernels timed inside real calls, prices updated from them, the solver run
again, and the plan that runs fastest kept (runtime/in_context.py)."""

import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
import torch

import kernorch
from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.dag import make_dag
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.priced import PricedCandidates
from kernorch.orchestrate.strategies import orchestrate
from kernorch.runtime import benchmark, in_context
from kernorch.runtime.report import CompileReport

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"


class Chain(torch.nn.Module):
    def forward(self, x, y):
        h = torch.tanh(x) * 2.0 + y
        return torch.softmax(h, dim=-1) * y, h.sum(dim=0)


def _unfused(tmp_path):
    x, y = torch.randn(8, 33), torch.randn(8, 33)
    model = kernorch.compile(Chain(), (x, y), strategy="unfused", cost="model", providers=(), regions=False,
                             progress=False, db=tmp_path / "db.sqlite")
    return model, {"x": x.numpy(), "y": y.numpy()}, (x, y)


def test_clock_gets_a_time_before_and_after_every_kernel_and_changes_no_result(tmp_path):
    model, _, (x, y) = _unfused(tmp_path)
    calls = model.executable._calls()
    assert any(r.n > 1 for r in calls.native_runs), "the unfused plan of C kernels has a native run of several kernels"
    want = model(x, y)
    before = time.perf_counter()
    clock: list[float] = []
    got = calls([x, y], False, clock)
    after = time.perf_counter()
    # The native driver's readings are on perf_counter's clock: in order, inside the call.
    assert len(clock) == len(model.kernels) + 1 and clock == sorted(clock)
    assert before <= clock[0] and clock[-1] <= after
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_profile_in_call_times_each_kernel_of_a_native_run(tmp_path):
    model, feeds, _ = _unfused(tmp_path)
    ex = model.executable
    per_kernel, call_s = ex.profile_in_call(feeds, 5)
    assert len(per_kernel) == len(ex.kernels) and all(t > 0 for t in per_kernel) and call_s > 0
    # Medians per kernel need not add up to the median call exactly, but cannot exceed it by much.
    assert sum(per_kernel) < 3 * call_s


class _Prices(PricedCandidates):
    """Prices by node set, from a table: a stand-in for the measurer."""

    def __init__(self, table: dict[frozenset, float]) -> None:
        self.g = SimpleNamespace(prims=[])
        self._start_memo()
        self._memo.update({self.key_of(n): p for n, p in table.items()})

    @staticmethod
    def key_of(nodes) -> str:
        return ",".join(map(str, sorted(nodes)))

    def key(self, cand: Candidate) -> str:
        return self.key_of(cand.nodes)

    def prefetch(self, cands) -> None:
        for c in cands:
            self._memo.setdefault(self.key(c), None)

    def can_generate(self, cand: Candidate) -> bool:
        return True


def test_prices_in_context_replace_the_seen_and_scale_the_rest():
    p = _Prices({frozenset({0}): 1.0, frozenset({1}): 2.0, frozenset({0, 1}): 4.0})
    cand = lambda *n: Candidate(frozenset(n), frozenset(n), frozenset())  # noqa: E731
    assert p(cand(0)) == 1.0 and p.hot(cand(0)) == 1.0
    p.price_in_context({p.key_of({0}): 3.0})  # three times its price in the model: so are the others
    assert p(cand(0)) == 3.0 and p(cand(1)) == 6.0 and p(cand(0, 1)) == 12.0
    assert p.hot(cand(0)) == 1.0 and p.hot(cand(1)) == 2.0  # the measured prices stay
    assert p(cand(2)) is None  # not a kernel anyone can build


def test_each_provider_is_scaled_by_what_the_model_did_to_its_own_kernels():
    # nodes 0-2 and 9 are provider "a" (twice as slow in the model), 3-5 and 10 "b" (as priced),
    # 6-7 and 11 "c": too few of c seen, so c is scaled over every kernel seen, (2*3 + 3 + 2) / 8.
    table = {frozenset({n}): 1.0 for n in range(12)}
    p = _Prices(table)
    provider = dict.fromkeys([0, 1, 2, 9], "a") | dict.fromkeys([3, 4, 5, 10], "b") | dict.fromkeys([6, 7, 11], "c")
    p.best = {p.key_of({n}): SimpleNamespace(provider=name) for n, name in provider.items()}
    seen = {0: 2.0, 1: 2.0, 2: 2.0, 3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0}
    p.price_in_context({p.key_of({n}): t for n, t in seen.items()})
    cand = lambda n: Candidate(frozenset({n}), frozenset({n}), frozenset())  # noqa: E731
    assert p(cand(9)) == pytest.approx(2.0) and p(cand(10)) == pytest.approx(1.0)
    assert p(cand(11)) == pytest.approx(11.0 / 8.0)


def test_a_kernel_slow_in_context_is_replaced_and_the_fastest_plan_kept(monkeypatch):
    # a -> b -> c -> d. Alone, the pairs {a,b} and {c,d} (1.0 each) beat single kernels (0.6 each).
    dag = make_dag({0: (), 1: (0,), 2: (1,), 3: (2,)})
    table = {frozenset(s): p for s, p in [({0, 1}, 1.0), ({2, 3}, 1.0), ({0}, 0.6), ({1}, 0.6), ({2}, 0.6),
                                          ({3}, 0.6)]}
    prices = _Prices(table)
    knobs = Knobs(context_rounds=3, seed_baselines=False)
    first = orchestrate(dag, "optimal", prices, prices.can_generate, None, knobs)
    assert {c.nodes for c in first.kernels} == {frozenset({0, 1}), frozenset({2, 3})}
    # In the model {c,d} takes 3.0 (three times its price), {a,b} its price: the scale is 2, so
    # c and d alone are priced 1.2 each, 2.4 < 3.0, and the solver splits {c,d}.
    in_model = {frozenset({0, 1}): 1.0, frozenset({2, 3}): 3.0, frozenset({2}): 1.0, frozenset({3}): 1.0}

    def executable(plan):
        times = [in_model[c.nodes] for c in plan.kernels]
        return SimpleNamespace(profile_in_call=lambda feeds, n, s: (times, sum(times)),
                               infos=[SimpleNamespace(seconds=None) for _ in plan.kernels], total=sum(times))

    built = []

    def build(plan):
        built.append(plan)
        return executable(plan)

    raced = {}

    def race(runs, feeds, rounds, seconds):
        raced.update(runs)
        return {k: ex.total for k, ex in runs.items()}

    monkeypatch.setattr(in_context, "race", race)
    rep = CompileReport("optimal", "measured")
    plan, ex = in_context.refine_in_context(dag, first, executable(first), prices, knobs, {}, build, rep)
    assert {c.nodes for c in plan.kernels} == {frozenset({0, 1}), frozenset({2}), frozenset({3})}
    assert len(built) == 1 and len(raced) == 2  # the second plan is built once; both plans raced
    assert plan.costs == (1.0, 1.0, 1.0) and plan.cost == 3.0  # its in-context times are its costs
    assert [i.seconds for i in ex.infos] == [1.0, 1.0, 1.0]
    assert rep.priced_hot_s == 2.0 and [r[2] for r in rep.context_rounds] == [4.0, 3.0]


def test_measured_compile_prices_its_plan_in_context(tmp_path):
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    kw = dict(db=tmp_path / "db.sqlite", threads=2, progress=False, regions=False, providers=("torch",))
    model = kernorch.compile(EXAMPLE, knobs=Knobs(context_rounds=2), **kw)
    rep = model.report
    assert 1 <= len(rep.context_rounds) <= 2 and rep.priced_hot_s > 0
    costs = [i.seconds for i in model.executable.infos]
    assert all(c > 0 for c in costs) and rep.priced_s == pytest.approx(sum(costs))
    want = ort.InferenceSession(str(EXAMPLE), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.testing.assert_allclose(model(x), want, rtol=1e-4, atol=1e-4)
    alone = kernorch.compile(EXAMPLE, knobs=Knobs(context_rounds=0), **kw)
    assert alone.report.context_rounds == [] and alone.report.priced_hot_s is None
    assert "prices in context" in model.summary() and "prices in context" not in alone.summary()


class _Disturbed:
    """An executable that runs slow when another one ran just before it (a thread pool woken up,
    cores stolen by the previous runtime's spinning threads), fast after a call of its own."""

    last = None

    def __init__(self, fast_s: float, slow_s: float) -> None:
        self.fast_s, self.slow_s = fast_s, slow_s

    def run(self, feeds):
        time.sleep(self.fast_s if _Disturbed.last is self else self.slow_s)
        _Disturbed.last = self


def test_a_race_times_each_executable_after_calls_of_its_own(monkeypatch):
    # steady state: "pool" 1 ms, "steady" 4 ms; "pool" takes 8 ms when called right after another
    runs = {"pool": _Disturbed(1e-3, 8e-3), "steady": _Disturbed(4e-3, 4e-3)}
    alternated = in_context.race(runs, {}, rounds=3, min_seconds=0.0)
    monkeypatch.setattr(benchmark, "LEAD_S", 0.01)
    led_in = in_context.race(runs, {}, rounds=3, min_seconds=0.0, lead=True)
    assert alternated["pool"] > alternated["steady"]  # the disturbance, not the runtime, timed
    assert led_in["pool"] < 2.5e-3 < led_in["steady"]  # each in its steady state



class _Drifting:
    """An executable of two kernels on a machine that slows down call by call; logs its calls."""

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log, self.infos = name, log, [SimpleNamespace(seconds=None), SimpleNamespace(seconds=None)]

    def run(self, feeds):
        self.log.append(self.name)

    def profile_in_call(self, feeds, repeat, warmup=2):
        self.log.append("profile")
        return [1.0 * len(self.log), 2.0 * len(self.log)], 3.0 * len(self.log)


def test_the_plan_is_priced_in_the_rounds_that_time_it():
    log: list = []
    plan_ex = _Drifting("plan", log)
    profiles = in_context.CallProfiles(plan_ex, {})
    in_context.race({"plan": plan_ex, "other": _Drifting("other", log)}, {}, rounds=5, min_seconds=0.0,
                    profile=profiles)
    timed = log[4:]  # after two warm-up rounds
    # one profiled call right after each timed call of the plan, none after the other runtime's
    assert [timed[i + 1] for i, x in enumerate(timed) if x == "plan"] == ["profile"] * timed.count("plan")
    assert len(profiles.calls) == timed.count("plan") == timed.count("profile") >= 5
    first = orchestrate(make_dag({0: (), 1: (0,)}), "unfused", _Prices({frozenset({0}): 1.0, frozenset({1}): 1.0}),
                        lambda c: True, None, Knobs())
    priced = profiles.priced(first)
    middle = sorted(c[0] for c in profiles.calls)[len(profiles.calls) // 2]  # the median call's first kernel
    assert priced.costs == (middle, 2 * middle) and priced.cost == 3 * middle
    assert [i.seconds for i in plan_ex.infos] == list(priced.costs)
