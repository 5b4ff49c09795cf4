"""The pipeline: model -> primitive graph -> rewrites -> plan (orchestrated on measured or modelled
costs) -> built kernels -> a CompiledModel."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import os
import time
from typing import Any, Mapping, Sequence

from kernorch.codegen import isa
from kernorch.errors import KernorchError
from kernorch.frontend.inputs import random_inputs
from kernorch.frontend.quantize import CALIBRATION_METHODS
from kernorch.ir.graph import Graph
from kernorch.orchestrate.candidate import multi_output
from kernorch.orchestrate.from_graph import chained_prims, dag_from_graph
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.machine import cpu_model
from kernorch.orchestrate.measure import MeasuredCost, ordered_outputs
from kernorch.options import (DEFAULT_CODEGEN, DEFAULT_PROVIDERS, PRECISIONS, TUNING_BUDGET, TUNINGS, CodegenOptions,
                              Env, Options)
from kernorch.orchestrate.plan import Plan
from kernorch.orchestrate.solver import SolverError
from kernorch.orchestrate.plan import build_plan as build_orchestrated_plan
from kernorch.orchestrate.strategies import STRATEGIES
from kernorch.orchestrate.tuning_db import TuningDB
from kernorch.rewrite.layouts import channels_last_pairs
from kernorch.rewrite.pipeline import DEFAULT_RULES, apply_rewrites
from kernorch.rewrite.precision import bf16_storage
from kernorch.rewrite.quantized import after_cleanups, integer_linear
from kernorch.providers import BuiltKernel, Provider
from kernorch.providers.bf16_choice import bf16_faster
from kernorch import targets
from kernorch.targets.cpu import build_kernels
from kernorch.runtime.executable import Executable, ProviderKernel, plan_executable
from kernorch.runtime.in_context import CallProfiles, race, refine_in_context
from kernorch.runtime.planning import no_plan_error, plan_kernels
from kernorch.runtime import accuracy, native, plan_cache
from kernorch.runtime.dynamic import compile_dynamic
from kernorch.runtime.dynamic_model import DynamicModel
from kernorch.runtime.model import CompiledModel
from kernorch.runtime.progress import progress_bar as _progress_bar
from kernorch.runtime.sources import Sources, int8_knobs, load_graph, load_int8_graph
from kernorch.runtime.whole import original_regions, region_plan
from kernorch.runtime.report import CompileReport, check_free_cores, record_measurements

COSTS = ("measured", "model")
# Each target's executable, by target name: (module, class), or (None, None) for the plain Executable.
EXECUTABLES = {"cpu": (None, None), "cuda": ("kernorch.runtime.cuda_exec", "CudaExecutable")}
# TUNING_BUDGET (Knobs.max_candidates explains it) lives in kernorch/options.py with the other defaults.


def compile(model: Any, example_inputs: Any = None, *, target: str = "cpu", strategy: str = "optimal",
            cost: str = "measured", db: str | os.PathLike | TuningDB | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None, rewrites: Sequence[str] = DEFAULT_RULES,
            threads: int | None = None, knobs: Knobs | None = None, progress: bool = True,
            dynamo: bool | None = None, cuda_options: Any = None,
            providers: Sequence[str] | None = DEFAULT_PROVIDERS, regions: bool = True,
            tuning_budget: int | None = TUNING_BUDGET, tuning: str = "full", require_quiet: bool = False,
            cluster: Any = None, strict: bool = False, precision: str = "f32",
            accuracy_budget: float | None = None, calibration: Any = None, calibration_method: str = "minmax",
            codegen: CodegenOptions = DEFAULT_CODEGEN, dynamic: Mapping[str, Mapping[int, Sequence[int]]] | None = None,
            profiles: Sequence[int] | None = None, options: Options | None = None) -> CompiledModel | DynamicModel:
    """Compile ``model`` for ``target`` ("cpu", or "cuda": Triton + cuBLAS/cuDNN, a CUDA graph;
    ``cuda_options`` is a targets.cuda_measure.CudaOptions). ``cluster="ray"`` (or
    ``"ray:ADDRESS"``) measures candidates on a Ray cluster. One pipeline for every target
    (targets/): an option a target cannot honour is rejected. The keywords and the environment
    become one Options (kernorch/options.py), read here once; or pass ``options`` instead of the
    keywords. ``dynamic={"x": {0: (1, 16)}}`` compiles one model for every batch size of a range
    (runtime/dynamic.py). See docs/PYTHON_API.md."""
    opts = _options(options, locals())
    _check_options(opts)
    if opts.dynamic is not None:
        return compile_dynamic(model, example_inputs, opts, _compile_static)
    if opts.profiles is not None:
        raise KernorchError("profiles= lists the batch sizes of a dynamic= compile; this compile has no dynamic=")
    return _compile_static(model, example_inputs, opts)


def _compile_static(model: Any, example_inputs: Any, opts: Options) -> CompiledModel:
    """One compile at the input shapes of ``model`` (or ``opts.input_shapes``)."""
    _check_options(opts)
    tgt = targets.make(opts)
    t0 = time.perf_counter()
    g, plan, whole, measured, ext, rep, sources = _orchestrate(model, example_inputs, opts, tgt)
    t3 = time.perf_counter()
    kernels, fallbacks = tgt.build(g, plan, measured if opts.cost == "measured" else None, ext)
    if any(native.can_run_natively(k) for k in kernels):
        native.available(opts.env)  # the native driver, built with this Env (process-wide: native.py)
    rep.failed += len(fallbacks)
    rep.failures = (rep.failures + fallbacks)[:20]
    compiled = _executable(tgt, g, plan, kernels)
    if opts.cost == "measured" and tgt.races_regions and not rep.plan_reused:  # its latency, next to its price
        original = None
        if opts.strategy == "optimal" and opts.regions and (opts.knobs is None or opts.knobs.regions) and ext:
            original = sources.onnx(model)  # a whole-graph region of its own (whole.py)
        knobs = _knobs(opts, tgt, g)
        in_context = (opts.strategy == "optimal" and not plan.regions and knobs.context_rounds > 0
                      and not rep.plan_transferred)  # its kernels are the only ones priced
        if in_context:
            with _progress_bar(opts.progress, "pricing the plan's kernels in context"):
                plan, compiled = refine_in_context(dag_from_graph(g), plan, compiled, measured, knobs,
                                                   random_inputs(g, seed=0),
                                                   _reusing_builder(tgt, g, measured, ext, plan, compiled), rep)
        with _progress_bar(opts.progress, "timing the plan end to end"):
            plan, compiled = _faster_end_to_end(g, (plan, compiled), whole, tgt.threads, measured, ext, rep, original,
                                                env=opts.env, reprice=in_context)
    if rep.plan_key and not rep.plan_reused and not plan.regions:
        _remember_plan(opts, rep.plan_key, g, plan, measured)
    if opts.strict and (rep.fallbacks or rep.failed):
        first = (rep.fallbacks or rep.failures or ["?"])[0]
        raise KernorchError(f"strict: {len(rep.fallbacks)} generated kernel(s) failed and {rep.failed} candidate(s) "
                            f"no provider could run; first: {first[:200]}")
    if opts.precision != "f32":
        with _progress_bar(opts.progress, f"measuring {opts.precision} accuracy against float32"):
            rep.precision = opts.precision
            rep.accuracy = accuracy.as_dicts(accuracy.measure(sources.reference, compiled.run))
    return _finish(compiled, plan, rep, g, t0, t3)


_COMPILE_DEFAULTS = {k: p.default for k, p in inspect.signature(compile).parameters.items()
                     if p.kind is p.KEYWORD_ONLY and k != "options"}


def _options(options: Options | None, given: dict) -> Options:
    """compile()'s keywords as Options (the environment read now), or ``options`` when passed
    with every keyword left at its default."""
    keywords = {k: v for k, v in given.items() if k in _COMPILE_DEFAULTS}
    if options is None:
        return Options.from_env(**keywords)
    changed = sorted(k for k, v in keywords.items() if v is not _COMPILE_DEFAULTS[k] and v != _COMPILE_DEFAULTS[k])
    if changed:
        raise KernorchError(f"pass either options= or keywords, not both (got {', '.join(changed)})")
    return options


def _finish(compiled, plan: Plan, rep: CompileReport, g: Graph, t0: float, t3: float) -> CompiledModel:
    rep.plan_summary = plan.summary()
    rep.seconds["build"] = time.perf_counter() - t3
    rep.seconds["total"] = time.perf_counter() - t0
    return CompiledModel(compiled, rep, g)


def tune(model: Any, example_inputs: Any = None, **options: Any) -> CompileReport:
    """Measure what compiling ``model`` would measure (same options as ``compile``) and store it
    in the tuning database, without building the compiled model: ``kernorch tune``."""
    options.setdefault("cost", "measured")
    opts = Options.from_env(**options)
    _check_options(opts)
    tgt = targets.make(opts)
    t0 = time.perf_counter()
    *_, rep = _orchestrate(model, example_inputs, opts, tgt)
    rep.seconds["total"] = time.perf_counter() - t0
    return rep


def _check_options(opts: Options) -> None:
    if opts.strategy not in STRATEGIES:
        raise KernorchError(f"unknown strategy {opts.strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if opts.cost not in COSTS:
        raise KernorchError(f"unknown cost {opts.cost!r}; choose one of {', '.join(COSTS)}")
    if opts.tuning not in TUNINGS:
        raise KernorchError(f"unknown tuning {opts.tuning!r}; choose one of {', '.join(TUNINGS)}")
    if opts.cluster is not None and opts.cost != "measured":
        raise KernorchError("cluster= distributes measurements: it needs cost='measured'")
    if opts.precision not in PRECISIONS:
        raise KernorchError(f"unknown precision {opts.precision!r}; choose one of {', '.join(PRECISIONS)}")
    if opts.calibration is not None and opts.precision != "int8":
        raise KernorchError(f"calibration= is for precision='int8' (this compile is {opts.precision!r})")
    if opts.calibration_method not in CALIBRATION_METHODS:
        raise KernorchError(f"unknown calibration_method {opts.calibration_method!r}; choose one of "
                            f"{', '.join(CALIBRATION_METHODS)}")
    if opts.accuracy_budget is not None and not 0 < opts.accuracy_budget < 1:
        raise KernorchError(f"accuracy_budget={opts.accuracy_budget!r}: expected a relative error between 0 and 1")
    if opts.precision == "bf16" and opts.target == "cpu" and not isa.host().bf16:
        raise KernorchError(f"precision='bf16' needs a CPU with bf16 arithmetic (AMX or AVX512-BF16); this one "
                            f"({cpu_model()}) has {isa.host().describe()}")


def _knobs(opts: Options, target: targets.Target, g: Graph | None = None) -> Knobs:
    """The knobs a compile orchestrates with: the user's, as the target takes them, with the
    ``regions`` option and the tuning budget applied; given the rewritten graph, its chains as
    groups and (int8) its int8 kernels as seeds, so every planning of it sees the same candidates."""
    knobs = target.knobs(opts.knobs or Knobs())
    if g is not None and opts.strategy == "optimal":
        knobs = int8_knobs(knobs, g) if opts.precision == "int8" else knobs
        if knobs.chains:  # QDQ chains: ResNet-50 int8 14485 -> 5490 candidates
            knobs = dataclasses.replace(knobs, groups=knobs.groups + chained_prims(g))
    if not opts.regions:
        knobs = dataclasses.replace(knobs, regions=False)
    if opts.tuning != knobs.tuning:
        knobs = dataclasses.replace(knobs, tuning=opts.tuning)
    if opts.cost == "measured" and knobs.max_candidates is None and opts.tuning_budget is not None:
        knobs = dataclasses.replace(knobs, max_candidates=opts.tuning_budget)
    return knobs


def _orchestrate(model: Any, example_inputs: Any, opts: Options, target: targets.Target):
    """Import, rewrite and plan on ``target`` (measuring into the database): (graph, plan,
    whole-graph region plan or None, the measured cost, external providers, report)."""
    strategy, cost, progress = opts.strategy, opts.cost, opts.progress
    cores = target.host_cores(cost)
    busy = check_free_cores(cores, target.require_quiet) if cores else ""
    knobs = _knobs(opts, target)
    rep = CompileReport(strategy, cost, busy=busy)
    if cost == "measured":
        rep.efficiency = target.efficiency_note()
    t0 = time.perf_counter()
    if opts.precision == "int8":
        g, imp, sources, rep.calibration = load_int8_graph(model, example_inputs, opts)
    else:
        g, imp = load_graph(model, example_inputs, opts.input_shapes, opts.dynamo)
    rep.opaque, rep.exporter = dict(imp.opaque), imp.exporter
    rep.seconds["import"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    g, integer = integer_linear(g)  # a quantized model's convolutions / matmuls on its integers
    g, rep.rewrites = apply_rewrites(g, DEFAULT_RULES if opts.rewrites is None else opts.rewrites)
    if integer:  # each int8 convolution / matmul gets a dequantization of its own, pooling on integers
        g, done = after_cleanups(g)
        rep.rewrites.update(integer_linear=integer, **done)
    if opts.precision != "int8":
        sources = Sources(g)  # the float32 graph, before any precision rewrite
    if opts.precision == "bf16":
        faster = bf16_faster(g, target.threads) if opts.target == "cpu" else None
        g, rep.rewrites["bf16_storage"] = bf16_storage(g, faster)
    if strategy == "optimal" and knobs.layouts:  # a target without layout pairs turns them off (Target.knobs)
        g, rep.rewrites["channels_last_pairs"] = channels_last_pairs(g)
    rep.prims = len(g.prims)
    rep.seconds["rewrite"] = time.perf_counter() - t1

    dag = dag_from_graph(g)
    pos = {p.output: i for i, p in enumerate(g.prims)}
    knobs = _knobs(opts, target, g)
    key_fn = functools.cache(lambda c: g.kernel_key(c.nodes, ordered_outputs(pos, c)))  # every pass asks again

    t2 = time.perf_counter()
    roofline = target.roofline()
    db = opts.db
    own_db = not isinstance(db, TuningDB)
    tdb = db if isinstance(db, TuningDB) else TuningDB(db if db is not None else opts.env.db_path)
    try:
        with target.measurer(g, tdb, roofline.bind(dag)) as measured:
            measured.can_generate = functools.cache(measured.can_generate)  # asked again by every pass
            ext = measured.providers
            if cost == "measured" and strategy == "optimal" and opts.target == "cpu":  # a warm compile's plan
                rep.plan_key = plan_cache.plan_key(g, knobs, opts)
                rep.plan_reused = (plan := plan_cache.reuse(tdb, rep.plan_key, g, dag, measured)) is not None
                if rep.plan_reused:
                    record_measurements(plan, measured, rep)
            if not rep.plan_reused and knobs.transfer and cost == "measured" and strategy == "optimal":
                rep.plan_transferred = (plan := plan_cache.transfer(knobs.transfer, g, dag, measured)) is not None
                if rep.plan_transferred:
                    record_measurements(plan, measured, rep)
            try:
                if not (rep.plan_reused or rep.plan_transferred):
                    plan = plan_kernels(dag, strategy, cost, roofline.bind(dag), measured, key_fn, knobs, rep, progress,
                                        target.where)
            except SolverError as e:
                raise no_plan_error(e, measured) from None
            whole = None
            if not rep.plan_reused and cost == "measured" and strategy == "optimal" and knobs.regions and ext:
                whole = _whole_region(dag, plan, measured)
    finally:
        if own_db:
            tdb.close()
    rep.seconds["orchestrate"] = time.perf_counter() - t2
    return g, plan, whole, measured, ext, rep, sources


def _remember_plan(opts: Options, key: str, g: Graph, plan: Plan, measured: MeasuredCost) -> None:
    """Keep the final plan in the tuning database for the next compile of this model (plan_cache.py)."""
    tdb = opts.db if isinstance(opts.db, TuningDB) else TuningDB(opts.db if opts.db is not None else opts.env.db_path)
    try:
        plan_cache.remember(tdb, key, g, plan, measured)
    finally:
        if tdb is not opts.db:
            tdb.close()


def _whole_region(dag, plan: Plan, measured: MeasuredCost) -> Plan | None:
    """The plan that runs the whole graph as one provider region, when it differs from ``plan``
    and a provider can run it (priced and verified like any region)."""
    live = dag.without_dead()
    if len(plan.kernels) == 1 and plan.regions == (0,):
        return None
    cand = multi_output(live, live.nodes)
    price = measured.region(cand)
    if price is None:
        return None
    return build_orchestrated_plan(live, [cand], [price], plan.strategy, plan.report, plan.stats, regions=[0])


def _faster_end_to_end(g: Graph, chosen: tuple[Plan, Executable], whole: Plan | None, threads: int,
                       measured: MeasuredCost, ext, rep: CompileReport, original: Any = None, rounds: int = 7,
                       min_seconds: float = 0.3, env: Env | None = None,
                       reprice: bool = False) -> tuple[Plan, Executable]:
    """Kernels priced one by one run slower in a model than alone (caches, other libraries'
    thread pools waking up, dispatch), most of all when a plan mixes runtimes. So the solver's
    plan is timed end to end against the whole graph as one region (on kernorch's exported graph,
    and on the user's ``original`` ONNX model per runtime, verified first: whole.py), interleaved,
    at least ``rounds`` times and ``min_seconds`` in all, each timed call led in by calls of its
    own (benchmark.LEAD_S), and the fastest is kept
    (``report.end_to_end`` has every median). ``reprice``: the plan is priced in context again in
    the same rounds (in_context.CallProfiles), so ``report.priced_s`` and its end-to-end time see
    one machine state."""
    runs = {"plan": chosen[1]}
    if whole is not None:
        runs["whole region"] = build_plan(g, whole, threads, measured, ext, env)
    if original is not None:
        runs.update(original_regions(g, original, ext, rep.failures))
    feeds = random_inputs(g, seed=0)
    profiles = CallProfiles(chosen[1], feeds) if reprice else None
    med = race(runs, feeds, rounds, min_seconds, lead=True, profile=profiles)
    if profiles is not None:
        chosen = (profiles.priced(chosen[0]), chosen[1])
    rep.priced_s = sum(chosen[0].costs) if all(c is not None for c in chosen[0].costs) else None
    rep.end_to_end = med
    best = min(med, key=med.__getitem__)
    if best == "plan":
        return chosen
    if best == "whole region":
        return whole, runs[best]
    runs[best].infos[0].seconds = med[best]
    return region_plan(g, whole or chosen[0], med[best]), runs[best]


def build_plan(g: Graph, plan: Plan, threads: int, measured: MeasuredCost | None = None,
               providers: Sequence[Provider] | None = None, env: Env | None = None) -> Executable:
    """The plan's kernels built for target "cpu" (targets/cpu.py) in an Executable."""
    return plan_executable(g, plan, _adapted(build_kernels(g, plan, threads, measured, providers, env)))


def _adapted(kernels: list) -> list:
    """Providers' BuiltKernels as runtime kernels (outputs written into planned buffers)."""
    return [ProviderKernel(k) if isinstance(k, BuiltKernel) else k for k in kernels]


def _reusing_builder(tgt: targets.Target, g: Graph, measured, ext, plan: Plan, built: Executable):
    """Builds the plans of the in-context rounds: a kernel an earlier plan built (same prims, same
    outputs) is taken from it, only the new ones are built (a large model's plan takes a minute)."""
    made = {(c.nodes, c.outputs): k for c, k in zip(plan.kernels, built.kernels)}

    def build(p: Plan) -> Executable:
        todo = [c for c in p.kernels if (c.nodes, c.outputs) not in made]
        if todo:
            kernels, _ = tgt.build(g, dataclasses.replace(p, kernels=tuple(todo), regions=()), measured, ext)
            made.update(zip(((c.nodes, c.outputs) for c in todo), _adapted(kernels)))
        return _executable(tgt, g, p, [made[(c.nodes, c.outputs)] for c in p.kernels])

    return build


def _executable(tgt: targets.Target, g: Graph, plan: Plan, kernels: list) -> Executable:
    """The target's executable over its built kernels (EXECUTABLES: the runtime side of a target)."""
    module, name = EXECUTABLES[tgt.name]
    cls = getattr(importlib.import_module(module), name) if module else None
    return plan_executable(g, plan, _adapted(kernels), cls, **tgt.device_args())
