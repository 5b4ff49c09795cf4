"""Primitive-graph rewrites that keep semantics: ``apply_rewrites(graph, rules) -> (graph, report)``."""

from kernorch.rewrite.driver import Ctx, Replacement, RewriteOptions, run_rules
from kernorch.rewrite.pipeline import ALL_RULES, DEFAULT_RULES, GROUPS, RULES, UnknownRewriteError, apply_rewrites

__all__ = ["ALL_RULES", "DEFAULT_RULES", "GROUPS", "RULES", "Ctx", "Replacement", "RewriteOptions",
           "UnknownRewriteError", "apply_rewrites", "run_rules"]
