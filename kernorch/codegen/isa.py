"""What the CPU can execute: the vector ISA level the generated C targets and the matrix units that
reduced precision uses. Read once from /proc/cpuinfo's flags (x86); machines without that file
report the portable level. The level names the generated code's shape (vector width, registers),
the extras name what a bf16 / int8 plan may use; both go into the machine signature, because a CPU
model name ("Intel(R) Xeon(R) Processor" in many VMs) does not say which ISA a machine has.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

# Levels, widest first: the flags each needs (Linux /proc/cpuinfo spelling).
LEVELS = (
    ("avx512", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})),
    ("avx2", frozenset({"avx2", "fma"})),
    ("sse4", frozenset({"sse4_2"})),
)
# Extras that reduced precision can use: name -> any of these flags.
EXTRAS = (
    ("amx_bf16", ("amx_bf16",)),
    ("amx_int8", ("amx_int8",)),
    ("avx512_bf16", ("avx512_bf16",)),
    ("vnni", ("avx512_vnni", "avx_vnni")),
    ("avx512_fp16", ("avx512_fp16",)),
)


@dataclass(frozen=True)
class Isa:
    """The vector level (``avx512``, ``avx2``, ``sse4`` or ``portable``) and the extras present."""

    level: str
    extras: frozenset[str]

    @property
    def bf16(self) -> bool:
        """Native bf16 products (AMX or AVX512-BF16)."""
        return bool({"amx_bf16", "avx512_bf16"} & self.extras)

    @property
    def int8(self) -> bool:
        """Native int8 dot products (AMX or VNNI)."""
        return bool({"amx_int8", "vnni"} & self.extras)

    def describe(self) -> str:
        return "+".join([self.level, *sorted(self.extras)])


def from_flags(flags: set[str] | frozenset[str]) -> Isa:
    level = next((name for name, need in LEVELS if need <= flags), "portable")
    extras = frozenset(name for name, any_of in EXTRAS if any(f in flags for f in any_of))
    return Isa(level, extras)


def cpu_flags() -> frozenset[str]:
    """The first CPU's flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@functools.lru_cache(maxsize=None)
def host() -> Isa:
    """This machine's ISA."""
    return from_flags(cpu_flags())
