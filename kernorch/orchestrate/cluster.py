"""Measure candidate kernels on a Ray cluster: one worker per node, results stored by the driver.

The driver (``MeasuredCost.prefetch``) enumerates and dedups candidates and keeps the tuning
database (the only writer); ``RayTuning.measure`` ships batches of (key, candidate) to one
``TuningWorker`` actor per node, each holding all of its node's CPUs so no two timings overlap on
a node, pinned to a fixed thread count. A worker builds, verifies and times a batch with the same
code as a local compile (``MeasuredCost.measure_items``) and returns the records. Note [cluster
faults]: a worker that dies loses only its batch in flight; its candidates are retried one by one
(on any worker), and a candidate that kills a worker on its own ``CRASHES_TO_FAIL`` times is
recorded as failed ("crashed its worker"), never retried forever. Results are stored as they
arrive, so a driver restarted after the cluster went away resumes from the database.
"""

from __future__ import annotations

import collections
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from kernorch.errors import KernorchError
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions, Env
from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.machine import machine_signature
from kernorch.orchestrate.measure import MeasuredCost, external_providers
from kernorch.orchestrate.measure_stats import MeasureStats
from kernorch.orchestrate.tuning_db import Record, TuningDB
from kernorch.providers.timing import usable_cores

CRASHES_TO_FAIL = 2  # deaths of a worker while measuring one candidate alone
RESTART_WAIT_S = 60.0  # how long a dead worker may take to come back before its node counts as gone
RAY_EXTRA = "the Ray cluster needs the 'ray' extra: pip install 'kernorch[ray]'"


def import_ray():
    try:
        import ray
    except ImportError:
        raise KernorchError(RAY_EXTRA) from None
    return ray


class TuningWorker:
    """One per node: measures batches of one graph's candidates (wrapped by ``ray.remote``)."""

    def __init__(self, cores: Sequence[int] | None = None) -> None:
        if cores and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(cores))
        self.measurer = None

    def signature(self) -> tuple[str, int, str]:
        """(machine signature, process id, host name). A worker is an entry point of its own: it
        reads its process's environment (Env.read, kernorch/options.py), as its measurer does."""
        env = Env.read()
        return machine_signature(env.cc, env.cflags), os.getpid(), socket.gethostname()

    def load(self, g, threads: int, provider_names: Sequence[str], timer_factory: Callable | None,
             codegen_options: CodegenOptions = DEFAULT_CODEGEN) -> None:
        self.measurer = MeasuredCost(g, TuningDB(":memory:"), threads=threads,
                                     providers=external_providers(threads, provider_names),
                                     codegen_options=codegen_options)
        if timer_factory is not None:
            self.measurer.timer = timer_factory()

    def measure(self, batch: list[tuple[str, Candidate]]):
        """{key: {provider: Record}} for the batch, and this batch's measurement counts."""
        m = self.measurer
        m.stats = MeasureStats()
        return dict(m.measure_items(batch)), m.stats


@dataclass
class _Item:
    key: str
    cand: Candidate
    crashes: int = 0  # worker deaths while it was in flight
    alone: bool = False  # retried on its own after a death, to find the culprit


@dataclass
class RayTuning:
    """Connects to a Ray cluster (``address``: "auto", "ray://...", host:port, or None for the
    cluster this process already joined) and measures candidates there."""

    address: str | None = "auto"
    batch: int = 8
    timer_factory: Callable | None = None  # tests: a deterministic timer on every worker
    worker_cls: type = TuningWorker
    # Pin worker k to core k (mod the cores here): several nodes on one machine (a local demo)
    # then never share a core. Leave off on a real cluster: a worker holds its whole node.
    pin_cores: bool = False
    workers: list = field(default_factory=list, init=False)
    rejected: list[str] = field(default_factory=list, init=False)
    pids: list[int] = field(default_factory=list, init=False)  # the workers' first processes
    measured_by: collections.Counter = field(default_factory=collections.Counter, init=False)  # per worker

    def connect(self) -> RayTuning:
        ray = import_ray()
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, log_to_driver=False, configure_logging=False)
            except Exception as e:  # noqa: BLE001 - Ray's connection errors vary by version
                raise KernorchError(f"cannot join the Ray cluster at {self.address!r}: {_one_line(e)}") from None
        return self

    def start(self, target_signature: str) -> None:
        """One worker per alive node, holding all its CPUs; workers on another kind of machine
        than ``target_signature`` are stopped and listed in ``rejected`` (their prices would not
        be this target's)."""
        ray = import_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(self.worker_cls)
        started = []
        cores = usable_cores()
        for node in ray.nodes():
            cpus = int(node.get("Resources", {}).get("CPU", 0))
            if not node.get("Alive") or cpus < 1:
                continue
            actor = remote.options(num_cpus=cpus, max_restarts=-1, max_task_retries=0,
                                   scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                                   ).remote([len(started) % cores] if self.pin_cores else None)
            started.append(actor)
        sigs = ray.get([a.signature.remote() for a in started])
        for actor, (sig, pid, host) in zip(started, sigs):
            if sig == target_signature:
                self.workers.append(actor)
                self.pids.append(pid)
            else:
                self.rejected.append(f"{host} ({sig})")
                ray.kill(actor)
        if not self.workers:
            raise KernorchError(f"no Ray worker of this machine kind ({target_signature}); nodes of other kinds: "
                                f"{', '.join(self.rejected) or 'none'}")

    def stop(self) -> None:
        ray = import_ray()
        for a in self.workers:
            ray.kill(a)
        self.workers.clear()

    def measure(self, measured, items: list[tuple[str, Candidate]]) -> Iterator[tuple[str, dict[str, Record]]]:
        """Yield (key, records) as workers finish; the caller (the driver's ``MeasuredCost``)
        stores them. Worker deaths are handled as Note [cluster faults] says."""
        ray = import_ray()
        from ray.exceptions import RayActorError, RayTaskError

        g_ref = ray.put(measured.g)
        names = [p.name for p in measured.providers]
        ray.get([w.load.remote(g_ref, measured.threads, names, self.timer_factory, measured.codegen_options)
                 for w in self.workers])
        pending = collections.deque(_Item(k, c) for k, c in items)
        idle = list(self.workers)
        flight: dict = {}
        total, done = len(items), 0
        while pending or flight:
            while idle and pending:
                worker = idle.pop()
                batch = [pending.popleft()]
                while not batch[0].alone and pending and len(batch) < self.batch and not pending[0].alone:
                    batch.append(pending.popleft())
                ref = worker.measure.remote([(it.key, it.cand) for it in batch])
                flight[ref] = (worker, batch)
            (ref,), _ = ray.wait(list(flight), num_returns=1)
            worker, batch = flight.pop(ref)
            try:
                results, stats = ray.get(ref)
            except RayTaskError as e:  # Python error inside measure (e.g. require_quiet refused)
                cause = e.as_instanceof_cause()
                raise cause if isinstance(cause, KernorchError) else KernorchError(
                    f"a Ray worker failed measuring: {_one_line(e)}") from None
            except RayActorError:
                if self._reload(worker, g_ref, measured, names):
                    idle.append(worker)
                else:  # not back within RESTART_WAIT_S: its node is gone
                    self.workers.remove(worker)
                    if not self.workers and not flight:
                        raise KernorchError(f"the Ray cluster lost all workers; {done} of {total} kernels were "
                                            f"measured and stored: run again to resume") from None
                for it in batch:
                    it.crashes += 1 if (it.alone or len(batch) == 1) else 0
                    if it.crashes >= CRASHES_TO_FAIL:
                        done += 1
                        yield it.key, {"codegen": Record("codegen", None, "run_failed",
                                                         f"crashed its worker {it.crashes} times (process died "
                                                         f"while measuring it alone)")}
                    else:
                        it.alone = True
                        pending.appendleft(it)
                continue
            idle.append(worker)
            measured.stats.add(stats)
            self.measured_by[self.workers.index(worker)] += len(results)
            for key, recs in results.items():
                done += 1
                if measured.progress:
                    measured.progress(done, total)
                yield key, recs


    def _reload(self, worker, g_ref, measured, names: list[str]) -> bool:
        """Load the graph into a worker Ray is restarting (max_restarts=-1): calls fail while it
        is unavailable, so retry until RESTART_WAIT_S; False if it never comes back."""
        ray = import_ray()
        from ray.exceptions import RayActorError

        deadline = time.monotonic() + RESTART_WAIT_S
        while True:
            try:
                ray.get(worker.load.remote(g_ref, measured.threads, names, self.timer_factory, measured.codegen_options))
                return True
            except RayActorError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.5)


def _one_line(e: BaseException) -> str:
    lines = [line for line in str(e).splitlines() if line.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]


@contextmanager
def cluster_from(spec, env: Env | None = None) -> Iterator[RayTuning | None]:
    """None (measure here), "ray" (the cluster at ``env.ray_address``: $RAY_ADDRESS, else "auto"),
    "ray:ADDRESS", or a RayTuning: workers started for the compile and stopped after it."""
    env = env or Env.read()
    if spec is None:
        yield None
        return
    if isinstance(spec, RayTuning) and spec.workers:  # already started by the caller, who stops it
        yield spec
        return
    if isinstance(spec, RayTuning):
        tuning = spec
    elif spec == "ray":
        tuning = RayTuning(env.ray_address)
    elif isinstance(spec, str) and spec.startswith("ray:"):
        tuning = RayTuning(spec[4:])
    else:
        raise KernorchError(f"unknown cluster {spec!r}; use 'ray' or 'ray:ADDRESS'")
    tuning.connect().start(machine_signature(env.cc, env.cflags))
    try:
        yield tuning
    finally:
        tuning.stop()
