"""Run-time input checks shared by every way of running a model (interpreter, compiled model).

A model compiled for static shapes must refuse other shapes loudly: a wrong shape that happened to
have the right number of elements would otherwise read garbage. Every message names the input.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from kernorch.errors import InputError
from kernorch.ir import oracle
from kernorch.ir.graph import Graph, TensorType
from kernorch.ir.prims import ValueId


def describe_inputs(graph: Graph) -> str:
    """``'x' float32[1,3,224,224], 'mask' bool[1,128]`` -- for error messages and the CLI."""
    return ", ".join(f"{graph.name(v)!r} {graph.types[v]!r}" for v in graph.inputs)


def check_inputs(graph: Graph, feeds: Mapping[str, Any] | Sequence[Any]) -> dict[ValueId, Any]:
    """Validate ``feeds`` (by input name, or positional in input order) against the graph's inputs.

    Arrays may be NumPy arrays, PyTorch tensors or anything with ``shape`` and ``dtype``; other
    objects (lists, scalars) go through ``np.asarray``. Returns {input value id: array}, the
    arrays untouched. Raises InputError naming the first culprit."""
    names = {graph.name(v): v for v in graph.inputs}
    if isinstance(feeds, Mapping):
        for k in feeds:
            if k not in names:
                raise InputError(f"unknown input {k!r}; the model's inputs are {describe_inputs(graph)}")
        for n, v in names.items():
            if n not in feeds:
                raise InputError(f"missing input {n!r} ({graph.types[v]!r})")
        by_id = {names[k]: a for k, a in feeds.items()}
    else:
        feeds = list(feeds)
        if len(feeds) != len(graph.inputs):
            raise InputError(f"expected {len(graph.inputs)} input(s) ({describe_inputs(graph)}), got {len(feeds)}")
        by_id = dict(zip(graph.inputs, feeds))
    out = {}
    for v in graph.inputs:
        a = by_id[v]
        if not (hasattr(a, "shape") and hasattr(a, "dtype")):
            a = np.asarray(a)
        _check_one(graph.name(v), graph.types[v], a)
        out[v] = a
    return out


def _check_one(name: str, want: TensorType, a: Any) -> None:
    shape = tuple(int(s) for s in a.shape)
    if shape != tuple(want.shape):
        raise InputError(f"input {name!r} has shape {_fmt(shape)}, expected {_fmt(want.shape)}")
    dtype = dtype_name(a.dtype)
    if dtype != want.dtype:
        raise InputError(f"input {name!r} has dtype {dtype}, expected {want.dtype}")


def dtype_name(dtype: Any) -> str:
    """NumPy-style dtype name for NumPy and PyTorch dtypes (``torch.float32`` -> ``float32``)."""
    s = str(dtype)
    if s.startswith("torch."):
        s = s[len("torch."):]
        return {"bool": "bool", "half": "float16", "float": "float32", "double": "float64"}.get(s, s)
    try:
        return np.dtype(dtype).name
    except TypeError:
        return s


def _fmt(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(s) for s in shape) + "]"


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random feeds by input name, by the oracle's policy (``ir.oracle``: standard normal
    floats, small non-zero integers valid as indices into any axis of at least 4, gather indices
    inside the gathered axis, random booleans)."""
    try:
        feeds = oracle.random_feeds(graph, seed=seed)
    except ValueError as e:
        raise InputError(str(e)) from None
    return {graph.name(v): a for v, a in feeds.items()}
