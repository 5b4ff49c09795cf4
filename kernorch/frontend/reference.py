"""Reference runs and their comparison: the primitive graph through the interpreter against the
original ONNX model through onnxruntime. This is what ``kernorch check`` does, kept importable so
tests and later stages (a compiled model) are judged by the same rule."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from kernorch.errors import InputError, KernorchError
from kernorch.frontend.inputs import check_inputs
from kernorch.ir import interp, oracle
from kernorch.ir.graph import Graph
from kernorch.ir.layout import GatherIndexError


def run_interpreter(graph: Graph, feeds: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
    """Checked inputs -> reference interpreter -> {output name: array}."""
    by_id = check_inputs(graph, feeds)
    arrays = {v: oracle.to_numpy(a) for v, a in by_id.items()}
    try:
        out = interp.run(graph, arrays)
    except GatherIndexError as e:  # an index input out of range: the user's data, said in one line
        raise InputError(str(e)) from None
    return {graph.name(v): out[v] for v in graph.outputs}


def run_onnxruntime(model: str | os.PathLike | onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model through onnxruntime on CPU with graph optimizations off (a plain reference)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    try:
        sess = ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        wanted = {i.name for i in sess.get_inputs()}
        outs = sess.run(names, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise KernorchError(f"onnxruntime cannot run the model: {first}") from None
    return dict(zip(names, outs))


@dataclass
class OutputDiff:
    name: str
    shape: tuple[int, ...]
    max_abs: float      # max |got - ref| (inf on shape mismatch or NaN disagreement)
    max_rel: float      # max_abs / max|ref|
    ok: bool            # max_abs <= tol * max(1, max|ref|); exact equality for non-float outputs


def compare(got: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], tol: float | None = None) -> list[OutputDiff]:
    """One OutputDiff per reference output, in the reference's order, by the oracle's rule
    (``ir.oracle.compare``); ``tol`` overrides its relative tolerance for float outputs."""
    rows = []
    for name, r in ref.items():
        r = np.asarray(r)
        if name not in got:
            rows.append(OutputDiff(name, r.shape, float("inf"), float("inf"), False))
            continue
        ok, err, _ = oracle.compare(got[name], r, rel=tol)
        scale = oracle.magnitude(r) if r.dtype.kind in "fc" else max(1.0, oracle.magnitude(r))
        rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
        rows.append(OutputDiff(name, np.shape(got[name]), err, rel, ok))
    return rows

