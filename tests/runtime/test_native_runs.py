"""Runs of generated C kernels execute in one native call, bit-identical to the Python loop."""

from pathlib import Path

import numpy as np
import pytest
import torch

import kernorch
from kernorch.runtime.native import NativeRun
from saved_net import net_and_input

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"


class Chain(torch.nn.Module):
    """Small elementwise and reduction steps whose intermediate (``h``) is also a graph output
    read by later kernels: the native run must allocate it before any kernel reads it."""

    def forward(self, x, y):
        h = torch.tanh(x) * 2.0 + y
        s = torch.softmax(h, dim=-1)
        return h, torch.relu(s - h.mean(dim=-1, keepdim=True)), (s * y).sum(dim=0)


def _both(model, *args):
    ex = model.executable
    ex.native = False
    loop = model(*args)
    ex.native = True
    native = model(*args)
    return loop, native


@pytest.mark.parametrize("strategy", ["unfused", "greedy", "optimal"])
def test_native_runs_match_the_python_loop_bit_for_bit(strategy, tmp_path):
    x = torch.randn(8, 33)
    y = torch.randn(8, 33)
    model = kernorch.compile(Chain(), (x, y), strategy=strategy, cost="model", providers=(), regions=False,
                             progress=False, db=tmp_path / "db.sqlite")
    runs = [s for s in model.executable._native_program() if isinstance(s, NativeRun)]
    assert runs and sum(r.n for r in runs) == sum(k.provider == "c" for k in model.kernels)
    loop, native = _both(model, x.numpy(), y.numpy())
    for a, b in zip(loop, native):
        assert np.array_equal(a, b)
    want = Chain()(x, y)
    for a, b in zip(native, want):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)


def test_native_runs_between_linear_kernels(tmp_path):
    net, x = net_and_input()  # a grouped 5x5 convolution only a library runs
    model = kernorch.compile(net, x, cost="model", providers=(), regions=False, progress=False,
                             db=tmp_path / "db.sqlite")
    steps = model.executable._native_program()
    assert any(isinstance(s, NativeRun) for s in steps) and any(not isinstance(s, NativeRun) for s in steps)
    x = x.numpy()
    loop, native = _both(model, x)
    assert np.array_equal(loop, native)
    again = model(x)  # a second call reuses the argument arrays with fresh output tensors
    assert np.array_equal(again, native) and again is not native


def test_saved_and_loaded_model_runs_natively(tmp_path):
    model = kernorch.compile(EXAMPLE, cost="model", providers=(), regions=False, progress=False,
                             db=tmp_path / "db.sqlite")
    model.save(tmp_path / "m")
    again = kernorch.load(tmp_path / "m")
    assert any(isinstance(s, NativeRun) for s in again.executable._native_program())
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    assert np.array_equal(again(x), model(x))


@pytest.fixture(scope="module")
def chain_model(tmp_path_factory):
    x, y = torch.randn(8, 33), torch.randn(8, 33)
    return kernorch.compile(Chain(), (x, y), strategy="greedy", cost="model", providers=(), regions=False,
                            progress=False, db=tmp_path_factory.mktemp("db") / "db.sqlite")


@pytest.mark.parametrize("native", [True, False])
def test_every_way_of_calling_gives_the_same_bits(chain_model, native):
    """NumPy, torch, mappings, non-contiguous and read-only arrays (the checked path) all agree with
    eager PyTorch and with each other bit for bit."""
    chain_model.executable.native = native
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal((8, 33)).astype(np.float32) for _ in range(2))
    want = [t.numpy() for t in Chain()(torch.from_numpy(x), torch.from_numpy(y))]
    ways = {
        "numpy": chain_model(x, y),
        "torch": [t.numpy() for t in chain_model(torch.from_numpy(x), torch.from_numpy(y))],
        "run": list(v.numpy() for v in chain_model.run({"x": x, "y": y}).values()),
        "strided": chain_model(np.asfortranarray(x), y),
        "strided torch": [t.numpy() for t in chain_model(torch.from_numpy(x).t().contiguous().t(),
                                                          torch.from_numpy(y))],
        "grad": [t.numpy() for t in chain_model(torch.from_numpy(x).requires_grad_(), torch.from_numpy(y))],
        "read-only": chain_model(np.frombuffer(x.tobytes(), np.float32).reshape(8, 33), y),
    }
    for name, got in ways.items():
        for a, b in zip(got, ways["numpy"]):
            assert np.array_equal(a, b), name
    for a, b in zip(ways["numpy"], want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    chain_model.executable.native = True


@pytest.mark.parametrize("native", [True, False])
def test_results_survive_later_calls(chain_model, native):
    """Every call returns fresh outputs: a later call never overwrites an earlier result."""
    chain_model.executable.native = native
    x, y = np.ones((8, 33), np.float32), np.full((8, 33), 2.0, np.float32)
    first = chain_model(x, y)
    kept = [a.copy() for a in first]
    second = chain_model(x * 3, y)
    third = chain_model(torch.from_numpy(x), torch.from_numpy(y))
    for a, b in zip(first, kept):
        assert np.array_equal(a, b)
    assert all(a is not b for a, b in zip(first, second))
    assert all(not np.shares_memory(a, b.numpy()) for a, b in zip(first, third))
    chain_model.executable.native = True


def test_wrong_inputs_are_named(chain_model):
    from kernorch.errors import InputError

    x = np.zeros((8, 33), np.float32)
    with pytest.raises(InputError, match="'y'.*shape"):
        chain_model(x, np.zeros((8, 32), np.float32))
    with pytest.raises(InputError, match="'x'.*dtype"):
        chain_model(x.astype(np.float64), x)
    with pytest.raises(InputError, match="expected 2 input"):
        chain_model(x)


def test_calls_from_threads_do_not_mix(chain_model):
    """Calls share the arena, so they take turns; each thread gets its own inputs' results."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(8)
    feeds = [tuple(rng.standard_normal((8, 33)).astype(np.float32) for _ in range(2)) for _ in range(16)]
    want = [chain_model(*f) for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda f: chain_model(*f), feeds * 4))
    for k, g in enumerate(got):
        for a, b in zip(g, want[k % 16]):
            assert np.array_equal(a, b)


class _LinearNet(torch.nn.Module):
    """oneDNN kernels (conv + hardswish, conv + residual + relu, matmul + bias + sigmoid) around
    generated C reductions, with an intermediate that is also a graph output. The first
    convolution is grouped with more taps than a C stencil takes (codegen/stencil.py, gemm.py take
    no groups), so it stays a library kernel."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(8, 72, 5, padding=2, groups=2)
        self.c2 = torch.nn.Conv2d(72, 72, 1)
        self.fc = torch.nn.Linear(72, 5)

    def forward(self, x):
        y = torch.nn.functional.hardswish(self.c1(x))
        y = torch.relu(self.c2(y) + y)
        return torch.sigmoid(self.fc(y.mean(dim=(2, 3)))), y.sum(dim=1)


def test_buffers_returned_by_linear_kernels_are_adopted_not_copied(tmp_path, monkeypatch):
    """oneDNN kernels' results become the values' buffers for the call (no arena slot, no copy):
    native and Python loop agree bit for bit, results match PyTorch, survive the next call, and
    each adopted buffer is released after its last reader. The build leaves every kernel holding
    a linear prim to torch_onednn (a cost-model plan may otherwise split the first convolution from
    its hardswish, and the code generator's own library call then takes it)."""
    from kernorch.ir.prims import Kind
    from kernorch.targets import cpu

    generate = cpu.codegen.can_generate
    monkeypatch.setattr(cpu.codegen, "can_generate", lambda g, members, outs: generate(g, members, outs) and not any(
        p.kind is Kind.LINEAR for p in g.prims if p.output in members))
    torch.manual_seed(0)
    net, x = _LinearNet().eval(), torch.randn(2, 8, 10, 10)
    model = kernorch.compile(net, (x,), cost="model", providers=("torch_onednn",), regions=False, progress=False,
                             db=tmp_path / "db.sqlite")
    ex = model.executable
    assert {i.provider for i in ex.infos} >= {"torch_onednn", "c"}
    written = {v for k in ex.kernels if k.provider == "torch_onednn" for v in k.outputs}
    assert ex.fresh == written - set(ex.sig.graph.inputs)
    assert not any(v in slots for slots in ex.memory.slot_of for v in ex.fresh)
    for args in [(x.numpy(),), (x,)]:
        loop, native = _both(model, *args)
        for a, b in zip(loop, native):
            assert np.array_equal(np.asarray(a), np.asarray(b))
        for a, b in zip(native, net(x)):
            np.testing.assert_allclose(np.asarray(a), b.detach().numpy(), rtol=1e-4, atol=1e-5)
        again = model(*args)
        for a, b in zip(again, native):
            assert np.array_equal(np.asarray(a), np.asarray(b)) and a is not b
    plan = ex._calls()
    adopted = {plan_index for plan_index in range(plan.size) if plan_index not in plan.answer
               and plan_index >= len(ex.sig.graph.inputs)}
    dropped = [i for d in plan.drops for i in d]
    assert sorted(dropped) == sorted(adopted) and adopted
