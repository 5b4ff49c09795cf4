"""What a compile reports about itself: the CompileReport, and how far its measurements can be
trusted (disturbed samples, flagged prices, free cores; Note [trusted timing] in docs/TUNING.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kernorch.errors import KernorchError
from kernorch.orchestrate.plan import Plan
from kernorch.providers.timing import free_cores

# How long require_quiet waits for other processes to free the cores tuning needs.
QUIET_WAIT_S = 30.0


@dataclass
class CompileReport:
    """What happened, for ``summary()``, the CLI and the benchmark."""

    strategy: str
    cost: str
    prims: int = 0
    opaque: dict[str, int] = field(default_factory=dict)
    exporter: str | None = None  # a PyTorch module's ONNX exporter: "torchscript" or "dynamo"
    rewrites: dict[str, int] = field(default_factory=dict)
    candidates: int = 0
    learned: str = ""  # measured compiles: the learned cost model's standing, or why every candidate was timed
    predicted: int = 0  # candidates the learned cost model priced and nothing timed (tuning="learned")
    measured: int = 0
    cached: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    # generated kernels that failed to build, crashed or disagreed with the interpreter (MeasureStats)
    fallbacks: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    plan_summary: str = ""
    roofline_scale: float | None = None  # measured / roofline time of the calibration kernels
    end_to_end: dict[str, float] = field(default_factory=dict)  # plan vs whole-graph region, median s
    priced_s: float | None = None  # the solver's plan: sum of its kernels' prices (measured compiles)
    priced_hot_s: float | None = None  # the first plan's kernels priced alone, hot (runtime/in_context.py)
    context_rounds: list[tuple[int, float, float]] = field(default_factory=list)  # (kernels, hot price, call s)
    # Trust in the measurements (Note [trusted timing] in docs/TUNING.md).
    disturbed: int = 0  # timing samples discarded: the process waited for a CPU during them
    remeasured: int = 0  # kernels measured again because their first price was doubtful
    unsettled: int = 0  # kernels stored flagged: no quiet price could be taken
    other_load: float = 0.0  # most cores other processes kept busy while kernels were timed
    doubtful_share: float = 0.0  # share of the plan's priced cost resting on flagged prices
    busy: str = ""  # set when tuning used more threads than the machine had free cores
    efficiency: str = ""  # set when this CPU runs generated GEMMs far behind the library (gemm_check.py)
    precision: str = "f32"  # what the compile let kernels compute in (options.PRECISIONS)
    # per output, a reduced-precision compile against the float32 reference (runtime/accuracy.py)
    accuracy: list[dict] = field(default_factory=list)
    calibration: str = ""  # precision "int8": what the quantizer calibrated on (frontend/quantize.py)
    plan_key: str = ""  # where the final plan is kept in the tuning database (runtime/plan_cache.py)
    plan_reused: bool = False  # the plan came from there: nothing was orchestrated or measured
    plan_transferred: bool = False  # the plan of this model at other sizes, its kernels timed (Knobs.transfer)

    def timing_note(self) -> str:
        """One line on how far the measurements can be trusted ('' for modelled costs)."""
        if self.cost != "measured" or not (self.measured or self.busy):
            return ""
        if not (self.disturbed or self.unsettled or self.busy):
            return "measurements: quiet machine, no disturbed samples"
        line = (f"measurements: {self.disturbed} disturbed timing samples discarded (other processes up to "
                f"{self.other_load:.1f} cores busy), {self.remeasured} kernels re-measured, {self.unsettled} "
                f"stored flagged; {self.doubtful_share:.0%} of the plan's priced time rests on flagged prices")
        return f"{self.busy}; {line}" if self.busy else line


def record_measurements(plan: Plan, measured, rep: CompileReport) -> Plan:
    """Copy the measurement counts into the report, with the share of the plan's priced time that
    rests on flagged prices; returns ``plan``."""
    st = measured.stats
    rep.measured, rep.cached = st.measured, st.cached
    rep.failed, rep.failures, rep.fallbacks = st.failed, st.failures[:20], list(st.fallbacks)
    rep.disturbed, rep.remeasured, rep.unsettled, rep.other_load = st.disturbed, st.remeasured, st.unsettled, st.max_load
    best = measured.best
    regions = set(plan.regions)
    keys = [measured.region_key(c) if k in regions else measured.key(c) for k, c in enumerate(plan.kernels)]
    flagged = sum(best[key].seconds for key in keys if key in best and best[key].doubtful)
    total = sum(best[key].seconds for key in keys if key in best)
    rep.doubtful_share = flagged / total if total else 0.0
    return plan


def check_free_cores(threads: int, require_quiet: bool) -> str:
    """'' when ``threads`` cores are free for tuning; else a note saying how busy the machine is
    (or, with ``require_quiet``, wait up to QUIET_WAIT_S for them and fail if they stay busy)."""
    others, cores = free_cores()
    deadline = time.monotonic() + QUIET_WAIT_S
    while require_quiet and cores - others < threads - 0.25 and time.monotonic() < deadline:
        others, cores = free_cores(1.0)
    if cores - others >= threads - 0.25:
        return ""
    note = (f"tuning with {threads} threads while other processes keep {others:.1f} of {cores} cores busy")
    if require_quiet:
        raise KernorchError(f"{note} (waited {QUIET_WAIT_S:.0f} s for them to free up); require_quiet / "
                            f"--require-quiet refuses to measure on a busy machine")
    return note
