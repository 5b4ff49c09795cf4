"""The abstract graph the orchestrator works on: one node per primitive, ids in topological order.

The IR adapter builds a `Dag`; nothing in `orchestrate/` imports `kernorch.ir`, so the orchestrator
can be tested on random graphs and reused for any primitive set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

KINDS: tuple[str, ...] = ("elementwise", "reduce", "broadcast", "layout", "linear", "opaque")


@dataclass(frozen=True)
class Dag:
    """A primitive graph. Graph inputs and constants are not nodes: their traffic is `input_bytes`."""

    nodes: tuple[int, ...]
    preds: Mapping[int, tuple[int, ...]]
    outputs: frozenset[int]
    kind: Mapping[int, str]
    group: Mapping[int, str]
    nbytes: Mapping[int, int]
    flops: Mapping[int, float]
    input_bytes: Mapping[int, int]

    def __post_init__(self) -> None:
        seen: set[int] = set()
        for n in self.nodes:
            for p in self.preds.get(n, ()):
                if p not in seen:
                    raise ValueError(f"node {n} reads {p}, which is not an earlier node of the dag")
            if self.kind.get(n) not in KINDS:
                raise ValueError(f"node {n} has unknown kind {self.kind.get(n)!r}")
            seen.add(n)
        if not self.outputs <= seen:
            raise ValueError(f"outputs {sorted(self.outputs - seen)} are not nodes of the dag")

    @cached_property
    def position(self) -> Mapping[int, int]:
        """Index of each node in the topological order."""
        return {n: i for i, n in enumerate(self.nodes)}

    @cached_property
    def succs(self) -> Mapping[int, tuple[int, ...]]:
        """node -> nodes that read it, in topological order."""
        out: dict[int, list[int]] = {n: [] for n in self.nodes}
        for n in self.nodes:
            for p in dict.fromkeys(self.preds.get(n, ())):
                out[p].append(n)
        return {n: tuple(s) for n, s in out.items()}

    def subdag(self, nodes: Iterable[int]) -> Dag:
        """The dag on `nodes`: dropped predecessors become external reads (their bytes move to
        `input_bytes`) and a kept node read by a dropped node becomes an output, so a plan for the
        sub-dag still feeds the rest of the graph."""
        keep = set(nodes)
        order = tuple(n for n in self.nodes if n in keep)
        preds = {n: tuple(p for p in self.preds.get(n, ()) if p in keep) for n in order}
        ext = {
            n: self.input_bytes.get(n, 0)
            + sum(self.nbytes[p] for p in dict.fromkeys(self.preds.get(n, ())) if p not in keep)
            for n in order
        }
        outs = {n for n in order if n in self.outputs or any(s not in keep for s in self.succs[n])}
        return self._restricted(order, preds, frozenset(outs), ext)

    def without_dead(self) -> Dag:
        """Drop nodes no output depends on: no plan needs them, and dropping them makes every
        remaining node mandatory, which lets segments be solved independently."""
        live = set(self.outputs)
        for n in reversed(self.nodes):
            if n in live:
                live.update(self.preds.get(n, ()))
        if len(live) == len(self.nodes):
            return self
        order = tuple(n for n in self.nodes if n in live)
        preds = {n: tuple(self.preds.get(n, ())) for n in order}
        return self._restricted(order, preds, self.outputs, {n: self.input_bytes.get(n, 0) for n in order})

    def _restricted(
        self,
        order: tuple[int, ...],
        preds: Mapping[int, tuple[int, ...]],
        outputs: frozenset[int],
        input_bytes: Mapping[int, int],
    ) -> Dag:
        return Dag(
            nodes=order,
            preds=preds,
            outputs=outputs,
            kind={n: self.kind[n] for n in order},
            group={n: self.group[n] for n in order},
            nbytes={n: self.nbytes[n] for n in order},
            flops={n: self.flops[n] for n in order},
            input_bytes=input_bytes,
        )


def make_dag(
    preds: Mapping[int, Iterable[int]],
    *,
    outputs: Iterable[int] | None = None,
    kind: Mapping[int, str] | None = None,
    group: Mapping[int, str] | None = None,
    nbytes: Mapping[int, int] | None = None,
    flops: Mapping[int, float] | None = None,
    input_bytes: Mapping[int, int] | None = None,
) -> Dag:
    """Convenience constructor for tests: nodes in the key order of `preds`, defaults for the rest
    (elementwise, one group per node, 4 KiB values, no flops, sinks are the outputs)."""
    nodes = tuple(preds)
    p = {n: tuple(preds[n]) for n in nodes}
    if outputs is None:
        read = {q for ps in p.values() for q in ps}
        outputs = [n for n in nodes if n not in read]
    return Dag(
        nodes=nodes,
        preds=p,
        outputs=frozenset(outputs),
        kind={n: (kind or {}).get(n, "elementwise") for n in nodes},
        group={n: (group or {}).get(n, f"op{n}") for n in nodes},
        nbytes={n: (nbytes or {}).get(n, 4096) for n in nodes},
        flops={n: (flops or {}).get(n, 0.0) for n in nodes},
        input_bytes={n: (input_bytes or {}).get(n, 0) for n in nodes},
    )
