"""What a reduced-precision compile costs in accuracy, stated: each output of the compiled model
against the float32 reference interpreter (ir/interp.py, the oracle) on held-out inputs — seeds the
kernels were never verified on — as the max error relative to the output's scale, the cosine
similarity and, for outputs shaped like class scores (a last axis of at least 2 classes), how often
both pick the same class (top-1 agreement over every row)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from kernorch.ir import interp, oracle
from kernorch.ir.graph import Graph

HELD_OUT_SEEDS = (101, 102, 103)  # the compile verifies and times kernels on seed 0


@dataclass(frozen=True)
class OutputAccuracy:
    output: str
    max_rel_err: float  # max |got - ref| / max |ref|, over every held-out input
    cosine: float  # the worst input's cosine similarity of got and ref (flattened)
    top1: float | None  # share of rows whose argmax agrees; None when the output is not class scores

    def line(self) -> str:
        top1 = "" if self.top1 is None else f", top-1 agreement {self.top1:.1%}"
        return f"{self.output}: max rel err {self.max_rel_err:.2e}, cosine {self.cosine:.5f}{top1}"


def measure(g: Graph, run: Callable[[dict[str, np.ndarray]], dict], seeds=HELD_OUT_SEEDS) -> list[OutputAccuracy]:
    """Accuracy of ``run`` (``{input name: array} -> {output name: array or tensor}``) per output of
    ``g`` against the interpreter on ``seeds``' random inputs."""
    errs: dict[int, list[tuple[float, float]]] = {v: [] for v in g.outputs}
    agree: dict[int, list[float]] = {v: [] for v in g.outputs}
    for seed in seeds:
        feeds = oracle.random_feeds(g, seed=seed)
        ref = interp.run(g, feeds)
        got = run({g.name(v): a for v, a in feeds.items()})
        for v in g.outputs:
            r = np.asarray(ref[v], dtype=np.float64)
            o = oracle.to_numpy(got[g.name(v)]).astype(np.float64).reshape(r.shape)
            scale = max(float(np.max(np.abs(r), initial=0.0)), 1e-30)
            norm = float(np.linalg.norm(r) * np.linalg.norm(o))
            cos = float(np.dot(r.ravel(), o.ravel()) / norm) if norm > 0 else 1.0
            errs[v].append((float(np.max(np.abs(o - r), initial=0.0)) / scale, cos))
            if r.ndim >= 1 and r.shape[-1] >= 2 and r.size:
                agree[v].append(float(np.mean(r.reshape(-1, r.shape[-1]).argmax(-1)
                                              == o.reshape(-1, r.shape[-1]).argmax(-1))))
    return [OutputAccuracy(g.name(v), max(e for e, _ in errs[v]), min(c for _, c in errs[v]),
                           float(np.mean(agree[v])) if agree[v] else None) for v in g.outputs]


def as_dicts(report: list[OutputAccuracy]) -> list[dict]:
    """Plain values for the compile report (saved with the model as JSON)."""
    return [asdict(a) for a in report]
