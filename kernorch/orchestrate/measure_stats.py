"""What a measurer counts while it prices kernels (shown by ``model.summary()``'s measurements
line): kernels measured and found stored, failures, disturbed samples, re-measures. Shared by every
target's measurer and folded in from cluster workers."""

from __future__ import annotations

from dataclasses import dataclass, field

from kernorch.orchestrate.tuning_db import Record


@dataclass
class MeasureStats:
    measured: int = 0
    cached: int = 0
    failed: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    disturbed: int = 0  # timing samples discarded because the process waited for a CPU
    remeasured: int = 0  # kernels measured again: a doubtful first price, or a declined fusion (recheck.py)
    unsettled: int = 0  # kernels stored flagged: still doubtful after every re-measure
    max_load: float = 0.0  # most cores other processes kept busy while a kernel was timed
    # generated kernels that failed to build, crashed or disagreed with the reference interpreter
    # (another provider or other kernels stand in: never silent, compile(strict=True) raises on any)
    fallbacks: list[str] = field(default_factory=list)

    def count(self, recs: dict[str, Record]) -> None:
        for r in recs.values():
            self.disturbed += r.disturbed or 0
            self.max_load = max(self.max_load, r.load or 0.0)

    def add(self, other: MeasureStats) -> None:
        """Fold in the counts of measurements taken elsewhere (a cluster worker)."""
        self.measured += other.measured
        self.seconds += other.seconds
        self.disturbed += other.disturbed
        self.remeasured += other.remeasured
        self.unsettled += other.unsettled
        self.max_load = max(self.max_load, other.max_load)
