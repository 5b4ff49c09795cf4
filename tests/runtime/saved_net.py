"""The small network the saved-model tests compile: every kernel kind in a few prims."""

import torch

from kernorch.orchestrate import measure
from kernorch.orchestrate.measure import MeasuredCost


class Net(torch.nn.Module):
    """relu before a conv (a PyTorch-provider kernel: issue 14's load bug), elementwise work and a
    softmax (generated C), and a ScatterElements (no fission rule: a reference kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        # grouped, 100 taps per output: neither a C stencil nor a generated GEMM, so a library kernel
        self.c2 = torch.nn.Conv2d(8, 8, 5, padding=2, groups=2)
        self.register_buffer("idx", torch.tensor([3, 1, 0, 2]).expand(1, 8, 16, 4).contiguous())

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x)))
        y = torch.softmax(y * torch.sigmoid(y), dim=1)
        return y.scatter(3, self.idx, y[..., 4:8] * 2.0)


def net_and_input() -> tuple[Net, torch.Tensor]:
    torch.manual_seed(0)
    return Net().eval(), torch.randn(1, 3, 16, 16)


def favour(monkeypatch, name: str) -> None:
    """Every kernel ``name`` runs is priced nearly free (after running it once; no pool switch), so
    the plan uses that provider wherever it can, whatever this noisy machine's timings say."""
    monkeypatch.setattr(measure, "POOL_SWITCH_S", 0.0)
    real_init = MeasuredCost.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        timer = self.timer

        def favoured(fn, who):
            if who != name:
                return timer(fn, who)
            fn()
            return 1e-7

        self.timer = favoured

    monkeypatch.setattr(MeasuredCost, "__init__", init)
