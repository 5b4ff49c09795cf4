"""Imports point one way: the layers of DESIGN.md, checked on the source with ``ast``.

ir is the bottom and imports nothing else from kernorch; frontend / fission / rewrite / codegen
(and kernel providers) build on ir; orchestrate on codegen + ir, except the solver, which works on
an abstract DAG and must stay free of both; targets (the Target seam: what a device kind brings to
the one pipeline) on orchestrate and below; runtime on everything below; ``options`` (one compile's
settings, the environment read once) sits just above errors so every layer can take it; only the top-level
``kernorch/__init__.py`` and ``cli.py`` reach runtime. Imports inside functions count too (a lazy
import is still a dependency); only ``if TYPE_CHECKING:`` blocks are exempt.
"""

import ast
from pathlib import Path

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


def test_solver_depends_on_neither_ir_nor_codegen():
    """Transitively: the solver must stay usable on any DAG, without the IR or code generators."""
    by_name = {_module_name(p): p for p in _sources()}
    if SOLVER not in by_name:
        return
    seen, todo, bad = set(), [SOLVER], []
    while todo:
        m = todo.pop()
        if m in seen or m not in by_name:
            continue
        seen.add(m)
        for line, target in kernorch_imports(by_name[m]):
            if _layer(target) in ("ir", "codegen"):
                bad.append(f"{m}:{line} imports {target}")
            todo.append(target)
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
