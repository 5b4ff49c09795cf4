"""The Winograd F(6,3) transform matrices and the weight transform a Winograd kernel reads
(winograd.py): below both the kernel template and the runner that packs weights (packing.py),
so neither imports the other.
"""

from __future__ import annotations

import math

import numpy as np
import torch

TILE = 6  # outputs of one row per Winograd tile
POINTS = TILE + 2  # transform points (8)
TRANSFORM = "winograd63"  # the name of the weight transform in KernelSpec.packs


def _matrices() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(AT 6x8, G 8x3, BT 8x8) of F(6,3) on the points 0, 1, -1, 2, -2, 1/2, -1/2 and infinity:
    AT and G by Toom-Cook, BT solved so that ``AT @ ((G @ g) * (BT @ d))`` is the correlation."""
    pts = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)
    at, g = np.zeros((TILE, POINTS)), np.zeros((POINTS, 3))
    for j, a in enumerate(pts):
        at[:, j] = [a ** i for i in range(TILE)]
        g[j] = [a ** k / math.prod(a - b for b in pts if b != a) for k in range(3)]
    at[TILE - 1, POINTS - 1], g[POINTS - 1] = 1.0, (0.0, 0.0, 1.0)
    system = np.einsum("it,tk,jx->ikjtx", at, g, np.eye(POINTS)).reshape(TILE * 3 * POINTS, POINTS * POINTS)
    target = np.array([[[float(j == i + k) for j in range(POINTS)] for k in range(3)] for i in range(TILE)]).ravel()
    bt = np.linalg.lstsq(system, target, rcond=None)[0].reshape(POINTS, POINTS)
    assert np.abs(system @ bt.ravel() - target).max() < 1e-9
    return at, g, np.where(np.abs(bt) < 1e-12, 0.0, bt)


AT, G, BT = _matrices()


def transformed_weight(w: torch.Tensor, panel: int) -> torch.Tensor:
    """The weight (Cout, Cin, 3, 3) as U, (npanels, 8, 3 * Cin, panel): ``U[p, t, ky*Cin + c, n]
    = sum over j of G[t, j] * w[p*panel + n, c, ky, j]``, zeros past Cout."""
    co, ci = w.shape[0], w.shape[1]
    u = torch.einsum("tj,ocyj->tyco", torch.from_numpy(G), w.double()).float().reshape(POINTS, 3 * ci, co)
    npan = -(-co // panel)
    u = torch.nn.functional.pad(u, (0, npan * panel - co))
    return u.reshape(POINTS, 3 * ci, npan, panel).permute(2, 0, 1, 3).contiguous()
