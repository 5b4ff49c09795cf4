"""DynamicModel: one compiled model for every batch size of a range, as static profiles.

A model whose samples do not see each other (a vision model in inference, a text encoder per
sequence) computes the same per sample at every batch size, so a batch of ``n`` can run as chunks
of the sizes compiled (the *profiles*), the last one padded when padding is cheaper. The chunks
are chosen by the profiles' measured latencies (``cheapest_cover``: the least total time over
every way to cover ``n``), once per batch size, so a call does no search: it checks the inputs,
slices them, runs each chunk's profile in one native call and concatenates the outputs.
dynamic.py compiles the profiles and proves the model is batch-separable first.

Saved as a directory::

    dynamic.json     format, version, the batch range, inputs' and outputs' batch axes, profiles
    batch-<n>/       each profile, a saved model of its own (model.py)
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from kernorch.errors import InputError, KernorchError, SavedModelError
from kernorch.frontend.inputs import random_inputs
from kernorch.runtime.model import CompiledModel, load as load_static

FORMAT = "kernorch-dynamic"
VERSION = 1
MANIFEST = "dynamic.json"


@dataclass(frozen=True)
class BatchAxes:
    """Where the batch lies: per dynamic input its axis, per output its axis and the extent one
    sample takes on it (1 unless the model flattens the batch into a wider axis), and the range."""

    inputs: Mapping[str, int]
    outputs: Mapping[str, tuple[int, int]]
    lo: int
    hi: int

    def describe(self) -> str:
        dims = ", ".join(f"{n} dim {a}" for n, a in self.inputs.items())
        return f"batch {self.lo}..{self.hi} ({dims})"


def cheapest_cover(n: int, latency: Mapping[int, float]) -> tuple[int, ...]:
    """Profile sizes whose sum is at least ``n`` at the least total latency (ties: fewer padded
    samples, then fewer calls), largest first. An unbounded knapsack over 0..n."""
    sizes = sorted(latency)
    best: list[tuple[float, int, int, tuple[int, ...]]] = [(0.0, 0, 0, ())]
    for m in range(1, n + 1):
        options = []
        for s in sizes:
            cost, covered, calls, parts = best[max(0, m - s)]
            options.append((cost + latency[s], covered + s, calls + 1, parts + (s,)))
        best.append(min(options, key=lambda o: (round(o[0], 12), o[1], o[2])))
    return tuple(sorted(best[n][3], reverse=True))


class DynamicModel:
    """Call it like the model (``model(x)``, ``model.run({name: array})``) with any batch size of
    its range; ``profiles`` maps each compiled batch size to its CompiledModel."""

    def __init__(self, profiles: Mapping[int, CompiledModel], axes: BatchAxes, latency: Mapping[int, float],
                 seconds: float | None = None, covers: Mapping[int, Sequence[int]] | None = None) -> None:
        """``covers``: batch size -> the profile sizes it runs as, where measured (dynamic.measure_covers);
        other sizes take ``cheapest_cover`` of the profiles' latencies."""
        self.profiles = dict(sorted(profiles.items()))
        self.axes = axes
        self.latency = dict(latency)  # seconds per call of each profile, measured at compile time
        self.seconds = seconds  # the whole compile, every profile
        first = next(iter(self.profiles.values()))
        self.input_names, self.output_names = first.input_names, first.output_names
        self.covers = {n: tuple(c) for n, c in (covers or {}).items()}

    @property
    def report(self):
        """The compile report of the largest profile (each profile's is in ``profiles``)."""
        return self.profiles[max(self.profiles)].report

    @property
    def kernels(self):
        """The largest profile's kernels (each profile's are in ``profiles``)."""
        return self.profiles[max(self.profiles)].kernels

    def chunks(self, n: int) -> tuple[int, ...]:
        """The profile sizes a batch of ``n`` runs as (padding the last when their sum exceeds n)."""
        if n not in self.covers:
            self.covers[n] = cheapest_cover(n, self.latency)
        return self.covers[n]

    def random_inputs(self, n: int, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random feeds of batch size ``n`` (the oracle's policy, as for a static model)."""
        if not self.axes.lo <= n <= self.axes.hi:
            raise InputError(f"batch {n}: this model was compiled for {self.axes.lo}..{self.axes.hi}")
        b = max(self.profiles)
        feeds = random_inputs(self.profiles[b].executable.sig.graph, seed=seed)
        return {k: np.take(a, np.arange(n) % b, axis=self.axes.inputs[k]) if k in self.axes.inputs else a
                for k, a in feeds.items()}

    def __call__(self, *args):
        if len(args) != len(self.input_names):
            raise InputError(f"expected {len(self.input_names)} input(s) {self.input_names}, got {len(args)}")
        numpy = any(isinstance(a, np.ndarray) for a in args)
        outs = self.run(dict(zip(self.input_names, args)))
        vals = [t.numpy() if numpy else t for t in outs.values()]
        return vals[0] if len(vals) == 1 else tuple(vals)

    def run(self, feeds) -> dict[str, torch.Tensor]:
        """``{input name: array}`` (or a list in input order) -> ``{output name: tensor}``."""
        if not isinstance(feeds, Mapping):
            feeds = dict(zip(self.input_names, feeds))
        n = self._batch(feeds)
        cover = self.chunks(n)
        if cover == (n,):
            return self.profiles[n].run(feeds)
        parts: dict[str, list[torch.Tensor]] = {name: [] for name in self.output_names}
        start = 0
        for size in cover:
            valid = min(size, n - start)
            chunk = {k: (slice_batch(v, self.axes.inputs[k], start, valid, size) if k in self.axes.inputs else v)
                     for k, v in feeds.items()}
            for name, t in self.profiles[size].run(chunk).items():
                axis, per = self.axes.outputs[name]
                parts[name].append(t.narrow(axis, 0, valid * per))
            start += valid
        return {name: torch.cat(ts, dim=self.axes.outputs[name][0]) for name, ts in parts.items()}

    def _batch(self, feeds: Mapping[str, Any]) -> int:
        """The batch size of ``feeds``, checked against the range (one line naming the input)."""
        sizes = {}
        for name, axis in self.axes.inputs.items():
            if name not in feeds:
                raise InputError(f"missing input {name!r}; the model's inputs are {self.input_names}")
            shape = tuple(getattr(feeds[name], "shape", ()))
            if len(shape) <= axis:
                raise InputError(f"input {name!r} has shape {list(shape)}: no dim {axis} (its batch dim)")
            sizes[name] = shape[axis]
        n = next(iter(sizes.values()))
        if not self.axes.lo <= n <= self.axes.hi:
            name = next(iter(sizes))
            raise InputError(f"input {name!r} dim {self.axes.inputs[name]} is {n}: this model was compiled for "
                             f"{self.axes.lo}..{self.axes.hi} (compile with a wider dynamic= range)")
        other = {k: v for k, v in sizes.items() if v != n}
        if other:
            first = next(iter(sizes))
            k, v = next(iter(other.items()))
            raise InputError(f"input {k!r} dim {self.axes.inputs[k]} is {v} but {first!r} dim "
                             f"{self.axes.inputs[first]} is {n}: dynamic dims share one batch size")
        return n

    def summary(self) -> str:
        """The range, each profile's measured latency, and how a few batch sizes run."""
        lines = [f"dynamic   {self.axes.describe()}; profiles compiled at batch "
                 f"{', '.join(map(str, self.profiles))}"
                 + (f" in {self.seconds:.0f} s" if self.seconds is not None else "")]
        for b, s in self.latency.items():
            lines.append(f"  batch {b:>4}: {s * 1e3:.3f} ms per call ({s * 1e3 / b:.3f} ms per sample)")
        for n in sorted({self.axes.lo, (self.axes.lo + self.axes.hi) // 2, self.axes.hi} - set(self.profiles)):
            lines.append(f"  batch {n:>4} runs as {' + '.join(map(str, self.chunks(n)))}")
        return "\n".join(lines)

    # -- persistence ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write every profile and the manifest to directory ``path`` (the manifest last)."""
        d = Path(path)
        for b, m in self.profiles.items():
            m.save(d / f"batch-{b}")
        manifest = {"format": FORMAT, "version": VERSION, "lo": self.axes.lo, "hi": self.axes.hi,
                    "inputs": dict(self.axes.inputs), "outputs": {k: list(v) for k, v in self.axes.outputs.items()},
                    "profiles": {str(b): self.latency[b] for b in self.profiles}, "seconds": self.seconds,
                    "covers": {str(n): list(c) for n, c in sorted(self.covers.items())}}
        try:
            (d / MANIFEST).write_text(json.dumps(manifest, indent=1))
        except OSError as e:
            raise KernorchError(f"{d}: cannot save the model ({e.strerror or type(e).__name__})") from None
        return d


def load(path: str | os.PathLike, device: Any = None, **kw: Any) -> CompiledModel | DynamicModel:
    """``kernorch.load``: a saved DynamicModel (its manifest names the profiles) or CompiledModel."""
    d = Path(path)
    if not (d / MANIFEST).is_file():
        return load_static(d, device, **kw)
    try:
        m = json.loads((d / MANIFEST).read_text())
        if m.get("format") != FORMAT or m.get("version") != VERSION:
            raise ValueError(f"format {str(m.get('format'))[:30]!r} version {str(m.get('version'))[:10]}")
        lo, hi = _int(m["lo"]), _int(m["hi"])
        latency = {_int(b): float(s) for b, s in m["profiles"].items()}
        inputs = {str(k): _int(a) for k, a in m["inputs"].items()}
        outputs = {str(k): (_int(v[0]), _int(v[1])) for k, v in m["outputs"].items()}
        covers = {_int(n): tuple(_int(b) for b in c) for n, c in m.get("covers", {}).items()}
        if not (1 <= lo < hi and latency and all(1 <= b <= hi and math.isfinite(s) and s > 0
                                                 for b, s in latency.items())):
            raise ValueError("implausible range or profiles")
        if any(not set(c) <= set(latency) or sum(c) < n or not lo <= n <= hi for n, c in covers.items()):
            raise ValueError("a batch size's chunks are not profiles covering it")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SavedModelError(f"{d / MANIFEST}: not a dynamic kernorch model ({type(e).__name__}: {e})") from None
    profiles = {b: load_static(d / f"batch-{b}", device, **kw) for b in latency}
    model = DynamicModel(profiles, BatchAxes(inputs, outputs, lo, hi), latency, m.get("seconds"), covers)
    if set(model.output_names) != set(outputs) or not set(inputs) <= set(model.input_names):
        raise SavedModelError(f"{d / MANIFEST}: its batch axes name inputs or outputs the profiles do not have")
    return model


def _int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, str)):
        raise TypeError(f"expected an integer, got {type(x).__name__}")
    return int(x)


def slice_batch(t, axis: int, start: int, valid: int, size: int):
    """Samples ``start .. start+valid`` of ``t`` (a tensor or an array, kept as it is: the compiled
    model's fast path takes either) along ``axis``, padded with zeros to ``size`` (padding samples
    are never read back: the model is batch-separable)."""
    part = t[(slice(None),) * axis + (slice(start, start + valid),)]
    if valid < size:
        pad = list(part.shape)
        pad[axis] = size - valid
        if isinstance(part, np.ndarray):
            return np.concatenate([part, np.zeros(pad, part.dtype)], axis=axis)
        return torch.cat([part, part.new_zeros(pad)], dim=axis)
    return np.ascontiguousarray(part) if isinstance(part, np.ndarray) else part.contiguous()


def sample_sizes(lo: int, hi: int, extra: Sequence[int] = ()) -> list[int]:
    """Batch sizes worth checking: both ends, odd sizes, ``extra`` (used by the tests and bench)."""
    picks = {lo, hi, lo + 1, hi - 1, (lo + hi) // 2, (lo + hi) // 2 + 1, *extra}
    return sorted(n for n in picks if lo <= n <= hi)
