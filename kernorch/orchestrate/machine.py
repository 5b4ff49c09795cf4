"""The machine kind a price was measured on: prices of one kind never stand in for another's.

The signature names the CPU model, its ISA level and core count and hashes the library versions
that build or run kernels (PyTorch, onnxruntime, OpenVINO, the C compiler), the CPU's full ISA
(codegen/isa.py: a VM's model name often hides it) and the user's extra compiler flags, so a database shared between
machines, merged from several (``kernorch db merge``) or filled by Ray workers keeps each kind's
prices apart, and upgrading a provider prices its kernels again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import re

from kernorch.codegen import isa, toolchain

VERSIONED = ("torch", "onnxruntime", "openvino")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "-"


@functools.lru_cache(maxsize=None)
def machine_signature(cc: str | None = None, cflags: tuple[str, ...] = ()) -> str:
    """``<cpu model>-<isa level>-<N>c-<hash of versions, ISA and flags>``, e.g.
    ``amd-epyc-avx512-2c-1a2b3c4d``; ``cc``, ``cflags``: the environment's $CC and
    $KERNORCH_CFLAGS (Env.cc, Env.cflags)."""
    try:
        cc = toolchain._compiler_id(toolchain.compiler(cc))
    except Exception:  # noqa: BLE001 - no compiler: the providers can still measure
        cc = "no-cc"
    cores = os.cpu_count() or 1  # the machine's, not this process's affinity (a pinned worker is the same kind)
    versions = ";".join([cc, *(f"{p}={_version(p)}" for p in VERSIONED), isa.host().describe(), *cflags])
    slug = re.sub(r"[^a-z0-9]+", "-", cpu_model().lower()).strip("-")[:32] or "cpu"
    return f"{slug}-{isa.host().level}-{cores}c-{hashlib.sha1(versions.encode()).hexdigest()[:8]}"


def target_name(target: str, threads: int, cc: str | None = None, cflags: tuple[str, ...] = ()) -> str:
    """The tuning database's target column: device, thread count and machine kind."""
    return f"{target}-t{threads}@{machine_signature(cc, cflags)}"
