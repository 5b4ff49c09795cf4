"""Price a candidate with every provider that can run it and keep the cheapest correct one.

Korch's rule: a candidate's cost is the minimum over its implementations. Each provider's attempt
ends in a record (unavailable, unsupported, build failed, wrong, run failed, or timed), so a
provider that cannot serve a kernel is a line in a report, never a crash.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

from kernorch.ir.graph import Graph
from kernorch.ir.prims import ValueId
from kernorch.providers.base import BuiltKernel, Provider, _one_line, random_inputs, reason_or_none, verify

Timer = Callable[[Callable[[], object], str], float]  # (run once, provider name) -> seconds per run


@dataclass
class ProviderRecord:
    """``status``: ok, unavailable, unsupported, build_failed, wrong, run_failed."""

    provider: str
    status: str
    seconds: float | None = None
    max_err: float | None = None
    reason: str = ""
    built: BuiltKernel | None = field(default=None, repr=False)


class MedianTimer:
    """Warm up (at least ``warmup`` runs and ``min_warmup_s``: thread pools that slept while
    another provider ran must be awake), then the median of ``repeats`` samples; each sample
    loops enough runs to last ``min_sample_s`` so microsecond kernels are not timer noise."""

    def __init__(self, warmup: int = 3, repeats: int = 9, min_sample_s: float = 2e-4,
                 min_warmup_s: float = 0.01) -> None:
        self.warmup, self.repeats, self.min_sample_s = warmup, repeats, min_sample_s
        self.min_warmup_s = min_warmup_s

    def __call__(self, fn: Callable[[], object], provider: str = "") -> float:
        t0 = time.perf_counter()
        runs = 0
        while runs < self.warmup or (time.perf_counter() - t0 < self.min_warmup_s and runs < 1000):
            fn()
            runs += 1
        per = max((time.perf_counter() - t0) / max(runs, 1), 1e-9)
        number = max(1, min(1000, int(self.min_sample_s / per)))
        samples = []
        for _ in range(self.repeats):
            t = time.perf_counter()
            for _ in range(number):
                fn()
            samples.append((time.perf_counter() - t) / number)
        return statistics.median(samples)


def best_provider(g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId], providers: Sequence[Provider],
                  timer: Timer | None = None, seed: int = 0, reference: tuple[dict, dict] | None = None) -> tuple[str | None, float, list[ProviderRecord]]:
    """(name of the fastest correct provider or None, its seconds or inf, one record per provider)."""
    members = list(members)
    outputs = list(outputs)
    timer = timer or MedianTimer()
    records = [_try(p, g, members, outputs, timer, seed, reference) for p in providers]
    ok = [r for r in records if r.status == "ok"]
    if not ok:
        return None, math.inf, records
    best = min(ok, key=lambda r: r.seconds)
    return best.provider, best.seconds, records


def _try(p: Provider, g: Graph, members, outputs, timer: Timer, seed: int,
         reference: tuple[dict, dict] | None = None) -> ProviderRecord:
    name = getattr(p, "name", type(p).__name__)
    try:
        if not p.available():
            return ProviderRecord(name, "unavailable", reason="optional dependency not installed")
        reason = reason_or_none(p.can_run(g, members, outputs))
    except Exception as e:  # noqa: BLE001
        return ProviderRecord(name, "unsupported", reason=f"can_run raised {type(e).__name__}: {_one_line(e)}")
    if reason is not None:
        return ProviderRecord(name, "unsupported", reason=reason)
    try:
        built = p.build(g, members, outputs)
    except Exception as e:  # noqa: BLE001
        return ProviderRecord(name, "build_failed", reason=f"{type(e).__name__}: {_one_line(e)}")
    ok, err, detail = verify(built, g, members, outputs, seed, reference)
    if not ok:
        status = "run_failed" if detail.startswith("run failed") else "wrong"
        return ProviderRecord(name, status, max_err=err, reason=detail, built=built)
    try:
        sub = g.subgraph(members, outputs)
        feeds = reference[0] if reference is not None else random_inputs(g, sub, seed + 1)
        args = [torch.from_numpy(feeds[v]) for v in built.inputs]
        seconds = float(timer(lambda: built.run(args), name))
    except Exception as e:  # noqa: BLE001
        return ProviderRecord(name, "run_failed", max_err=err, reason=f"timing: {type(e).__name__}: {_one_line(e)}")
    return ProviderRecord(name, "ok", seconds=seconds, max_err=err, reason=built.detail, built=built)
