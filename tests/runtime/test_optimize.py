"""kernorch.optimize: a drop-in nn.Module whose forward runs the compiled plan and returns what the
module returns (tensor, tuple, named tuple, dict), checked against the module's own output; and
output names taken from the module (not the exporter's '31')."""

import collections

import pytest
import torch

import kernorch
from kernorch.errors import InputError
from kernorch.frontend.torch_import import import_torch

P = collections.namedtuple("P", "scores probs")


class Heads(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.lin = torch.nn.Linear(8, 5)

    def forward(self, x, bias):
        s = self.lin(x) + bias
        p = torch.softmax(s, -1)
        if self.kind == "dict":
            return {"scores": s, "probs": p}
        if self.kind == "namedtuple":
            return P(s, p)
        if self.kind == "tuple":
            return s, p
        return p


@pytest.fixture(autouse=True)
def _db(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNORCH_DB", str(tmp_path / "tuning.sqlite"))


def test_optimize_a_cnn_matches_the_module():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    net.train()
    x = torch.randn(2, 3, 16, 16)
    fast = kernorch.optimize(net, (x,), cost="model", progress=False)
    assert isinstance(fast, torch.nn.Module) and net.training  # the user's flags are left alone
    net.eval()
    y = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        want = net(y)
    got = fast(y)
    assert isinstance(got, torch.Tensor) and got.shape == want.shape
    assert (got - want).abs().max() < 1e-4
    assert "kernels" in repr(fast) and fast.compiled.summary()


@pytest.mark.parametrize("kind", ["tensor", "tuple", "namedtuple", "dict"])
def test_optimize_returns_what_forward_returns(kind):
    torch.manual_seed(1)
    m = Heads(kind).eval()
    x, b = torch.randn(3, 8), torch.randn(5)
    fast = kernorch.optimize(m, (x, b), cost="model", progress=False)
    x2, b2 = torch.randn(3, 8), torch.randn(5)
    with torch.no_grad():
        want = m(x2, b2)
    got = fast(x2, bias=b2)
    assert type(got) is type(want)
    pairs = {"tensor": lambda o: [o], "dict": lambda o: list(o.values())}.get(kind, list)
    for g, w in zip(pairs(got), pairs(want)):
        assert (g - w).abs().max() < 1e-5
    if kind == "dict":
        assert list(got) == ["scores", "probs"]
    with pytest.raises(InputError, match="takes 2 input"):
        fast(x2, b2, b2)


@pytest.mark.parametrize("dynamo", [False, True])
def test_output_names_come_from_the_module(dynamo):
    x, b = torch.randn(3, 8), torch.randn(5)
    names = {}
    for kind in ("tensor", "tuple", "namedtuple", "dict"):
        g, _ = import_torch(Heads(kind), (x, b), dynamo=dynamo)
        names[kind] = [g.name(v) for v in g.outputs]
    assert names == {"tensor": ["output"], "tuple": ["output_0", "output_1"], "namedtuple": ["scores", "probs"],
                     "dict": ["scores", "probs"]}
