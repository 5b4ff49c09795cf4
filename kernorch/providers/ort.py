"""onnxruntime as a kernel provider: the candidate exported as a one-kernel ONNX model, run in an
InferenceSession with all graph optimizations and a fixed intra-op thread count."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from kernorch.ir.graph import Graph
from kernorch.ir.prims import ValueId
from kernorch.providers.base import BuiltKernel, Provider, ProviderError, default_threads
from kernorch.providers.to_onnx import OnnxKernel, export, unsupported


class OrtProvider(Provider):
    """``spin=False`` keeps ORT's worker threads from busy-waiting after a run: in a plan, the
    next kernel is often another provider's, and spinning threads would steal its cores."""

    name = "ort"

    def __init__(self, threads: int | None = None, bake_constants: bool = True, spin: bool = False) -> None:
        self.threads = threads or default_threads()
        self.bake_constants = bake_constants
        self.spin = spin

    def available(self) -> bool:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return False
        return True

    def can_run(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> bool | str:
        return unsupported(g, members) or True

    def build(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId]) -> BuiltKernel:
        k = export(g, members, outputs, bake_constants=self.bake_constants)
        return self._kernel(k, k.model.SerializeToString())

    def saved_state(self, built: BuiltKernel) -> dict:
        return without_weights(built.state)

    def load(self, g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId], state: dict) -> BuiltKernel:
        """A saved kernel: its ONNX model, checked, in a new session (nothing is exported)."""
        built = OrtProvider(self.threads, self.bake_constants, bool(state.get("spin")))._kernel(
            *onnx_from_state(g, members, outputs, state))
        return kept_shared_weights(built, state)

    def _kernel(self, k: OnnxKernel, model: bytes) -> BuiltKernel:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        if not self.spin:
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        built = BuiltKernel(self.name, k.inputs, k.outputs, _runner(sess, k), k.baked, _views_detail(k),
                            run_into=_binder(sess, k), state=onnx_state(k, model, threads=self.threads, spin=self.spin))
        built.run_numpy = _numpy_runner(sess, k)  # read by the runtime when present (runtime/calls.py)
        return built


def onnx_state(k: OnnxKernel, model: bytes, **settings) -> dict:
    """What a saved model keeps of a kernel run from an exported ONNX model (ORT, OpenVINO)."""
    return {**settings, "onnx": model, "inputs": list(k.inputs), "feeds": list(k.feeds), "outputs": list(k.outputs),
            "output_names": list(k.output_names), "baked": sorted(k.baked), "views": dict(k.views)}


def without_weights(state: dict) -> dict:
    """The state with the baked graph constants taken out of its ONNX model (they are the saved
    graph's weights): each as (position among the initializers, value id). A user's original model
    (providers/original.py) lists its initializers equal to graph constants in ``shared_weights``
    as (position, value id, name)."""
    import onnx

    model = onnx.load_model_from_string(state["onnx"])
    inits = model.graph.initializer
    if "shared_weights" in state:
        taken = [[int(i), int(v), str(n)] for i, v, n in state["shared_weights"]]
    else:
        names = {f"v{v}": v for v in state["baked"]}  # to_onnx names a baked constant %v "v{v}"
        taken = [[i, names[t.name]] for i, t in enumerate(inits) if t.name in names]
    for i, *_ in reversed(taken):
        del inits[i]
    return {**state, "onnx": model.SerializeToString(), "weights_taken": taken}


def kept_shared_weights(built: BuiltKernel, state: dict) -> BuiltKernel:
    """A reloaded kernel keeps the list of its model's initializers that are graph constants, so
    saving it again leaves them out again."""
    if "shared_weights" in state:
        built.state["shared_weights"] = [[int(i), int(v), str(n)] for i, v, n in state["shared_weights"]]
        built.detail = "the original ONNX model"
    return built


def _with_weights(g: Graph, model, taken: list) -> None:
    """Put the constants ``without_weights`` took out back, where they were (same bytes, under
    their own name: ``v{v}``, or the name listed)."""
    from onnx import numpy_helper

    inits = model.graph.initializer
    for entry in taken:
        i, v = int(entry[0]), int(entry[1])
        name = str(entry[2]) if len(entry) > 2 else f"v{v}"
        if v not in g.constants or not 0 <= i <= len(inits):
            raise ProviderError(f"the saved ONNX model wants weight %{v}, which the graph lacks")
        t = numpy_helper.from_array(np.ascontiguousarray(g.constants[v]), name)
        inits.insert(i, t)


def onnx_from_state(g: Graph, members: Iterable[ValueId], outputs: Sequence[ValueId],
                    state: dict) -> tuple[OnnxKernel, bytes]:
    """The inverse of ``onnx_state``, checked against the graph: the kernel's inputs and outputs
    are those of its prims, every name is one of the model's, and the model reads no other files."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    data = state["onnx"]
    if not isinstance(data, bytes):
        raise ProviderError("the saved kernel has no ONNX model")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # noqa: BLE001 - a protobuf decode error
        raise ProviderError(f"the saved ONNX model cannot be parsed ({type(e).__name__})") from None
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in _get_all_tensors(model)):
        raise ProviderError("the saved ONNX model refers to external data files")
    if state.get("weights_taken"):
        _with_weights(g, model, list(state["weights_taken"]))
        data = model.SerializeToString()
    sub = g.subgraph(set(members), list(outputs))
    ins, outs = [int(v) for v in state["inputs"]], [int(v) for v in state["outputs"]]
    feeds, names = list(state["feeds"]), [str(n) for n in state["output_names"]]
    baked = frozenset(int(v) for v in state["baked"])
    model_ins = {i.name for i in model.graph.input}
    model_outs = {o.name for o in model.graph.output}
    if (ins != list(sub.inputs) or outs != list(sub.outputs) or len(feeds) != len(ins) or len(names) != len(outs)
            or not baked <= set(ins) or not set(names) <= model_outs
            or any(f is not None and f not in model_ins for f in feeds)):
        raise ProviderError("the saved ONNX kernel does not match its prims in the graph")
    views = Counter({str(kind): int(n) for kind, n in dict(state.get("views") or {}).items()})
    return OnnxKernel(model, ins, feeds, outs, names, baked, views), data


def _runner(sess, k: OnnxKernel):
    feeds = [(i, name) for i, name in enumerate(k.feeds) if name is not None]
    names = list(k.output_names)

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        res = sess.run(names, {name: inputs[i].numpy() for i, name in feeds})
        return [torch.from_numpy(np.ascontiguousarray(r)) for r in res]

    return run


def _numpy_runner(sess, k: OnnxKernel):
    """Run on NumPy arrays and return the session's own fresh output arrays (no copies). Calls the
    session's native object where the installed onnxruntime has it: ``InferenceSession.run`` adds
    only a check of the feed names, which are fixed here."""
    feeds = [(i, name) for i, name in enumerate(k.feeds) if name is not None]
    names = list(k.output_names)
    native = getattr(getattr(sess, "_sess", None), "run", None)
    if native is None:
        return lambda inputs: sess.run(names, {name: inputs[i] for i, name in feeds})

    def run_numpy(inputs: list[np.ndarray]) -> list[np.ndarray]:
        return native(names, {name: inputs[i] for i, name in feeds}, None)

    # (run on a {feed name: array} dict, output names, (kernel input position, feed name)): lets a
    # one-kernel plan feed the session straight from the call's arguments (runtime/calls.py).
    run_numpy.by_name = (lambda fed: native(names, fed, None), feeds)
    return run_numpy


def _binder(sess, k: OnnxKernel):
    """Run with IOBinding straight from and into the runtime's tensors (no output copies)."""
    feeds = [(i, name) for i, name in enumerate(k.feeds) if name is not None]
    names = list(k.output_names)

    def run_into(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        b = sess.io_binding()
        for i, name in feeds:
            a = inputs[i].numpy()
            b.bind_input(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        for name, t in zip(names, outputs):
            a = t.numpy()
            b.bind_output(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        sess.run_with_iobinding(b)

    return run_into


def _views_detail(k: OnnxKernel) -> str:
    return ", ".join(f"{n} {kind} view" for kind, n in sorted(k.views.items()))
