"""Roofline cost and its calibration."""

import math
import types

import pytest

from kernorch.orchestrate import cost as cost_module
from kernorch.orchestrate.candidate import multi_output, single_output
from kernorch.orchestrate.cost import RooflineCost, calibrate
from kernorch.orchestrate.dag import make_dag


def test_roofline_counts_external_reads_inputs_outputs_flops_and_launch():
    dag = make_dag(
        {0: (), 1: (0,), 2: (1,), 3: (1,)},
        nbytes={0: 100, 1: 200, 2: 300, 3: 400},
        input_bytes={1: 50, 2: 7},
        flops={1: 1000.0, 2: 2000.0},
    )
    roof = RooflineCost(bandwidth_bytes_per_s=100.0, peak_flops=1000.0, launch_overhead_s=0.5)
    cost = roof.bind(dag)
    # {1, 2}: reads 0 (100) + external 57, writes 1 (read by 3) and 2: 657 bytes, 3000 flops
    assert cost(multi_output(dag, {1, 2})) == pytest.approx(657 / 100 + 3 + 0.5)
    # single-output flavour writes only the sink 2
    assert cost(single_output(dag, {1, 2})) == pytest.approx(457 / 100 + 3 + 0.5)


def test_calibrate_measures_positive_constants():
    """The machine's figures themselves are printed, not bounded (a loaded machine would fail)."""
    roof = calibrate(copy_bytes=8 << 20, matmul_n=128, repeats=2)
    print(roof)
    assert 0 < roof.bandwidth_bytes_per_s < math.inf
    assert 0 < roof.peak_flops < math.inf
    assert 0 < roof.launch_overhead_s < math.inf


def test_calibrate_divides_work_by_the_fastest_repeat(monkeypatch):
    """A fake clock: every timed call lasts 3 ms, except one 1 ms repeat per measurement."""
    clock = {"t": 0.0, "reads": 0}

    def perf_counter():
        clock["reads"] += 1
        if clock["reads"] % 2 == 0:  # the end of a timed call
            clock["t"] += 1e-3 if clock["reads"] % 6 == 4 else 3e-3
        return clock["t"]

    monkeypatch.setattr(cost_module, "time", types.SimpleNamespace(perf_counter=perf_counter))
    roof = calibrate(copy_bytes=4096, matmul_n=8, repeats=3)
    assert roof.bandwidth_bytes_per_s == pytest.approx(2 * 4096 / 1e-3)
    assert roof.peak_flops == pytest.approx(2.0 * 8**3 / 1e-3)
    assert roof.launch_overhead_s == pytest.approx(1e-3)
