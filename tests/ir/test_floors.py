"""Floors inside orchestrate/ (issue 45): pure planning (the DAG, enumeration, partition, the
solver, the strategies) imports neither measuring nor the tuning database nor any I/O, directly or
through another module, so it runs and is tested on any DAG without a machine to time on; tuning
(measure, database, cluster, trust) sits above it and may import it."""

from test_import_arch import _module_name, _sources, imports_reached

PLANNING = {f"kernorch.orchestrate.{m}" for m in (
    "baselines", "candidate", "contract", "cost", "dag", "enumerate", "from_graph", "joins", "knobs", "partition",
    "plan", "pricing", "recheck", "regions", "solver", "strategies", "synthetic")}
# what planning may reach: itself, the IR (from_graph reads a Graph) and the shared error type
BELOW = ("kernorch.ir", "kernorch.errors")


def test_planning_reaches_no_measuring_or_io():
    known = {_module_name(p) for p in _sources()}
    assert PLANNING <= known, f"planning modules gone: {sorted(PLANNING - known)}; update PLANNING"
    bad = {f"{m}:{line} imports {target} (reached from {start})"
           for start in sorted(PLANNING) for m, line, target in imports_reached(start, PLANNING.__contains__)
           if target not in PLANNING and not target.startswith(BELOW) and target != "kernorch.orchestrate"}
    assert not bad, "\n".join(sorted(bad))
