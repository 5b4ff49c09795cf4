"""A view plan's steps (providers/views.py) as PyTorch calls: reshape, permute, expand, slice,
pad and upsample on a tensor (views where PyTorch has them), else a gather through the plan's
constant index table."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from kernorch.providers.view_steps import Step


def view_step(st: Step) -> Callable[[torch.Tensor], torch.Tensor]:
    if st.op == "reshape":
        return lambda t: t.reshape(st.shape)
    if st.op == "transpose":
        return lambda t: t.permute(st.perm)
    if st.op == "expand":
        return lambda t: t.expand(st.shape)
    if st.op == "upsample":
        def upsample(t):
            for d, f in enumerate(st.shape):
                t = t.repeat_interleave(f, dim=d) if f > 1 else t
            return t
        return upsample
    if st.op == "slice":
        def sl(t):
            for d, (s, a, c) in enumerate(zip(st.starts, st.steps, st.counts)):
                if a < 0:
                    t = t.flip(d)
                    s, a = int(t.shape[d]) - 1 - s, -a
                t = t.narrow(d, s, (c - 1) * a + 1)[(slice(None),) * d + (slice(None, None, a),)] if a > 1 \
                    else t.narrow(d, s, c)
            return t
        return sl
    if st.op == "pad":
        if st.mode == "constant":
            pads = []
            for b, e in zip(reversed(st.begins), reversed(st.ends)):
                pads += [b, e]
            return lambda t: F.pad(t, pads, value=st.value)
        return lambda t: index_pad(t, st)
    table = torch.from_numpy(st.table)
    mask = torch.from_numpy(st.mask) if st.mask is not None else None

    def gather(t):
        y = t.reshape(-1)[table]
        return y if mask is None else torch.where(mask, y, torch.tensor(st.value).to(t.dtype))
    return gather


def index_pad(t: torch.Tensor, st: Step) -> torch.Tensor:
    """Reflect / edge padding along any dims as one index_select per padded dim."""
    for d, (b, e) in enumerate(zip(st.begins, st.ends)):
        if not b and not e:
            continue
        n = int(t.shape[d])
        j = np.arange(-b, n + e)
        if st.mode == "edge":
            j = np.clip(j, 0, n - 1)
        else:
            j = np.abs(j)
            j = (n - 1) - np.abs((n - 1) - j)
        t = t.index_select(d, torch.from_numpy(j.astype(np.int64)))
    return t
