"""Timing that notices when it was disturbed: a kernel's price is measured, never guessed from noise.

A sample is *disturbed* when the process's threads waited for a CPU while it ran (the kernel's
run-queue delay, read from ``/proc/self/task/*/schedstat`` on Linux): on a busy machine a 2-thread
OpenMP kernel stalls at its barrier while one thread is preempted, and its wall time becomes a
multiple of the scheduler tick instead of its cost. Disturbed samples are discarded and more are
taken, up to a bound; a measurement that never collects enough clean samples is *unsettled* and
the caller re-measures it later or stores it flagged. See Note [trusted timing] in docs/TUNING.md
"Tuning on a busy machine".
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

# A sample is discarded when one of its threads spent more than this fraction of its wall time
# waiting for a CPU: beyond it the sample is inflated by at least that much. Quiet samples
# measure 0-2% here (wakeup latency), preempted ones 5-90%.
DISTURBED_WAIT_FRACTION = 0.05
# Samples tried per clean sample wanted before the measurement is declared unsettled; after
# HOPELESS_TRIES per sample wanted without a single clean one, it is declared unsettled at once.
TRIES_PER_SAMPLE = 4
HOPELESS_TRIES = 2
_TASKS = "/proc/self/task"


def run_queue_wait_ns() -> dict[str, int] | None:
    """Per thread of this process, the nanoseconds it has spent runnable but not running; None
    where the kernel does not say (no /proc schedstat): then no sample can be judged."""
    waits = {}
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/schedstat", "rb") as f:
                waits[tid] = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that exited between listdir and open
    return waits


def stall_s(before: dict[str, int] | None, after: dict[str, int] | None) -> float | None:
    """How long the slowest thread waited for a CPU between two readings: a parallel kernel waits
    at its barrier for its most-delayed thread, so that is what the sample's wall time carries
    beyond the kernel's cost (the sum would count two threads sharing one core twice)."""
    if before is None or after is None:
        return None
    return max((after[t] - before[t] for t in after.keys() & before.keys()), default=0) * 1e-9


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class LoadMeter:
    """Cores kept busy by *other* processes: machine busy time (/proc/stat, 10 ms ticks) minus
    this process's CPU time, over windows of at least ``window_s`` (shorter ones are tick noise).
    ``read()`` returns the estimate of the last complete window, None before the first one or
    where /proc/stat is missing."""

    def __init__(self, window_s: float = 0.25) -> None:
        self.window_s = window_s
        self.cores = usable_cores()
        self.last: float | None = None
        self._mark = self._now()

    @staticmethod
    def _now() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat", "rb") as f:
                ticks = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        r = resource.getrusage(resource.RUSAGE_SELF)
        return time.perf_counter(), (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK"), r.ru_utime + r.ru_stime

    def read(self) -> float | None:
        now = self._now()
        if now is None or self._mark is None:
            self._mark = now
            return self.last
        dt = now[0] - self._mark[0]
        if dt >= self.window_s:
            others = (now[1] - self._mark[1] - (now[2] - self._mark[2])) / dt
            self.last = min(float(self.cores), max(0.0, others))
            self._mark = now
        return self.last


def free_cores(seconds: float = 0.3) -> tuple[float, int]:
    """(cores other processes keep busy, usable cores), sampled over ``seconds``."""
    meter = LoadMeter(window_s=seconds)
    time.sleep(seconds)
    return meter.read() or 0.0, meter.cores


@dataclass(frozen=True)
class Measurement:
    """The evidence behind one price. ``seconds`` is the median of the clean samples; when fewer
    than half the wanted ones were clean, the median over all samples of their wall time less
    the stall of their most-delayed thread (the time the kernel's threads really ran)."""

    seconds: float
    min_s: float
    spread: float  # (max - min) / median of the clean samples
    samples: int  # clean samples
    disturbed: int  # discarded samples
    load: float | None = None  # other processes' busy cores while timing
    settled: bool = True  # enough clean samples were collected

    @staticmethod
    def exact(seconds: float) -> Measurement:
        """A figure taken as given (a fake timer in tests, a cost model)."""
        return Measurement(seconds, seconds, 0.0, 1, 0)


def as_measurement(x: float | Measurement) -> Measurement:
    """Timers may return a bare number (test doubles); everything downstream wants evidence."""
    return x if isinstance(x, Measurement) else Measurement.exact(float(x))


class MedianTimer:
    """Warm up (at least ``warmup`` runs and ``min_warmup_s``: thread pools that slept while
    another provider ran must be awake), then collect ``repeats`` clean samples, discarding
    disturbed ones, with at most ``TRIES_PER_SAMPLE * repeats`` tries. Each sample loops enough
    runs to last ``min_sample_s`` so microsecond kernels are not timer noise."""

    def __init__(self, warmup: int = 3, repeats: int = 9, min_sample_s: float = 2e-4,
                 min_warmup_s: float = 0.01,
                 wait_ns: Callable[[], dict[str, int] | None] = run_queue_wait_ns) -> None:
        self.warmup, self.repeats, self.min_sample_s = warmup, repeats, min_sample_s
        self.min_warmup_s = min_warmup_s
        self.wait_ns = wait_ns
        self.load = LoadMeter()

    def __call__(self, fn: Callable[[], object], provider: str = "") -> Measurement:
        t0 = time.perf_counter()
        runs = 0
        while runs < self.warmup or (time.perf_counter() - t0 < self.min_warmup_s and runs < 1000):
            fn()
            runs += 1
        per = max((time.perf_counter() - t0) / max(runs, 1), 1e-9)
        number = max(1, min(1000, int(self.min_sample_s / per)))
        clean: list[float] = []
        every: list[float] = []  # every sample, less its stall (the time its threads ran)
        for _ in range(TRIES_PER_SAMPLE * self.repeats):
            w0 = self.wait_ns()
            t = time.perf_counter()
            for _ in range(number):
                fn()
            wall = time.perf_counter() - t
            stall = stall_s(w0, self.wait_ns())
            every.append(max(wall - (stall or 0.0), 0.0) / number)
            if stall is None or stall <= DISTURBED_WAIT_FRACTION * wall:
                clean.append(wall / number)
                if len(clean) >= self.repeats:
                    break
            elif not clean and len(every) >= HOPELESS_TRIES * self.repeats:
                break  # every sample disturbed so far: the load persists, stop paying for more
        return summarize(clean, every, self.repeats, self.load.read())


def summarize(clean: list[float], every: list[float], wanted: int, load: float | None) -> Measurement:
    """One measurement from its clean samples and all samples (see ``Measurement``)."""
    disturbed = len(every) - len(clean)
    settled = len(clean) >= wanted
    if 2 * len(clean) >= wanted:
        med = statistics.median(clean)
        return Measurement(med, min(clean), (max(clean) - min(clean)) / med if med > 0 else 0.0, len(clean),
                           disturbed, load, settled)
    ran = [t for t in every if t > 0] or every  # stall-corrected: what the threads really ran
    med = statistics.median(ran)
    return Measurement(med, min(ran), (max(ran) - min(ran)) / med if med > 0 else 0.0, len(clean), disturbed,
                       load, False)
