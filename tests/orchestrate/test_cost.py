"""Roofline cost and its calibration."""

import pytest

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
    roof = calibrate(copy_bytes=8 << 20, matmul_n=128, repeats=2)
    assert roof.bandwidth_bytes_per_s > 1e8
    assert roof.peak_flops > 1e8
    assert 0 < roof.launch_overhead_s < 1e-3
