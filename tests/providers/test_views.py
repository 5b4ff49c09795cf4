"""View plans against the reference gather: random chains of layout constructors, composed the
way rewrites compose them, must be reproduced exactly by the recognized steps."""

import math

import numpy as np
from hypothesis import given, settings, strategies as st

from kernorch.ir import layout
from kernorch.providers.views import apply_numpy, plan_view


@st.composite
def chains(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    m = layout.identity(shape)
    for _ in range(draw(st.integers(1, 3))):
        cur = m.out_shape
        kind = draw(st.sampled_from(["reshape", "permute", "slice", "pad", "broadcast", "flip"]))
        if kind == "reshape":
            n = math.prod(cur)
            dims = [d for d in range(1, n + 1) if n % d == 0]
            a = draw(st.sampled_from(dims))
            nxt = layout.reshape(cur, (a, n // a) if draw(st.booleans()) else (n // a, 1, a))
        elif kind == "permute":
            nxt = layout.permute(cur, draw(st.permutations(range(len(cur)))))
        elif kind == "slice":
            starts, steps, counts = [], [], []
            for n in cur:
                step = draw(st.sampled_from([1, 2, -1]))
                start = draw(st.integers(0, n - 1))
                room = (n - start - 1) // step + 1 if step > 0 else start + 1
                starts.append(start), steps.append(step), counts.append(draw(st.integers(1, room)))
            nxt = layout.slice_(cur, starts, steps, counts)
        elif kind == "pad":
            mode = draw(st.sampled_from(["constant", "edge", "reflect"]))
            lo = [draw(st.integers(0, n - 1 if mode == "reflect" else 2)) for n in cur]
            hi = [draw(st.integers(0, n - 1 if mode == "reflect" else 2)) for n in cur]
            nxt = layout.pad(cur, lo, hi, mode, -2.0)
        elif kind == "broadcast":
            if 1 not in cur:
                continue
            nxt = layout.broadcast(cur, tuple(3 if n == 1 else n for n in cur))
        else:
            nxt = layout.flip(cur, [draw(st.integers(0, len(cur) - 1))])
        composed = nxt.compose(m)
        if composed is None:
            continue
        m = composed
    return m


@settings(max_examples=300, deadline=None)
@given(chains())
def test_plan_reproduces_the_map(m):
    x = np.arange(1, math.prod(m.in_shape) + 1, dtype=np.float32).reshape(m.in_shape)
    plan = plan_view(m)
    np.testing.assert_array_equal(apply_numpy(plan, x), m.gather(x))


def test_recognized_kinds_are_single_steps():
    assert plan_view(layout.permute((2, 3, 4), (2, 0, 1))).steps[0].op == "transpose"
    assert len(plan_view(layout.permute((2, 3, 4), (2, 0, 1))).steps) == 1
    assert plan_view(layout.identity((2, 3))).steps == ()
    assert [s.op for s in plan_view(layout.pad((4, 4), (1, 1), (1, 1), "reflect")).steps] == ["pad"]
    assert plan_view(layout.window((1, 6), (3,), (1,), (0,), (1,), (4,))).kind == "gather"


def _compose(shape, *makers):
    m = layout.identity(shape)
    for make in makers:
        m = make(m.out_shape).compose(m)
    return m


def test_slice_then_split_heads_is_a_box_not_a_gather():
    """GPT-2's key: the middle third of a fused qkv projection, split into heads, transposed."""
    m = _compose((1, 6, 24),
                 lambda s: layout.slice_(s, (0, 0, 8), (1, 1, 1), (1, 6, 8)),
                 lambda s: layout.reshape(s, (1, 6, 2, 4)),
                 lambda s: layout.permute(s, (0, 2, 3, 1)))
    plan = plan_view(m)
    assert plan.kind == "box" and all(st.op != "gather" for st in plan.steps)
    x = np.arange(144, dtype=np.float32).reshape(1, 6, 24)
    want = x[:, :, 8:16].reshape(1, 6, 2, 4).transpose(0, 2, 3, 1)
    assert np.array_equal(apply_numpy(plan, x), want)


def test_split_heads_then_slice_then_pad_is_a_padded_box():
    """EfficientViT's value: heads split from channels, one third sliced, padded with ones."""
    m = _compose((1, 12, 3, 3),
                 lambda s: layout.reshape(s, (1, 2, 6, 9)),
                 lambda s: layout.permute(s, (0, 1, 3, 2)),
                 lambda s: layout.slice_(s, (0, 0, 0, 4), (1, 1, 1, 1), (1, 2, 9, 2)),
                 lambda s: layout.pad(s, (0, 0, 0, 0), (0, 0, 0, 1), "constant", 1.0))
    plan = plan_view(m)
    assert plan.kind == "box-pad"
    x = np.arange(108, dtype=np.float32).reshape(1, 12, 3, 3)
    want = np.pad(x.reshape(1, 2, 6, 9).transpose(0, 1, 3, 2)[..., 4:6], [(0, 0)] * 3 + [(0, 1)], constant_values=1.0)
    assert np.array_equal(apply_numpy(plan, x), want)


def test_upsample_then_reflect_pad_is_expand_and_pad_not_a_gather():
    """candy's decoder: nearest resize x2, then a reflection pad of 1, composed into one view."""
    from kernorch.ir import index as ix

    shape = (1, 3, 4, 5)
    out = (1, 3, 8, 10)
    idx = (ix.var(0), ix.var(1), ix.floordiv(ix.var(2), 2, out), ix.floordiv(ix.var(3), 2, out))
    upsample = layout.IndexMap(out, shape, idx)
    m = layout.pad(out, (0, 0, 1, 1), (0, 0, 1, 1), "reflect", 0.0).compose(upsample)
    plan = plan_view(m)
    assert plan.kind == "upsample-pad-reflect" and all(st.op != "gather" for st in plan.steps)
    x = np.arange(60, dtype=np.float32).reshape(shape)
    want = np.pad(x.repeat(2, axis=2).repeat(2, axis=3), [(0, 0), (0, 0), (1, 1), (1, 1)], mode="reflect")
    assert np.array_equal(apply_numpy(plan, x), want)


def test_torch_steps_agree_with_numpy_on_upsample_and_box():
    import torch

    from kernorch.ir import index as ix
    from kernorch.providers.torch_views import view_step

    out = (1, 2, 6, 8)
    up = layout.IndexMap(out, (1, 2, 3, 4), (ix.var(0), ix.var(1), ix.floordiv(ix.var(2), 2, out),
                                              ix.floordiv(ix.var(3), 2, out)))
    maps = [layout.pad(out, (0, 0, 1, 1), (0, 0, 1, 1), "reflect").compose(up),
            _compose((1, 12, 3, 3), lambda s: layout.reshape(s, (1, 2, 6, 9)),
                     lambda s: layout.permute(s, (0, 1, 3, 2)),
                     lambda s: layout.slice_(s, (0, 0, 0, 4), (1, 1, 1, 1), (1, 2, 9, 2)))]
    for m in maps:
        plan = plan_view(m)
        x = np.random.default_rng(0).standard_normal(m.in_shape).astype(np.float32)
        t = torch.from_numpy(x)
        for st in plan.steps:
            t = view_step(st)(t)
        assert np.array_equal(t.numpy(), apply_numpy(plan, x)), plan.kind
