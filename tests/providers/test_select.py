"""best_provider/_try: every attempt ends in one record whose fields say exactly what happened, and
the kernel is verified and timed on the oracle's data. Fake providers with a hand-written torch
kernel (relu(x + c)); the oracle is the reference interpreter's feeds and NumPy."""

import math

import numpy as np
import pytest
import torch

from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from kernorch.providers import BuiltKernel, Provider, best_provider
from kernorch.providers.base import random_inputs, reference_for
from kernorch.providers.timing import Measurement

C = np.arange(6, dtype=np.float64).reshape(2, 3) - 2.5


def _graph():
    """x (input) + c (tensor constant) -> relu; float64 so a buffer of the default dtype is wrong."""
    b = Builder()
    x = b.input((2, 3), "float64")
    a = b.binary(Op.ADD, x, b.constant(C))
    y = b.unary(Op.RELU, a)
    b.g.outputs = [y]
    return b.g, [a, y], [y]


class Right(Provider):
    """relu(x + c) by torch; logs every call with its arguments."""

    def __init__(self, name="right", run_into=True, detail="hand-written", wrong_by=0.0, timing_error=None):
        self.name, self.with_into, self.detail, self.wrong_by = name, run_into, detail, wrong_by
        self.timing_error = timing_error
        self.log = []

    def can_run(self, g, members, outputs):
        self.log.append(("can_run", g, members, outputs))
        return True

    def build(self, g, members, outputs):
        self.log.append(("build", g, members, outputs))
        sub = g.subgraph(members, outputs)

        def run(xs):
            self.log.append(("run", [t.clone() for t in xs]))
            return [torch.relu(xs[0] + xs[1]) + self.wrong_by]

        def run_into(xs, outs):
            self.log.append(("run_into", [t.clone() for t in xs], [(tuple(o.shape), o.dtype) for o in outs]))
            if self.timing_error:
                raise self.timing_error
            torch.add(xs[0], xs[1], out=outs[0]).relu_()

        return BuiltKernel(self.name, list(sub.inputs), list(sub.outputs), run, detail=self.detail,
                           run_into=run_into if self.with_into else None)


def _timer(seconds=1e-3, calls=None, error=None):
    def timer(fn, provider):
        if calls is not None:
            calls.append(provider)
        if error is not None:
            raise error
        fn()
        return seconds
    return timer


def _feeds(g, members, outputs, seed):
    f = random_inputs(g, g.subgraph(members, outputs), seed)
    return [f[v] for v in g.subgraph(members, outputs).inputs]


def test_an_unavailable_provider_is_one_exact_record():
    class Missing(Provider):
        name = "missing"

        def available(self):
            return False

    g, m, o = _graph()
    name, s, (r,) = best_provider(g, m, o, [Missing()], timer=_timer())
    assert (name, s) == (None, math.inf)
    assert (r.provider, r.status, r.reason) == ("missing", "unavailable", "optional dependency not installed")
    assert (r.seconds, r.max_err, r.built, r.timing) == (None, None, None, None)


@pytest.mark.parametrize("where", ["available", "can_run"])
def test_a_provider_that_raises_while_asked_is_unsupported_with_the_first_line(where):
    class Raises(Provider):
        name = "raises"

        def available(self):
            if where == "available":
                raise OSError("no such\nsecond line")
            return True

        def can_run(self, g, members, outputs):
            raise ValueError("cannot even look\nsecond line")

    g, m, o = _graph()
    (r,) = best_provider(g, m, o, [Raises()], timer=_timer())[2]
    want = "OSError: no such" if where == "available" else "ValueError: cannot even look"
    assert (r.provider, r.status, r.reason) == ("raises", "unsupported", f"can_run raised {want}")
    assert (r.seconds, r.max_err, r.built) == (None, None, None)


@pytest.mark.parametrize("answer,reason", [(False, "cannot run (no reason given)"), ("", "cannot run (no reason given)"),
                                           ("rank 5 is not supported", "rank 5 is not supported")])
def test_a_refusal_is_recorded_with_its_reason(answer, reason):
    class Refuses(Right):
        def can_run(self, g, members, outputs):
            return answer

    g, m, o = _graph()
    p = Refuses("refuses")
    (r,) = best_provider(g, m, o, [p], timer=_timer())[2]
    assert (r.provider, r.status, r.reason, r.built) == ("refuses", "unsupported", reason, None)
    assert not [e for e in p.log if e[0] == "build"]


def test_a_build_failure_is_recorded_with_its_first_line():
    class Broken(Right):
        def build(self, g, members, outputs):
            raise RuntimeError("compiler exploded\nwith a long trace")

    g, m, o = _graph()
    (r,) = best_provider(g, m, o, [Broken("broken")], timer=_timer())[2]
    assert (r.provider, r.status, r.reason) == ("broken", "build_failed", "RuntimeError: compiler exploded")
    assert (r.seconds, r.max_err, r.built, r.timing) == (None, None, None, None)


def test_a_provider_without_a_name_is_named_by_its_class():
    class Anonymous:  # duck-typed: no Provider base, no ``name``
        def available(self):
            return False

    g, m, o = _graph()
    assert best_provider(g, m, o, [Anonymous()], timer=_timer())[2][0].provider == "Anonymous"


def test_can_run_and_build_get_the_candidate_and_members_may_be_an_iterator():
    """Each provider sees the same members and outputs (lists), even when they came as iterators."""
    g, m, o = _graph()
    ps = [Right("first"), Right("second")]
    name, s, records = best_provider(g, iter(m), iter(o), ps, timer=_timer())
    assert [r.status for r in records] == ["ok", "ok"]
    for p in ps:
        calls = [e for e in p.log if e[0] in ("can_run", "build")]
        assert [e[0] for e in calls] == ["can_run", "build"]
        for _, gg, members, outputs in calls:
            assert gg is g and list(members) == m and list(outputs) == o


def test_a_wrong_kernel_is_recorded_with_its_error_and_kept_out():
    g, m, o = _graph()
    wrong, right = Right("wrong", wrong_by=0.5), Right("right")
    name, s, (rw, rr) = best_provider(g, m, o, [wrong, right], timer=_timer(1e-3))
    assert (name, s) == ("right", 1e-3)
    assert rw.status == "wrong" and rw.max_err == pytest.approx(0.5) and rw.built is not None
    assert rw.reason.startswith("output %") and "max abs error 0.5" in rw.reason
    assert rw.seconds is None and rw.timing is None
    assert not [e for e in wrong.log if e[0] == "run_into"], "a wrong kernel is never timed"


def test_a_kernel_that_raises_is_run_failed():
    class Crashes(Right):
        def build(self, g, members, outputs):
            k = super().build(g, members, outputs)
            def run(xs):
                return [xs[0] / 0, 1 // 0]
            k.run = run
            return k

    g, m, o = _graph()
    (r,) = best_provider(g, m, o, [Crashes("crashes")], timer=_timer())[2]
    assert r.status == "run_failed" and r.max_err == math.inf and r.built is not None
    assert r.reason == "run failed: ZeroDivisionError: integer division or modulo by zero"


def _timed_calls(p):
    return [e for e in p.log if e[0] == "run_into"]


@pytest.mark.parametrize("seed", [0, 4])
def test_verified_on_seed_and_timed_on_seed_plus_one_into_buffers_of_the_output_type(seed):
    g, m, o = _graph()
    p, calls = Right("right"), []
    kw = {} if seed == 0 else {"seed": seed}  # seed 0 is the default
    name, s, (r,) = best_provider(g, m, o, [p], timer=_timer(2e-3, calls), **kw)
    assert (name, s) == ("right", 2e-3) and calls == ["right"]
    runs = [e for e in p.log if e[0] == "run"]
    # first run: verification on the oracle's data of ``seed``; then one run that sizes the buffers
    assert len(runs) == 2
    for got, want in zip(runs[0][1], _feeds(g, m, o, seed)):
        np.testing.assert_array_equal(got.numpy(), want)
    (timed,) = _timed_calls(p)
    for got, want in zip(timed[1], _feeds(g, m, o, seed + 1)):
        np.testing.assert_array_equal(got.numpy(), want)
    assert timed[2] == [((2, 3), torch.float64)]
    assert (r.status, r.seconds, r.reason, r.max_err) == ("ok", 2e-3, "hand-written", 0.0)
    assert r.built is not None and r.built.provider == "right"
    assert r.timing == Measurement.exact(2e-3)


def test_without_run_into_the_timer_runs_run():
    g, m, o = _graph()
    p, calls = Right("plain", run_into=False), []
    (r,) = best_provider(g, m, o, [p], timer=_timer(3e-3, calls))[2]
    assert r.status == "ok" and r.seconds == 3e-3 and calls == ["plain"]
    runs = [e for e in p.log if e[0] == "run"]
    assert len(runs) == 2 and not _timed_calls(p)  # verification, then the timed run
    for got, want in zip(runs[1][1], _feeds(g, m, o, 1)):
        np.testing.assert_array_equal(got.numpy(), want)


def test_the_timers_measurement_is_kept_as_evidence():
    g, m, o = _graph()
    evidence = Measurement(4e-3, 3e-3, 0.1, 5, 2)
    (r,) = best_provider(g, m, o, [Right()], timer=lambda fn, name: (fn(), evidence)[1])[2]
    assert r.timing is evidence and r.seconds == 4e-3


def test_a_shared_reference_is_used_for_verification_and_timing():
    """The caller's (feeds, outputs) are used as given: its feeds reach the kernel, its outputs
    judge it (outputs that do not match the feeds make a correct kernel wrong)."""
    g, m, o = _graph()
    sub = g.subgraph(m, o)
    feeds, outs = reference_for(g, sub, 9)
    p = Right()
    (r,) = best_provider(g, m, o, [p], timer=_timer(), reference=(feeds, outs))[2]
    assert r.status == "ok"
    want = [feeds[v] for v in sub.inputs]
    for got, w in zip([e for e in p.log if e[0] == "run"][0][1], want):
        np.testing.assert_array_equal(got.numpy(), w)
    for got, w in zip(_timed_calls(p)[0][1], want):
        np.testing.assert_array_equal(got.numpy(), w)
    liar = {v: a + 1.0 for v, a in outs.items()}
    (r,) = best_provider(g, m, o, [Right()], timer=_timer(), reference=(feeds, liar))[2]
    assert r.status == "wrong" and r.max_err == pytest.approx(1.0)


@pytest.mark.parametrize("where", ["timer", "run_into"])
def test_a_failure_while_timing_is_run_failed_with_the_verified_error(where):
    g, m, o = _graph()
    boom = RuntimeError("device lost\nsecond line")
    p = Right("flaky", timing_error=boom if where == "run_into" else None)
    timer = _timer(error=boom if where == "timer" else None)
    name, s, (r,) = best_provider(g, m, o, [p], timer=timer)
    assert (name, s) == (None, math.inf)
    assert (r.provider, r.status, r.reason) == ("flaky", "run_failed", "timing: RuntimeError: device lost")
    assert r.max_err == 0.0
    assert r.seconds is None and r.timing is None


def test_the_cheapest_correct_provider_wins():
    g, m, o = _graph()
    times = {"slow": 3e-3, "fast": 1e-3, "mid": 2e-3}
    ps = [Right(n) for n in times]
    name, s, records = best_provider(g, m, o, ps, timer=lambda fn, n: (fn(), times[n])[1])
    assert (name, s) == ("fast", 1e-3)
    assert [(r.provider, r.seconds) for r in records] == list(times.items())


def test_outputs_in_another_order_than_the_boundarys_are_verified_in_that_order():
    """The requested outputs, not the subgraph's default boundary, are what the kernel must return."""
    b = Builder()
    x = b.input((2, 3), "float64")
    a = b.binary(Op.ADD, x, b.constant(C))
    y = b.unary(Op.RELU, a)
    z = b.unary(Op.NEG, a)  # outside the candidate: ``a`` is on the boundary
    b.g.outputs = [y, z]
    g = b.g
    assert g.subgraph([a, y]).outputs == [a, y]

    class Both(Right):
        def build(self, g, members, outputs):
            k = super().build(g, members, outputs)
            k.run = lambda xs: [torch.relu(xs[0] + xs[1]), xs[0] + xs[1]]
            k.run_into = None
            return k

    name, s, (r,) = best_provider(g, [a, y], [y, a], [Both("both")], timer=_timer())
    assert (name, r.status) == ("both", "ok"), r.reason
