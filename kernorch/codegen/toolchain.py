"""The C toolchain: find the system compiler, compile a translation unit to a shared library
cached on disk by a hash of (source, compiler, flags), load it with ctypes.

Flags: ``-O3 -march=native -fopenmp -ffp-contract=off``, plus ``-fno-math-errno`` and
``-fno-trapping-math``. Neither changes a computed value: the first only stops libm calls from
setting errno (nothing reads it; it lets sqrt and friends vectorize), the second lets the
compiler evaluate both arms of a select (we never unmask FP traps). No ``-ffast-math``: it would
reassociate and drop NaN/inf semantics, and results must stay close to the interpreter.
``-ffp-contract=off`` keeps a*b+c from becoming an FMA, again for interpreter parity.
Where glibc's libmvec exists, loops calling exp/erf/tanh/... use its SIMD variants.

$KERNORCH_CFLAGS (``env.cflags``) come after those: a user may tune for another CPU or lower the ISA.

Cache: ``env.cache_dir`` ($KERNORCH_CACHE_DIR or ``~/.cache/kernorch/build``), keyed also by
the CPU (native code); compiler: ``env.cc`` ($CC), else cc, gcc. The kernels' common header (110 KB
of helpers, math.h, immintrin.h) is included through a header precompiled once per (header,
compiler, flags, CPU): gcc otherwise parses it for 0.5 s in every translation unit, a fifth of a
cold compile's C compiler time. A compiler that cannot precompile (or reads no .gch) parses it.
Kernels are found again one by one too (``compiled_kernels``): each compiled kernel's source is
indexed to the library that holds it, so a plan's kernels, timed as candidates in batches of 32,
are loaded from those batches' libraries instead of compiled again in a translation unit of their own.
The caller passes the Env its entry point read (kernorch/options.py); only a call without one reads
the environment itself.
Loaded libraries are cached per process (``_LOADED``): the dynamic loader is process-wide.
Kernels link libgomp.so.1; once torch is imported, the loader resolves that to torch's copy, so
generated kernels and torch ops share one OpenMP thread pool (no oversubscription between them).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from kernorch.errors import CompilerError
from kernorch.options import Env

FLAGS = ("-O3", "-march=native", "-fopenmp", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-std=gnu99", "-shared", "-fPIC", "-w")


@functools.lru_cache(maxsize=None)
def compiler(cc: str | None = None) -> str:
    """The compiler to run: ``cc`` (the environment's $CC) if installed, else cc, else gcc."""
    for cand in (cc, "cc", "gcc"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    raise CompilerError("no C compiler found: install gcc (or set CC) to build kernorch's CPU kernels")


@functools.lru_cache(maxsize=None)
def _compiler_id(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return cc


@functools.lru_cache(maxsize=None)
def _cpu_id() -> str:
    """-march=native code is only valid on the CPU it was built for; key the cache on it too (a
    cache directory may be shared between machines)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
        return hashlib.sha256("".join(lines).encode()).hexdigest()[:16]
    except OSError:
        import platform

        return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=None)
def _has_mvec() -> bool:
    return ctypes.util.find_library("mvec") is not None


def default_threads(env: Env | None = None) -> int:
    """Threads a kernel runs with unless told: $KERNORCH_NUM_THREADS, else the CPUs this process may use."""
    return (env or Env.read()).threads


def cache_dir(env: Env | None = None) -> Path:
    return (env or Env.read()).build_dir()


def flags(env: Env | None = None) -> list[str]:
    """The compiler's flags: kernorch's own, -DKN_MVEC where libmvec exists, then $KERNORCH_CFLAGS
    (``env.cflags``: the user's tuning or ISA, e.g. -mtune=znver4; later flags win)."""
    extra = ["-DKN_MVEC"] if _has_mvec() else []
    return [*FLAGS, *extra, *(env.cflags if env else ())]


def libs() -> list[str]:
    return (["-lmvec"] if _has_mvec() else []) + ["-lm"]


def compile_source(source: str, env: Env | None = None, header: str = "") -> Path:
    """Compile ``header`` then ``source`` as one translation unit to a shared library (or reuse
    the cached one); return its path. The header is read precompiled (``precompiled_header``)."""
    env = env or Env.read()
    cc = compiler(env.cc)
    out = env.build_dir() / f"kn_{_unit_digest(source, env, header)}.so"
    if out.exists():
        return out
    include = ["-I", str(precompiled_header(header, env))] if header else []
    with tempfile.TemporaryDirectory(dir=env.build_dir()) as tmp:
        src = Path(tmp) / "kernels.c"
        src.write_text(f'#include "{HEADER_NAME}"\n{source}' if header else source)
        lib = Path(tmp) / "kernels.so"
        proc = subprocess.run([cc, *flags(env), *include, str(src), "-o", str(lib), *libs()], capture_output=True,
                              text=True)
        if proc.returncode < 0:  # a signal, not the source: say so rather than blame the code
            raise CompilerError(f"{Path(cc).name} was killed by signal {-proc.returncode} while compiling "
                                "generated code (out of memory, or stopped by another process)")
        if proc.returncode != 0:
            raise CompilerError(f"{Path(cc).name} rejected generated code: {_first_error(proc.stderr)}")
        os.replace(lib, out)
    return out


def _unit_digest(source: str, env: Env, header: str) -> str:
    """What keys compiled code: the header, the source, the compiler, the CPU, the flags and libraries
    (a library's name in compile_source, one kernel's entry in remember_kernels' index)."""
    key = "\0".join([_text_digest(header), source, _compiler_id(compiler(env.cc)), _cpu_id(), *flags(env), *libs()])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=8)
def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def compiled_kernels(sources: dict[str, str], env: Env, header: str = "") -> dict[str, Path]:
    """The libraries already holding some of ``sources`` (function name -> its source, compiled
    by an earlier ``remember_kernels`` with the same header, compiler, flags and CPU), by name."""
    index = env.build_dir() / "kernels"
    found = {}
    for name, source in sources.items():
        try:
            lib = env.build_dir() / (index / _unit_digest(source, env, header)).read_text()
        except OSError:
            continue
        if lib.is_file():
            found[name] = lib
    return found


def remember_kernels(sources: dict[str, str], lib: Path, env: Env, header: str = "") -> None:
    """Index each of ``sources`` (compiled into ``lib``, a library of the build directory) for
    ``compiled_kernels``; an entry is written whole (renamed into place) or not at all."""
    index = env.build_dir() / "kernels"
    index.mkdir(exist_ok=True)
    for source in sources.values():
        entry = index / _unit_digest(source, env, header)
        tmp = entry.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(lib.name)
        os.replace(tmp, entry)


HEADER_NAME = "kn_header.h"


def precompiled_header(header: str, env: Env) -> Path:
    """The directory holding ``header`` as HEADER_NAME and, where the compiler can make one, its
    precompiled form beside it (gcc reads ``kn_header.h.gch`` in its place when the flags match,
    else the text). Built once per (header, compiler, flags, CPU), moved into place whole."""
    cc = compiler(env.cc)
    pch_flags = [f for f in flags(env) if f != "-shared"]
    key = "\0".join([header, _compiler_id(cc), _cpu_id(), *pch_flags])
    where = env.build_dir() / f"pch_{hashlib.sha256(key.encode()).hexdigest()[:32]}"
    if where.is_dir():
        return where
    tmp = Path(tempfile.mkdtemp(dir=env.build_dir()))
    (tmp / HEADER_NAME).write_text(header)
    # no precompiled copy (an old or foreign compiler): the text is parsed instead, as before
    subprocess.run([cc, *pch_flags, "-x", "c-header", str(tmp / HEADER_NAME), "-o", str(tmp / (HEADER_NAME + ".gch"))],
                   capture_output=True)
    try:
        os.rename(tmp, where)
    except OSError:  # another process put its copy there first
        shutil.rmtree(tmp, ignore_errors=True)
    return where


def _first_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln:
            return ln
    return lines[0] if lines else "unknown error"


_LOADED: dict[Path, ctypes.CDLL] = {}


def load(path: Path) -> ctypes.CDLL:
    lib = _LOADED.get(path)
    if lib is None:
        lib = _LOADED[path] = ctypes.CDLL(str(path))
    return lib


def function(lib: ctypes.CDLL, name: str):
    fn = getattr(lib, name)
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    fn.restype = None
    return fn
