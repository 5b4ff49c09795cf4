"""Analytical roofline cost of a candidate, calibrated on this machine. Candidate -> seconds.

The measured cost (compile and time) lives with the code generator; this one prices candidates
without building them, for fast compiles, pruning and tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.dag import Dag

from kernorch.orchestrate.pricing import CostFn


@dataclass(frozen=True)
class RooflineCost:
    """seconds = bytes moved / bandwidth + flops / peak + launch overhead, where bytes moved =
    external reads of the members + reads of the kernel's inputs + writes of its outputs.
    Members computed in two kernels are paid twice (recomputation is priced, not forbidden).
    External reads are summed per member, so a weight read by two members counts twice: the dag
    does not say which external values are shared."""

    bandwidth_bytes_per_s: float = 20e9
    peak_flops: float = 200e9
    launch_overhead_s: float = 5e-6

    def seconds(self, dag: Dag, cand: Candidate) -> float:
        moved = sum(dag.input_bytes.get(n, 0) for n in cand.nodes)
        moved += sum(dag.nbytes[v] for v in cand.inputs) + sum(dag.nbytes[v] for v in cand.outputs)
        work = sum(dag.flops[n] for n in cand.nodes)
        return moved / self.bandwidth_bytes_per_s + work / self.peak_flops + self.launch_overhead_s

    def bind(self, dag: Dag) -> CostFn:
        """The cost function `orchestrate` expects: candidate -> seconds (never None here; the
        code generator's `can_generate` decides feasibility)."""

        def cost(cand: Candidate) -> float | None:
            return self.seconds(dag, cand)

        return cost


def calibrate(copy_bytes: int = 64 << 20, matmul_n: int = 512, repeats: int = 5) -> RooflineCost:
    """Measure this machine: bandwidth from a numpy copy (read + write), peak from a float32
    matmul, overhead from a tiny numpy op. Best of `repeats`; takes well under a second."""
    src = np.ones(copy_bytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    a = np.ones((matmul_n, matmul_n), dtype=np.float32)
    tiny = np.ones(8, dtype=np.float32)
    out = np.empty_like(tiny)

    def best(fn: Callable[[], object]) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return max(min(times), 1e-9)

    bandwidth = 2 * src.nbytes / best(lambda: np.copyto(dst, src))
    peak = 2.0 * matmul_n**3 / best(lambda: a @ a)
    overhead = best(lambda: np.add(tiny, tiny, out=out))
    return RooflineCost(bandwidth, peak, overhead)
