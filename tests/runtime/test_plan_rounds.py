"""planning.plan_kernels' measuring rounds: the plan is re-solved on measured prices, an estimate
standing in for what is not measured yet, until every kernel it picks was measured. Joins across
segment cuts chain (a join is joined again), so a round measures every join it priced, not only
those the plan kept: one at a time, a long chain ran out of rounds (SegFormer's decode head)."""

from kernorch.orchestrate.dag import make_dag
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.measure_stats import MeasureStats
from kernorch.orchestrate.pricing import identity_key
from kernorch.runtime.planning import ESTIMATED_ROUNDS, plan_kernels
from kernorch.runtime.report import CompileReport


class SquaredPrices:
    """The measurer's interface as plan_kernels uses it, pricing a kernel at its prim count
    squared (so no join ever pays), and counting the batches it measures."""

    providers = ()

    def __init__(self) -> None:
        self.fallback = self.progress = None
        self.stats, self.best, self.batches = MeasureStats(), {}, 0
        self._memo: dict[str, float] = {}

    key = staticmethod(identity_key)

    def region_key(self, cand) -> str:
        return "region:" + self.key(cand)

    def can_generate(self, cand) -> bool:
        return True

    def has(self, cand) -> bool:
        return self.key(cand) in self._memo

    def prefetch(self, cands) -> None:
        self.batches += 1
        self._memo.update((self.key(c), float(len(c.nodes)) ** 2) for c in cands)

    def __call__(self, cand) -> float:
        if not self.has(cand):
            if self.fallback is not None:
                return self.fallback(cand)
            self.prefetch([cand])
        return self._memo[self.key(cand)]


def test_joins_the_estimate_favours_are_measured_in_few_rounds():
    n = 60
    chain = make_dag({i: ((i - 1,) if i else ()) for i in range(n)}, nbytes=dict.fromkeys(range(n), 1 << 20))
    measured = SquaredPrices()
    knobs = Knobs(max_segment_nodes=2, max_kernel_nodes=2, greedy_max_kernel_nodes=n, regions=False, mip_rel_gap=0.0)
    plan = plan_kernels(chain, "optimal", "measured", lambda c: 1e-3, measured, identity_key, knobs,
                        CompileReport("optimal", "measured"), False, "")
    assert all(measured.has(c) for c in plan.kernels)
    assert len(plan.kernels) == n and plan.stats["joins"] == 0 and plan.cost == n
    assert measured.batches <= 3  # the segments' candidates, then the joins of one round


class FlatPrices(SquaredPrices):
    """A kernel costs about the same whatever it holds, so every join pays and joins of joins
    chain: each round the estimate offers a longer join than the last one measured."""

    def prefetch(self, cands) -> None:
        self.batches += 1
        self._memo.update((self.key(c), 1.0 + 0.01 * len(c.nodes)) for c in cands)


def test_chained_joins_end_after_the_estimated_rounds_on_measured_kernels_only():
    n = 200  # a join chain longer than the 16 rounds: BERT-base int8 ran out of them
    chain = make_dag({i: ((i - 1,) if i else ()) for i in range(n)}, nbytes=dict.fromkeys(range(n), 1 << 20))
    measured = FlatPrices()
    knobs = Knobs(max_segment_nodes=2, max_kernel_nodes=2, greedy_max_kernel_nodes=n, regions=False, mip_rel_gap=0.0)
    plan = plan_kernels(chain, "optimal", "measured", lambda c: 1e-3 * len(c.nodes), measured, identity_key, knobs,
                        CompileReport("optimal", "measured"), False, "")
    assert all(measured.has(c) for c in plan.kernels)
    assert sorted(n for c in plan.kernels for n in c.nodes) == list(range(n))
    assert plan.stats["joins"] > 16 and measured.batches <= ESTIMATED_ROUNDS + 2
