"""Quiet vs busy-machine tuning, side by side (issue: measurements you can trust on a busy machine).

For each model: compile (strategy optimal, regions off so every price is kernorch's own) into a
fresh tuning database on the quiet machine, then again with a CPU burner pinned to core 0, with
kernorch's interference detection on and (to show what it prevents) off. Prints per run: tuning
time, disturbed samples, flagged prices, the worst price ratio against the quiet database, whether
the plan equals the quiet plan, the plan's objective at quiet prices relative to the quiet plan's
(kernel prices plus the solver's per-kernel overhead; a timing figure, not a test bound), the
plan's priced cost, and the measured latency of the compiled model (all latencies timed at the
end, interleaved, with the burner stopped).

    python -m bench.busy_tuning                      # candy and vit_tiny, small sizes
    python -m bench.busy_tuning --models candy --size default
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

BURN = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"


@contextmanager
def burner(on: bool):
    proc = subprocess.Popen([sys.executable, "-c", BURN]) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


def prices(db: Path) -> dict[tuple[str, str], float]:
    with sqlite3.connect(db) as c:
        return {(k, p): s for k, p, s in c.execute("SELECT key, provider, seconds FROM costs WHERE status='ok'")}


def at_prices(keys: list[str], p: dict[tuple[str, str], float]) -> float:
    """The solver's objective for a plan at prices ``p``: each kernel's cheapest provider plus the
    per-kernel overhead; NaN when a kernel has no price there."""
    from kernorch.orchestrate.measure import KERNEL_OVERHEAD_S

    best: dict[str, float] = {}
    for (k, _), s in p.items():
        best[k] = min(s, best.get(k, s))
    return sum(best.get(k, float("nan")) + KERNEL_OVERHEAD_S for k in keys)


def plan_keys(model) -> list[str]:
    g, ex = model.graph, model.executable
    return [g.kernel_key(info.members, list(k.outputs)) for k, info in zip(ex.kernels, ex.infos)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="candy,vit_tiny")
    ap.add_argument("--size", default="small", choices=("small", "default"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=30, help="timed runs per compiled model")
    ap.add_argument("--budget", type=int, default=800, help="candidate kernels measured per compile")
    args = ap.parse_args()

    import kernorch
    from bench.export import export_onnx
    from kernorch.frontend.inputs import random_inputs
    from kernorch.providers import timing

    os.sched_setaffinity(0, {0, 1})
    runs = (("quiet", False, True), ("busy", True, True), ("busy, detection off", True, False))
    tmp = Path(tempfile.mkdtemp(prefix="kn-busy-"))
    rows = []
    for name in args.models.split(","):
        path = export_onnx(name, size=args.size)
        compiled = {}
        for label, busy, detect in runs:
            db = tmp / f"{name}-{label.replace(' ', '_').replace(',', '')}.sqlite"
            timing.DISTURBED_WAIT_FRACTION = 0.05 if detect else float("inf")
            t0 = time.perf_counter()
            with burner(busy):
                m = kernorch.compile(path, db=db, threads=args.threads, regions=False, providers=(), progress=False,
                                     tuning_budget=args.budget)
            secs = time.perf_counter() - t0
            compiled[label] = (m, db, secs)
        timing.DISTURBED_WAIT_FRACTION = 0.05
        feeds = random_inputs(next(iter(compiled.values()))[0].graph, seed=0)
        lat: dict[str, list[float]] = {k: [] for k in compiled}
        for r in range(args.repeat + 3):
            for label, (m, _, _) in compiled.items():
                t = time.perf_counter()
                m.run(feeds)
                if r >= 3:
                    lat[label].append(time.perf_counter() - t)
        quiet_prices = prices(compiled["quiet"][1])
        quiet_keys = plan_keys(compiled["quiet"][0])
        quiet_objective = at_prices(quiet_keys, quiet_prices)
        for label, (m, db, secs) in compiled.items():
            p = prices(db)
            common = [k for k in p if k in quiet_prices]
            worst = max((p[k] / quiet_prices[k] for k in common), default=float("nan"))
            flagged = sum(1 for _ in sqlite3.connect(db).execute("SELECT 1 FROM costs WHERE flags != ''"))
            rep = m.report
            rows.append((name, label, f"{secs:.0f}", str(rep.disturbed), str(flagged), f"{worst:.1f}x",
                         "yes" if plan_keys(m) == quiet_keys else "no",
                         f"{at_prices(plan_keys(m), quiet_prices) / quiet_objective:.3f}x", str(len(m.kernels)),
                         f"{sum(i.seconds or 0 for i in m.executable.infos) * 1e3:.3f}",
                         f"{statistics.median(lat[label]) * 1e3:.3f}"))
    head = ("model", "tuning", "s", "disturbed", "flagged", "worst price/quiet", "plan = quiet",
            "plan at quiet prices", "kernels",
            "priced ms", "latency ms")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; {args.threads} threads, {args.size} inputs, "
          f"budget {args.budget} candidates per compile")
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
