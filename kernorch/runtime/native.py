"""Native runs: consecutive generated C kernels of a plan run in one call into C.

The executor's Python loop costs microseconds per kernel (argument lists, ctypes marshalling);
a model of a hundred small kernels pays that a hundred times per inference. A run of consecutive
C kernels instead becomes one call of ``kn_run_all`` (a fixed driver compiled once per machine),
which calls each kernel's function pointer with an argument array prepared at build time: arena
slots and constants have fixed addresses, so per call only the pointers of graph inputs and
outputs are written. Kernels of other providers (PyTorch linear kernels, onnxruntime, OpenVINO)
stay Python calls between runs. Results are bit-identical to the Python loop: the same kernel
functions run on the same buffers in the same order.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

import torch

from kernorch.codegen import toolchain

DRIVER = """
typedef void (*kn_kernel)(void *const *args, int nthreads);
void kn_run_all(int n, const kn_kernel *fns, void *const *const *args, const int *threads) {
    for (int i = 0; i < n; i++)
        fns[i](args[i], threads[i]);
}
"""


@functools.lru_cache(maxsize=None)
def driver():
    """The ``kn_run_all`` entry point (built once, cached on disk like any kernel)."""
    fn = toolchain.load(toolchain.compile_source(DRIVER)).kn_run_all
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = None
    return fn


def can_run_natively(kern) -> bool:
    """A generated C kernel (a ``CKernel``: a C function pointer and a fixed workspace)."""
    return getattr(kern, "provider", None) == "c" and hasattr(kern, "fn") and hasattr(kern, "spec")


class NativeRun:
    """Consecutive C kernels as one C call. ``steps`` are the executor's program entries
    (kernel, inputs, dynamic inputs, outputs, dynamic outputs); a dynamic position (a graph input
    or output) is None in the lists and filled per call from the environment."""

    def __init__(self, steps: Sequence[tuple], types: dict) -> None:
        self.types = types
        self.n = len(steps)
        self._fns = (ctypes.c_void_p * self.n)(*[ctypes.cast(s[0].fn, ctypes.c_void_p).value for s in steps])
        self._threads = (ctypes.c_int * self.n)(*[s[0].num_threads for s in steps])
        self._argv = []
        self._dyn_in: list[tuple[ctypes.Array, int, int]] = []  # (argument array, slot, value id)
        self._dyn_out: list[tuple[ctypes.Array, int, int]] = []
        self._keep = []  # tensors whose addresses are baked into the argument arrays
        for kern, ins, dyn_in, outs, dyn_out in steps:
            tensors = list(ins) + list(outs) + ([kern._ws] if kern.spec.workspace else [])
            arr = (ctypes.c_void_p * max(len(tensors), 1))(*[0 if t is None else t.data_ptr() for t in tensors])
            self._keep.extend(t for t in tensors if t is not None)
            self._dyn_in.extend((arr, i, v) for i, v in dyn_in)
            self._dyn_out.extend((arr, len(ins) + i, v) for i, v in dyn_out)
            self._argv.append(arr)
        self._args = (ctypes.c_void_p * self.n)(*[ctypes.addressof(a) for a in self._argv])
        self._call = driver()

    def __call__(self, env: dict[int, torch.Tensor], new_output) -> None:
        """Run the kernels; graph inputs come from ``env``, graph outputs are made by
        ``new_output(value id)`` (and put in ``env``) unless an earlier kernel made them."""
        for arr, i, v in self._dyn_out:  # first: a later kernel of the run may read a graph output
            t = env.get(v)
            if t is None:
                t = env[v] = new_output(v)
            arr[i] = t.data_ptr()
        for arr, i, v in self._dyn_in:
            arr[i] = env[v].data_ptr()
        self._call(self.n, ctypes.addressof(self._fns), ctypes.addressof(self._args), ctypes.addressof(self._threads))
