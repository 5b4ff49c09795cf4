"""Synthetic dags for tests and benchmarks: narrow random graphs and a transformer-shaped graph.

They stand in for the IR adapter's output, so the orchestrator can be checked and timed alone.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from kernorch.orchestrate.dag import Dag


def random_dag(
    seed: int,
    n_nodes: int,
    *,
    max_preds: int = 2,
    window: int = 4,
    kinds: Mapping[str, float] | None = None,
    p_output: float = 0.1,
    max_group: int = 3,
) -> Dag:
    """A random dag for tests. Each node reads up to `max_preds` of the `window` nodes before it,
    so the dag stays narrow like a real primitive graph; groups are runs of up to `max_group`
    consecutive nodes (like the prims of one operator); every sink is an output (no dead code)."""
    rng = random.Random(seed)
    weights = kinds or {"elementwise": 5, "reduce": 2, "broadcast": 1, "layout": 1, "linear": 1, "opaque": 0.3}
    names, w = list(weights), list(weights.values())
    preds: dict[int, tuple[int, ...]] = {}
    for n in range(n_nodes):
        lo = max(0, n - window)
        k = min(n - lo, rng.randint(0 if n == 0 else 1, max_preds))
        preds[n] = tuple(sorted(rng.sample(range(lo, n), k)))
    read = {q for ps in preds.values() for q in ps}
    outputs = {n for n in range(n_nodes) if n not in read or rng.random() < p_output}
    kind = {n: rng.choices(names, w)[0] for n in range(n_nodes)}
    group: dict[int, str] = {}
    n, g = 0, 0
    while n < n_nodes:
        size = rng.randint(1, max_group)
        for m in range(n, min(n + size, n_nodes)):
            group[m] = f"op{g}"
        n, g = n + size, g + 1
    nbytes = {n: rng.choice((256, 4096, 65536, 1 << 20)) for n in range(n_nodes)}
    flops = {n: (rng.choice((1e6, 1e8, 1e9)) if kind[n] == "linear" else nbytes[n] / 4.0) for n in range(n_nodes)}
    input_bytes = {n: rng.choice((0, 0, 4096, 1 << 20)) if len(preds[n]) < 2 else 0 for n in range(n_nodes)}
    return Dag(
        nodes=tuple(range(n_nodes)),
        preds=preds,
        outputs=frozenset(outputs),
        kind=kind,
        group=group,
        nbytes=nbytes,
        flops=flops,
        input_bytes=input_bytes,
    )


class _Builder:
    """Appends nodes in topological order; the value of `add` is the new node's id."""

    def __init__(self) -> None:
        self.preds: dict[int, tuple[int, ...]] = {}
        self.kind: dict[int, str] = {}
        self.group: dict[int, str] = {}
        self.nbytes: dict[int, int] = {}
        self.flops: dict[int, float] = {}
        self.input_bytes: dict[int, int] = {}

    def add(
        self, kind: str, group: str, preds: Sequence[int], nbytes: int, flops: float | None = None, ext: int = 0
    ) -> int:
        n = len(self.preds)
        self.preds[n] = tuple(preds)
        self.kind[n] = kind
        self.group[n] = group
        self.nbytes[n] = nbytes
        self.flops[n] = nbytes / 4.0 if flops is None else flops
        self.input_bytes[n] = ext
        return n

    def build(self, outputs: Sequence[int]) -> Dag:
        return Dag(
            nodes=tuple(self.preds),
            preds=self.preds,
            outputs=frozenset(outputs),
            kind=self.kind,
            group=self.group,
            nbytes=self.nbytes,
            flops=self.flops,
            input_bytes=self.input_bytes,
        )


def transformer_dag(n_layers: int = 25, seq: int = 128, hidden: int = 768, heads: int = 12) -> Dag:
    """A BERT-like encoder after fission: 60 prims per layer (layer norms, QKV projections with
    bias, reshapes/transposes, attention softmax, GELU, residual adds), fp32. The widest cut is
    4 live values (residual, q, k, v); between layers only the residual is live."""
    b = _Builder()
    act = seq * hidden * 4
    row = seq * 4
    att = heads * seq * seq * 4
    x = b.add("layout", "input", (), act, 0.0, ext=act)

    def layer_norm(x: int, name: str) -> int:
        mean = b.add("reduce", name, (x,), row)
        mb = b.add("broadcast", name, (mean,), act, 0.0)
        xc = b.add("elementwise", name, (x, mb), act)
        sq = b.add("elementwise", name, (xc,), act)
        var = b.add("reduce", name, (sq,), row)
        ve = b.add("elementwise", name, (var,), row)
        rs = b.add("elementwise", name, (ve,), row)
        rb = b.add("broadcast", name, (rs,), act, 0.0)
        y = b.add("elementwise", name, (xc, rb), act)
        g = b.add("elementwise", name, (y,), act, ext=hidden * 4)
        return b.add("elementwise", name, (g,), act, ext=hidden * 4)

    def gemm(x: int, name: str, n_in: int, n_out: int) -> int:
        out = seq * n_out * 4
        mm = b.add("linear", name, (x,), out, 2.0 * seq * n_in * n_out, ext=n_in * n_out * 4)
        return b.add("elementwise", name, (mm,), out, ext=n_out * 4)

    def heads_view(x: int, name: str) -> int:
        r = b.add("layout", f"{name}_reshape", (x,), act, 0.0)
        return b.add("layout", f"{name}_transpose", (r,), act, 0.0)

    for i in range(n_layers):
        h = layer_norm(x, f"L{i}.ln1")
        q = heads_view(gemm(h, f"L{i}.q", hidden, hidden), f"L{i}.q")
        k = heads_view(gemm(h, f"L{i}.k", hidden, hidden), f"L{i}.k")
        v = heads_view(gemm(h, f"L{i}.v", hidden, hidden), f"L{i}.v")
        s = b.add("linear", f"L{i}.qk", (q, k), att, 2.0 * seq * seq * hidden)
        s = b.add("elementwise", f"L{i}.scale", (s,), att)
        s = b.add("elementwise", f"L{i}.mask", (s,), att, ext=seq * seq * 4)
        sm = f"L{i}.softmax"
        mx = b.add("reduce", sm, (s,), att // seq)
        mxb = b.add("broadcast", sm, (mx,), att, 0.0)
        e = b.add("elementwise", sm, (b.add("elementwise", sm, (s, mxb), att),), att)
        tot = b.add("broadcast", sm, (b.add("reduce", sm, (e,), att // seq),), att, 0.0)
        p = b.add("elementwise", sm, (e, tot), att)
        c = b.add("linear", f"L{i}.av", (p, v), act, 2.0 * seq * seq * hidden)
        c = b.add("layout", f"L{i}.ctx_reshape", (b.add("layout", f"L{i}.ctx_transpose", (c,), act, 0.0),), act, 0.0)
        o = gemm(c, f"L{i}.proj", hidden, hidden)
        x = b.add("elementwise", f"L{i}.res1", (x, o), act)
        h = layer_norm(x, f"L{i}.ln2")
        f = gemm(h, f"L{i}.ffn1", hidden, 4 * hidden)
        g = f"L{i}.gelu"
        big = 4 * act
        d = b.add("elementwise", g, (f,), big)
        er = b.add("elementwise", g, (d,), big, 20.0 * big)
        a1 = b.add("elementwise", g, (er,), big)
        m1 = b.add("elementwise", g, (f, a1), big)
        m2 = b.add("elementwise", g, (m1,), big)
        f = gemm(m2, f"L{i}.ffn2", 4 * hidden, hidden)
        x = b.add("elementwise", f"L{i}.res2", (x, f), act)
    return b.build([x])
