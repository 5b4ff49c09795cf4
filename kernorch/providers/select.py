"""Price a candidate with every provider that can run it and keep the cheapest correct one.

Korch's rule: a candidate's cost is the minimum over its implementations. Each provider's attempt
ends in a record (unavailable, unsupported, build failed, wrong, run failed, or timed), so a
provider that cannot serve a kernel is a line in a report, never a crash.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

from kernorch.ir.graph import Graph
from kernorch.ir.prims import ValueId
from kernorch.providers.base import BuiltKernel, Provider, _one_line, random_inputs, reason_or_none, verify
from kernorch.providers.timing import Measurement, MedianTimer, as_measurement
from kernorch.ir.tensors import to_torch

# (run once, provider name) -> seconds per run, with its evidence (a bare float from test doubles)
Timer = Callable[[Callable[[], object], str], "Measurement | float"]


@dataclass
class ProviderRecord:
    """``status``: ok, unavailable, unsupported, build_failed, wrong, run_failed."""

    provider: str
    status: str
    seconds: float | None = None
    max_err: float | None = None
    reason: str = ""
    built: BuiltKernel | None = field(default=None, repr=False)
    timing: Measurement | None = None  # the evidence behind ``seconds``


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
        args = [to_torch(feeds[v]) for v in built.inputs]
        if built.run_into is not None and not built.fresh:  # timed as the runtime calls it: into planned outputs
            outs = [torch.empty(g.types[v].shape, dtype=a.dtype) for v, a in zip(built.outputs, built.run(args))]
            timing = as_measurement(timer(lambda: built.run_into(args, outs), name))
        else:
            timing = as_measurement(timer(lambda: built.run(args), name))
    except Exception as e:  # noqa: BLE001
        return ProviderRecord(name, "run_failed", max_err=err, reason=f"timing: {type(e).__name__}: {_one_line(e)}")
    return ProviderRecord(name, "ok", seconds=timing.seconds, max_err=err, reason=built.detail, built=built,
                          timing=timing)
