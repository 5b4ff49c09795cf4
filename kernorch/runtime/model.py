"""CompiledModel: the user-facing callable, its report, and save/load without re-tuning.

``save`` writes the directory described in saved.py (JSON plan and kernel records, safetensors
weights, libraries and ONNX models stored by content hash). Every kernel kind saves what rebuilds
it: generated C its library and function, PyTorch/onnxruntime/OpenVINO kernels their provider's
``BuiltKernel.state`` (reloaded by that provider's ``load``), the code generator's linear and
reference kernels only their prims. Loading rebuilds nothing that needs the optimizer (no
enumeration, solving or tuning) and never unpickles.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from kernorch.codegen.build import build_many, function as library_function, load as load_library
from kernorch.codegen.kernel import KernelSpec
from kernorch.codegen.linear import LinearKernel
from kernorch.codegen.packing import TRANSFORMS
from kernorch.codegen.runner import CKernel, OpaqueKernel
from kernorch.errors import CompilerError, KernorchError
from kernorch.ir.graph import Graph
from kernorch.options import CodegenOptions, Env
from kernorch.providers import default_providers
from kernorch.runtime import native, saved
from kernorch.runtime.cuda_exec import kernel_record as cuda_kernel_record, load_cuda, save_meta
from kernorch.runtime.executable import Executable, ProviderKernel, executable_for
from kernorch.runtime.records import kernel_info, kernel_members
from kernorch.runtime.report import CompileReport
from kernorch.runtime.summary import summary_text

FORMAT_VERSION = saved.VERSION
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,200}")


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
        """What ran where and the tuning in plain words, then per kernel its prims, provider, cost
        (measured ms when ``repeat`` > 0 and feeds are given, else the priced cost) and share."""
        return summary_text(self, feeds, repeat)

    # -- persistence ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the model to directory ``path`` (created; files of an earlier save are replaced)."""
        if self.graph is None:
            raise KernorchError("this model has no graph attached and cannot be saved")
        d = Path(path)
        try:
            self._write(saved.Writer(d))
        except OSError as e:
            raise KernorchError(f"{d}: cannot save the model ({e.strerror or type(e).__name__}: "
                                f"{e.filename or d})") from None
        return d

    def _write(self, w: saved.Writer) -> None:
        assert self.graph is not None
        target = getattr(self.executable, "target", "cpu")
        m: dict[str, Any] = {"format": saved.FORMAT, "version": saved.VERSION, "target": target}
        if target == "cuda":
            kernel_record = cuda_kernel_record
            m.update(save_meta(self.executable))
        else:
            kernel_record = _kernel_record
        m["weights"] = w.weights(self.graph.constants)
        m["graph"] = saved.graph_json(self.graph)
        m["kernels"] = [{**kernel_record(kern, w), "members": list(info.members), "outputs": list(kern.outputs),
                         "info": dataclasses.asdict(info)}
                        for kern, info in zip(self.executable.kernels, self.executable.infos)]
        m["report"] = dataclasses.asdict(self.report) if dataclasses.is_dataclass(self.report) else None
        w.manifest(m)  # last: a directory is a saved model once its manifest is complete


def load(path: str | os.PathLike, device: Any = None, *, trust_libraries: bool = False,
         env: Env | None = None) -> CompiledModel:
    """Load a model saved by ``CompiledModel.save``: no tuning, and nothing read from the directory
    runs as code. Generated C kernels are generated again from the saved plan and compiled here
    (cached by source, so usually no compiler runs), and must equal the saved code; with
    ``trust_libraries`` the saved libraries are loaded instead (hash-checked; no compiler needed;
    only for directories you trust: a library is native code). A CUDA model's Triton kernels are
    lowered again from their prims and compiled by Triton's JIT on ``device`` or the current GPU.
    A directory that is not a valid saved model is one ``SavedModelError`` line. The environment
    is read here once (``env``: kernorch/options.py) and passed to what builds kernels."""
    env = env or Env.read()
    r = saved.Reader(Path(path))
    m = r.manifest()
    what = "the graph or weights"
    try:
        g = saved.graph_from_json(m["graph"], r.weights(m["weights"]))
        what = "the report"
        report = _report(m.get("report"))
        if m.get("target") == "cuda":
            return CompiledModel(load_cuda(g, m, device, env), report, g)
        if m.get("target") != "cpu":
            raise r.fail(f"unknown target {str(m.get('target'))[:20]!r}")
        kernels, infos, own = [], [], []
        for k, rec in enumerate(m["kernels"]):
            what = f"kernel {k}"
            members, outputs = kernel_members(g, rec)
            if rec["kind"] == "c" and not trust_libraries:
                own.append((k, rec, members, outputs))
                kernels.append(None)
            else:
                kernels.append(_load_kernel(r, g, rec, members, outputs))
            infos.append(kernel_info(rec["info"]))
        what = "a generated kernel"
        for k, kern in _generate_again(r, g, own, env):
            kernels[k] = kern
    except saved.SavedModelError:
        raise
    except KernorchError as e:
        raise r.fail(f"{what}: {saved.one_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - whatever a tampered file triggers is one line
        raise r.fail(f"{what} is malformed or tampered ({type(e).__name__}: {saved.one_line(e)})") from None
    if any(native.can_run_natively(k) for k in kernels):
        native.available(env)  # the native driver, built now with this Env (process-wide: native.py)
    return CompiledModel(executable_for(g, kernels, infos), report, g)


def _generate_again(r: saved.Reader, g: Graph, own: list, env: Env) -> list[tuple[int, CKernel]]:
    """Saved C kernels generated again from their prims (one compiler call per thread count,
    cached by source) and checked against the saved source: same code, same results."""
    out = []
    def switches(rec: dict) -> CodegenOptions:
        return CodegenOptions.from_changed(rec.get("codegen", {}))

    for threads, options in {(saved.as_int(rec["threads"]), switches(rec)) for _, rec, _, _ in own}:
        batch = [(k, rec, members, outputs) for k, rec, members, outputs in own
                 if rec["threads"] == threads and switches(rec) == options]
        try:
            built = build_many([(g, members, outputs) for _, _, members, outputs in batch], threads, env=env,
                               options=options)
        except CompilerError as e:
            raise KernorchError(f"{e} (load(..., trust_libraries=True) runs the saved libraries, no compiler)") from None
        for (k, rec, _, _), kern in zip(batch, built):
            before = r.blob(rec["source"]).decode()
            if not isinstance(kern, CKernel) or before.replace(str(rec["function"]), kern.spec.name) != kern.source:
                raise KernorchError(f"kernel {k}: its C code generated again differs from the saved code (saved by "
                                    "another kernorch?); compile the model again, or load(..., trust_libraries=True)")
            out.append((k, kern))
    return out


def _kernel_record(kern, w: saved.Writer) -> dict:
    """What rebuilds a CPU kernel, by its kind (the class that runs it, not its provider's name)."""
    if isinstance(kern, CKernel):
        return {"kind": "c", "inputs": list(kern.inputs), "function": kern.spec.name, "threads": kern.num_threads,
                "workspace": kern.spec.workspace, "key": kern.spec.key, "codegen": kern.spec.options.changed(),
                "packs": [[pos, list(perm), panel, transform] for pos, perm, panel, transform in kern.spec.packs],
                "lib": w.blob(Path(kern.lib._name).read_bytes(), "so"), "source": w.blob(kern.source.encode(), "c")}
    if isinstance(kern, ProviderKernel):
        prov = _provider(kern.provider, kern.built.state["threads"])
        return {"kind": "provider", "provider": kern.provider, "state": w.state(prov.saved_state(kern.built))}
    if isinstance(kern, LinearKernel):
        return {"kind": "linear"}
    if isinstance(kern, OpaqueKernel):
        return {"kind": "reference"}
    raise KernorchError(f"cannot save a {type(kern).__name__} kernel")


def _load_kernel(r: saved.Reader, g: Graph, rec: dict, members: set[int], outputs: list[int]):
    kind = rec["kind"]
    if kind == "c":
        return _load_c(r, g, rec, members, outputs)
    if kind == "provider":
        return ProviderKernel(load_provider_kernel(g, rec["provider"], r.state(rec["state"]), members, outputs))
    if kind == "linear":
        return LinearKernel(g, members, outputs)
    if kind == "reference":
        return OpaqueKernel(g, members)
    raise KernorchError(f"unknown kernel kind {str(kind)[:20]!r}")


def _load_c(r: saved.Reader, g: Graph, rec: dict, members: set[int], outputs: list[int]) -> CKernel:
    """A generated kernel from its library (hash-checked) and its function's name. Its arguments
    must be values its prims read and write, so a tampered record cannot point it elsewhere."""
    inputs = [saved.as_int(v) for v in rec["inputs"]]
    name, threads, workspace = rec["function"], saved.as_int(rec["threads"]), saved.as_int(rec["workspace"])
    source = r.blob(rec["source"]).decode()
    if (not set(inputs) <= set(g.boundary(members)[0]) or not isinstance(name, str) or not _IDENT.fullmatch(name)
            or f"void {name}(" not in source):
        raise KernorchError("its arguments or function name do not match its prims and source")
    if not 1 <= threads <= 4096 or not 0 <= workspace < 1 << 40:
        raise KernorchError(f"implausible threads {threads} or workspace {workspace}")
    packs = tuple(_pack(p, inputs, g) for p in rec.get("packs", []))
    spec = KernelSpec(name=name, args=(), body=(), sizes=(), inputs=tuple(inputs), outputs=tuple(outputs),
                      key=str(rec["key"]), workspace=workspace, packs=packs,
                      options=CodegenOptions.from_changed(rec.get("codegen", {})))
    lib = load_library(r.blob_path(rec["lib"]).resolve())
    return CKernel(spec, library_function(lib, name), lib, source, threads, g.types)


def _pack(rec, inputs: list[int], g: Graph) -> tuple[int, tuple[int, ...], int, str]:
    """One (input position, permutation, panel width, transform) of a kernel's packed constants,
    checked (a record without the width, from before panels, packs no panels; one without the
    transform, from before transforms, none)."""
    pos, perm = saved.as_int(rec[0]), tuple(saved.as_int(d) for d in rec[1])
    panel = saved.as_int(rec[2]) if len(rec) > 2 else 0
    transform = rec[3] if len(rec) > 3 else ""
    if not 0 <= pos < len(inputs) or inputs[pos] not in g.constants \
            or sorted(perm) != list(range(len(g.types[inputs[pos]].shape))) or not 0 <= panel <= 4096 \
            or not (transform == "" or transform in TRANSFORMS):
        raise KernorchError(f"implausible packed input {pos} {perm} {panel} {transform!r}")
    return pos, perm, panel, transform


def load_provider_kernel(g: Graph, name: Any, state: dict, members: set[int], outputs: list[int]):
    """A provider kernel rebuilt by its own provider (``Provider.load``), checked against its prims."""
    built = _provider(name, state["threads"]).load(g, members, outputs, state)
    sub = g.subgraph(members, outputs)
    if list(built.inputs) != list(sub.inputs) or list(built.outputs) != list(sub.outputs):
        raise KernorchError(f"the {name} kernel's inputs or outputs differ from its prims'")
    return built


def _provider(name: Any, threads: Any):
    """The provider called ``name`` (installed), set up for ``threads``."""
    threads = saved.as_int(threads)
    if not 1 <= threads <= 4096:
        raise KernorchError(f"implausible threads {threads}")
    prov = next((p for p in default_providers(threads) if p.name == name), None)
    if prov is None:
        raise KernorchError(f"unknown kernel provider {str(name)[:20]!r}")
    if not prov.available():
        raise KernorchError(f"kernel provider {name!r} is not installed here (pip install 'kernorch[{name}]')")
    return prov


def _report(d: Any):
    """The compile report (plain values only) as the report class, or None."""
    if d is None:
        return None
    known = {f.name for f in dataclasses.fields(CompileReport)}
    if not isinstance(d, dict) or not {"strategy", "cost"} <= set(d):
        raise KernorchError("not a compile report")
    return CompileReport(**{k: v for k, v in d.items() if k in known})
