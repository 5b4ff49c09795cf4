"""Baseline orchestrations that partition the dag into disjoint kernels by fixed rules: unfused,
per-operator and greedy. Dag -> list of node blocks (each block one multi-output kernel).

Rules (exact):
- unfused: one kernel per node.
- per-operator: one kernel per `group` (the ONNX operator a prim came from), unless the group is
  not a legal kernel: not weakly connected, not convex, two linear prims, an opaque prim with
  others, or the code generator cannot generate it (`can_generate` false or cost None). Such a
  group is split into pieces: its nodes in topological order join the first earlier piece of the
  group they touch where the result is legal, else start a new piece; then pieces of the group
  are merged pairwise while legal, until no two can be. If pieces of different groups then form
  a cycle (each reads a value the other writes; Note [multi-output deadlock]), the pieces on the
  cycle fall back to one kernel per node.
- greedy (TVM/TensorRT style): start from the per-operator pieces ("units") in topological order
  and classify each unit: opaque if it has an opaque prim, else linear if it has a linear prim,
  else reduce if it has a reduce prim, else injective. A unit U merges into the kernel G that
  writes a value v that U reads when
    1. U is injective (elementwise/broadcast/layout epilogue of anything but opaque), or U is
       a reduce unit and G has no reduce and no linear unit (injective prologue of a reduction);
    2. U is v's only consumer (all readers of v are in U), so v need not be written;
    3. G is not opaque, and the union has at most `greedy_max_kernel_nodes` prims;
    4. kernels stay acyclic (no path from G through another kernel into U), the code generator
       can generate the union, and the cost accepts it.
  Among several such v, the largest (then the latest) wins. Linear and opaque units never merge
  into a producer, so a kernel holds at most one linear and one reduce operator. Whole units are
  merged, so greedy never splits an operator more than per-operator does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from kernorch.orchestrate.candidate import Candidate, is_connected, is_convex, multi_output
from kernorch.orchestrate.dag import Dag
from kernorch.orchestrate.solver import Problem, order_kernels

Legal = Callable[[frozenset[int]], bool]


def kind_rules_ok(dag: Dag, nodes: Iterable[int]) -> bool:
    """At most one linear prim; an opaque prim only alone."""
    kinds = [dag.kind[n] for n in nodes]
    return kinds.count("linear") <= 1 and ("opaque" not in kinds or len(kinds) == 1)


def unfused_blocks(dag: Dag) -> list[frozenset[int]]:
    return [frozenset((n,)) for n in dag.nodes]


def operator_blocks(dag: Dag, generatable: Legal) -> list[frozenset[int]]:
    """Per-operator pieces (module docstring), in topological order of their first node."""

    def legal(nodes: frozenset[int]) -> bool:
        return (
            kind_rules_ok(dag, nodes)
            and is_connected(dag, nodes)
            and is_convex(dag, nodes)
            and generatable(nodes)
        )

    groups: dict[str, list[int]] = {}
    for n in dag.nodes:
        groups.setdefault(dag.group[n], []).append(n)
    blocks: list[frozenset[int]] = []
    for members in groups.values():
        whole = frozenset(members)
        blocks.extend([whole] if len(whole) == 1 or legal(whole) else _split_group(dag, members, legal))
    blocks = _break_cycles(dag, blocks)
    return sorted(blocks, key=lambda b: min(dag.position[n] for n in b))


def _split_group(dag: Dag, members: Sequence[int], legal: Legal) -> list[frozenset[int]]:
    pieces: list[frozenset[int]] = []
    for n in members:
        touching = set(dag.preds.get(n, ())) | set(dag.succs[n])
        for i, piece in enumerate(pieces):
            if touching & piece and legal(piece | {n}):
                pieces[i] = piece | {n}
                break
        else:
            pieces.append(frozenset((n,)))
    merged = True
    while merged:
        merged = False
        for i in range(len(pieces)):
            for j in range(i + 1, len(pieces)):
                if legal(pieces[i] | pieces[j]):
                    pieces[i] = pieces[i] | pieces.pop(j)
                    merged = True
                    break
            if merged:
                break
    return pieces


def _break_cycles(dag: Dag, blocks: list[frozenset[int]]) -> list[frozenset[int]]:
    """Replace the blocks that cannot be ordered by one block per node (see module docstring).
    Refining only blocks on cycles leaves an acyclic quotient: a new cycle would map to a cycle
    among coarse blocks that were themselves refined, i.e. to a cycle of the dag."""
    problem = _as_problem(dag, blocks)
    _, stuck, _ = order_kernels(problem, range(len(blocks)))
    if not stuck:
        return blocks
    bad = set(stuck)
    cyclic = _blocks_on_cycles(dag, blocks, bad)
    out = [b for i, b in enumerate(blocks) if i not in cyclic]
    out += [frozenset((n,)) for i in sorted(cyclic) for n in blocks[i]]
    return out


def _blocks_on_cycles(dag: Dag, blocks: list[frozenset[int]], stuck: set[int]) -> set[int]:
    """Stuck blocks that reach themselves through the block quotient."""
    block_of = {n: i for i, b in enumerate(blocks) for n in b}
    succ = {i: {block_of[s] for n in blocks[i] for s in dag.succs[n]} - {i} for i in stuck}
    on_cycle = set()
    for i in stuck:
        seen, todo = set(), [j for j in succ[i] if j in stuck]
        while todo:
            j = todo.pop()
            if j == i:
                on_cycle.add(i)
                break
            if j not in seen:
                seen.add(j)
                todo.extend(k for k in succ[j] if k in stuck)
    return on_cycle


def _as_problem(dag: Dag, blocks: Sequence[frozenset[int]]) -> Problem:
    cands = [multi_output(dag, b) for b in blocks]
    return Problem(
        costs=[0.0] * len(cands),
        writes=[tuple(c.outputs) for c in cands],
        reads=[tuple(c.inputs) for c in cands],
        required=(),
        order_key=[float(min(dag.position[n] for n in b)) for b in blocks],
    )


def order_blocks(dag: Dag, blocks: Sequence[frozenset[int]]) -> list[Candidate]:
    """Blocks as multi-output kernels in an executable order (blocks must have an acyclic quotient)."""
    problem = _as_problem(dag, blocks)
    ran, stuck, _ = order_kernels(problem, range(len(blocks)))
    if stuck:
        raise AssertionError(f"blocks {[sorted(blocks[i]) for i in stuck]} cannot be ordered")
    return [multi_output(dag, blocks[i]) for i in ran]


def _pattern(dag: Dag, unit: frozenset[int]) -> str:
    kinds = {dag.kind[n] for n in unit}
    for k in ("opaque", "linear", "reduce"):
        if k in kinds:
            return k
    return "injective"


def greedy_blocks(
    dag: Dag, units: Sequence[frozenset[int]], generatable: Legal, max_nodes: int
) -> list[frozenset[int]]:
    """Greedy fusion of per-operator units (module docstring). `units` must be in an executable
    (topological) order, as `operator_blocks` returns them after `order_blocks`."""
    kernels: list[set[int]] = []
    patterns: list[set[str]] = []
    kernel_of: dict[int, int] = {}
    for unit in units:
        pat = _pattern(dag, unit)
        target = None
        if pat in ("injective", "reduce"):
            target = _pick_target(dag, unit, pat, kernels, patterns, kernel_of, generatable, max_nodes)
        if target is None:
            target = len(kernels)
            kernels.append(set())
            patterns.append(set())
        kernels[target] |= unit
        patterns[target].add(pat)
        for n in unit:
            kernel_of[n] = target
    return [frozenset(k) for k in kernels]


def _pick_target(
    dag: Dag,
    unit: frozenset[int],
    pat: str,
    kernels: list[set[int]],
    patterns: list[set[str]],
    kernel_of: dict[int, int],
    generatable: Legal,
    max_nodes: int,
) -> int | None:
    reads = {p for n in unit for p in dag.preds.get(n, ()) if p not in unit}
    sole = [v for v in reads if all(s in unit for s in dag.succs[v])]
    sole.sort(key=lambda v: (-dag.nbytes[v], -dag.position[v]))
    feeders = {kernel_of[v] for v in reads}
    for v in sole:
        g = kernel_of[v]
        if "opaque" in patterns[g] or len(kernels[g]) + len(unit) > max_nodes:
            continue
        if pat == "reduce" and patterns[g] & {"reduce", "linear"}:
            continue
        if _reaches_through_other(dag, g, feeders, kernels, kernel_of):
            continue
        if generatable(frozenset(kernels[g] | unit)):
            return g
    return None


def _reaches_through_other(
    dag: Dag, g: int, feeders: set[int], kernels: list[set[int]], kernel_of: dict[int, int]
) -> bool:
    """True if a path leaves kernel g through another kernel and reaches a feeder of the unit;
    merging would then close a cycle. Unplaced nodes (later units) cannot feed the unit."""
    start = {kernel_of[s] for n in kernels[g] for s in dag.succs[n] if s in kernel_of} - {g}
    seen = set(start)
    todo = list(start)
    while todo:
        k = todo.pop()
        if k in feeders:
            return True
        for n in kernels[k]:
            for s in dag.succs[n]:
                j = kernel_of.get(s)
                if j is not None and j != g and j not in seen:
                    seen.add(j)
                    todo.append(j)
    return False
