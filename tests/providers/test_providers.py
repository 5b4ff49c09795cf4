"""Every available provider builds the shared candidates and matches the interpreter; selection
records failures with reasons and keeps the cheapest correct provider."""

import math

import numpy as np
import pytest
import torch

from kernorch.ir.graph import Builder
from kernorch.ir.prims import CastAttrs, Op
from kernorch.providers import (BuiltKernel, OpenVinoProvider, OrtProvider, Provider, TorchProvider, best_provider,
                                verify)
from kernorch.providers.timing import MedianTimer

import provider_candidates as C
from test_to_onnx import VIEWS

PROVIDERS = {"ort": lambda: OrtProvider(threads=1), "openvino": lambda: OpenVinoProvider(threads=1),
             "torch": lambda: TorchProvider("eager", threads=1),
             "torch_cl": lambda: TorchProvider("channels_last", threads=1),
             "torch_jit": lambda: TorchProvider("jit", threads=1)}
CONV_ONLY = {"torch_cl", "torch_jit"}


def _provider(name):
    p = PROVIDERS[name]()
    if not p.available():
        pytest.skip(f"{name} is not installed (pip install kernorch[openvino]); its tests are skipped")
    return p


@pytest.mark.parametrize("cand", sorted(C.ALL))
@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_candidate_matches_interpreter(cand, name):
    p = _provider(name)
    g, members, outputs = C.ALL[cand]()
    reason = p.can_run(g, members, outputs)
    runs_all = name in ("ort", "openvino")
    expect = runs_all or (cand in C.LINEAR and not (name in CONV_ONLY and "matmul" in cand))
    if not expect:
        assert isinstance(reason, str) and reason, "a refusal must say why"
        return
    assert reason is True, reason
    built = p.build(g, members, outputs)
    ok, err, detail = verify(built, g, members, outputs, seed=3)
    assert ok, f"{name} on {cand}: {detail}"
    x = [torch.from_numpy(np.asarray(g.constants[v])) if v in g.constants else torch.randn(g.types[v].shape)
         for v in built.inputs]
    for out, v in zip(built.run(x), built.outputs):
        assert out.is_contiguous() and tuple(out.shape) == g.types[v].shape


@pytest.mark.parametrize("cand,note", [("pad_conv", "pad folded into conv"), ("matmul_add", "matmul + bias as addmm"),
                                       ("conv_then_bias_add", "bias add folded into conv"),
                                       ("pointwise_conv_clamp", "1x1 convolution as a GEMM")])
def test_torch_fusions_are_taken(cand, note):
    g, members, outputs = C.ALL[cand]()
    built = TorchProvider("eager", threads=1).build(g, members, outputs)
    assert note in built.detail
    assert verify(built, g, members, outputs)[0]


def test_unbaked_constants_are_read_from_the_inputs():
    g, members, outputs = C.matmul_add()
    for p in (OrtProvider(threads=1, bake_constants=False), TorchProvider("eager", threads=1, bake_constants=False)):
        built = p.build(g, members, outputs)
        assert not built.baked
        x = [torch.from_numpy(np.asarray(g.constants[v])) if v in g.constants else torch.randn(g.types[v].shape)
             for v in built.inputs]
        before = built.run(x)[0]
        x = [t * 2 if v in g.constants else t for t, v in zip(x, built.inputs)]
        assert not torch.allclose(built.run(x)[0], before)


def test_outputs_never_share_memory():
    b = Builder()
    x = b.input((2, 3))
    y = b.matmul(x, b.input((3, 3)))
    r = b.reshape(y, (3, 2))
    k = b.reshape(x, (6,))
    b.g.outputs = [y, r, k]
    built = TorchProvider("eager", threads=1).build(b.g, [y, r, k], [y, r, k])
    ins = [torch.randn(2, 3), torch.randn(3, 3)]
    outs = built.run(ins)
    ptrs = [t.untyped_storage().data_ptr() for t in ins + outs]
    assert len(set(ptrs)) == len(ptrs)


def test_outputs_known_fresh_skip_the_aliasing_check():
    """A kernel whose every output is computed by it (or a view of a value it computed that no
    other output views) returns its results without checking storage per call; views of inputs,
    two views of one value and casts (``to`` may return its input) are checked."""
    from kernorch.providers.torch_exec import build_program

    b = Builder()
    x = b.input((2, 3))
    y = b.matmul(x, b.input((3, 3)))
    r = b.reshape(y, (3, 2))
    c = b.prim(Op.CAST, [x], CastAttrs("float32"))  # the builder's cast() would drop a no-op cast
    k = b.reshape(x, (6,))
    t = b.permute(y, (1, 0))  # a second output viewing y's storage in another order
    for members, outs, fresh in [({y}, [y], [True]), ({y, r}, [r], [True]), ({y, r}, [y, r], [False, False]),
                                 ({k}, [k], [False]), ({c}, [c], [False]), ({y, t}, [y, t], [False, False])]:
        prog = build_program(b.g, members, outs)
        assert prog.fresh_outputs == fresh, outs
        ins = [torch.randn(b.g.types[v].shape) for v in prog.inputs]
        got = prog.run(ins)
        ptrs = [t.untyped_storage().data_ptr() for t in ins + got]
        assert len(set(ptrs)) == len(ptrs)
        assert all(o.is_contiguous() for o in got)  # the runtime adopts them as planned buffers


# ---------------------------------------------------------------------------------------------
# Selection
# ---------------------------------------------------------------------------------------------

class _Broken(Provider):
    name = "broken"

    def can_run(self, g, members, outputs):
        return True

    def build(self, g, members, outputs):
        raise RuntimeError("compiler exploded\nwith a long trace")


class _Wrong(Provider):
    """Fast and wrong: returns zeros."""

    name = "wrong"

    def can_run(self, g, members, outputs):
        return True

    def build(self, g, members, outputs):
        sub = g.subgraph(members, outputs)
        return BuiltKernel(self.name, list(sub.inputs), list(sub.outputs),
                           lambda xs: [torch.zeros(sub.types[v].shape) for v in sub.outputs])


class _Missing(Provider):
    name = "missing"

    def available(self):
        return False


class _Refuses(Provider):
    name = "refuses"

    def can_run(self, g, members, outputs):
        raise ValueError("cannot even look")


def _fake_timer(seconds):
    def timer(fn, provider):
        fn()
        return seconds[provider]
    return timer


def test_cheapest_correct_provider_wins_and_failures_have_reasons():
    g, members, outputs = C.conv_bias_relu()
    provs = [_Broken(), _Wrong(), _Missing(), _Refuses(), OrtProvider(threads=1), TorchProvider("eager", threads=1),
             TorchProvider("jit", threads=1)]
    times = {"wrong": 1e-9, "ort": 3e-3, "torch": 1e-3, "torch_jit": 2e-3}
    name, seconds, records = best_provider(g, members, outputs, provs, timer=_fake_timer(times))
    assert (name, seconds) == ("torch", 1e-3)
    by = {r.provider: r for r in records}
    assert by["broken"].status == "build_failed" and "compiler exploded" in by["broken"].reason
    assert "\n" not in by["broken"].reason
    assert by["wrong"].status == "wrong" and by["wrong"].max_err > 0
    assert by["missing"].status == "unavailable"
    assert by["refuses"].status == "unsupported" and "cannot even look" in by["refuses"].reason
    assert by["ort"].status == by["torch"].status == "ok" and by["torch"].built is not None


def test_no_provider_can_run_it():
    g, members, outputs = C.softmax()
    name, seconds, records = best_provider(g, members, outputs, [TorchProvider("eager", threads=1), _Broken()],
                                           timer=_fake_timer({}))
    assert name is None and seconds == math.inf
    assert [r.status for r in records] == ["unsupported", "build_failed"]


def test_median_timer_counts_runs():
    calls = []
    t = MedianTimer(warmup=2, repeats=3, min_sample_s=0, min_warmup_s=0)
    assert t(lambda: calls.append(1), "x").seconds >= 0
    assert len(calls) == 2 + 3


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_openvino_runs_every_view_plan(view):
    p = _provider("openvino")
    m, kind = VIEWS[view]
    b = Builder()
    v = b.view(b.input(m.in_shape), m)
    y = b.unary(Op.NEG, v)
    b.g.outputs = [y]
    built = p.build(b.g, [v, y], [y])
    ok, err, detail = verify(built, b.g, [v, y], [y])
    assert ok, detail
    assert f"{kind} view" in built.detail


@pytest.mark.parametrize("cand", sorted(C.ALL))
@pytest.mark.parametrize("name", ["ort", "openvino"])
def test_run_into_preallocated_outputs_equals_run(cand, name):
    """The runtime writes provider results straight into its planned buffers (``run_into``)."""
    p = _provider(name)
    g, members, outputs = C.ALL[cand]()
    built = p.build(g, members, outputs)
    if built.run_into is None:
        pytest.skip("this kernel has no run_into (output dtype differs from the provider's)")
    torch.manual_seed(0)
    x = [torch.from_numpy(np.array(g.constants[v])) if v in g.constants else torch.randn(g.types[v].shape)
         for v in built.inputs]
    want = built.run(x)
    got = [torch.full(g.types[v].shape, float("nan")) for v in built.outputs]
    built.run_into(x, got)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
