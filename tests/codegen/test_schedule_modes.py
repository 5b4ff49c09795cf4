"""Scheduler modes: CPU threads vs a GPU grid (the Triton path). The grid mode is its own switch,
not a pretend thread count; on every fused kernel class it plans what a huge thread count planned
(the old stand-in), and it never narrows a group to fuse a stage into it."""

import pytest

import cg_util as cg
import test_fused as FUSED
from kernorch.codegen import window
from kernorch.codegen.facts import kernel_prims
from kernorch.codegen.schedule import Vars, make_schedule


def _plan(case, **mode):
    g, members, outputs = cg.one_kernel(case)
    sch = make_schedule(g, kernel_prims(g, members), outputs, Vars(), **mode)
    return sorted(sch.mat), [(members, P) for members, P in sch.groups], sch


def _windows(case) -> set[int]:
    g, members, _ = cg.one_kernel(case)
    prims = kernel_prims(g, members)
    producers = {p.output: p for p in prims}
    return {p.output for p in prims if window.is_window(g, p, producers)}


WINDOWED = [name for name, case in FUSED.CASES.items() if _windows(case)]


@pytest.mark.parametrize("name", [n for n in FUSED.CASES if n not in WINDOWED])
def test_grid_plans_like_an_unbounded_thread_count(name):
    assert _plan(FUSED.CASES[name], grid=True)[:2] == _plan(FUSED.CASES[name], threads=1 << 20)[:2]


@pytest.mark.parametrize("name", WINDOWED)
def test_only_cpu_loops_write_window_sums_out(name):
    """A small window sum (a pooling) is a reduce stage on the grid, and on CPU loops written out tap
    by tap where it is read (window.py): never a reduce stage there."""
    windows = _windows(FUSED.CASES[name])
    _, _, gpu = _plan(FUSED.CASES[name], grid=True)
    _, _, cpu = _plan(FUSED.CASES[name], threads=1 << 20)
    assert windows <= {st.value for st in gpu.stages if st.reduce}
    assert not windows & {st.value for st in cpu.stages if st.reduce}


@pytest.mark.parametrize("name", list(FUSED.CASES))
def test_grid_ignores_threads_and_keeps_groups_widest(name):
    mat, groups, sch = _plan(FUSED.CASES[name], grid=True)
    assert (mat, groups) == _plan(FUSED.CASES[name], threads=1, grid=True)[:2]
    for members, P in groups:  # the widest outer extent every stage of the group allows
        assert P == max(set.intersection(*(sch.stages[j].cands for j in members)) | {P})


def test_few_threads_fuse_what_the_grid_splits():
    """softmax over a middle axis: for two threads the stages share one group (a kept lane); a grid
    keeps the wider elementwise domain in a group of its own."""
    _, cpu, _ = _plan(FUSED.CASES["softmax_middle"], threads=2)
    _, gpu, _ = _plan(FUSED.CASES["softmax_middle"], grid=True)
    assert len(cpu) == 1 and len(gpu) > 1
