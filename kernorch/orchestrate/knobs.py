"""The orchestrator's tuning knobs: one frozen dataclass, the only place their defaults live."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Knobs:
    """Knobs of `orchestrate`. Defaults keep enumeration + solve of a 3000-prim model well under a
    minute on two cores (see bench and tests/orchestrate/test_scale.py)."""

    max_segment_nodes: int = 48
    """Largest segment; bounds each binary program (partition.py). Solve time grows steeply with
    it: a 60-prim transformer layer takes HiGHS ~5 s, two 30-prim halves ~0.3 s."""
    max_cut_width: int = 4
    """A cut crossed by at most this many values is narrow; segments end at narrow cuts."""
    max_kernel_nodes: int = 12
    """Largest enumerated candidate, in prims."""
    max_segment_sets: int = 800
    """Enumerated sets per segment; past it the segment's size bound is lowered (dense segments
    otherwise give binary programs HiGHS cannot close in time)."""
    max_candidates: int | None = None
    """Enumerated sets for the whole model, shared out evenly over the segments (lowering
    `max_segment_sets`, never below 50 each): a tuning budget, since every candidate is measured
    under measured costs. None: no budget beyond `max_segment_sets`."""
    multi_output: bool = True
    """Also enumerate multi-output candidates (Korch: single-output only)."""
    greedy_max_kernel_nodes: int = 64
    """Largest kernel the greedy baseline builds (TVM's max_fuse_depth plays this role)."""
    seeds: tuple[frozenset[int], ...] = ()
    """Kernels offered to the optimal strategy besides the enumerated ones (each used where it lies
    inside one segment): a provider's natural kernel that enumeration's size bound or budget may
    miss, such as a quantized convolution with its whole dequantize / epilogue / requantize chain
    (providers/onednn_int8.py ``int8_kernels``)."""
    groups: tuple[frozenset[int], ...] = ()
    """Groups of prims planned as one node (contract.py): every member but one is read only inside
    its group."""
    chains: bool = True
    """Compiles plan each chain of elementwise prims (each read only by the next) as one group
    (from_graph.py ``chained_prims``): cutting inside one never saves traffic, and a QDQ model's
    QuantizeLinear / DequantizeLinear chains would otherwise multiply its candidates."""
    seed_baselines: bool = True
    """Add the per-operator and greedy kernels that fit in a segment to the optimal strategy's
    candidates, so its plan never costs more than those baselines (under the same cost)."""
    time_limit_s: float = 30.0
    """Solver time for the whole model, shared out over the segments."""
    mip_rel_gap: float = 1e-4
    """Relative optimality gap at which the solver may stop."""
    join_cuts: bool = True
    """After the segments are solved, join pairs of kernels across segment cuts (one writes what
    the other reads) where the join is priced cheaper than the pair (joins.py). Plans without
    provider regions only."""
    recheck: bool = True
    """Measured compiles: once every kernel of the plan is measured, time each fusion of two plan
    kernels that the solver declined again, in turn with its two parts, and solve again
    (recheck.py): one slow batch of timings otherwise splits every identical block alike."""
    regions: bool = True
    """Let `optimal` hand runs of whole segments to an external runtime when that is cheaper
    (regions.py); only takes effect when the caller prices regions (measured costs with
    external providers)."""
    region_join_saving_s: float = 20e-6
    """Estimated saving of joining two adjacent regions (one dispatch fewer), used only to pick
    which runs to price for real."""
    region_prune_gain: float = 2.0
    """When deciding which segments to tune, assume fusion makes a segment's kernel plan at most
    this much faster than its measured per-operator kernels: a region cheaper than that is taken
    without tuning the segment (measured compiles with regions only)."""
    region_tolerance: float = 0.02
    """Stop pricing joined regions once the best priced choice is within this fraction of the
    estimated optimum: nearer ties are measurement noise (regions.py, Note [near ties stop the
    search])."""
    layouts: bool = True
    """Offer channels-last activations around 2-D convolutions as a plan choice
    (rewrite/layouts.py): the solver decides where layouts change."""
    context_rounds: int = 3
    """Measured compiles of plans of own kernels: build the plan, time its kernels inside real
    calls, price them at that and solve again, this many plans at most; the fastest is kept
    (runtime/in_context.py). 0: keep the plan priced on kernels timed alone."""
    tuning: str = "full"
    """Measured compiles: 'learned' times only the candidates that can win by the learned cost model's
    optimistic price (orchestrate/learned_pricing.py; every candidate while the tuning database holds too
    few prices with features on this machine); 'full' times every candidate."""
    transfer: tuple = ()
    """(graph structure, kernels as prim positions) of a plan made for the same model at other input
    sizes (a dynamic= profile: runtime/dynamic.py). When this graph has that structure, a measured
    compile times those kernels only and keeps that plan, without enumerating or solving
    (runtime/plan_cache.py ``transfer``); otherwise it plans as usual."""
    solver_backend: str = "highs"
    """'highs' (highspy, warm-started) or 'scipy' (scipy.optimize.milp)."""
