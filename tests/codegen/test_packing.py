"""Weights packed once (codegen/packing.py): the copy a kernel's loops read, against brute force."""

import numpy as np
import pytest
import torch

from kernorch.codegen.packing import packed_copy


@pytest.mark.parametrize("shape,perm,panel", [
    ((70, 45), (0, 1), 32),  # a matmul weight (K, N), N past one panel and not a multiple of it
    ((45, 70), (1, 0), 32),  # a transposed weight, stored (N, K)
    ((40, 24, 1, 1), (1, 2, 3, 0), 32),  # a 1x1 convolution's (Cout, Cin, 1, 1) read as (Cin, Cout)
    ((64, 5), (0, 1), 32),  # fewer columns than one panel
    ((8, 1, 3, 3), (2, 3, 1, 0), 0),  # a depthwise weight channels-last, no panels
])
def test_packed_copy_matches_brute_force(shape, perm, panel):
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = packed_copy(torch.from_numpy(w.reshape(-1)), shape, perm, panel).numpy()
    x = np.transpose(w, perm)
    if not panel:
        assert got.shape == x.shape and np.array_equal(got, x)
        return
    x = x.reshape(-1, x.shape[-1])
    k, n = x.shape
    npan = -(-n // panel)
    assert got.shape == (npan, k, panel)
    for p in range(npan):
        for kk in range(k):
            for j in range(panel):
                want = x[kk, p * panel + j] if p * panel + j < n else 0.0
                assert got[p, kk, j] == want
