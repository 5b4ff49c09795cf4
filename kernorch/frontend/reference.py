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
from kernorch.ir import interp
from kernorch.ir.graph import Graph
from kernorch.ir.layout import GatherIndexError

DEFAULT_TOL = 1e-4


def run_interpreter(graph: Graph, feeds: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
    """Checked inputs -> reference interpreter -> {output name: array}."""
    by_id = check_inputs(graph, feeds)
    arrays = {v: _numpy(a) for v, a in by_id.items()}
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


def compare(got: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], tol: float = DEFAULT_TOL) -> list[OutputDiff]:
    """One OutputDiff per reference output, in the reference's order."""
    rows = []
    for name, r in ref.items():
        r = np.asarray(r)
        if name not in got:
            rows.append(OutputDiff(name, r.shape, float("inf"), float("inf"), False))
            continue
        g = np.asarray(got[name])
        if g.shape != r.shape:
            rows.append(OutputDiff(name, g.shape, float("inf"), float("inf"), False))
            continue
        if r.dtype.kind not in "fc":
            bad = int(np.count_nonzero(g != r))
            err = float(np.max(np.abs(g.astype(np.float64) - r.astype(np.float64)))) if bad else 0.0
            rows.append(OutputDiff(name, r.shape, err, err / max(1.0, float(np.max(np.abs(r), initial=0))), bad == 0))
            continue
        g64, r64 = g.astype(np.float64), r.astype(np.float64)
        nan_g, nan_r = np.isnan(g64), np.isnan(r64)
        if np.any(nan_g != nan_r):
            rows.append(OutputDiff(name, r.shape, float("inf"), float("inf"), False))
            continue
        finite = ~nan_r
        with np.errstate(invalid="ignore"):
            diff = np.abs(g64[finite] - r64[finite])
        same_inf = g64[finite] == r64[finite]  # inf - inf is nan; equal infinities agree
        diff = np.where(same_inf, 0.0, diff)
        max_abs = float(np.max(diff, initial=0.0))
        scale = float(np.max(np.abs(np.where(np.isinf(r64[finite]), 0.0, r64[finite])), initial=0.0))
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        rows.append(OutputDiff(name, r.shape, max_abs, max_rel, bool(max_abs <= tol * max(1.0, scale))))
    return rows


def _numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach") and hasattr(a, "cpu"):  # a torch tensor, without importing torch
        return a.detach().cpu().numpy()
    return np.asarray(a)
