"""The rewrite driver: applies local rules to a primitive graph until nothing changes.

A rule is ``fn(p: Prim, ctx: Ctx) -> Replacement | None``. It looks at one prim (and, through ``ctx``,
at producers, consumers and constants), builds new prims with ``ctx.builder()`` and says which value
replaces the prim's output. The driver owns all bookkeeping: consumer rewiring, dead-code removal,
topological order, the rule that graph outputs keep their value ids, and ``verify`` at the end.
See Note [graph outputs keep their ids].
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from kernorch.ir.graph import Builder, Graph, GraphError, TensorType, verify
from kernorch.ir.interp import eval_prim
from kernorch.ir.prims import Op, Prim, ValueId

# Note [graph outputs keep their ids]
# Downstream stages map outputs by ``graph.outputs`` order and ``graph.names``. A rewrite that
# replaces a graph output must therefore replace it by a prim it builds itself; the driver renames
# that prim's output to the old id. A rewrite that would turn an output into a pre-existing value
# (an input, a constant, another prim's output) is declined, so every output stays produced by a
# prim of its own, with its own name.


@dataclass(frozen=True)
class RewriteOptions:
    """Knobs of the rewrite rules, in one place."""

    max_sweeps: int = 32              # bound on fixed-point sweeps over the whole graph
    fold_max_elements: int = 1 << 24  # constant folding never builds a larger constant
    fold_growth_floor: int = 64       # ... nor one larger than its inputs, unless at most this size
    const_probe_elements: int = 1 << 20  # largest constant a rule materializes to inspect it


@dataclass(frozen=True)
class Replacement:
    """What a rule returns: new prims (in dependency order) and the values they replace.

    ``value`` replaces the matched prim's output; ``extra`` maps further old values to new ones
    (horizontal merges replace several prims at once)."""

    prims: tuple[Prim, ...] = ()
    value: ValueId | None = None
    extra: Mapping[ValueId, ValueId] = field(default_factory=dict)


Rule = Callable[[Prim, "Ctx"], "Replacement | None"]


class _Types(dict):
    """The type table; remembers the largest id so builders never hand out an id twice."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.top = max(self, default=-1)

    def __setitem__(self, k, v) -> None:
        super().__setitem__(k, v)
        if k > self.top:
            self.top = k


class _Scratch(Graph):
    """A graph whose builder appends to a fresh prim list but shares the working type and
    constant tables, so new values get fresh ids and new constants land in the working graph."""

    def __init__(self, work: _Work) -> None:
        super().__init__()
        self.types = work.types
        self.constants = work.constants
        self._work = work

    def next_id(self) -> ValueId:
        return self._work.types.top + 1


class _Work:
    """The mutable working copy of a graph: producers, consumers and order, kept in step."""

    def __init__(self, g: Graph) -> None:
        self.types = _Types(g.types)
        self.constants: dict[ValueId, np.ndarray] = dict(g.constants)
        self.inputs = list(g.inputs)
        self.outputs = list(g.outputs)
        self.out_set = set(g.outputs)
        self.names = dict(g.names)
        self.producer: dict[ValueId, Prim] = {}
        self.users: dict[ValueId, dict[ValueId, None]] = {v: {} for v in g.types}
        self.order: list[ValueId] = []
        for p in g.prims:
            self._add(p)
            self.order.append(p.output)
        self.before: dict[ValueId, list[ValueId]] = {}
        self.const_memo: dict[ValueId, np.ndarray | None] = {}
        self.not_const: set[ValueId] = set()  # values computed from a graph input; reset as prims are rewired
        self.removed_dead = 0
        self.rank: dict[ValueId, int] = {}

    def _add(self, p: Prim) -> None:
        self.producer[p.output] = p
        self.users.setdefault(p.output, {})
        for v in p.inputs:
            self.users.setdefault(v, {})[p.output] = None

    def is_dead(self, v: ValueId) -> bool:
        return v in self.producer and not self.users.get(v) and v not in self.out_set

    def detach(self, v: ValueId) -> list[ValueId]:
        """Remove the prim producing ``v``; return its inputs (candidates for removal)."""
        p = self.producer.pop(v)
        for i in p.inputs:
            self.users[i].pop(v, None)
        return list(p.inputs)

    def kill(self, vs: Iterable[ValueId], count_roots: bool = True) -> None:
        """Remove prims whose outputs are unused, and then whatever becomes unused. Prims that a
        rewrite replaced (``count_roots=False``) are not counted as dead code; what they leave
        unused is."""
        stack = [(v, count_roots) for v in vs]
        while stack:
            v, count = stack.pop()
            if self.is_dead(v):
                stack.extend((i, True) for i in self.detach(v))
                self.removed_dead += count

    # -- applying one replacement -------------------------------------------------------------
    def apply(self, anchor: Prim, rep: Replacement, rule: str) -> bool:
        mapping = dict(rep.extra)
        if rep.value is not None:
            mapping[anchor.output] = rep.value
        mapping = {o: n for o, n in mapping.items() if o != n}
        new = list(rep.prims)
        if not mapping:
            return False
        new_ids = {q.output for q in new}
        for o, n in mapping.items():
            if self.types[o] != self.types[n]:
                raise GraphError(f"rewrite {rule}: %{o} {self.types[o]!r} replaced by %{n} {self.types[n]!r}")
            if o not in self.producer:
                raise GraphError(f"rewrite {rule}: replaces %{o}, which no prim produces")
        for q in new:
            if any(v in mapping for v in q.inputs):
                raise GraphError(f"rewrite {rule}: a new prim reads a value it replaces")
        # Note [graph outputs keep their ids]
        rename: dict[ValueId, ValueId] = {}
        for o, n in mapping.items():
            if o in self.out_set:
                if n not in new_ids or n in rename or n in self.out_set:
                    return False
                rename[n] = o
        if rename:
            new = [_renamed(q, rename) for q in new]
            mapping = {o: rename.get(n, n) for o, n in mapping.items() if o not in rename.values()}
        candidates: list[ValueId] = []
        self.not_const.clear()  # a rewired prim may now read constants only
        for o in rename.values():
            candidates += self.detach(o)
        for o, n in mapping.items():
            for c in list(self.users[o]):
                p = self.producer[c]
                self.producer[c] = dataclasses.replace(p, inputs=tuple(mapping.get(v, v) for v in p.inputs))
                self.users.setdefault(n, {})[c] = None
            self.users[o].clear()
        for q in new:
            self._add(q)
        for o, n in mapping.items():  # a replaced value's name moves to the prim built for it
            if n in new_ids and o in self.names and n not in self.names:
                self.names[n] = self.names[o]
        self.before.setdefault(anchor.output, []).extend(q.output for q in new)
        self.kill(list(mapping) + [q.output for q in new], count_roots=False)
        self.kill(candidates)
        return True

    # -- order --------------------------------------------------------------------------------
    def reorder(self) -> None:
        """Splice new prims before their anchors, then make the order topological (stable)."""
        seq: list[ValueId] = []
        for v in self.order:
            seq += self.before.pop(v, [])
            seq.append(v)
        for vs in self.before.values():
            seq += vs
        self.before.clear()
        state: dict[ValueId, int] = {}
        out: list[ValueId] = []
        for root in seq:
            if root not in self.producer or state.get(root) == 2:
                continue
            stack = [(root, False)]
            while stack:
                v, expanded = stack.pop()
                if expanded:
                    state[v] = 2
                    out.append(v)
                    continue
                if state.get(v) == 2:
                    continue
                if state.get(v) == 1:
                    raise GraphError(f"rewrites made a cycle through %{v}")
                state[v] = 1
                stack.append((v, True))
                for i in reversed(self.producer[v].inputs):
                    if i in self.producer and state.get(i) != 2:
                        if state.get(i) == 1:
                            raise GraphError(f"rewrites made a cycle through %{i}")
                        stack.append((i, False))
        self.order = out

    def to_graph(self) -> Graph:
        g = Graph()
        live: set[ValueId] = set()
        stack = [v for v in self.outputs if v in self.producer]
        while stack:
            v = stack.pop()
            if v in live:
                continue
            live.add(v)
            stack.extend(i for i in self.producer[v].inputs if i in self.producer)
        used = set(self.inputs) | set(self.outputs)
        for v in self.order:
            if v in live:
                p = self.producer[v]
                g.prims.append(p)
                used.add(v)
                used.update(p.inputs)
        g.types = {v: self.types[v] for v in sorted(used)}
        g.inputs = list(self.inputs)
        g.outputs = list(self.outputs)
        g.constants = {v: a for v, a in self.constants.items() if v in used}
        g.names = {v: n for v, n in self.names.items() if v in used}
        self.removed_dead += sum(1 for v in self.producer if v not in live)
        return g


def _renamed(p: Prim, rename: Mapping[ValueId, ValueId]) -> Prim:
    return dataclasses.replace(p, output=rename.get(p.output, p.output),
                               inputs=tuple(rename.get(v, v) for v in p.inputs))


class Ctx:
    """What a rule may ask about the graph around the prim it looks at."""

    def __init__(self, work: _Work, prim: Prim, options: RewriteOptions) -> None:
        self._w = work
        self.prim = prim
        self.options = options

    # -- lookups ------------------------------------------------------------------------------
    def type(self, v: ValueId) -> TensorType:
        return self._w.types[v]

    def shape(self, v: ValueId) -> tuple[int, ...]:
        return self._w.types[v].shape

    def producer(self, v: ValueId) -> Prim | None:
        return self._w.producer.get(v)

    def users(self, v: ValueId) -> list[Prim]:
        return [self._w.producer[c] for c in self._w.users.get(v, ())]

    def uses(self, v: ValueId) -> int:
        """Number of consuming prims, plus one if ``v`` is a graph output."""
        return len(self._w.users.get(v, ())) + (v in self._w.out_set)

    def is_output(self, v: ValueId) -> bool:
        return v in self._w.out_set

    def const(self, v: ValueId) -> np.ndarray | None:
        return self._w.constants.get(v)

    def const_value(self, v: ValueId, max_elements: int | None = None) -> np.ndarray | None:
        """The value of ``v`` if it is a constant or computed from constants only (never through
        opaque prims), and no value on the way is larger than ``max_elements``."""
        limit = self.options.const_probe_elements if max_elements is None else max_elements
        return _const_value(self._w, v, limit)

    def depends_on(self, v: ValueId, targets: set[ValueId]) -> bool:
        """Whether ``v`` is, or is computed from, any of ``targets``."""
        seen: set[ValueId] = set()
        stack = [v]
        while stack:
            u = stack.pop()
            if u in targets:
                return True
            if u in seen or u not in self._w.producer:
                continue
            seen.add(u)
            stack.extend(self._w.producer[u].inputs)
        return False

    def position(self, v: ValueId) -> int:
        """A rank in the current order (new prims sort last); for deterministic tie-breaking."""
        return self._w.rank.get(v, len(self._w.rank) + v)

    # -- building -----------------------------------------------------------------------------
    def builder(self, origin: str | None = None) -> Builder:
        return Builder(_Scratch(self._w), origin=self.prim.origin if origin is None else origin)

    def replace(self, b: Builder | None, value: ValueId | None,
                extra: Mapping[ValueId, ValueId] | None = None) -> Replacement:
        prims = tuple(b.g.prims) if b is not None else ()
        return Replacement(prims, value, dict(extra or {}))


def _const_value(w: _Work, v: ValueId, limit: int) -> np.ndarray | None:
    """``v``'s value when constants alone compute it (at most ``limit`` elements), else None.
    Iterative: a deep model's producer chains are longer than Python's recursion limit."""
    stack = [v]
    while stack:
        u = stack[-1]
        if u in w.constants or u in w.const_memo or u in w.not_const:
            stack.pop()
            continue
        p = w.producer.get(u)
        if p is not None and w.types[u].size > limit:
            return None  # too large for this caller (another may allow it): nothing remembered
        if p is None or p.op is Op.OPAQUE:
            w.not_const.add(u)
            stack.pop()
            continue
        todo = [i for i in p.inputs if i not in w.constants and i not in w.const_memo and i not in w.not_const]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        args = [w.constants[i] if i in w.constants else w.const_memo[i] for i in p.inputs
                if i not in w.not_const]
        if len(args) != len(p.inputs):
            w.not_const.add(u)
            continue
        if any(a.size > limit for a in args):
            return None
        t = w.types[u]
        w.const_memo[u] = eval_prim(p, args, t.dtype, t.shape)
    if v in w.constants:
        arr = w.constants[v]
    else:
        arr = w.const_memo.get(v)
    return arr if arr is not None and arr.size <= limit else None


def run_rules(graph: Graph, rules: Sequence[tuple[str, Rule]], options: RewriteOptions = RewriteOptions()
              ) -> tuple[Graph, dict[str, int]]:
    """Apply ``rules`` (tried in the given order at each prim) until a sweep changes nothing.
    Returns a new, verified graph (the input is never mutated) and rule name -> applications;
    ``"dce"`` counts prims removed because nothing used them."""
    w = _Work(graph)
    report = {name: 0 for name, _ in rules}
    w.kill(list(w.producer))
    for sweep in range(options.max_sweeps):
        w.rank = {v: k for k, v in enumerate(w.order)}
        changed = False
        for v in list(w.order):
            p = w.producer.get(v)
            if p is None or w.is_dead(v):
                continue
            ctx = Ctx(w, p, options)
            for name, fn in rules:
                rep = fn(p, ctx)
                if rep is not None and w.apply(p, rep, name):
                    report[name] += 1
                    changed = True
                    break
        w.reorder()
        if not changed:
            break
    else:
        warnings.warn(f"rewrites did not reach a fixed point in {options.max_sweeps} sweeps", stacklevel=2)
    out = w.to_graph()
    report["dce"] = report.get("dce", 0) + w.removed_dead
    verify(out)
    return out, report
