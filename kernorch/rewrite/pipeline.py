"""The rewrite pipeline: named rules, the default selection, and ``apply_rewrites``.

Defaults: the cleanups (fold, algebra, cse, dce, views, bn_fold), ``tanh_softplus`` (Mish's gate
as one exp and a division, equal up to rounding) and ``merge_linear`` (one GEMM instead of several
on the same input, with constant weights, never more work), ``conv_before_upsample`` (a 1x1
convolution runs before the upsampling that feeds it) and ``compose_linear`` (two constant linear
maps in a row are one) are on: each only fires when it saves work. Korch's
``sum_to_matmul`` and ``div_past_matmul`` change which prims exist and only pay off when the
orchestrator measures them, so they are opt-in, as is ``merge_linear_concat`` (it copies computed
weights on every run). Each is selectable by name for the benchmark ablation.
"""

from __future__ import annotations

from typing import Iterable

from kernorch.errors import KernorchError, VerificationError
from kernorch.ir.graph import Graph
from kernorch.rewrite import activations, bn_fold, compose, cse, fold, matmul, merge, upsample, views
from kernorch.rewrite.check import mismatches
from kernorch.rewrite.driver import RewriteOptions, Rule, run_rules

# Every rule, in the order the driver tries them at each prim. Cheap cleanups first, so that the
# structural rules see a tidy graph.
RULES: dict[str, Rule] = {
    "fold": fold.fold_constants,
    "algebra": fold.algebra,
    "cse": cse.cse,
    "identity_view": views.identity_view,
    "view_chain": views.view_chain,
    "broadcast_noop": views.broadcast_noop,
    "broadcast_chain": views.broadcast_chain,
    "view_of_concat": views.view_of_concat,
    "bn_fold": bn_fold.bn_fold,
    "tanh_softplus": activations.tanh_softplus,
    "merge_linear": merge.merge_linear,
    "conv_before_upsample": upsample.conv_before_upsample,
    "compose_linear": compose.compose_linear,
    "merge_linear_concat": merge.merge_linear_concat,
    "sum_to_matmul": matmul.sum_to_matmul,
    "div_past_matmul": matmul.div_past_matmul,
}

# Selection names that stand for several rules. "dce" is always on: the driver removes dead prims
# as it goes (use counts must be exact) and once more at the end.
GROUPS: dict[str, tuple[str, ...]] = {
    "views": ("identity_view", "view_chain", "broadcast_noop", "broadcast_chain", "view_of_concat"),
    "dce": (),
}

# Rules that only tidy up. They run to a fixed point before the structural rules (merges, the
# matmul rewrites) join them, so that e.g. a BatchNorm is folded into each convolution before two
# convolutions of one input are merged (a merged conv's slices no longer match the fold pattern).
CLEANUPS: frozenset[str] = frozenset({"fold", "algebra", "cse", "bn_fold"} | set(GROUPS["views"]))

DEFAULT_RULES: tuple[str, ...] = ("fold", "algebra", "cse", "dce", "views", "bn_fold", "tanh_softplus", "merge_linear",
                                  "conv_before_upsample", "compose_linear")
ALL_RULES: tuple[str, ...] = DEFAULT_RULES + ("merge_linear_concat", "sum_to_matmul", "div_past_matmul")


class UnknownRewriteError(KernorchError):
    """A rule name that ``apply_rewrites`` does not know."""


def expand(names: Iterable[str]) -> list[str]:
    """Rule names for a selection (group names expanded), in the driver's order."""
    chosen: set[str] = set()
    for n in names:
        if n in GROUPS:
            chosen.update(GROUPS[n])
        elif n in RULES:
            chosen.add(n)
        else:
            raise UnknownRewriteError(f"unknown rewrite rule {n!r}; known: {', '.join(list(RULES) + list(GROUPS))}")
    return [n for n in RULES if n in chosen]


def apply_rewrites(graph: Graph, rules: Iterable[str] = DEFAULT_RULES, options: RewriteOptions = RewriteOptions(),
                   check: bool = False) -> tuple[Graph, dict[str, int]]:
    """Rewrite ``graph`` with the selected rules to a fixed point. Returns a new verified graph
    (``graph`` is untouched; inputs, outputs and their names are kept) and a report: rule name ->
    applications, plus ``"dce"`` -> prims removed as dead. With ``check``, the result is compared
    with ``graph`` by the reference interpreter on random inputs."""
    selected = expand(rules)
    out, report = graph, {n: 0 for n in selected}
    report["dce"] = 0
    for phase in (CLEANUPS, None):
        names = [n for n in selected if phase is None or n in phase]
        if phase is not None and len(names) == len(selected):
            continue  # nothing structural selected: one phase does it all
        out, r = run_rules(out, [(n, RULES[n]) for n in names], options)
        for k, c in r.items():
            report[k] += c
    if check:
        bad = mismatches(graph, out)
        if bad:
            applied = sorted(k for k, c in report.items() if c)
            raise VerificationError(f"rewrites {applied} changed the result: {bad[0]}")
    return out, report
