"""``kernorch doctor``: what this machine is to kernorch, in the words a bug report needs — the CPU,
its ISA, the C compiler with the flags kernorch passes and what ``-march=native`` means to it, the
threads, the machine signature prices are keyed by, and how fast the generated GEMM runs next to
oneDNN here (targets/gemm_check.py). The bench prints the same header above its tables."""

from __future__ import annotations

import functools
import os
import subprocess

from kernorch.codegen import isa, toolchain
from kernorch.errors import CompilerError
from kernorch.options import Env
from kernorch.orchestrate.machine import cpu_model, machine_signature
from kernorch.targets import gemm_check

ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "amx_tile", "amx_bf16", "amx_int8", "avx_vnni")


@functools.lru_cache(maxsize=None)
def native_target(cc: str, extra: tuple[str, ...]) -> str:
    """What the compiler makes of ``-march=native`` (and the user's flags): its -march and -mtune."""
    try:
        out = subprocess.run([cc, "-march=native", *extra, "-Q", "--help=target"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("-march=", "-mtune="):
            found[parts[0].strip("-=")] = parts[1]
    return ", ".join(f"{k} {v}" for k, v in sorted(found.items())) or "unknown"


def machine_lines(threads: int, env: Env | None = None) -> list[str]:
    """The machine, one fact a line (no timing)."""
    env = env or Env.read()
    flags = isa.cpu_flags()
    try:
        cc = toolchain.compiler(env.cc)
        compiler = f"{toolchain._compiler_id(cc)}; -march=native here means {native_target(cc, env.cflags)}"
    except CompilerError as e:
        cc, compiler = None, str(e)
    try:
        load = "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "load average unknown"
    return [f"cpu       {cpu_model()}, {os.cpu_count()} logical CPUs, {threads} threads; {load}",
            f"isa       {isa.host().describe()} (flags: {' '.join(f for f in ISA_FLAGS if f in flags) or 'none'})",
            f"compiler  {compiler}",
            f"flags     {' '.join(toolchain.flags(env))}" + (f" (KERNORCH_CFLAGS: {' '.join(env.cflags)})"
                                                             if env.cflags else ""),
            f"bf16      {'yes' if isa.host().bf16 else 'no'}; int8 dot products {'yes' if isa.host().int8 else 'no'}",
            f"signature {machine_signature(env.cc, env.cflags)}"]


def report(threads: int, env: Env | None = None, refresh: bool = False) -> str:
    """``kernorch doctor``'s text: the machine, then the generated GEMM against oneDNN."""
    lines = machine_lines(threads, env)
    ratios = gemm_check.cached(threads, env, refresh=refresh)
    cells = ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
    lines.append(f"gemm      generated / oneDNN speed: {cells}; geomean {gemm_check.geomean(ratios.values()):.2f}x")
    note = gemm_check.behind_note(ratios)
    if note:
        lines.append(f"warning   {note}")
    return "\n".join(lines)
