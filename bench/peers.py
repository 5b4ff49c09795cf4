"""The runtimes the benchmark compares, each behind one interface, and the interleaved timer.

A runtime is set up once (session creation, compilation, tuning: its ``setup_s``), then called
with fixed inputs. ``Runner.call()`` returns the raw result; ``Runner.outputs()`` the outputs as
NumPy arrays in ONNX graph-output order, used once to check against onnxruntime before timing.
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

# column name -> what it is (printed under the tables)
PEERS = {
    "ort": "onnxruntime, ORT_ENABLE_ALL (the reference for output checks)",
    "ort-noopt": "onnxruntime, graph optimizations disabled (ORT_DISABLE_ALL)",
    "eager": "PyTorch eager: the bench.models nn.Module under torch.no_grad()",
    "torch.compile": "torch.compile(backend='inductor', dynamic=False), CPU, freezing on",
    "openvino": "OpenVINO CPU plugin: f32 precision hint, LATENCY hint, 1 stream, fixed threads",
}
# column name -> (strategy, rewrites: None = kernorch's DEFAULT_RULES, "all" = ALL_RULES, () = none,
#                 provider regions on/off)
KERNORCH = {
    "kn-unfused": ("unfused", None, False),
    "kn-per-op": ("per-operator", None, False),
    "kn-greedy": ("greedy", None, False),
    "kn-own": ("optimal", None, False),
    "kn-optimal": ("optimal", None, True),
    "kn-opt+all": ("optimal", "all", False),
    "kn-opt-norw": ("optimal", (), False),
}
KERNORCH_DOC = {
    "kn-unfused": "kernorch, one kernel per primitive (default rewrites)",
    "kn-per-op": "kernorch, one kernel per ONNX operator (default rewrites)",
    "kn-greedy": "kernorch, rule-based fusion as mainstream compilers do it (default rewrites)",
    "kn-own": "kernorch, binary-LP orchestration over measured costs, kernels only (no provider regions): "
              "the orchestration result on kernorch's kernel set",
    "kn-optimal": "kernorch's default: kn-own plus provider regions (runs of segments handed whole to "
                  "OpenVINO/onnxruntime where measured cheaper)",
    "kn-opt+all": "kn-own with ALL_RULES rewrites (adds sum_to_matmul, div_past_matmul, merge_linear_concat)",
    "kn-opt-norw": "kn-own with no rewrites at all (rewrites=())",
}
RUNTIMES = list(PEERS) + list(KERNORCH)
MISMATCH_REL = 1e-3  # max |x - ort| / max |ort| above this flags the runtime
LINEAR_OPS = frozenset({"matmul", "conv", "conv_transpose"})


@dataclass
class Runner:
    name: str
    call: Callable[[], Any]
    to_numpy: Callable[[Any], list[np.ndarray]]
    setup_s: float
    extra: dict = field(default_factory=dict)

    def outputs(self) -> list[np.ndarray]:
        return self.to_numpy(self.call())


def _torch_out(res) -> list[np.ndarray]:
    import torch

    res = [res] if isinstance(res, torch.Tensor) else list(res)
    return [r.detach().numpy() for r in res]


# ---------------------------------------------------------------------------------------------
# peers
# ---------------------------------------------------------------------------------------------
def ort_runner(name: str, path, feeds: dict[str, np.ndarray], threads: int, optimize: bool) -> Runner:
    import onnxruntime as ort

    t0 = time.perf_counter()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    fixed = {i.name: feeds[i.name] for i in sess.get_inputs()}
    sess.run(None, fixed)
    return Runner(name, lambda: sess.run(None, fixed), list, time.perf_counter() - t0)


def eager_runner(module, inputs: tuple) -> Runner:
    import torch

    def call():
        with torch.no_grad():
            return module(*inputs)

    t0 = time.perf_counter()
    call()
    return Runner("eager", call, _torch_out, time.perf_counter() - t0)


class CompileTimeout(Exception):
    pass


@contextmanager
def alarm(seconds: float):
    """Raise CompileTimeout in the main thread after ``seconds`` (no-op when <= 0)."""
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return
    fired = []

    def handler(signum, frame):
        fired.append(True)
        raise CompileTimeout(f"compile took longer than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except CompileTimeout:
        raise
    except Exception as e:  # torch wraps the timeout in its own errors
        if fired:
            raise CompileTimeout(f"compile took longer than {seconds:g} s") from e
        raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def torch_compile_runner(module, inputs: tuple, timeout_s: float, cache_dir=None) -> Runner:
    """Compiles on the first call (that is its setup time); a timeout raises CompileTimeout.
    ``cache_dir``: a fresh inductor cache directory for the compile (cold, like kernorch's)."""
    import torch

    torch._dynamo.reset()
    compiled = torch.compile(module, backend="inductor", dynamic=False)

    def call():
        with torch.no_grad():
            return compiled(*inputs)

    cache = nullcontext()
    if cache_dir is not None:
        from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        cache = temporary_cache_dir(str(cache_dir))
    from torch._inductor import config as inductor_config

    t0 = time.perf_counter()
    # freezing: weights become constants, prepacked for oneDNN with fused post-ops (Inductor's
    # CPU inference mode; the compile runs on the first call, under no_grad)
    with alarm(timeout_s), cache, inductor_config.patch(freezing=True):
        call()
        call()  # a recompile on the second call would otherwise land in the timings
    return Runner("torch.compile", call, _torch_out, time.perf_counter() - t0)


def openvino_available() -> bool:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def openvino_runner(path, feeds: dict[str, np.ndarray], threads: int, precision: str = "f32") -> Runner:
    """OpenVINO's CPU plugin computing in ``precision`` ("f32", or "bf16": its default where the CPU
    has bf16 arithmetic)."""
    import openvino as ov

    t0 = time.perf_counter()
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
              "INFERENCE_PRECISION_HINT": precision}
    compiled = core.compile_model(core.read_model(str(path)), "CPU", config)
    request = compiled.create_infer_request()
    fixed = {}
    for i, port in enumerate(compiled.inputs):
        names = port.get_names()
        fixed[i] = next(feeds[n] for n in names if n in feeds)
    outs = list(compiled.outputs)

    def call():
        return request.infer(fixed, share_inputs=True)

    def to_numpy(res):
        return [np.array(res[o]) for o in outs]

    call()
    return Runner("openvino", call, to_numpy, time.perf_counter() - t0,
                  {"precision": str(compiled.get_property("INFERENCE_PRECISION_HINT")),
                   "threads": compiled.get_property("INFERENCE_NUM_THREADS")})


# ---------------------------------------------------------------------------------------------
# kernorch
# ---------------------------------------------------------------------------------------------
def rewrite_rules(spec):
    from kernorch.rewrite.pipeline import ALL_RULES, DEFAULT_RULES

    return DEFAULT_RULES if spec is None else ALL_RULES if spec == "all" else tuple(spec)


def kernorch_compile(path, strategy: str, rewrites, db, threads: int, regions: bool = True, precision: str = "f32",
                     **options):
    import kernorch

    t0 = time.perf_counter()
    m = kernorch.compile(str(path), strategy=strategy, cost="measured", db=str(db), rewrites=rewrite_rules(rewrites),
                         threads=threads, progress=False, regions=regions, precision=precision, **options)
    return m, time.perf_counter() - t0


def kernorch_runner(name: str, model, feeds: dict[str, np.ndarray], setup_s: float) -> Runner:
    import torch

    tensors = [torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in model.input_names]
    model(*tensors)
    return Runner(name, lambda: model(*tensors), _torch_out, setup_s, {"model": model})


def compile_record(model, wall_s: float) -> dict:
    """What a compile reported: counts, phase seconds, kernels per provider."""
    r = model.report
    providers: dict[str, int] = {}
    for info in model.executable.infos:
        providers[info.provider] = providers.get(info.provider, 0) + 1
    return dict(wall_s=wall_s, seconds=dict(r.seconds), candidates=r.candidates, measured=r.measured, cached=r.cached,
                failed=r.failed, failures=list(r.failures)[:5], prims=r.prims, opaque=dict(r.opaque),
                rewrites=dict(r.rewrites), kernels=len(model.kernels), providers=providers, plan=r.plan_summary)


def plan_signature(model) -> list:
    return [(i.members, i.provider) for i in model.executable.infos]


# ---------------------------------------------------------------------------------------------
# kernels: memory-bound share and roofline
# ---------------------------------------------------------------------------------------------
def kernel_class(info) -> str:
    """'linear' (a vendor/provider kernel with a matmul/conv), 'opaque' (reference), else
    'memory' (kernorch's own C code: elementwise / reduce / layout work, bound by memory)."""
    if info.provider == "reference" or "opaque" in info.ops:
        return "opaque"
    if LINEAR_OPS & set(info.ops):
        return "linear"
    return "memory"


def kernel_bytes(executable, k: int) -> int:
    kern = executable.kernels[k]
    total = 0
    for v in set(kern.inputs) | set(kern.outputs):
        shape, dtype = executable.types[v]
        total += math.prod(shape) * np.dtype(dtype).itemsize
    return total


def kernel_analysis(model, feeds: dict[str, np.ndarray], repeat: int, copy_bw: Optional[float]) -> dict:
    """Per-kernel medians timed inside real calls (``executable.profile_in_call``: dispatch
    included), time shares per kernel class, and for every memory-bound kernel its achieved
    bandwidth (input + output bytes / time) over copy bandwidth."""
    ex = model.executable
    secs, _ = ex.profile_in_call(feeds, repeat)
    total = sum(secs) or float("nan")
    by_class = {"memory": 0.0, "linear": 0.0, "opaque": 0.0}
    kernels = []
    for k, (info, s) in enumerate(zip(ex.infos, secs)):
        cls = kernel_class(info)
        by_class[cls] += s
        if cls == "memory":
            nbytes = kernel_bytes(ex, k)
            bw = nbytes / s if s > 0 else float("inf")
            frac = bw / copy_bw if copy_bw else None
            kernels.append(dict(k=k, ops=" ".join(info.ops)[:80], seconds=s, bytes=nbytes, gbs=bw / 1e9, frac=frac))
    priced = [info.seconds for info in ex.infos]
    out = dict(total_s=total, shares={c: t / total for c, t in by_class.items()}, n_memory=len(kernels),
               by_class_s=by_class, priced_s=sum(priced) if all(p is not None for p in priced) else None,
               priced_hot_s=getattr(model.report, "priced_hot_s", None),
               compile_e2e_s=(getattr(model.report, "end_to_end", None) or {}).get("plan"))
    if copy_bw and kernels:
        mem_t = sum(x["seconds"] for x in kernels) or float("nan")
        out["median_frac"] = statistics.median(x["frac"] for x in kernels)
        out["share_ge70"] = sum(x["seconds"] for x in kernels if x["frac"] >= 0.7) / mem_t
        worst = sorted(kernels, key=lambda x: x["seconds"] * max(0.0, 1 - x["frac"]), reverse=True)
        out["worst"] = worst[:3]
    return out


def copy_bandwidth(threads: int, mib: int = 256, repeats: int = 7) -> float:
    """Bytes/s of a large torch copy (read + write counted, as STREAM copy does)."""
    import torch

    torch.set_num_threads(threads)
    n = mib * (1 << 20) // 4
    src = torch.rand(n)
    dst = torch.empty_like(src)
    dst.copy_(src)
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        dst.copy_(src)
        samples.append(time.perf_counter() - t)
    return 2 * src.numel() * 4 / statistics.median(samples)


# ---------------------------------------------------------------------------------------------
# checks and the interleaved timer
# ---------------------------------------------------------------------------------------------
def rel_error(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    """max |got - ref| / max |ref| over all outputs (inf on a shape or count mismatch)."""
    if len(ref) != len(got):
        return float("inf")
    err = scale = 0.0
    for r, g in zip(ref, got):
        g = np.asarray(g)
        if r.size != g.size:
            return float("inf")
        r64, g64 = r.astype(np.float64).ravel(), g.astype(np.float64).ravel()
        d = np.abs(r64 - g64)
        d = np.where(np.isnan(r64) & np.isnan(g64), 0.0, d)
        err = max(err, float(np.nan_to_num(d, nan=np.inf).max(initial=0.0)))
        scale = max(scale, float(np.abs(np.nan_to_num(r64)).max(initial=0.0)))
    return err / max(scale, 1e-12)


LEAD_S = 0.1  # untimed calls before each sample (see interleaved)


def interleaved(runners: dict[str, Runner], repeats: int, min_sample_s: float, warmup_s: float,
                log: Callable[[str], None] = lambda s: None,
                errors: Optional[dict[str, str]] = None) -> dict[str, list[float]]:
    """Median-ready samples (seconds per call) for every runner, round-robin per repetition; the
    starting runner rotates so no runtime always follows the same one. Each sample is preceded
    by untimed calls for LEAD_S (at least one): thread pools that slept while another runtime ran
    wake up first, and the previous runtime's spinning threads stop stealing cores (onnxruntime's
    spin for ~90 ms after its last call: the call right after them ran 2x slower). A runner that
    raises is dropped and its error put in ``errors``."""
    errors = {} if errors is None else errors
    number = {}
    for name, r in runners.items():
        t0, runs = time.perf_counter(), 0
        try:
            while runs < 3 or (time.perf_counter() - t0 < warmup_s and runs < 1000):
                r.call()
                runs += 1
        except Exception as e:  # a runtime that breaks while timing is reported, not fatal
            errors[name] = f"{type(e).__name__}: {e}"[:160]
            continue
        per = (time.perf_counter() - t0) / runs
        number[name] = max(1, min(1000, math.ceil(min_sample_s / max(per, 1e-9))))
    order = list(number)
    samples: dict[str, list[float]] = {n: [] for n in order}
    for rep in range(repeats):
        start = rep % max(1, len(order))
        for name in order[start:] + order[:start]:
            if name in errors:
                continue
            fn, n = runners[name].call, number[name]
            try:
                lead = time.perf_counter()
                fn()
                while time.perf_counter() - lead < LEAD_S:
                    fn()
                t = time.perf_counter()
                for _ in range(n):
                    fn()
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {e}"[:160]
                continue
            samples[name].append((time.perf_counter() - t) / n)
        log(f"repetition {rep + 1}/{repeats}")
    return {n: s for n, s in samples.items() if n not in errors and s}


def machine_header(threads: int) -> str:
    """The machine, as ``kernorch doctor`` prints it (without its GEMM check): CPU, ISA, compiler,
    flags, threads and load, above every table a bench prints."""
    from kernorch.runtime.doctor import machine_lines

    return "\n".join(machine_lines(threads))


def machine_info(threads: int) -> dict:
    from kernorch.orchestrate.machine import cpu_model

    import onnxruntime
    import torch

    info = dict(cpu=cpu_model(), logical_cpus=os.cpu_count(), threads=threads, torch=torch.__version__,
                onnxruntime=onnxruntime.__version__)
    try:
        import openvino

        info["openvino"] = openvino.__version__
    except ImportError:
        info["openvino"] = None
    try:
        info["load_avg"] = os.getloadavg()
    except OSError:
        pass
    return info
