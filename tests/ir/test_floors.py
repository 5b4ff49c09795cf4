"""Floors inside orchestrate/ (issue 45): pure planning (the DAG, enumeration, partition, the
solver, the strategies) imports neither measuring nor the tuning database nor any I/O, directly or
through another module, so it runs and is tested on any DAG without a machine to time on; tuning
(measure, database, cluster, trust) sits above it and may import it."""

from test_import_arch import _module_name, _sources, kernorch_imports

PLANNING = {f"kernorch.orchestrate.{m}" for m in (
    "baselines", "candidate", "contract", "cost", "dag", "enumerate", "from_graph", "joins", "knobs", "partition",
    "plan", "pricing", "recheck", "regions", "solver", "strategies", "synthetic")}
# what planning may reach: itself, the IR (from_graph reads a Graph) and the shared error type
BELOW = ("kernorch.ir", "kernorch.errors")


def test_planning_reaches_no_measuring_or_io():
    by_name = {_module_name(p): p for p in _sources()}
    assert PLANNING <= set(by_name), f"planning modules gone: {sorted(PLANNING - set(by_name))}; update PLANNING"
    bad = []
    for start in sorted(PLANNING):
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m in seen or m not in by_name:
                continue
            seen.add(m)
            for line, target in kernorch_imports(by_name[m]):
                if target not in PLANNING and not target.startswith(BELOW) and target != "kernorch.orchestrate":
                    bad.append(f"{m}:{line} imports {target} (reached from {start})")
                elif target in PLANNING:
                    todo.append(target)
    assert not bad, "\n".join(sorted(set(bad)))
