"""One call of a compiled model, with the per-call work prepared once.

A model of tiny kernels spends its time around the kernels, so everything a call can do ahead
of time is done when the plan first runs: which values are the call's own (graph inputs, and
graph outputs, which are fresh per call so results survive later calls), where each kernel finds
them, their expected shapes and dtypes. A call then only checks its inputs against that list,
allocates its outputs, writes their addresses into one pointer table and runs the steps: native
runs of C kernels (native.py) read the table in C, the other kernels get tensors from a list.
No dictionary is built per call. NumPy in gives NumPy out without wrapping anything in torch
unless a Python-side kernel needs a tensor.

An ``Executable`` runs one call at a time (calls from several threads wait for each other): the
arena of intermediate buffers and the pointer table are shared by its calls.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from typing import Any, Sequence

import numpy as np
import torch

from kernorch.runtime import native as native_runs
from kernorch.ir.tensors import TORCH_DTYPES, to_numpy, to_torch

_now = time.perf_counter
_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof
_TENSOR = torch.Tensor
_NDARRAY = np.ndarray
NATIVE, PYTHON, RETURNS, FRESH = 0, 1, 2, 3  # kinds of step


def np_pointer(a: np.ndarray) -> int:
    """The address of a contiguous array's data (the quick way needs a writable, non-empty buffer)."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def pointer(a: Any) -> int:
    return a.data_ptr() if type(a) is _TENSOR else np_pointer(a)


def as_tensor(a: Any) -> torch.Tensor:
    if isinstance(a, _TENSOR):
        return a
    return to_torch(a)


def as_array(a: Any) -> np.ndarray:
    return a if type(a) is _NDARRAY else to_numpy(a)


class CallPlan:
    """The steps of one call over a table of the call's own values: graph inputs at 0..n-1, then
    the graph outputs. ``program`` is the executor's per-kernel program (``Executable._program``):
    per kernel (kernel, inputs, dynamic inputs, outputs, dynamic outputs). With ``native``, runs of
    consecutive C kernels are one native call each."""

    def __init__(self, graph, program: list, types: dict, native: bool, fresh: set[int] = frozenset()) -> None:
        def spec(v: int) -> tuple:
            shape, dtype = types[v] if v in types else (graph.types[v].shape, graph.types[v].dtype)
            return tuple(shape), np.dtype(dtype), TORCH_DTYPES[dtype]

        self.specs = [spec(v) for v in graph.inputs]
        index: dict[int, int] = {v: i for i, v in enumerate(graph.inputs)}
        for v in graph.outputs:
            index.setdefault(v, len(index))
        for v in sorted(fresh):  # values whose kernels return new buffers, adopted per call
            index.setdefault(v, len(index))
        self.size = len(index)
        self.answer = [index[v] for v in graph.outputs]
        native = native and native_runs.available()
        steps: list[list] = []
        run: list = []
        for entry in program + [None]:
            if native and entry is not None and native_runs.can_run_natively(entry[0]):
                run.append(entry)
                continue
            if run:
                steps.append([NATIVE, native_runs.NativeRun(run, index)])
                run = []
            if entry is not None:
                steps.append(self._python_step(entry, index, spec))
        self.native_runs = [s[1] for s in steps if s[0] == NATIVE]
        read_natively = set().union(*(r.reads for r in self.native_runs))
        returned = set()
        for s in steps:
            if s[0] in (RETURNS, FRESH):
                s.append(tuple(i in read_natively for i in s[3]))
                returned.update(s[3])
        self.steps = [tuple(s) + (None,) * (5 - len(s)) for s in steps]
        self.drops = _drops(self.steps, {index[v] for v in fresh} - set(self.answer) - set(range(len(graph.inputs))))
        self.alloc = [(i,) + spec(v) for v, i in index.items() if i >= len(graph.inputs) and i not in returned]
        self.table = (ctypes.c_void_p * max(self.size, 1))()
        self.table_address = ctypes.addressof(self.table)
        self.pointed = [i for i in range(len(graph.inputs)) if i in read_natively]
        # Kernels writing the shared arena or table take turns; a plan of only kernels that
        # return their outputs (a whole-model region) shares nothing between calls.
        shared = any(s[0] != RETURNS for s in self.steps) or bool(self.alloc)
        self.lock = threading.Lock() if shared else contextlib.nullcontext()
        # One kernel returning every graph output from graph inputs only (a whole-model region):
        # called directly, nothing else to arrange.
        self.single = None
        self.by_name = None  # (run on {feed name: array}, [(feed name, argument index)]) of a single kernel
        if not shared and len(self.steps) == 1 and list(self.steps[0][3]) == self.answer:
            _, fn, (ins, patch, wants), _, _ = self.steps[0]
            if all(i < len(graph.inputs) for _, i in patch):
                self.single = (fn, ins, patch, wants)
                self.by_name = _by_name(fn, patch)

    @staticmethod
    def _python_step(entry: tuple, index: dict[int, int], spec) -> list:
        kern, ins, dyn_in, outs, dyn_out = entry
        patch_in = [(i, index[v]) for i, v in dyn_in]
        run_numpy = getattr(kern, "run_numpy", None)
        run_fresh = getattr(kern, "run_fresh", None)
        if run_fresh is not None and len(dyn_out) == len(outs):
            # Every output is adopted: the kernel's new tensors become the values for this call.
            return [FRESH, run_fresh, (ins, patch_in), tuple(index[v] for v in kern.outputs)]
        if run_numpy is not None and len(dyn_out) == len(outs):
            # Every output is the call's own: the kernel returns fresh arrays (no allocation, no copy).
            np_ins = [None if t is None else to_numpy(t) for t in ins]
            wants = [spec(v)[:2] for v in kern.outputs]
            return [RETURNS, run_numpy, (np_ins, patch_in, wants), tuple(index[v] for v in kern.outputs)]
        return [PYTHON, kern._run, (ins, patch_in), (outs, [(i, index[v]) for i, v in dyn_out])]

    def fast(self, args: Sequence[Any]) -> list | None:
        """The outputs, when ``args`` are all C-contiguous NumPy arrays or all contiguous CPU
        tensors (no autograd) of exactly the expected shapes and dtypes; else None (the checked
        path then converts what it can and names what it cannot)."""
        specs = self.specs
        if len(args) != len(specs) or not args:
            return None
        if type(args[0]) is _NDARRAY:
            for a, (shape, dtype, _) in zip(args, specs):
                if type(a) is not _NDARRAY or a.shape != shape or a.dtype != dtype or not a.flags.c_contiguous:
                    return None
            if self.by_name is not None:  # a whole-model region: straight to the runtime
                run, feeds = self.by_name
                out = run({name: args[i] for name, i in feeds})
                for k, (shape, dt) in enumerate(self.single[3]):
                    r = out[k]
                    if r.shape != shape or r.dtype != dt:
                        out[k] = np.ascontiguousarray(np.asarray(r).astype(dt, copy=False).reshape(shape))
                return out
            return self(args, True)
        for a, (shape, _, dtype) in zip(args, specs):
            if (type(a) is not _TENSOR or a.dtype != dtype or a.shape != shape or a.requires_grad
                    or not a.is_cpu or not a.is_contiguous()):
                return None
        return self(args, False)

    def __call__(self, args: Sequence[Any], numpy: bool, clock: list[float] | None = None) -> list:
        """Run on checked, contiguous CPU ``args`` (NumPy arrays when ``numpy``, else tensors);
        the outputs come back as NumPy arrays or tensors alike. ``clock``: a list that gets the
        time before the first kernel and after each one, in program order, native runs included
        (the in-context profile, see ``Executable.profile_in_call``)."""
        if self.single is not None and clock is None:
            fn, ins, patch, wants = self.single
            ins = list(ins)
            for pos, i in patch:
                ins[pos] = args[i] if numpy else args[i].numpy()
            out = fn(ins)
            for k, r in enumerate(out):
                shape, dt = wants[k]
                if r.shape != shape or r.dtype != dt:
                    r = out[k] = np.ascontiguousarray(np.asarray(r).astype(dt, copy=False).reshape(shape))
                if not numpy:
                    out[k] = torch.from_numpy(r)
            return out
        with self.lock:
            env = list(args)
            env += [None] * (self.size - len(env))
            table = self.table
            for i in self.pointed:
                table[i] = pointer(args[i])
            for i, shape, npt, tt in self.alloc:
                if numpy:
                    o = env[i] = np.empty(shape, npt)
                    table[i] = np_pointer(o)
                else:
                    o = env[i] = torch.empty(shape, dtype=tt)
                    table[i] = o.data_ptr()
            if clock is not None:
                clock.append(_now())
            for (kind, fn, a, b, c), drop in zip(self.steps, self.drops):
                if kind == NATIVE:
                    if clock is None:
                        fn(self.table_address)
                    else:  # every kernel's end; the last one's is taken below, after the return
                        clock.extend(fn.timed(self.table_address)[:-1])
                elif kind == FRESH:
                    self._adopt(fn, a, b, c, env, numpy)
                elif kind == PYTHON:
                    ins, patch = a
                    if patch:
                        ins = list(ins)
                        for pos, i in patch:
                            ins[pos] = as_tensor(env[i])
                    outs, patch = b
                    if patch:
                        outs = list(outs)
                        for pos, i in patch:
                            outs[pos] = as_tensor(env[i])
                    fn(ins, outs)
                else:
                    self._returns(fn, a, b, c, env, numpy)
                for i in drop:  # an adopted buffer no later step reads goes back to the allocator
                    env[i] = None
                if clock is not None:
                    clock.append(_now())
            return [env[i] for i in self.answer]

    def _adopt(self, fn, a: tuple, outs_at: tuple, read_natively: tuple, env: list, numpy: bool) -> None:
        ins, patch = a
        if patch:
            ins = list(ins)
            for pos, i in patch:
                ins[pos] = as_tensor(env[i])
        answer = self.answer
        for i, r, p in zip(outs_at, fn(ins), read_natively):
            env[i] = r.numpy() if numpy and i in answer else r
            if p:
                self.table[i] = r.data_ptr()

    def _returns(self, fn, a: tuple, outs_at: tuple, read_natively: tuple, env: list, numpy: bool) -> None:
        ins, patch, wants = a
        if patch:
            ins = list(ins)
            for pos, i in patch:
                ins[pos] = as_array(env[i])
        for i, r, (shape, dt), p in zip(outs_at, fn(ins), wants, read_natively):
            if r.shape != shape or r.dtype != dt or (p and not r.flags.c_contiguous):
                r = np.ascontiguousarray(np.asarray(r).astype(dt, copy=False).reshape(shape))
            env[i] = r if numpy else to_torch(r)
            if p:
                self.table[i] = pointer(env[i])


def _drops(steps: list, adopted: set[int]) -> list[tuple[int, ...]]:
    """Per step, the adopted values (pointer-table indices) it is the last to read or write."""
    last: dict[int, int] = {}
    for k, (kind, fn, a, b, _) in enumerate(steps):
        used = set(fn.reads) if kind == NATIVE else {i for _, i in a[1]} | set(
            b if kind in (RETURNS, FRESH) else (i for _, i in b[1]))
        for i in used & adopted:
            last[i] = k
    drops: list[list[int]] = [[] for _ in steps]
    for i, k in last.items():
        drops[k].append(i)
    return [tuple(d) for d in drops]


def _by_name(fn, patch: list) -> tuple | None:
    """The single kernel's by-name entry (``run_numpy.by_name``), its feeds mapped to the call's
    arguments; None when it has none or reads a position no argument fills."""
    entry = getattr(fn, "by_name", None)
    if entry is None:
        return None
    run, feeds = entry
    arg_at = dict(patch)
    if any(pos not in arg_at for pos, _ in feeds):
        return None
    return run, [(name, arg_at[pos]) for pos, name in feeds]
