"""Uniform kernel objects.

Every kernel, whoever implements it (generated C, PyTorch for linear prims, the reference
implementation for opaque prims), is a ``Kernel``: ``inputs``/``outputs`` are graph value ids,
``run(inputs, out=None)`` takes tensors/arrays in ``inputs`` order and returns (or fills) the
outputs. Outputs must not alias inputs. C kernels run with a fixed number of OpenMP threads
(see build.py).
"""

from __future__ import annotations

import ctypes
from typing import Iterable, Sequence

import numpy as np
import onnx
import torch

from kernorch.codegen.facts import kernel_prims
from kernorch.codegen.kernel import KernelSpec
from kernorch.codegen.packing import packed_copy
from kernorch.errors import InputError
from kernorch.ir.graph import Graph, TensorType
from kernorch.ir.interp import NodeSession, eval_opaque
from kernorch.ir.tensors import to_torch

TORCH_DTYPE = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
               "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
               "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool}


def as_tensor(x, t: TensorType, what: str) -> torch.Tensor:
    """A contiguous tensor of type ``t`` (NumPy arrays are wrapped without copying when possible)."""
    if isinstance(x, np.ndarray):
        x = to_torch(x if x.flags.c_contiguous and x.flags.writeable else np.array(x, order="C"))
    elif not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x)
    if tuple(x.shape) != t.shape or x.dtype != TORCH_DTYPE[t.dtype]:
        raise InputError(f"{what}: got {x.dtype} {tuple(x.shape)}, expected {t!r}")
    return x.contiguous()


class Kernel:
    """A runnable kernel. Subclasses implement ``_run(ins, outs)`` on contiguous tensors."""

    provider = "?"

    def __init__(self, inputs: Sequence[int], outputs: Sequence[int], in_types: Sequence[TensorType],
                 out_types: Sequence[TensorType], source: str = "", key: str = "") -> None:
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.in_types, self.out_types = tuple(in_types), tuple(out_types)
        self.source, self.key = source, key

    def run(self, inputs: Sequence, out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
        if len(inputs) != len(self.inputs):
            raise InputError(f"kernel {self.key[:12]} takes {len(self.inputs)} inputs, got {len(inputs)}")
        ins = [as_tensor(x, t, f"input {k}") for k, (x, t) in enumerate(zip(inputs, self.in_types))]
        if out is None:
            outs = [torch.empty(t.shape, dtype=TORCH_DTYPE[t.dtype]) for t in self.out_types]
        else:
            outs = list(out)
            for k, (o, t) in enumerate(zip(outs, self.out_types)):
                if tuple(o.shape) != t.shape or o.dtype != TORCH_DTYPE[t.dtype] or not o.is_contiguous():
                    raise InputError(f"output {k}: got {o.dtype} {tuple(o.shape)}, expected contiguous {t!r}")
        self._run(ins, outs)
        return outs

    __call__ = run

    def _run(self, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
        raise NotImplementedError


class CKernel(Kernel):
    provider = "c"

    def __init__(self, spec: KernelSpec, fn, lib, source: str, num_threads: int, g_types) -> None:
        super().__init__(spec.inputs, spec.outputs, [g_types[v] for v in spec.inputs],
                         [g_types[v] for v in spec.outputs], source, spec.key)
        self.spec, self.fn, self.lib, self.num_threads = spec, fn, lib, num_threads
        self._ws = torch.empty(max(spec.workspace, 1), dtype=torch.uint8)
        self._nargs = len(spec.inputs) + len(spec.outputs) + (1 if spec.workspace else 0)
        self._packed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # position -> (source, its packed copy)

    def bound(self, ins: list) -> list:
        """The tensors the C function reads: ``ins`` with each packed input (``spec.packs``: a
        constant weight) replaced by its packed copy, made at the first call and kept while the
        same tensor comes back."""
        if not self.spec.packs:
            return ins
        out = list(ins)
        for pos, perm, panel, transform in self.spec.packs:
            t = ins[pos]
            if t is None:
                continue
            held = self._packed.get(pos)
            if held is None or held[0] is not t:
                held = self._packed[pos] = (t, packed_copy(t, self.in_types[pos].shape, perm, panel,
                                                                   transform))
            out[pos] = held[1]
        return out

    def _run(self, ins, outs) -> None:
        self.prepared(ins, outs)()

    def prepared(self, ins, outs):
        """A call on these buffers with its argument array built once: what a native run pays per
        kernel (the price of a kernel leaves out the marshalling the runtime never does)."""
        ins = self.bound(ins)
        ptrs = [t.data_ptr() for t in ins] + [t.data_ptr() for t in outs]
        if self.spec.workspace:
            ptrs.append(self._ws.data_ptr())
        args = (ctypes.c_void_p * self._nargs)(*ptrs)
        fn, threads = self.fn, self.num_threads
        return lambda: fn(args, threads)


class OpaqueKernel(Kernel):
    """One OPAQUE prim, run natively: onnxruntime on that single node (kernorch.ir.interp.
    NodeSession), at compiled speed. The provider keeps its saved-format name "reference"; the
    onnx Python reference only runs where onnxruntime cannot build the node (then ``detail``
    says so), and stays the oracle that verifies this kernel."""

    provider = "reference"

    def __init__(self, g: Graph, members: Iterable[int]) -> None:
        (self.prim,) = kernel_prims(g, members)
        ins = list(dict.fromkeys(self.prim.inputs))
        super().__init__(ins, [self.prim.output], [g.types[v] for v in ins], [g.types[self.prim.output]],
                         f"opaque {self.prim.attrs.op_type}", g.kernel_key(set(members), [self.prim.output]))
        self._pos = [ins.index(v) for v in self.prim.inputs]
        self._dtype = g.types[self.prim.output].dtype
        node = onnx.NodeProto()
        node.ParseFromString(self.prim.attrs.node)
        types = [(g.types[v].shape, g.types[v].dtype) for v in self.prim.inputs]
        try:
            self._session: NodeSession | None = NodeSession(node, types, self.prim.attrs.opset, self._dtype,
                                                            torch.get_num_threads())
            self.detail = f"opaque {self.prim.attrs.op_type} (onnxruntime, one node)"
        except Exception as e:  # noqa: BLE001 -- onnxruntime lacks this node: the Python reference runs it
            self._session = None
            self.detail = f"opaque {self.prim.attrs.op_type} (onnx reference: onnxruntime cannot run it: " \
                          f"{type(e).__name__})"

    def _run(self, ins, outs) -> None:
        arrays = [ins[k].numpy() for k in self._pos]
        res = self._session.run(arrays) if self._session is not None else eval_opaque(self.prim, arrays)
        res = np.asarray(res).astype(self._dtype, copy=False)
        outs[0].copy_(torch.from_numpy(np.ascontiguousarray(res)).reshape(outs[0].shape))
