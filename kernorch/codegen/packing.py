"""Constant weights copied once into the order a generated kernel's loops read them.

A depthwise stencil reads its taps channels-last; a GEMM's tile reads a 32-column panel of B
row after row. Reading a weight in another order than it is stored costs a gather per element
(or a per-call repack) on every inference, while the weight never changes: so a kernel declares
the order it wants (``KernelSpec.packs``) and its runner makes that copy at the first call and
keeps it while the same tensor comes back (``CKernel.bound``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from kernorch.codegen import amx, vnni
from kernorch.codegen.winograd_transform import TRANSFORM, transformed_weight

# winograd_transform.transformed_weight: a 3x3 weight as Winograd F(6,3)'s U, in panels;
# amx.pairs: a bf16 weight's (K, N) matrix in panels of k pairs, as AMX tiles read B;
# vnni.quads: an int8-valued weight's (K, N) matrix as int8, in panels of k quads, as VPDPBUSD reads B
TRANSFORMS = (TRANSFORM, amx.TRANSFORM, vnni.TRANSFORM)


def packed_copy(t: torch.Tensor, shape: Sequence[int], perm: Sequence[int], panel: int,
                transform: str = "") -> torch.Tensor:
    """``t`` (of ``shape``) with its dims in ``perm`` order, contiguous; with ``panel`` > 0 that
    as a (K, N) matrix (N: the last dim, K: the others) in zero-padded panels of ``panel``
    columns, shape (npanels, K, panel): panel p holds columns p*panel .. p*panel + panel - 1.
    A ``transform`` (one of TRANSFORMS) replaces both."""
    if transform == TRANSFORM:
        return transformed_weight(t.reshape(tuple(shape)), panel)
    if transform and transform not in TRANSFORMS:
        raise ValueError(f"unknown weight transform {transform!r}")
    x = t.reshape(tuple(shape)).permute(tuple(perm))
    if transform:
        pack = amx.pairs if transform == amx.TRANSFORM else vnni.quads
        return pack(x.reshape(-1, x.shape[-1]), panel)
    if not panel:
        return x.contiguous()
    n = x.shape[-1] if x.dim() else 1
    k = math.prod(x.shape[:-1])
    npan = -(-n // panel)
    x = F.pad(x.reshape(k, n), (0, npan * panel - n))
    return x.reshape(k, npan, panel).permute(1, 0, 2).contiguous()
