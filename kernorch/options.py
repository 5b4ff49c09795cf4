"""Every setting of a compile in one frozen object, the environment read once.

``Options.from_env(**settings)`` is called at an entry point (``compile``, ``tune``, ``load``,
the CLI) and carried down: the target, the measurer, the code generators and the toolchain take
what they need from their caller and never read ``os.environ`` themselves, so a compile sees one
consistent configuration even if the environment changes while it runs. A bad value is a
one-line KernorchError naming the variable, raised before any work starts.

The environment (``Env``), each variable once:
  KERNORCH_CACHE_DIR        built kernels and generated Triton modules (~/.cache/kernorch/build)
  KERNORCH_DB               the tuning database (else $XDG_CACHE_HOME or ~/.cache, /kernorch/tuning.sqlite)
  KERNORCH_NUM_THREADS      threads per CPU kernel unless ``threads=`` (else the CPUs this process may use)
  KERNORCH_COMPILE_WORKERS  processes compiling Triton kernels for a GPU (0 or unset: one per core, at most 16)
  CC                        the C compiler (else cc, gcc)
  KERNORCH_CFLAGS           extra C compiler flags, after kernorch's own (e.g. -mtune=znver4 or
                            -march=x86-64-v3); part of the build cache key and the machine signature
  TRITON_INTERPRET          target "cuda" on CPU through Triton's interpreter (Triton reads it too)
  RAY_ADDRESS               the Ray cluster of ``cluster="ray"`` (else "auto")

Per compile: the measurer a Target opens for it holds the compile's caches (prices, verified
kernels, database look-ups: orchestrate/priced.py); per graph: codegen/feasible.py's facts, held
weakly by the graph. Process-wide by design (not per compile, documented where they live): loaded
shared libraries and the native driver (codegen/toolchain.py, runtime/native.py; the dynamic loader
is per process), imported Triton modules (codegen/triton_kernel.py; sys.modules is), the Triton
compile-worker pool (costly to start), the roofline constants of this machine and GPU (targets/;
measured once, they describe hardware), OpenVINO's Core (providers/ov.py) and memoised pure
functions (lru_cache on their arguments).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from kernorch.errors import KernorchError

if TYPE_CHECKING:
    from kernorch.orchestrate.knobs import Knobs
    from kernorch.targets.cuda_measure import CudaOptions

# Providers tried by default (orchestrate/measure.py): onnxruntime and OpenVINO for regions (and
# single kernels nothing on the own pool can run), PyTorch eager and its fused oneDNN variant for
# linear kernels. The channels-last and JIT variants rarely beat those and each costs a build and
# a timing per candidate; ask for them by name (``providers=``).
DEFAULT_PROVIDERS: tuple[str, ...] = ("ort", "openvino", "torch", "torch_onednn")
# Candidates the optimal strategy may enumerate (and so measure) per model under measured costs:
# about seven minutes of tuning on two cores (~15 candidates/s). Knobs.max_candidates explains it.
# 3000 left the convolution segments of MobileNetV3 / EfficientViT (4600-4700 sets) without their
# large kernels (depthwise + activation in channels-last): their plans ran 15-20% slower.
TUNING_BUDGET = 6000
# precision= : what the compiled model may compute in, and the providers that adds (besides DEFAULT_PROVIDERS)
PRECISIONS: dict[str, tuple[str, ...]] = {"f32": (), "bf16": ("openvino_bf16",), "int8": ()}
# tuning= : "learned" times the candidates the learned cost model says can win; "full" times all of them
TUNINGS = ("learned", "full")
_TRUE, _FALSE = ("1", "true", "yes", "on", "y"), ("0", "false", "no", "off", "n", "")


class OptionsError(KernorchError):
    """An environment variable or option with a value kernorch cannot use (names the culprit)."""


def _int(environ: Mapping[str, str], name: str, lowest: int) -> int | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = lowest - 1
    if value < lowest:
        raise OptionsError(f"{name}={raw!r} is not an integer >= {lowest}; unset it or fix the value")
    return value


def _flag(environ: Mapping[str, str], name: str) -> bool:
    raw = environ.get(name, "").strip().lower()
    if raw not in _TRUE + _FALSE:
        raise OptionsError(f"{name}={environ[name]!r} is not a switch; use 1 or 0")
    return raw in _TRUE


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Env:
    """What kernorch takes from the environment (module docstring), read once by ``read``."""

    cache_dir: Path
    db_path: Path
    threads: int
    compile_workers: int  # 0: one per core, at most 16
    cc: str | None
    cflags: tuple[str, ...]
    triton_interpret: bool
    ray_address: str

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Env:
        e = os.environ if environ is None else environ
        home = Path.home() / ".cache"
        db = e.get("KERNORCH_DB") or Path(e.get("XDG_CACHE_HOME") or home) / "kernorch" / "tuning.sqlite"
        return cls(cache_dir=Path(e.get("KERNORCH_CACHE_DIR") or home / "kernorch" / "build"), db_path=Path(db),
                   threads=_int(e, "KERNORCH_NUM_THREADS", 1) or _cpus(),
                   compile_workers=_int(e, "KERNORCH_COMPILE_WORKERS", 0) or 0,
                   cc=e.get("CC") or None, cflags=tuple(shlex.split(e.get("KERNORCH_CFLAGS", ""))),
                   triton_interpret=_flag(e, "TRITON_INTERPRET"),
                   ray_address=e.get("RAY_ADDRESS") or "auto")

    def build_dir(self) -> Path:
        """The kernel cache directory, created on first use."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        return self.cache_dir


@dataclass(frozen=True)
class CodegenOptions:
    """Every switch that changes the C code kernorch generates, with its default (each was a module
    global once, and an A/B switch of bench/switch_ab.py). ``tag`` puts a non-default choice into the
    code generator's version (codegen/version.py), which keys the tuning database, the kept plans
    and the build check of saved models: a price of one code is never served for another."""

    winograd: bool = True  # 3x3 convolutions with unit strides through Winograd F(6,3) (codegen/winograd.py)
    window_sums: bool = True  # small window sums (average pools) written out tap by tap (codegen/window.py)
    gemm_prefetch: bool = True  # a GEMM tile prefetches the packed weight's next panel (codegen/gemm.py)
    gemm_short_k: int = 32  # products of a packed weight at most this long along k split rows only
    gemm_rows_first_bytes: int = 256 << 10  # ... and those of a packed weight up to this size with many row blocks
    windows_in_place: bool = True  # a convolution's row blocks of windows inside the image are read in place
    depthwise_tiles: bool = True  # channels-last depthwise convolutions as register-blocked row tiles (depthwise.py)

    def changed(self) -> dict[str, Any]:
        """The fields that differ from their defaults."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}

    def tag(self) -> str:
        """'' for the defaults, else '+' and a hash of the changed fields (appended to the version)."""
        changed = self.changed()
        return "+" + hashlib.sha1(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:10] if changed else ""

    @classmethod
    def from_changed(cls, changed: Mapping[str, Any]) -> CodegenOptions:
        """The options ``changed()`` described (a saved model's record); unknown names are an error."""
        unknown = sorted(set(changed) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise OptionsError(f"unknown code generator option(s) {', '.join(unknown)}")
        return cls(**changed)


DEFAULT_CODEGEN = CodegenOptions()


@dataclass(frozen=True)
class Options:
    """The settings of one compile: ``compile()``'s keywords (docs/PYTHON_API.md; defaults
    equal), the orchestrator's Knobs, target "cuda"'s CudaOptions and the environment."""

    target: str = "cpu"
    strategy: str = "optimal"
    cost: str = "measured"
    db: Any = None  # a path or a TuningDB; None: env.db_path
    input_shapes: Mapping[str, Sequence[int]] | None = None
    rewrites: Sequence[str] | None = None  # None: rewrite.pipeline.DEFAULT_RULES
    threads: int | None = None  # None: env.threads (target "cpu")
    knobs: Knobs | None = None  # None: Knobs()
    progress: bool = True
    dynamo: bool | None = None  # None: the TorchScript exporter, the dynamo one where it fails
    cuda_options: CudaOptions | None = None
    providers: Sequence[str] | None = DEFAULT_PROVIDERS
    regions: bool = True
    tuning_budget: int | None = TUNING_BUDGET
    tuning: str = "full"  # "learned" | "full" (TUNINGS): which candidates a measured compile times
    require_quiet: bool = False
    cluster: Any = None
    strict: bool = False  # raise when a generated kernel failed (report.fallbacks) or no provider ran one
    precision: str = "f32"  # "bf16": linear kernels may compute in bfloat16 (PRECISIONS)
    accuracy_budget: float | None = None  # relative error a reduced-precision kernel may add (None: 1e-2)
    calibration: Any = None  # precision "int8": an iterable of input feeds to calibrate on (None: random)
    calibration_method: str = "minmax"  # "minmax" | "entropy" | "percentile" (frontend/quantize.py)
    codegen: CodegenOptions = DEFAULT_CODEGEN  # switches of the C code generator (target "cpu")
    dynamic: Mapping[str, Mapping[int, Sequence[int]]] | None = None  # batch dims and range (runtime/dynamic.py)
    profiles: Sequence[int] | None = None  # dynamic=: the batch sizes compiled (None: the ends, powers of 2 between)
    env: Env = field(default_factory=Env.read)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **settings: Any) -> Options:
        """``settings`` (compile()'s keywords) with the environment read now, once."""
        unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(cls)} - {"env"})
        if unknown:
            raise OptionsError(f"unknown option(s) {', '.join(unknown)}; see docs/PYTHON_API.md")
        return cls(**settings, env=Env.read(environ))

    def replace(self, **settings: Any) -> Options:
        """A copy with ``settings`` changed (the environment as read before)."""
        return dataclasses.replace(self, **settings)

    @property
    def cpu_threads(self) -> int:
        """Threads per CPU kernel: ``threads``, else $KERNORCH_NUM_THREADS, else the usable CPUs."""
        return self.threads or self.env.threads
