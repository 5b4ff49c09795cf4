"""Declined fusions are timed again (recheck.py): a fused kernel priced high by one slow batch of
timings must not split every identical block; after re-timing it beside its parts, the plan is
solved again on the new prices."""

from kernorch.orchestrate.candidate import multi_output, single_output
from kernorch.orchestrate.dag import make_dag
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.measure_stats import MeasureStats
from kernorch.orchestrate.plan import build_plan
from kernorch.orchestrate.pricing import identity_key
from kernorch.orchestrate.recheck import declined, recheck
from kernorch.runtime.planning import plan_kernels
from kernorch.runtime.report import CompileReport


class SlowBatchPrices:
    """A measurer whose first timing of every fused kernel (more than one prim) came from a slow
    phase: 3 per prim; timed again, 0.6 per prim, against 1 per prim for single prims either way."""

    providers = ()

    def __init__(self) -> None:
        self.fallback = self.progress = None
        self.stats, self.best = MeasureStats(), {}
        self._memo: dict[str, float] = {}
        self.retimed: list[list[str]] = []

    key = staticmethod(identity_key)

    def can_generate(self, cand) -> bool:
        return True

    def has(self, cand) -> bool:
        return self.key(cand) in self._memo

    def hot(self, cand):
        return self._memo.get(self.key(cand))

    def prefetch(self, cands) -> None:
        self._memo.update((self.key(c), (3.0 if len(c.nodes) > 1 else 1.0) * len(c.nodes)) for c in cands)

    def retime(self, cands) -> None:
        self.retimed.append(sorted(self.key(c) for c in cands))
        self._memo.update((self.key(c), (0.6 if len(c.nodes) > 1 else 1.0) * len(c.nodes)) for c in cands)

    def __call__(self, cand):
        if not self.has(cand):
            if self.fallback is not None:
                return self.fallback(cand)
            self.prefetch([cand])
        return self._memo[self.key(cand)]


def _plan(dag, measured, **knobs):
    knobs = Knobs(regions=False, mip_rel_gap=0.0, seed_baselines=False, **knobs)
    return plan_kernels(dag, "optimal", "measured", lambda c: 1.0, measured, identity_key, knobs,
                        CompileReport("optimal", "measured"), False, "")


def test_a_fusion_priced_by_a_slow_batch_is_timed_again_and_taken():
    chain = make_dag({0: (), 1: (0,)})
    measured = SlowBatchPrices()
    plan = _plan(chain, measured)
    assert [sorted(c.nodes) for c in plan.kernels] == [[0, 1]] and plan.cost == 1.2
    # the fusion and both parts, once, in one call (so they are timed in turn)
    assert measured.retimed == [sorted(identity_key(single_output(chain, ns)) for ns in ([0], [1], [0, 1]))]


def test_without_recheck_the_slow_batch_splits_the_plan():
    chain = make_dag({0: (), 1: (0,)})
    measured = SlowBatchPrices()
    plan = _plan(chain, measured, recheck=False)
    assert [sorted(c.nodes) for c in plan.kernels] == [[0], [1]] and plan.cost == 2.0
    assert measured.retimed == []


def test_every_key_is_retimed_at_most_once():
    chain = make_dag({0: (), 1: (0,)})
    measured = SlowBatchPrices()
    split = build_plan(chain, [single_output(chain, [0]), single_output(chain, [1])], [1.0, 1.0], "optimal")
    measured.prefetch(list(split.kernels) + [single_output(chain, [0, 1])])
    done: set[str] = set()
    assert recheck(chain, split, measured, done) and len(done) == 3
    assert not recheck(chain, split, measured, done) and len(measured.retimed) == 1


def test_only_convex_priced_fusions_dearer_than_their_parts_are_declined():
    # 0 -> 1 -> 2 and 0 -> 2: {0, 2} is not convex (the path through 1 leaves it and comes back)
    dag = make_dag({0: (), 1: (0,), 2: (0, 1)})
    kernels = [multi_output(dag, [n]) for n in (0, 1, 2)]
    plan = build_plan(dag, kernels, [1.0] * 3, "optimal")
    prices = {identity_key(k): 1.0 for k in kernels}
    prices[identity_key(multi_output(dag, [0, 1]))] = 2.5  # declined: dearer than 1 + 1
    prices[identity_key(multi_output(dag, [1, 2]))] = 1.5  # cheaper than its parts: not declined
    prices[identity_key(multi_output(dag, [0, 2]))] = 9.0  # priced, but not convex
    found = declined(dag, plan, lambda c: prices.get(identity_key(c)))
    assert [[sorted(c.nodes) for c in cands] for cands in found] == [[[0], [1], [0, 1]]]
    assert declined(dag, plan, lambda c: None) == []  # nothing priced: nothing to recheck


def test_a_prologue_is_moved_into_the_kernel_before_and_an_epilogue_into_the_kernel_after():
    # conv -> relu -> conv -> relu: the plan runs the first relu as the second conv's prologue
    kind = {0: "linear", 1: "elementwise", 2: "linear", 3: "elementwise"}
    dag = make_dag({0: (), 1: (0,), 2: (1,), 3: (2,)}, kind=kind)
    a, b = multi_output(dag, [0]), multi_output(dag, [1, 2, 3])
    plan = build_plan(dag, [a, b], [1.0, 2.0], "optimal")
    moved = (multi_output(dag, [0, 1]), multi_output(dag, [2, 3]))
    prices = {identity_key(a): 1.0, identity_key(b): 2.0, identity_key(moved[0]): 1.5, identity_key(moved[1]): 1.8}
    found = declined(dag, plan, lambda c: prices.get(identity_key(c)))
    assert [[sorted(c.nodes) for c in cands] for cands in found] == [[[0], [1, 2, 3], [0, 1], [2, 3]]]
    prices[identity_key(moved[1])] = 1.4  # the move pays as priced: the solver took it, nothing to recheck
    assert declined(dag, plan, lambda c: prices.get(identity_key(c))) == []
    # and the other way: a's relu epilogue into b
    a, b = multi_output(dag, [0, 1]), multi_output(dag, [2, 3])
    plan = build_plan(dag, [a, b], [1.0, 1.0], "optimal")
    prices = {identity_key(a): 1.0, identity_key(b): 1.0, identity_key(multi_output(dag, [0])): 0.9,
              identity_key(multi_output(dag, [1, 2, 3])): 1.3}
    found = declined(dag, plan, lambda c: prices.get(identity_key(c)))
    assert [[sorted(c.nodes) for c in cands] for cands in found] == [[[0, 1], [2, 3], [1, 2, 3], [0]]]


def test_a_measurer_without_retime_rechecks_nothing():
    chain = make_dag({0: (), 1: (0,)})
    split = build_plan(chain, [single_output(chain, [0]), single_output(chain, [1])], [1.0, 1.0], "optimal")
    measured = SlowBatchPrices()
    measured.prefetch(list(split.kernels) + [single_output(chain, [0, 1])])
    measured.retime = None
    assert not recheck(chain, split, measured, set())


def test_alternatives_retimed_by_an_earlier_compile_are_not_retimed_again():
    """A warm database: every price of the declined fusion and its parts is settled (re-timed in
    turn by an earlier compile), so recheck times nothing; one unsettled price among them and the
    whole group is timed again, in turn."""
    chain = make_dag({0: (), 1: (0,)})
    split = build_plan(chain, [single_output(chain, [0]), single_output(chain, [1])], [1.0, 1.0], "optimal")
    fused = single_output(chain, [0, 1])
    for settled_keys, timed in ((None, 0), ({identity_key(split.kernels[0])}, 1)):
        measured = SlowBatchPrices()
        measured.prefetch(list(split.kernels) + [fused])
        every = {identity_key(c) for c in list(split.kernels) + [fused]}
        measured.settled = lambda c, s=settled_keys or every: identity_key(c) in s
        assert recheck(chain, split, measured, set()) == bool(timed)
        assert len(measured.retimed) == timed and all(len(r) == 3 for r in measured.retimed)
