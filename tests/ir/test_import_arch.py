"""Imports point one way: the layers of DESIGN.md, checked on the source with ``ast``.

ir is the bottom and imports nothing else from kernorch; frontend / fission / rewrite / codegen
(and kernel providers) build on ir; orchestrate on codegen + ir, except the solver, which works on
an abstract DAG and must stay free of both; targets (the Target seam: what a device kind brings to
the one pipeline) on orchestrate and below; runtime on everything below; ``options`` (one compile's
settings, the environment read once) sits just above errors so every layer can take it; only the top-level
``kernorch/__init__.py`` and ``cli.py`` reach runtime. Imports inside functions count too (a lazy
import is still a dependency); only ``if TYPE_CHECKING:`` blocks are exempt.

No two modules import each other, directly or around a cycle, and no two layers either (issue 45):
a shared piece moves down into the lower module or a small new one (the CLI's cli_common.py,
runtime/records.py), and a registry never imports what registers in it (fission/rules/ imports
fission/registry.py, not the reverse). An import inside a function is the exception that buys
start-up time or keeps an optional heavy dependency unloaded; each says why on its line and is
listed, with that reason, in LAZY_IMPORTS.
"""

import ast
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

PKG = Path(__file__).resolve().parents[2] / "kernorch"

# subpackage -> the other kernorch subpackages it may import ("errors" is the shared module)
BELOW_RUNTIME = {"ir", "frontend", "fission", "rewrite", "codegen", "providers", "orchestrate", "targets", "errors",
                 "options"}
ALLOWED = {
    "ir": set(),
    "frontend": {"ir", "fission", "errors"},     # importing a model is load + fission
    "fission": {"ir", "frontend", "errors"},
    "rewrite": {"ir", "errors"},
    "codegen": {"ir", "errors", "options"},
    "providers": {"ir", "codegen", "errors", "options"},
    "orchestrate": {"ir", "codegen", "providers", "errors", "options"},  # providers price candidates too
    "targets": {"ir", "codegen", "providers", "orchestrate", "errors", "options"},  # never runtime: it runs on them
    "runtime": BELOW_RUNTIME,
    "errors": set(),
    "options": {"errors"},  # the settings of a compile, read once: below every layer that takes them
    "__main__": {"cli"},
    # the command: cli.py (parser, inspect / check / doctor) over its two subcommand modules, all three over
    # cli_common (what they share), which imports none of them: no cycle among the command's modules
    "cli": BELOW_RUNTIME | {"runtime", "__init__", "cli_common", "cli_run", "cli_db"},
    "cli_run": BELOW_RUNTIME | {"runtime", "__init__", "cli_common"},   # the compile / run subcommands
    "cli_db": BELOW_RUNTIME | {"runtime", "__init__", "cli_common"},    # the tune / db subcommands
    "cli_common": {"errors"},  # exit statuses, the model arguments, argument types
    "__init__": BELOW_RUNTIME | {"runtime"},
}
SOLVER = "kernorch.orchestrate.solver"


def _module_name(path: Path, pkg: Path = PKG) -> str:
    parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str, pkg: Path = PKG) -> bool:
    rel = Path(*name.split("."))
    return (pkg.parent / rel).with_suffix(".py").exists() or (pkg.parent / rel / "__init__.py").exists()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            t = node.test
            if (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
                    (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"):
                skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def kernorch_imports(path: Path, pkg: Path = PKG) -> list[tuple[int, str]]:
    """(line, imported kernorch module) for every import in ``path``, relative ones resolved."""
    me = _module_name(path, pkg)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_nodes(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kernorch"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "kernorch":
                continue
            for a in node.names:  # `from kernorch import errors` imports the module kernorch.errors
                sub = f"{mod}.{a.name}"
                out.append((node.lineno, sub if _is_module(sub, pkg) else mod))
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _sources() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_subpackage_has_a_layer():
    unknown = sorted({_layer(_module_name(p)) for p in _sources()} - set(ALLOWED))
    assert not unknown, f"new kernorch subpackages {unknown}: add them to ALLOWED in {__file__}"


def test_imports_point_one_way():
    bad = []
    for path in _sources():
        me = _layer(_module_name(path))
        for line, target in kernorch_imports(path):
            other = _layer(target)
            if other != me and other not in ALLOWED.get(me, set()):
                bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {target} "
                           f"({me} may import only {sorted(ALLOWED.get(me, ()))})")
    assert not bad, "\n".join(bad)


def imports_reached(start: str, within=lambda module: True):
    """(module, line, imported) for every kernorch import of ``start`` and of the modules it reaches
    through imports, following only imported modules that ``within`` accepts."""
    by_name = {_module_name(p): p for p in _sources()}
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m in seen or m not in by_name:
            continue
        seen.add(m)
        for line, target in kernorch_imports(by_name[m]):
            yield m, line, target
            if within(target):
                todo.append(target)


def test_solver_depends_on_neither_ir_nor_codegen():
    """Transitively: the solver must stay usable on any DAG, without the IR or code generators."""
    bad = [f"{m}:{line} imports {target}" for m, line, target in imports_reached(SOLVER)
           if _layer(target) in ("ir", "codegen")]
    assert not bad, "\n".join(bad)


def test_the_checker_sees_relative_and_lazy_imports(tmp_path):
    """The checker itself: relative, from-package and in-function imports are all resolved."""
    pkg = tmp_path / "kernorch"
    for sub in ("ir", "orchestrate", "runtime"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "ir" / "graph.py").write_text("")
    (pkg / "orchestrate" / "solver.py").write_text("")
    p = pkg / "orchestrate" / "probe.py"
    p.write_text("from ..ir import graph\nfrom . import solver\n"
                 "def f():\n    from kernorch import runtime\n"
                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kernorch.frontend import inputs\n")
    got = kernorch_imports(p, pkg)
    assert got == [(1, "kernorch.ir.graph"), (2, "kernorch.orchestrate.solver"), (4, "kernorch.runtime")]


# ---------------------------------------------------------------------------------------------
# No import cycles, and lazy imports only where they buy something
# ---------------------------------------------------------------------------------------------

_CLI = "the CLI: a command's heavy modules load when it runs, so `kernorch --help` stays fast"
# (module, the kernorch module it imports inside a function) -> why that import cannot be at the top.
LAZY_IMPORTS = {
    ("kernorch", "kernorch.runtime.compile"): "`import kernorch` loads no torch or codegen (kernorch.compile on use)",
    ("kernorch", "kernorch.runtime.optimize"): "as kernorch.compile",
    ("kernorch", "kernorch.runtime.model"): "as kernorch.compile (CompiledModel)",
    ("kernorch", "kernorch.runtime.dynamic_model"): "as kernorch.compile (DynamicModel)",
    ("kernorch", "kernorch.runtime.decode"): "as kernorch.compile (compile_decoder, Decoder)",
    ("kernorch", "kernorch.runtime.loading"): "as kernorch.compile (kernorch.load)",
    ("kernorch", "kernorch.options"): "kernorch.CodegenOptions: `import kernorch` loads kernorch.errors only",
    ("kernorch.ir.oracle", "kernorch.ir.tensors"): "torch, only for a tensor argument: the oracle stays torch-free",
    ("kernorch.cli", "kernorch.frontend.onnx_import"): _CLI + " (onnx)",
    ("kernorch.cli", "kernorch.frontend.summary"): _CLI + " (onnx)",
    ("kernorch.cli", "kernorch.frontend.inputs"): _CLI + " (ml_dtypes, scipy)",
    ("kernorch.cli", "kernorch.frontend.reference"): _CLI + " (onnx)",
    ("kernorch.cli", "kernorch.runtime.doctor"): _CLI + " (torch, the code generator)",
    ("kernorch.cli", "kernorch.runtime.segments"): _CLI + " (torch, the rewrites)",
    ("kernorch.cli_run", "kernorch.frontend.inputs"): _CLI + " (ml_dtypes, scipy)",
    ("kernorch.cli_run", "kernorch.runtime.benchmark"): _CLI + " (torch, the code generator)",
    ("kernorch.cli_run", "kernorch.runtime.html_report"): _CLI + " (torch, compile())",
    ("kernorch.cli_run", "kernorch.runtime.summary"): _CLI + "; `import kernorch.cli` loads no kernorch.runtime "
                                                      "(tests/test_cli.py)",
    ("kernorch.cli_db", "kernorch.orchestrate.tuning_db"): _CLI + " (sqlite3: 5% of --help)",
    ("kernorch.cli_db", "kernorch.orchestrate.trust"): _CLI + " (the tuning database, as above)",
    ("kernorch.cli_db", "kernorch.orchestrate.db_merge"): _CLI + " (the tuning database, as above)",
    ("kernorch.cli_db", "kernorch.orchestrate.cluster"): _CLI + " (torch, the providers)",
    ("kernorch.cli_db", "kernorch.runtime.compile"): _CLI + " (torch, the code generator)",
    ("kernorch.cli_db", "kernorch.orchestrate.machine"): _CLI + " (the code generator)",
    ("kernorch.cli_db", "kernorch.orchestrate.measure"): _CLI + " (torch, the code generator)",
    ("kernorch.codegen.triton_warm", "kernorch.codegen.runner"): "runs in a Triton compile worker process, which "
                                                                  "loads torch only when a job comes",
}


def _import_graph() -> dict[str, set[str]]:
    """module -> the kernorch modules it imports (at the top or inside functions; not under TYPE_CHECKING)."""
    edges: dict[str, set[str]] = {}
    for path in _sources():
        me = _module_name(path)
        edges[me] = {target for _, target in kernorch_imports(path) if target != me}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (SciPy's), each sorted."""
    names = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    at = {n: k for k, n in enumerate(names)}
    pairs = [(at[a], at[b]) for a, ts in edges.items() for b in ts]
    rows, cols = zip(*pairs) if pairs else ((), ())
    graph = csr_matrix((np.ones(len(pairs)), (rows, cols)), shape=(len(names), len(names)))
    _, label = connected_components(graph, directed=True, connection="strong")
    comps: dict[int, list[str]] = {}
    for n, c in zip(names, label):
        comps.setdefault(int(c), []).append(n)
    return sorted(c for c in comps.values() if len(c) > 1)


def test_no_module_cycles():
    bad = _cycles(_import_graph())
    assert not bad, ("kernorch modules import each other in a cycle (move the shared piece down into the lower "
                     "module or a small new one):\n" + "\n".join(" <-> ".join(c) for c in bad))


def test_no_folder_cycles():
    """Between subpackages and top-level modules (the layers of ALLOWED) no cycle either."""
    layers: dict[str, set[str]] = {}
    for me, targets in _import_graph().items():
        layers.setdefault(_layer(me), set()).update(_layer(t) for t in targets if _layer(t) != _layer(me))
    bad = _cycles(layers)
    assert not bad, "layers import each other in a cycle:\n" + "\n".join(" <-> ".join(c) for c in bad)


def _lazy_imports(path: Path) -> list[tuple[int, str]]:
    """(line, kernorch module) of every import inside a function of ``path`` (TYPE_CHECKING exempt)."""
    tree = ast.parse(path.read_text(), str(path))
    inside = {n.lineno for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return [(line, target) for line, target in kernorch_imports(path) if line in inside]


def test_lazy_imports_are_the_listed_few():
    """A kernorch import inside a function is there for start-up time or an optional heavy dependency,
    says why in a ``# lazy:`` comment on its line, and is listed in LAZY_IMPORTS with that reason."""
    found, unlisted, uncommented = set(), [], []
    for path in _sources():
        me = _module_name(path)
        lines = path.read_text().splitlines()
        for line, target in _lazy_imports(path):
            where = f"{path.relative_to(PKG.parent)}:{line} imports {target}"
            found.add((me, target))
            if (me, target) not in LAZY_IMPORTS:
                unlisted.append(where)
            if "# lazy:" not in lines[line - 1]:
                uncommented.append(where)
    assert not unlisted, ("imports inside functions: move them to the top of the module; if one must stay (start-up "
                          "time, an optional heavy dependency), add it to LAZY_IMPORTS in " + __file__ +
                          " with its reason:\n" + "\n".join(unlisted))
    assert not uncommented, "a lazy import says why on its line (`# lazy: ...`):\n" + "\n".join(uncommented)
    stale = sorted(set(LAZY_IMPORTS) - found)
    assert not stale, f"LAZY_IMPORTS lists imports that are no longer inside functions; remove them: {stale}"


def test_the_cycle_finder(tmp_path):
    """The checker itself: a cycle through three modules is one component; a self-import none."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"d"}, "e": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    p = tmp_path / "kernorch" / "probe.py"
    p.parent.mkdir()
    (p.parent / "__init__.py").write_text("")
    (p.parent / "other.py").write_text("")
    p.write_text("from kernorch import other\ndef f():\n    from kernorch import other  # lazy: why\n"
                 "class C:\n    def g(self):\n        import kernorch.other\n")
    assert [t for _, t in kernorch_imports(p, p.parent)] == ["kernorch.other"] * 3
