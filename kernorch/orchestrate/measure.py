"""Measured costs: build each candidate kernel, check it against the reference interpreter, time it.

Every distinct kernel (by canonical key) is built, verified and timed once; results go to the
tuning database as soon as they exist, so a second run of the same model measures nothing and a
killed run loses at most the batch in flight. Kernels are built many per compiler call
(``codegen.build_many``); compilation of a batch runs in a thread pool (the compiler is a
subprocess), timing is serial with a fixed thread count.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from kernorch import codegen
from kernorch.codegen.feasible import extreme_split
from kernorch.errors import KernorchError
from kernorch.ir import oracle
from kernorch.ir.graph import Graph
from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.features import FEATURES_VERSION, kernel_features
from kernorch.orchestrate import trust
from kernorch.orchestrate.machine import target_name
from kernorch.orchestrate.measure_stats import MeasureStats
from kernorch.orchestrate.priced import PricedCandidates
from kernorch.orchestrate.tuning_db import UNSETTLED, Record, TuningDB
from kernorch.codegen.version import CODEGEN_VERSION, codegen_version  # noqa: F401 - CODEGEN_VERSION re-exported
from kernorch.options import DEFAULT_CODEGEN, DEFAULT_PROVIDERS, CodegenOptions, Env
from kernorch.providers import MedianTimer, Provider, best_provider, default_providers
from kernorch.providers.timing import Measurement, as_measurement
from kernorch.providers.select import reason_or_none
from kernorch.ir.tensors import to_torch

# What a kernel costs in a model run beyond its isolated timing: the executor's dispatch (Python,
# ctypes, provider call) and waking a thread pool that another library's kernel just used. Measured
# on EfficientViT-B0 (98 kernels): run time - sum of isolated kernel times ~= 25 us per kernel.
# Added to every measured candidate (not stored), so the solver stops splitting work into kernels
# whose isolated times look free.
KERNEL_OVERHEAD_S = 25e-6
# A single kernel of a runtime with a thread pool of its own (onnxruntime, OpenVINO) between
# kernels of kernorch's pool also pays for the switch there and back, which its isolated timing
# never sees: ~25 us on 2 cores (``python -m bench.pool_switch``). Regions pay it once per region,
# which their end-to-end timing includes.
POOL_SWITCH_S = 25e-6
# Doubtful prices (trust.needs_remeasure) are measured again after the rest, at most this many
# times, each round after a pause that lets a transient load (a compiler, a cron job) pass.
REMEASURE_ROUNDS = 2
REMEASURE_PAUSE_S = 0.25
RETIME_ROUNDS = 3  # MeasuredCost.retime: rounds of timing every kernel in turn


def ordered_outputs(g_pos: dict[int, int], cand: Candidate) -> list[int]:
    return sorted(cand.outputs, key=g_pos.__getitem__)


def random_feeds(g: Graph, inputs: Sequence[int], seed: int = 0) -> list[np.ndarray]:
    """The oracle's data for ``inputs``, in order (constants' real data, random for the rest)."""
    feeds = oracle.random_feeds(g, inputs, seed)
    return [feeds[v] for v in inputs]


def verify(g: Graph, kernel, members: set[int], reference: oracle.Reference | None = None) -> tuple[bool, str]:
    """Run ``kernel`` and the interpreter on the same random inputs; compare every output by the
    oracle's policy. ``reference`` = (feeds by value id, interpreter outputs), shared with the
    other providers."""
    ok, _, detail = oracle.verify(kernel.run, kernel.inputs, kernel.outputs, g, members, reference)
    return ok, detail


def time_kernel(kernel, feeds: Sequence[np.ndarray], timer: Callable | None = None) -> Measurement:
    """Seconds of ``kernel._run`` on preallocated outputs, with the evidence (warm-up first)."""
    ins = [to_torch(np.array(a, order="C")) for a in feeds]
    outs = kernel.run(ins)
    timer = timer or MedianTimer()
    prepared = getattr(kernel, "prepared", None)  # a C kernel: timed as a native run calls it
    call = prepared(ins, outs) if prepared is not None else (lambda: kernel._run(ins, outs))
    return as_measurement(timer(call, getattr(kernel, "provider", "c")))


def priced(name: str, timing: Measurement, roofline_s: float | None = None, detail: str = "") -> Record:
    """An ``ok`` record carrying its measurement's evidence."""
    return Record(name, timing.seconds, "ok", detail, timing.samples, timing.disturbed, timing.min_s,
                  timing.spread, timing.load, roofline_s, "" if timing.settled else UNSETTLED)


def _db_record(r, roofline_s: float | None = None) -> Record:
    """A provider's attempt (select.ProviderRecord) as a tuning-database record."""
    if r.status == "ok":
        return priced(r.provider, r.timing or Measurement.exact(r.seconds), roofline_s, (r.reason or "")[:300])
    status = {"wrong": "verify_failed"}.get(r.status, r.status)
    return Record(r.provider, None, status, (r.reason or "")[:300])


def codegen_provider(kernel) -> str:
    """Database name of a kernel built by kernorch's own code generator."""
    return f"codegen:{getattr(kernel, 'provider', 'c')}"


# DEFAULT_PROVIDERS (imported above) lives in kernorch/options.py, with compile()'s other defaults.
# Providers that compile whole subgraphs, so they can run provider regions (regions.py).
REGION_PROVIDERS = ("ort", "openvino", "openvino_bf16")
# statuses of a generated kernel that is wrong rather than infeasible (MeasureStats.fallbacks)
GENERATED_FAILURES = ("build_failed", "verify_failed", "run_failed")
REGION_PREFIX = "region:"


def external_providers(threads: int, names: Sequence[str] | None = DEFAULT_PROVIDERS,
                       bf16_tolerance: float | None = None) -> list[Provider]:
    """The installed external providers (onnxruntime, OpenVINO, PyTorch variants), by name;
    ``bf16_tolerance``: the accuracy budget the bf16 provider's kernels are judged by."""
    every = default_providers(threads, bf16_tolerance)
    unknown = sorted(set(names or ()) - {p.name for p in every})
    if unknown:
        raise KernorchError(f"unknown provider(s) {', '.join(unknown)}; choose from "
                            f"{', '.join(p.name for p in every)}")
    out = [p for p in every if p.available()]
    if names is not None:
        return [p for p in out if p.name in names]
    return [p for p in out if not p.key_suffix]  # a lower precision only by name (options.PRECISIONS)


class MeasuredCost(PricedCandidates):
    """``cost(candidate) -> seconds | None``, backed by the tuning database (keys, memo and
    database look-ups: orchestrate.priced)."""

    def __init__(self, g: Graph, db: TuningDB, target: str = "cpu", threads: int | None = None,
                 batch: int = 32, progress: Callable[[int, int], None] | None = None,
                 providers: Sequence[Provider] | None = None,
                 kernel_overhead_s: float = KERNEL_OVERHEAD_S, native_overhead_s: float | None = None,
                 roofline: Callable[[Candidate], float | None] | None = None, require_quiet: bool = False,
                 cluster=None, env: Env | None = None, codegen_options: CodegenOptions = DEFAULT_CODEGEN) -> None:
        self.g = g
        self.db = db
        self.kernel_overhead_s = kernel_overhead_s
        # generated C kernels' (they run natively); None: the same as every other kernel's
        self._native_overhead_s = native_overhead_s
        self.env = env or Env.read()  # the settings the compile's entry point read (kernorch/options.py)
        self.threads = threads or self.env.threads
        self.codegen_options = codegen_options
        self.version = codegen_version(codegen_options)  # the database's version column for these prices
        self.batch = batch
        self.progress = progress
        self.stats = MeasureStats()
        self._start_memo()
        self.providers = list(providers) if providers is not None else external_providers(self.threads)
        self.target = target_name(target, self.threads, self.env.cc, self.env.cflags) + "".join(
            sorted({p.key_suffix for p in self.providers}))
        # warm-up 2 ms: a throwaway A/B, alternated on three bench models' plan kernels (Zen 3): medians matched a
        # second 5 ms timer's within its noise; 1 ms read 11% slow on EfficientNet-B0's. ~3 ms saved per timing.
        self.timer = MedianTimer(warmup=2, repeats=5, min_sample_s=1e-4, min_warmup_s=0.002)
        self._kind = {p.output: p.kind.value for p in g.prims}
        self._linear = {v for v, k in self._kind.items() if k == "linear"}
        # The analytical estimate stored next to each price (a price far above it is re-measured).
        self.roofline = roofline
        # Refuse to store a price that never settles (raise instead): ``compile(require_quiet=True)``.
        self.require_quiet = require_quiet
        # Where candidates are measured: here (None) or on a cluster (orchestrate.cluster.RayTuning).
        self.cluster = cluster

    def can_generate(self, cand: Candidate) -> bool:
        """kernorch's code generator can build it, or (for kernels with a linear prim) a provider can."""
        outs = ordered_outputs(self._pos, cand)
        if codegen.can_generate(self.g, cand.nodes, outs):
            return True
        if extreme_split(self.g, cand.nodes):
            return False  # a library would recompute what another kernel's max/min saw (codegen/extremes.py)
        return bool(self._external(cand)) and bool(self.kernel_providers(cand))

    def kernel_providers(self, cand: Candidate) -> list[Provider]:
        """The providers that may run ``cand`` as a single kernel: those on kernorch's own
        thread pool that can, else the others that can (a pool switch beats no kernel)."""
        outs = ordered_outputs(self._pos, cand)
        able = [p for p in self.providers if self._can_run(p, cand.nodes, outs)]
        own = [p for p in able if p.own_pool]
        return own or able

    def _can_run(self, p: Provider, members, outs) -> bool:
        """``p.can_run`` as a yes/no; a provider whose check raises cannot run it (trying it one by
        one records the same error as 'unsupported', providers/select.py)."""
        try:
            return reason_or_none(p.can_run(self.g, members, outs)) is None
        except Exception:  # noqa: BLE001
            return False

    def _external(self, cand: Candidate) -> bool:
        """External providers are tried for kernels of one linear prim with elementwise, broadcast
        and layout prims around it (epilogues, transposed operands): where libraries win."""
        if not self.providers or len(self._linear.intersection(cand.nodes)) != 1:
            return False
        return all(v in self._linear or self._kind[v] in ("elementwise", "broadcast", "layout") for v in cand.nodes)

    def region_key(self, cand: Candidate) -> str:
        return REGION_PREFIX + self.key(cand)

    def region(self, cand: Candidate) -> float | None:
        """Seconds for ``cand`` (a run of whole segments) as one kernel of an external runtime that
        compiles whole subgraphs (OpenVINO, onnxruntime), verified like any kernel; None if none
        can. Stored under ``region:<kernel key>``; a doubtful price is measured again at once."""
        key = self.region_key(cand)
        if key in self._memo:
            return self._memo[key]
        known = self.db.get_many([key], self.target, self.version)
        if key in known:
            self.stats.cached += 1
            self._remember(key, known[key])
            return self._memo[key]
        t0 = time.perf_counter()
        recs = self._attempt_region(cand)
        for _ in range(REMEASURE_ROUNDS):
            if not any(trust.needs_remeasure(r) for r in recs.values()):
                break
            self.stats.remeasured += 1
            time.sleep(REMEASURE_PAUSE_S)
            recs = trust.merge(recs, self._attempt_region(cand))
        self.stats.measured += 1
        self.stats.seconds += time.perf_counter() - t0
        self._store(key, recs)
        return self._memo[key]

    def _attempt_region(self, cand: Candidate) -> dict[str, Record]:
        outs = ordered_outputs(self._pos, cand)
        recs: dict[str, Record] = {}
        whole = [p for p in self.providers if p.name in REGION_PROVIDERS]
        try:
            reference = oracle.reference(self.g, self.g.subgraph(cand.nodes, outs))
        except Exception as e:  # noqa: BLE001 - the oracle failed: nothing can be verified
            recs["codegen"] = Record("codegen", None, "cannot_generate", f"reference interpreter failed: {e}"[:300])
            whole = []
        if whole:
            _, _, records = best_provider(self.g, cand.nodes, outs, whole, self.timer, reference=reference)
            roof = self._roofline(cand)
            recs.update((r.provider, _db_record(r, roof)) for r in records)
        if not recs:
            recs["codegen"] = Record("codegen", None, "cannot_generate", "no provider runs whole regions")
        self.stats.count(recs)
        return recs

    def _roofline(self, cand: Candidate) -> float | None:
        return None if self.roofline is None else self.roofline(cand)

    def prefetch(self, cands: Iterable[Candidate]) -> None:
        """Measure every candidate not yet in the database, here or on the cluster, and store each
        result as it arrives (this process is the database's one writer)."""
        todo = self._unknown(cands, self.version)
        if not todo:
            return
        items = list(todo.items())
        self.db.put_features(FEATURES_VERSION, [
            (k, kernel_features(self.g, c.nodes, ordered_outputs(self._pos, c), self.threads))
            for k, c in items if not k.startswith(REGION_PREFIX)])
        results = self.measure_items(items) if self.cluster is None else self.cluster.measure(self, items)
        for k, recs in results:
            self._store(k, recs)

    def measure_items(self, items: list[tuple[str, Candidate]]) -> Iterator[tuple[str, dict[str, Record]]]:
        """Build, verify and time each (key, candidate) in batches; yield its records once final:
        at once when trusted, after the re-measure rounds when doubtful (trust.needs_remeasure).
        Stores nothing: a Ray worker runs this too, and only the driver writes the database."""
        total = len(items)
        done = 0
        doubtful: dict[str, tuple[Candidate, object, dict[str, Record]]] = {}
        batches = [items[i:i + self.batch] for i in range(0, total, self.batch)]
        # Build a few batches in parallel (the compiler is a subprocess), then time them serially:
        # compiling never overlaps timing, which would steal a core from the kernel being timed.
        workers = 2
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for start in range(0, len(batches), 2 * workers):
                chunk = batches[start:start + 2 * workers]
                built = list(pool.map(self._build_batch, chunk))
                for b, kernels in zip(chunk, built):
                    for (k, cand), kern in zip(b, kernels):
                        t0 = time.perf_counter()
                        recs = self._attempt(k, cand, kern)
                        self.stats.measured += 1
                        self.stats.seconds += time.perf_counter() - t0
                        done += 1
                        if self.progress:
                            self.progress(done, total)
                        if any(trust.needs_remeasure(r) for r in recs.values()):
                            doubtful[k] = (cand, kern, recs)
                        else:
                            yield k, recs
        yield from self._remeasure(doubtful)

    def _remeasure(self, doubtful: dict[str, tuple[Candidate, object, dict[str, Record]]]
                   ) -> Iterator[tuple[str, dict[str, Record]]]:
        """Measure doubtful kernels again (bounded rounds, a pause before each) and yield the
        better attempt per provider, to be stored flagged when still doubtful (or refuse, when
        quiet is required). A round that settles none of them ends the re-measuring: the
        interference persists, and more rounds would only multiply the tuning time."""
        for _ in range(REMEASURE_ROUNDS):
            if not doubtful:
                break
            time.sleep(REMEASURE_PAUSE_S)
            before = len(doubtful)
            for k, (cand, kern, recs) in list(doubtful.items()):
                self.stats.remeasured += 1
                recs = trust.merge(recs, self._attempt(k, cand, kern))
                if any(trust.needs_remeasure(r) for r in recs.values()):
                    doubtful[k] = (cand, kern, recs)
                else:
                    del doubtful[k]
                    yield k, recs
            if len(doubtful) == before:
                break
        unsettled = [k for k, (_, _, recs) in doubtful.items() if any(UNSETTLED in r.flag_set for r in recs.values())]
        if unsettled and self.require_quiet:
            raise KernorchError(
                f"{len(unsettled)} kernel(s) could not be timed without interference (other processes kept "
                f"{self.stats.max_load:.1f} cores busy); their prices were not stored. Run again on a quieter "
                f"machine, or without require_quiet / --require-quiet to store them flagged")
        self.stats.unsettled += len(unsettled)
        for k, (_, _, recs) in doubtful.items():
            yield k, recs

    def retime(self, cands: Iterable[Candidate], rounds: int = RETIME_ROUNDS) -> None:
        """Time ``cands`` again, all of them in turn for ``rounds`` rounds (a slow phase of the
        machine then hits them alike), and keep per provider the cheapest attempt, the stored one
        included (trust.merge): prices that decide between fusing and splitting (recheck.py) do
        not rest on one batch's luck; stored flagged ``retimed`` (a later compile: ``settled``)."""
        items = list({self.key(c): c for c in cands}.items())
        best = self.db.get_many([k for k, _ in items], self.target, self.version)
        for _ in range(rounds):
            for k, recs in self.measure_items(items):
                best[k] = trust.merge(best.get(k, {}), recs)
        self.stats.remeasured += len(items)
        for k, recs in best.items():
            self._store(k, {p: trust.retimed(r) for p, r in recs.items()})

    def _build_batch(self, batch: list[tuple[str, Candidate]]):
        items = [(self.g, set(c.nodes), ordered_outputs(self._pos, c)) for _, c in batch]
        generatable = [codegen.can_generate(*it) for it in items]
        if not all(generatable):
            built = iter(self._build_items([it for it, ok in zip(items, generatable) if ok]))
            return [next(built) if ok else None for ok in generatable]
        return self._build_items(items)

    def _build_items(self, items):
        if not items:
            return []
        try:
            kernels = codegen.build_many(items, self.threads, env=self.env, options=self.codegen_options)
        except Exception:
            kernels = []
            for it in items:  # isolate the culprit
                try:
                    kernels.append(codegen.build_many([it], self.threads, env=self.env, options=self.codegen_options)[0])
                except Exception as e:  # noqa: BLE001 - recorded as a build failure
                    kernels.append(e)
        return kernels

    def _attempt(self, key: str, cand: Candidate, kern) -> dict[str, Record]:
        """Verify and time the code generator's kernel and every external provider that can run
        the candidate: one record per provider."""
        recs: dict[str, Record] = {}
        outs = ordered_outputs(self._pos, cand)
        roof = self._roofline(cand)
        try:
            reference = oracle.reference(self.g, self.g.subgraph(cand.nodes, outs))
        except Exception as e:  # noqa: BLE001 - the oracle itself failed: nothing can be verified
            reference = None
            kern = kern if kern is None else RuntimeError(f"reference interpreter failed: {e}")
        if isinstance(kern, Exception):
            detail = str(kern).splitlines()[0][:300] if str(kern) else type(kern).__name__
            recs["codegen"] = Record("codegen", None, "build_failed", detail)
        elif kern is not None:
            name = codegen_provider(kern)
            try:
                ok, detail = verify(self.g, kern, set(cand.nodes), reference)
                if ok:
                    feeds = oracle.kernel_feeds(self.g, kern.inputs, reference[0])
                    recs[name] = priced(name, time_kernel(kern, feeds, self.timer), roof)
                else:
                    recs[name] = Record(name, None, "verify_failed", detail)
            except Exception as e:  # noqa: BLE001 - a kernel that crashes is recorded, never chosen
                recs[name] = Record(name, None, "run_failed", f"{type(e).__name__}: {e}"[:300])
        if self._external(cand) and reference is not None:
            _, _, records = best_provider(self.g, cand.nodes, outs, self.kernel_providers(cand), self.timer,
                                          reference=reference)
            recs.update((r.provider, _db_record(r, roof)) for r in records
                        if r.status not in ("unavailable", "unsupported"))
        if not recs:
            recs["codegen"] = Record("codegen", None, "cannot_generate", "no provider can run it")
        self.stats.count(recs)
        return recs

    def _store(self, key: str, recs: dict[str, Record]) -> None:
        """Persist the final attempt of every provider (flagged when still doubtful) and use it;
        a kernel (not a region) that no provider can run is counted as failed."""
        recs = {p: trust.final(r) for p, r in recs.items()}
        if not key.startswith(REGION_PREFIX) and not any(r.ok for r in recs.values()):
            self.stats.failed += 1
            self.stats.failures.append(f"{key[:12]} " + "; ".join(f"{r.provider} {r.status}: {r.detail}"
                                                                  for r in recs.values())[:400])
        for r in recs.values():
            self.db.put(key, self.target, self.version, r)
        self._remember(key, recs)

    @property
    def native_overhead_s(self) -> float:
        return self.kernel_overhead_s if self._native_overhead_s is None else self._native_overhead_s

    def _in_model_s(self, key: str, r: Record) -> float:
        """What a kernel costs in the model: its timing, the dispatch around it (a generated C
        kernel runs inside a native run; the others are called from Python) and a pool switch."""
        overhead = self.native_overhead_s if r.provider == "codegen:c" else self.kernel_overhead_s
        return r.seconds + overhead + self._switch_s(key, r.provider)

    def _switch_s(self, key: str, provider: str) -> float:
        """The pool switch a single kernel of a foreign-pool provider costs in the model."""
        if key.startswith(REGION_PREFIX) or provider.startswith("codegen"):
            return 0.0
        return 0.0 if any(p.own_pool for p in self.providers if p.name == provider) else POOL_SWITCH_S

    def _remember(self, key: str, recs: dict[str, Record]) -> None:
        """Keep the cheapest correct record among the providers in use (the database may hold
        figures of providers this run leaves out); a generated kernel that failed is named in
        ``stats.fallbacks``."""
        self.stats.fallbacks += [f"{key[:12]} {r.provider} {r.status}: {r.detail}"[:300] for r in recs.values()
                                 if r.provider.startswith("codegen") and r.status in GENERATED_FAILURES]
        names = {p.name for p in self.providers}
        good = [r for r in recs.values() if r.ok and (r.provider.startswith("codegen") or r.provider in names)]
        if not key.startswith(REGION_PREFIX):  # a foreign pool only where the own pool has no kernel
            own = {p.name for p in self.providers if p.own_pool}
            good = [r for r in good if r.provider.startswith("codegen") or r.provider in own] or good
        if good:
            best = min(good, key=lambda r: self._in_model_s(key, r))
            self.best[key] = best
            self._memo[key] = self._in_model_s(key, best)
        else:
            self._memo[key] = None
