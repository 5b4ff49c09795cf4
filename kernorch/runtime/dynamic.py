"""``compile(..., dynamic=...)``: one model for every batch size of a range (dynamic_model.py runs it).

The user names the batch dim of each input that has one, with its range:
``dynamic={"x": {0: (1, 16)}}`` (CLI: ``--dynamic x=0:1..16``). kernorch then

1. proves the model batch-separable before anything is tuned: the reference interpreter runs the
   model imported at the smallest profile size ``p`` and at ``p + 1`` on random inputs, and the
   ``p + 1`` batch run as two chunks of ``p`` (the second padded) must give the same outputs. A
   model whose samples see each other (a batch norm in training mode, a reduction over the
   batch, a sequence dim named as a batch) is refused in one line before any tuning;
2. finds each output's batch axis from the shapes at ``p`` and ``p + 1``;
3. compiles one static profile per size (default: both ends of the range and the powers of 2
   between; ``profiles=`` chooses): the middle one tuned in full, each other one timing only the
   kernels of that plan at its own sizes (Knobs.transfer; a full tuning where the graph differs),
   and still raced end to end against onnxruntime / OpenVINO; then times the profiles so that a
   batch of any size runs as the cheapest chunks (dynamic_model.cheapest_cover).

Sizes other than a batch (a sequence length) need kernels with sizes as run-time arguments: not
built yet, refused by name.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kernorch.errors import KernorchError
from kernorch.frontend.inputs import random_inputs
from kernorch.frontend.onnx_import import load_model
from kernorch.frontend.torch_import import forward_names
from kernorch.ir import interp, oracle
from kernorch.ir.graph import Graph
from kernorch.options import Options
from kernorch.orchestrate.knobs import Knobs
from kernorch.runtime import plan_cache
from kernorch.runtime.dynamic_model import BatchAxes, DynamicModel, slice_batch
from kernorch.runtime.progress import progress_bar
from kernorch.runtime.sources import load_graph


def compile_dynamic(model: Any, example_inputs: Any, opts: Options,
                    compile_static: Callable[[Any, Any, Options], Any]) -> DynamicModel:
    """The DynamicModel of ``model`` over ``opts.dynamic``'s range (module docstring)."""
    t0 = time.perf_counter()
    if opts.precision != "f32" or opts.target != "cpu":
        raise KernorchError(f"dynamic= is built for target 'cpu' in f32 so far (this compile: {opts.target}, "
                            f"{opts.precision})")
    names, shapes = _declared_inputs(model, example_inputs, opts)
    axes, lo, hi = batch_dims(opts.dynamic, names)
    sizes = profile_sizes(lo, hi, opts.profiles)
    with progress_bar(opts.progress, "checking that samples do not see each other"):
        outputs = separable(model, example_inputs, opts, shapes, axes, sizes[0])
    batch_axes = BatchAxes(axes, outputs, lo, hi)
    profiles = {}
    first = sizes[len(sizes) // 2]  # tuned in full; the others time its plan's kernels at their sizes
    for k, b in enumerate([first] + [b for b in sizes if b != first]):
        if opts.progress:
            print(f"kernorch: profile batch {b} ({k + 1} of {len(sizes)}; {batch_axes.describe()})", file=sys.stderr,
                  flush=True)
        ex, pinned = _at_batch(model, example_inputs, shapes, axes, b, names)
        knobs = opts.knobs or Knobs()
        if b != first:
            seen = profiles[first]
            knobs = dataclasses.replace(knobs, transfer=plan_cache.hint(seen.graph, [i.members for i in seen.executable.infos]))
        profiles[b] = compile_static(model, ex, opts.replace(dynamic=None, profiles=None, input_shapes=pinned,
                                                             knobs=knobs))
    with progress_bar(opts.progress, "timing the profiles"):
        model = DynamicModel(profiles, batch_axes, latencies(profiles))
    with progress_bar(opts.progress, "timing the ways to run the other batch sizes"):
        measure_covers(model)
    model.seconds = time.perf_counter() - t0
    return model


def batch_dims(dynamic: Any, names: Sequence[str]) -> tuple[dict[str, int], int, int]:
    """``dynamic=`` checked: (input name -> batch axis, lo, hi), one line naming what is wrong."""
    if not isinstance(dynamic, Mapping) or not dynamic:
        raise KernorchError(f"dynamic= expects {{input name: {{dim: (lo, hi)}}}}, e.g. "
                            f"{{{(names[0] if names else 'x')!r}: {{0: (1, 16)}}}}; got {dynamic!r:.80}")
    axes, ranges = {}, {}
    for name, dims in dynamic.items():
        if name not in names:
            raise KernorchError(f"dynamic=: unknown input {name!r}; the model's inputs are {list(names)}")
        if not isinstance(dims, Mapping) or len(dims) != 1:
            raise KernorchError(f"dynamic=[{name!r}]: expected one {{dim: (lo, hi)}} (the batch dim; sizes other "
                                f"than a batch need run-time-sized kernels, not built yet); got {dims!r:.80}")
        (axis, rng), = dims.items()
        ok = isinstance(axis, int) and axis >= 0 and isinstance(rng, (tuple, list)) and len(rng) == 2 \
            and all(isinstance(x, int) and not isinstance(x, bool) for x in rng) and 1 <= rng[0] < rng[1]
        if not ok:
            raise KernorchError(f"dynamic=[{name!r}]: expected {{dim: (lo, hi)}} with 1 <= lo < hi, got {dims!r:.80}")
        axes[name], ranges[name] = axis, tuple(rng)
    if len(set(ranges.values())) > 1:
        listed = ", ".join(f"{n} {r[0]}..{r[1]}" for n, r in ranges.items())
        raise KernorchError(f"dynamic=: the dynamic dims are one batch and share one range; got {listed}")
    lo, hi = next(iter(ranges.values()))
    return axes, lo, hi


def profile_sizes(lo: int, hi: int, given: Sequence[int] | None = None) -> list[int]:
    """The batch sizes compiled: ``given`` (checked), else lo, hi and the powers of 2 between."""
    if given is None:
        return sorted({lo, hi} | {2 ** k for k in range(1, 30) if lo < 2 ** k < hi})
    sizes = sorted(set(given))
    if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= hi for b in sizes):
        raise KernorchError(f"profiles={list(given)!r:.80}: expected batch sizes between 1 and {hi}")
    return sizes


def separable(model: Any, example_inputs: Any, opts: Options, shapes: Mapping[str, Sequence[int]],
              axes: Mapping[str, int], p: int) -> dict[str, tuple[int, int]]:
    """Each output's (batch axis, extent per sample), after checking with the reference
    interpreter that a batch of ``p + 1`` gives what two chunks of ``p`` (the last padded with
    zeros) give: the property a DynamicModel runs on (module docstring)."""
    names = list(shapes)
    graphs = {}
    for b in (p, p + 1):
        ex, pinned = _at_batch(model, example_inputs, shapes, axes, b, names)
        graphs[b], _ = load_graph(model, ex, pinned, opts.dynamo)
    small, big = graphs[p], graphs[p + 1]
    outputs = _output_axes(small, big, p)
    feeds = random_inputs(big, seed=1)
    whole = {big.name(v): a for v, a in interp.run(big, [feeds[big.name(v)] for v in big.inputs]).items()}
    got: dict[str, list[np.ndarray]] = {n: [] for n in outputs}
    for start, valid in ((0, p), (p, 1)):
        chunk = [feeds[small.name(v)] if small.name(v) not in axes else
                 slice_batch(feeds[small.name(v)], axes[small.name(v)], start, valid, p) for v in small.inputs]
        for v, a in interp.run(small, chunk).items():
            axis, per = outputs[small.name(v)]
            got[small.name(v)].append(np.take(a, range(valid * per), axis=axis))
    for name, ref in whole.items():
        ok, err, _ = oracle.compare(np.concatenate(got[name], axis=outputs[name][0]), ref)
        if not ok:
            raise KernorchError(f"dynamic=: output {name!r} of sample {p} changes when the other samples change "
                                f"(error {err:.3g}): the dims named are not a batch whose samples are independent")
    return outputs


def _output_axes(small: Graph, big: Graph, p: int) -> dict[str, tuple[int, int]]:
    """Per output the one axis that grows with the batch and its extent per sample."""
    out = {}
    for vs, vb in zip(small.outputs, big.outputs):
        s, b = small.types[vs].shape, big.types[vb].shape
        grown = [k for k, (x, y) in enumerate(zip(s, b)) if x != y]
        if len(s) != len(b) or len(grown) != 1 or s[grown[0]] % p or b[grown[0]] != s[grown[0]] // p * (p + 1):
            raise KernorchError(f"dynamic=: output {small.name(vs)!r} has shape {list(s)} at batch {p} and {list(b)} "
                                f"at batch {p + 1}: no one axis grows with the batch")
        out[small.name(vs)] = (grown[0], s[grown[0]] // p)
    return out


def _declared_inputs(model: Any, example_inputs: Any, opts: Options) -> tuple[list[str], dict[str, list]]:
    """The model's input names and shapes (a dim may be a symbol's name): the example inputs' of
    a module, else the ONNX model's, with ``input_shapes`` applied."""
    import torch

    if isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise KernorchError("compiling an nn.Module needs example_inputs (a tensor or a tuple of tensors)")
        args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
        names = forward_names(model, len(args))
        return names, {n: list(a.shape) for n, a in zip(names, args)}
    proto = load_model(model)
    init = {i.name for i in proto.graph.initializer}
    shapes = {}
    for vi in proto.graph.input:
        if vi.name in init:
            continue
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
    for name, shape in (opts.input_shapes or {}).items():
        shapes[name] = list(shape)
    return list(shapes), shapes


def _at_batch(model: Any, example_inputs: Any, shapes: Mapping[str, Sequence], axes: Mapping[str, int], b: int,
              names: Sequence[str]) -> tuple[Any, dict[str, list] | None]:
    """(example inputs, input_shapes) of the model at batch ``b``: a module's example inputs
    repeated or cut along their batch axes, or an ONNX model's shapes with the batch dims set."""
    import torch

    if isinstance(model, torch.nn.Module):
        args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
        out = []
        for name, a in zip(names, args):
            if name in axes:
                axis = axes[name]
                if axis >= a.dim():
                    raise KernorchError(f"dynamic=[{name!r}]: dim {axis} of an input with {a.dim()} dims")
                a = a.index_select(axis, torch.arange(b) % a.shape[axis])
            out.append(a)
        return tuple(out), None
    pinned = {}
    for name, shape in shapes.items():
        shape = list(shape)
        if name in axes:
            if axes[name] >= len(shape):
                raise KernorchError(f"dynamic=[{name!r}]: dim {axes[name]} of an input with {len(shape)} dims")
            shape[axes[name]] = b
        pinned[name] = shape
    return None, {n: s for n, s in pinned.items() if all(isinstance(d, int) for d in s)} or None


def measure_covers(model: DynamicModel, rounds: int = 5, most: int = 64) -> None:
    """For each batch size of the range that is not a profile: time the cheapest cover by the
    profiles' latencies against padding to the next profile, interleaved, and keep the faster.
    Chunks that alternate between profiles run by different runtimes (an onnxruntime region's
    threads spin after each call while an OpenVINO one waits for cores) can cost 2-3x their
    parts. Ranges of more than ``most`` sizes keep the cheapest covers untimed."""
    lo, hi = model.axes.lo, model.axes.hi
    if hi - lo + 1 > most:
        return
    for n in range(lo, hi + 1):
        options = {model.chunks(n)}
        options |= {(min(b for b in model.profiles if b >= n),)} if n <= max(model.profiles) else set()
        if len(options) < 2:
            continue
        feeds = model.random_inputs(n)
        times: dict[tuple, list[float]] = {c: [] for c in options}
        for _ in range(rounds):
            for c in options:
                model.covers[n] = c
                model.run(feeds)
                t = time.perf_counter()
                model.run(feeds)
                times[c].append(time.perf_counter() - t)
        model.covers[n] = min(options, key=lambda c: float(np.median(times[c])))


def latencies(profiles: Mapping[int, Any], rounds: int = 7, min_seconds: float = 0.5) -> dict[int, float]:
    """Median seconds per call of each compiled profile on random inputs, timed round by round
    (one machine state for all; each led in by a warm-up call of its own)."""
    feeds = {b: random_inputs(m.graph, seed=0) for b, m in profiles.items()}
    times: dict[int, list[float]] = {b: [] for b in profiles}
    t_end = time.perf_counter() + min_seconds
    while min(map(len, times.values())) < rounds or time.perf_counter() < t_end:
        for b, m in profiles.items():
            m.run(feeds[b])
            t = time.perf_counter()
            m.run(feeds[b])
            times[b].append(time.perf_counter() - t)
    return {b: float(np.median(ts)) for b, ts in times.items()}
