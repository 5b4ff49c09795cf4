"""What every saved kernel record holds whatever its target: its prims and outputs, and its
``KernelInfo``, read back and checked. The CPU loader (model.py) and the CUDA loader
(cuda_exec.py) both read them here, so neither loader imports the other."""

from __future__ import annotations

from kernorch.errors import KernorchError
from kernorch.ir.graph import Graph
from kernorch.runtime import saved
from kernorch.runtime.executable import KernelInfo


def kernel_members(g: Graph, rec: dict) -> tuple[set[int], list[int]]:
    """A kernel record's prims and outputs, checked: prims of the graph, outputs among them."""
    members = {saved.as_int(v) for v in rec["members"]}
    outputs = [saved.as_int(v) for v in rec["outputs"]]
    produced = {p.output for p in g.prims}
    if not members or not members <= produced or not set(outputs) <= members:
        raise KernorchError("its prims or outputs are not prims of the graph")
    return members, outputs


def kernel_info(d: dict) -> KernelInfo:
    seconds = d["seconds"]
    if seconds is not None and not isinstance(seconds, (int, float)):
        raise KernorchError("its priced seconds are not a number")
    return KernelInfo(tuple(saved.as_int(v) for v in d["members"]), tuple(str(o) for o in d["ops"]),
                      str(d["provider"]), seconds)
