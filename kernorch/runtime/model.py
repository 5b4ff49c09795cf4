"""CompiledModel: the user-facing callable, its report, and save/load without re-tuning.

A saved model is a directory: ``graph.pkl`` (the rewritten primitive graph with its weights),
``kernels.pkl`` (per kernel: provider, members, outputs, and for generated C its loop-level spec
and the name of its shared library) and ``libs/*.so``. Loading rebuilds nothing: it loads the
libraries and wires the kernels up again; the optimizer (enumeration, solver, tuning) is not needed.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any

from kernorch.codegen.build import function as library_function, load as load_library
from kernorch.codegen.linear import LinearKernel
from kernorch.codegen.runner import CKernel, OpaqueKernel
from kernorch.errors import KernorchError
from kernorch.ir.graph import Graph
from kernorch.runtime.executable import Executable

FORMAT_VERSION = 1


class CompiledModel:
    """Call it like the model: ``model(x)`` (positional, graph input order; NumPy in -> NumPy out,
    torch in -> torch out), or ``model.run({name: array}) -> {name: tensor}``."""

    def __init__(self, executable: Executable, report: Any = None, graph: Graph | None = None) -> None:
        self.executable = executable
        self.report = report
        self.graph = graph

    def __call__(self, *args):
        return self.executable(*args)

    def run(self, feeds) -> dict:
        return self.executable.run(feeds)

    @property
    def input_names(self) -> list[str]:
        g = self.executable.sig.graph
        return [g.name(v) for v in g.inputs]

    @property
    def output_names(self) -> list[str]:
        return list(self.executable.sig.output_names)

    @property
    def kernels(self):
        return self.executable.kernels

    def summary(self, feeds=None, repeat: int = 0) -> str:
        """Kernels, their prims, provider, cost (measured ms when ``repeat`` > 0 and feeds are given,
        else the cost the orchestrator priced them at) and share of the total."""
        infos = self.executable.infos
        if repeat and feeds is not None:
            secs = self.executable.profile(feeds, repeat)
            label = "measured"
        else:
            secs = [i.seconds or 0.0 for i in infos]
            label = "priced"
        total = sum(secs) or 1.0
        lines = []
        if self.report is not None:
            r = self.report
            lines.append(f"strategy {r.strategy}, cost {r.cost}: {len(infos)} kernels for {r.prims} prims; "
                         f"{r.candidates} candidates priced ({r.measured} measured, {r.cached} from the database, "
                         f"{r.failed} rejected); {r.plan_summary}")
            if r.opaque:
                lines.append(f"opaque ops: {r.opaque}")
        lines.append(f"{'#':>4} {'provider':<9} {label + ' ms':>11} {'share':>6}  prims")
        for k, (info, s) in enumerate(zip(infos, secs)):
            ops = " ".join(info.ops) if len(info.ops) <= 12 else _census(info.ops)
            lines.append(f"{k:>4} {info.provider:<9} {s * 1e3:>11.4f} {s / total:>6.1%}  {ops[:100]}")
        lines.append(f"total {label}: {total * 1e3:.3f} ms")
        return "\n".join(lines)

    # -- persistence ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        if self.graph is None:
            raise KernorchError("this model has no graph attached and cannot be saved")
        d = Path(path)
        (d / "libs").mkdir(parents=True, exist_ok=True)
        records = []
        for kern, info in zip(self.executable.kernels, self.executable.infos):
            rec = {"provider": kern.provider, "members": info.members, "outputs": tuple(kern.outputs), "info": info}
            if getattr(self.executable, "target", "cpu") == "cuda":
                from kernorch.runtime.cuda_exec import kernel_record

                rec.update(kernel_record(kern))
            elif isinstance(kern, CKernel):
                so = Path(kern.lib._name)
                shutil.copy2(so, d / "libs" / so.name)
                rec.update(spec=kern.spec, source=kern.source, lib=so.name, threads=kern.num_threads)
            records.append(rec)
        with open(d / "graph.pkl", "wb") as f:
            pickle.dump(self.graph, f, protocol=5)
        with open(d / "kernels.pkl", "wb") as f:
            meta = {"format": FORMAT_VERSION, "kernels": records, "report": self.report}
            if getattr(self.executable, "target", "cpu") == "cuda":
                from kernorch.runtime.cuda_exec import save_meta

                meta.update(save_meta(self.executable))
            pickle.dump(meta, f, protocol=5)
        return d


def load(path: str | os.PathLike, device: Any = None) -> CompiledModel:
    """Load a model saved by ``CompiledModel.save`` (no tuning, no compilation; a CUDA model's
    Triton kernels are compiled by Triton's JIT, from its cache, on ``device`` or the current GPU)."""
    d = Path(path)
    if not (d / "kernels.pkl").exists() or not (d / "graph.pkl").exists():
        raise KernorchError(f"{d}: not a saved kernorch model (kernels.pkl / graph.pkl missing)")
    with open(d / "graph.pkl", "rb") as f:
        g: Graph = pickle.load(f)
    with open(d / "kernels.pkl", "rb") as f:
        meta = pickle.load(f)
    if meta.get("format") != FORMAT_VERSION:
        raise KernorchError(f"{d}: saved with format {meta.get('format')}, this kernorch reads {FORMAT_VERSION}")
    if meta.get("target") == "cuda":
        from kernorch.runtime.cuda_exec import load_cuda

        return load_cuda(d, g, meta, device)
    kernels, infos = [], []
    for rec in meta["kernels"]:
        prov = rec["provider"]
        if prov == "c":
            lib = load_library((d / "libs" / rec["lib"]).resolve())
            fn = library_function(lib, rec["spec"].name)
            kernels.append(CKernel(rec["spec"], fn, lib, rec["source"], rec["threads"], g.types))
        elif prov == "torch":
            kernels.append(LinearKernel(g, set(rec["members"]), list(rec["outputs"])))
        elif prov == "reference":
            kernels.append(OpaqueKernel(g, set(rec["members"])))
        else:
            kernels.append(_rebuild_external(d, g, prov, rec))
        infos.append(rec["info"])
    from kernorch.runtime.compile import executable_for

    return CompiledModel(executable_for(g, kernels, infos), meta.get("report"), g)


def _rebuild_external(d: Path, g: Graph, name: str, rec: dict):
    """Kernels of external providers (onnxruntime, OpenVINO, PyTorch variants) are rebuilt from
    their prims: a session is created, nothing is tuned."""
    from kernorch.providers import default_providers
    from kernorch.runtime.executable import ProviderKernel

    prov = {p.name: p for p in default_providers(rec.get("threads"))}.get(name)
    if prov is None or not prov.available():
        raise KernorchError(f"{d}: kernel provider {name!r} is not installed here (pip install 'kernorch[{name}]')")
    return ProviderKernel(prov.build(g, set(rec["members"]), list(rec["outputs"])))


def _census(ops) -> str:
    """A large kernel (a provider region) as a count of its prims, most frequent first."""
    from collections import Counter

    counts = Counter(ops).most_common()
    return f"{len(ops)} prims: " + " ".join(f"{op}x{n}" for op, n in counts)
