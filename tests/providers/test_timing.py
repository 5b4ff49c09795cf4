"""The timer discards samples during which the process waited for a CPU, and says so."""

import os
import time
import types

import pytest

from kernorch.providers import timing
from kernorch.providers.timing import LoadMeter, Measurement, MedianTimer, run_queue_wait_ns


def _fake_waits(disturbed_samples, stall_ns=10**9):
    """A run-queue clock of one thread that advances by ``stall_ns`` during the given (0-based)
    samples."""
    state = {"reads": 0, "ns": 0}

    def wait_ns():
        sample, after = divmod(state["reads"], 2)
        state["reads"] += 1
        if after and sample in disturbed_samples:
            state["ns"] += stall_ns
        return {"1": state["ns"]}

    return wait_ns


def _timer(disturbed, repeats=3):
    return MedianTimer(warmup=1, repeats=repeats, min_sample_s=0, min_warmup_s=0, wait_ns=_fake_waits(disturbed))


def test_disturbed_samples_are_discarded_and_replaced():
    calls = []
    m = _timer({0, 2})(lambda: calls.append(1))
    assert (m.samples, m.disturbed, m.settled) == (3, 2, True)
    assert len(calls) == 1 + 5  # warm-up, then 3 clean + 2 disturbed samples of one run each


def test_a_measurement_that_never_settles_is_flagged_and_priced_by_the_time_its_threads_ran(monkeypatch):
    clock = {"t": 0.0}  # a fake clock each run advances by 2 ms: no wall-clock bound in the test
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: clock["t"], sleep=time.sleep))

    def kernel():
        clock["t"] += 0.002

    m = MedianTimer(warmup=1, repeats=3, min_sample_s=0, min_warmup_s=0,
                    wait_ns=_fake_waits(set(range(100)), stall_ns=1_500_000))(kernel)
    assert not m.settled and m.samples == 0
    assert m.disturbed == timing.HOPELESS_TRIES * 3  # no clean sample at all: gives up early
    assert m.seconds == pytest.approx(0.0005)  # the 2 ms wall time less the 1.5 ms stall


def test_stall_is_the_most_delayed_thread():
    assert timing.stall_s({"1": 0, "2": 0}, {"1": 4_000_000, "2": 1_000_000, "3": 9}) == pytest.approx(0.004)
    assert timing.stall_s(None, {"1": 0}) is None


def test_a_late_clean_sample_keeps_the_tries_going():
    m = _timer(set(range(100)) - {5})(lambda: None)  # one clean sample, after 5 disturbed ones
    assert not m.settled and m.samples == 1
    assert m.disturbed == timing.TRIES_PER_SAMPLE * 3 - 1


def test_quiet_samples_are_all_kept():
    m = _timer(set())(lambda: None)
    assert (m.samples, m.disturbed, m.settled) == (3, 0, True)


def test_without_schedstat_every_sample_counts_as_clean():
    m = MedianTimer(warmup=0, repeats=2, min_sample_s=0, min_warmup_s=0, wait_ns=lambda: None)(lambda: None)
    assert m.settled and m.disturbed == 0


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc only")
def test_run_queue_wait_is_read_from_proc():
    a = run_queue_wait_ns()
    sum(range(200000))
    b = run_queue_wait_ns()
    assert a and all(isinstance(v, int) for v in a.values())
    assert timing.stall_s(a, b) >= 0


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux /proc only")
def test_load_meter_reports_other_processes_within_core_count():
    meter = LoadMeter(window_s=0.05)
    assert meter.read() is None  # no complete window yet
    import time

    time.sleep(0.06)
    load = meter.read()
    assert load is not None and 0.0 <= load <= meter.cores


def test_exact_measurement_is_settled():
    assert Measurement.exact(2e-3) == Measurement(2e-3, 2e-3, 0.0, 1, 0)
