"""Native runs: consecutive generated C kernels of a plan run in one call into C.

The executor's Python loop costs microseconds per kernel (argument lists, ctypes marshalling);
a model of a hundred small kernels pays that a hundred times per inference. A run of consecutive
C kernels instead becomes one call of ``kn_run_all`` (a fixed driver compiled once per machine)
on a plan struct prepared at build time: each kernel's function pointer and argument array, with
arena slots and constants at fixed addresses. The only per-call data is one table of pointers
(the call's graph inputs and outputs, calls.py); the driver copies them into the argument arrays
at the positions the plan lists, then calls the kernels in order. Kernels of other providers
(PyTorch linear kernels, onnxruntime, OpenVINO) stay Python calls between runs. Results are
bit-identical to the Python loop: the same kernel functions run on the same buffers in order.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence

from kernorch.codegen import toolchain
from kernorch.errors import CompilerError
from kernorch.options import Env

DRIVER = """
#include <time.h>
typedef void (*kn_kernel)(void *const *args, int nthreads);
typedef struct {
    int n, npatch;
    const kn_kernel *fns;
    void **const *args;
    const int *threads;
    const int *patch; /* npatch triples: kernel, argument position, index into dyn */
} kn_plan;
void kn_run_all(const kn_plan *p, void *const *dyn) {
    for (int q = 0; q < p->npatch; q++)
        p->args[p->patch[3 * q]][p->patch[3 * q + 1]] = dyn[p->patch[3 * q + 2]];
    for (int i = 0; i < p->n; i++)
        p->fns[i](p->args[i], p->threads[i]);
}
/* The same run, with the monotonic clock (Python's perf_counter) read after every kernel. */
void kn_run_timed(const kn_plan *p, void *const *dyn, double *stamps) {
    struct timespec t;
    for (int q = 0; q < p->npatch; q++)
        p->args[p->patch[3 * q]][p->patch[3 * q + 1]] = dyn[p->patch[3 * q + 2]];
    for (int i = 0; i < p->n; i++) {
        p->fns[i](p->args[i], p->threads[i]);
        clock_gettime(CLOCK_MONOTONIC, &t);
        stamps[i] = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
    }
}
"""


class _Plan(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int), ("npatch", ctypes.c_int), ("fns", ctypes.c_void_p), ("args", ctypes.c_void_p),
                ("threads", ctypes.c_void_p), ("patch", ctypes.c_void_p)]


_DRIVER: list = []  # process-wide by design, like every loaded library (toolchain._LOADED)


def driver(env: Env | None = None):
    """The ``kn_run_all`` entry point, built once per process (cached on disk like any kernel) by
    the first caller: compile() and load() pass the Env they read, so an executable's first run
    finds it built."""
    return _entries(env)[0]


def _entries(env: Env | None = None) -> tuple:
    """(``kn_run_all``, ``kn_run_timed``) of the driver library, built once per process."""
    if not _DRIVER:
        lib = toolchain.load(toolchain.compile_source(DRIVER, env or Env.read()))
        lib.kn_run_all.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.kn_run_timed.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.kn_run_all.restype = lib.kn_run_timed.restype = None
        _DRIVER.append((lib.kn_run_all, lib.kn_run_timed))
    return _DRIVER[0]


def available(env: Env | None = None) -> bool:
    """Whether the driver can be built here (a model loaded with trusted libraries may run where
    there is no compiler: then its calls run the Python loop)."""
    try:
        driver(env)
    except CompilerError:
        return False
    return True


def can_run_natively(kern) -> bool:
    """A generated C kernel (a ``CKernel``: a C function pointer and a fixed workspace)."""
    return getattr(kern, "provider", None) == "c" and hasattr(kern, "fn") and hasattr(kern, "spec")


class NativeRun:
    """Consecutive C kernels as one C call. ``steps`` are the executor's program entries
    (kernel, inputs, dynamic inputs, outputs, dynamic outputs): a dynamic position (a graph input
    or output, None in the lists) is filled per call from the pointer table, at the index
    ``index[value id]``."""

    def __init__(self, steps: Sequence[tuple], index: Mapping[int, int]) -> None:
        self.n = len(steps)
        self._call, self._timed = _entries()
        self._stamps = (ctypes.c_double * max(self.n, 1))()
        self._fns = (ctypes.c_void_p * self.n)(*[ctypes.cast(s[0].fn, ctypes.c_void_p).value for s in steps])
        self._threads = (ctypes.c_int * self.n)(*[s[0].num_threads for s in steps])
        self._argv = []
        self._keep = []  # tensors whose addresses are baked into the argument arrays
        patch: list[int] = []
        self.reads: set[int] = set()  # pointer-table indices the run reads
        for k, (kern, ins, dyn_in, outs, dyn_out) in enumerate(steps):
            tensors = list(kern.bound(ins)) + list(outs) + ([kern._ws] if kern.spec.workspace else [])
            arr = (ctypes.c_void_p * max(len(tensors), 1))(*[0 if t is None else t.data_ptr() for t in tensors])
            self._keep.extend(t for t in tensors if t is not None)
            for pos, v in [(i, v) for i, v in dyn_in] + [(len(ins) + i, v) for i, v in dyn_out]:
                patch += [k, pos, index[v]]
                self.reads.add(index[v])
            self._argv.append(arr)
        self._args = (ctypes.c_void_p * self.n)(*[ctypes.addressof(a) for a in self._argv])
        self._patch = (ctypes.c_int * max(len(patch), 1))(*patch)
        self._plan = _Plan(self.n, len(patch) // 3, ctypes.addressof(self._fns), ctypes.addressof(self._args),
                           ctypes.addressof(self._threads), ctypes.addressof(self._patch))
        self.address = ctypes.addressof(self._plan)

    def __call__(self, table: int) -> None:
        """Run the kernels; ``table`` is the address of the call's pointer table."""
        self._call(self.address, table)

    def timed(self, table: int) -> list[float]:
        """Run the kernels as ``__call__`` does; the ``time.perf_counter()`` reading after each
        kernel (the in-context profile sees every kernel of a run, not just the run)."""
        self._timed(self.address, table, ctypes.addressof(self._stamps))
        return self._stamps[:self.n]
