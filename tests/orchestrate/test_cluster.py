"""Tuning on a local Ray cluster (two nodes of one CPU each, on loopback): the plan equals local
tuning's under one deterministic timer; a worker killed mid-run loses nothing stored; a candidate
that crashes its worker is recorded as failed. See Note [cluster faults] in orchestrate/cluster.py."""

import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

# Keep every Ray process on loopback (Ray picks the machine's outward address otherwise); read at import.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray")

import kernorch  # noqa: E402
from kernorch.errors import KernorchError  # noqa: E402
from kernorch.orchestrate import cluster as cluster_mod  # noqa: E402
from kernorch.orchestrate.cluster import RayTuning, TuningWorker  # noqa: E402
from kernorch.providers.timing import Measurement  # noqa: E402
from kernorch.orchestrate.knobs import Knobs  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"
# The plan solved on the measured prices, not refined in context: the in-context rounds race plans
# end to end, and a race is not reproducible, so two compiles could keep different plans.
OPTIONS = dict(threads=1, providers=(), regions=False, progress=False, knobs=Knobs(context_rounds=0))

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import test modules


class FakeTimer:
    """A deterministic price: 1 us + 1 ns per element the kernel reads and writes (+ a pause so
    a run lasts long enough to be interrupted)."""

    pause_s = 0.0

    def __init__(self, **_):
        pass

    def __call__(self, fn, provider=""):
        fn()
        time.sleep(self.pause_s)
        elements = 0
        for cell in fn.__closure__ or ():
            value = cell.cell_contents
            if isinstance(value, (list, tuple)):
                elements += sum(int(t.numel()) for t in value if hasattr(t, "numel"))
        return Measurement.exact(1e-6 + 1e-9 * elements)


class SlowTimer(FakeTimer):
    pause_s = 0.02


class CrashingWorker(TuningWorker):
    crash_key = ""

    def measure(self, batch):
        if any(k == self.crash_key for k, _ in batch):
            os.kill(os.getpid(), signal.SIGSEGV)
        return super().measure(batch)


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    ray.init(address=c.address, log_to_driver=False, configure_logging=False)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def local_plan(tmp_path_factory):
    import kernorch.orchestrate.measure as measure

    db = tmp_path_factory.mktemp("local") / "local.sqlite"
    real = measure.MedianTimer
    measure.MedianTimer = FakeTimer
    try:
        m = kernorch.compile(EXAMPLE, db=db, **OPTIONS)
    finally:
        measure.MedianTimer = real
    fused = [key for key, info in zip(_plan(m), m.executable.infos) if info.provider == "c" and len(info.ops) > 1]
    return _plan(m), db, fused


def _plan(m):
    g, ex = m.graph, m.executable
    return [g.kernel_key(info.members, list(k.outputs)) for k, info in zip(ex.kernels, ex.infos)]


def _rows(db):
    """The measured records (not the compile's kept plan, runtime/plan_cache.py)."""
    with sqlite3.connect(db) as c:
        return {(k, p): (s, st, d) for k, p, s, st, d in c.execute("SELECT key, provider, seconds, status, detail "
                                                                   "FROM costs WHERE provider != 'plan'")}


def test_distributed_plan_equals_local_plan(two_nodes, local_plan, tmp_path):
    tuning = RayTuning(address=None, timer_factory=FakeTimer)
    m = kernorch.compile(EXAMPLE, db=tmp_path / "ray.sqlite", cluster=tuning, **OPTIONS)
    assert len(tuning.pids) == 2  # one worker per node
    assert _plan(m) == local_plan[0]
    local, remote = _rows(local_plan[1]), _rows(tmp_path / "ray.sqlite")
    assert {k: v[:2] for k, v in remote.items()} == {k: v[:2] for k, v in local.items()}


def test_a_worker_killed_mid_run_loses_nothing(two_nodes, local_plan, tmp_path):
    db = tmp_path / "killed.sqlite"
    tuning = RayTuning(address=None, timer_factory=SlowTimer)
    seen = {}

    def kill_when_halfway():
        deadline = time.time() + 120
        while time.time() < deadline:
            if tuning.pids and db.exists():
                try:
                    with sqlite3.connect(db) as c:
                        n = c.execute("SELECT COUNT(*) FROM costs").fetchone()[0]
                except sqlite3.Error:
                    n = 0
                if n >= 40:
                    seen.update(_rows(db))
                    os.kill(tuning.pids[0], signal.SIGKILL)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_halfway)
    killer.start()
    m = kernorch.compile(EXAMPLE, db=db, cluster=tuning, **OPTIONS)
    killer.join()
    assert seen, "the run ended before the worker could be killed"
    final = _rows(db)
    assert all(final[k] == v for k, v in seen.items())  # nothing stored before the kill was lost
    assert set(final) == set(_rows(local_plan[1]))  # every candidate was measured in the end
    assert all(st == "ok" for _, st, _ in final.values())
    assert _plan(m) == local_plan[0]


def test_a_crashing_candidate_is_recorded_as_failed(two_nodes, local_plan, tmp_path):
    crash = local_plan[2][-1]  # a fused kernel of the local plan: the plan must do without it
    worker = type("Crashing", (CrashingWorker,), {"crash_key": crash})
    tuning = RayTuning(address=None, timer_factory=FakeTimer, worker_cls=worker)
    m = kernorch.compile(EXAMPLE, db=tmp_path / "crash.sqlite", cluster=tuning, **OPTIONS)
    rows = _rows(tmp_path / "crash.sqlite")
    (status, detail) = [(st, d) for (k, _), (_, st, d) in rows.items() if k == crash][0]
    assert status == "run_failed" and "crashed its worker" in detail
    assert crash not in _plan(m)
    assert sum(st == "ok" for _, st, _ in rows.values()) == len(rows) - 1


def test_without_ray_the_cluster_option_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(KernorchError, match=r"pip install 'kernorch\[ray\]'"):
        cluster_mod.import_ray()


def test_cluster_needs_measured_costs():
    with pytest.raises(KernorchError, match="needs cost='measured'"):
        kernorch.compile(EXAMPLE, cost="model", cluster="ray", progress=False)
