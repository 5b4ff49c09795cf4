"""``kernorch compile``, ``run`` and ``show``: the CLI face of compile(), save/load and the runtime."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import kernorch
from kernorch.cli_common import parse_dynamic, parse_input_shapes, parse_sizes, positive_int
from kernorch.errors import InputError, KernorchError
from kernorch.options import PRECISIONS

STRATEGIES = ("optimal", "greedy", "per-operator", "unfused")
SOURCE = "source.onnx"     # the original model, kept next to a compiled one for `run --compare`
SUMMARY = "summary.txt"    # what `kernorch show` prints, written at compile time


def add_commands(sub, add_model_args) -> None:
    q = sub.add_parser("compile", help="tune and compile a model into a directory",
                       description="Import MODEL, orchestrate its kernels on measured (or modelled) costs, "
                                   "build them and save the compiled model to DIR. Measured costs are kept in "
                                   "the tuning database, so compiling the same model again measures nothing. "
                                   "Then time the compiled model against onnxruntime (and OpenVINO) on the same "
                                   "random inputs and say what kernorch did in plain words.")
    add_model_args(q)
    q.add_argument("-o", "--output", required=True, metavar="DIR", help="directory for the compiled model")
    q.add_argument("--target", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: C/OpenMP + providers (default); cuda: Triton + cuBLAS/cuDNN, replayed as a CUDA graph")
    q.add_argument("--strategy", choices=STRATEGIES, default="optimal", help="kernel orchestration (default optimal)")
    q.add_argument("--cost", choices=("measured", "model"), default="measured",
                   help="measured: build and time candidates (default); model: roofline estimate, fast")
    q.add_argument("--db", metavar="FILE", help="tuning database (default $KERNORCH_DB or ~/.cache/kernorch)")
    q.add_argument("--threads", type=positive_int, help="CPU threads for kernels and timing (default: all)")
    q.add_argument("--rewrites", metavar="RULES", help="comma-separated rewrite rules ('' for none; default set)")
    q.add_argument("--providers", metavar="NAMES",
                   help="comma-separated external kernel providers (ort, openvino, torch, ...; '' for kernorch's "
                        "own kernels only; default ort,openvino,torch,torch_onednn)")
    q.add_argument("--no-regions", action="store_true",
                   help="never hand whole runs of segments to OpenVINO/onnxruntime (provider regions)")
    q.add_argument("--tuning", choices=("full", "learned"), default="full",
                   help="full: time every candidate kernel (default); learned: time only those the learned cost "
                        "model, trained on this machine's tuning database, says can win (docs/TUNING.md)")
    q.add_argument("--strict", action="store_true",
                   help="fail when a generated kernel fails to build or to match the reference interpreter "
                        "(without it, another kernel stands in and the summary's 'fallback' line names it)")
    q.add_argument("--precision", choices=tuple(PRECISIONS), default="f32",
                   help="f32 (default); bf16: linear kernels may compute in bfloat16 on the CPU's matrix units "
                        "(AMX, AVX512-BF16), each kept only within --accuracy-budget; int8: the model quantized "
                        "by onnxruntime's quantizer on --calibration inputs; the accuracy is reported")
    q.add_argument("--calibration", action="append", default=[], metavar="FILE.npz",
                   help="--precision int8: one calibration batch, an .npz archive of arrays named by the model's "
                        "inputs (repeatable; without it random inputs stand in and the summary says so)")
    q.add_argument("--calibration-method", default="minmax", metavar="METHOD",
                   help="--precision int8: how activation ranges are chosen: minmax (default), entropy, percentile")
    q.add_argument("--accuracy-budget", type=float, metavar="REL",
                   help="relative error a bf16 kernel may add (default 1e-2 of its output's scale)")
    q.add_argument("--ray", metavar="ADDRESS", help="measure candidates on a Ray cluster ('auto', host:port or "
                                                    "ray://...; needs the 'ray' extra)")
    q.add_argument("--require-quiet", action="store_true",
                   help="wait for free cores before tuning and fail rather than store prices disturbed by other "
                        "processes")
    q.add_argument("--dynamic", action="append", default=[], metavar="NAME=DIM:LO..HI",
                   help="one model for every batch size LO..HI of input NAME's dim DIM (repeatable, one range for "
                        "all; compiled as static profiles: docs/DYNAMIC.md)")
    q.add_argument("--profiles", metavar="B1,B2,...",
                   help="--dynamic: the batch sizes compiled (default: both ends and the powers of 2 between)")
    q.add_argument("--no-compare", action="store_true",
                   help="do not time the result against onnxruntime/OpenVINO after compiling")
    q.add_argument("--quiet", action="store_true", help="no progress, no kernel table: the last line only")
    q.set_defaults(func=cmd_compile)

    q = sub.add_parser("run", help="run a compiled model directory",
                       description="Load a model saved by 'kernorch compile' and run it on the given inputs "
                                   "(.npy files) or seeded random ones; print each output's summary and latency. "
                                   "With --compare, benchmark it against onnxruntime (and OpenVINO when installed) "
                                   "on the original model: warm-up, interleaved repetitions, median/p90/p99.")
    q.add_argument("dir", metavar="DIR")
    q.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input (repeatable)")
    q.add_argument("--repeat", type=positive_int, default=None,
                   help="timed runs (default 10; with --compare: as many as --time allows)")
    q.add_argument("--time", type=float, default=None, metavar="SECONDS",
                   help="with --compare: time budget for the timed runs (default 3 s, at least 10 runs)")
    q.add_argument("--warmup", type=_non_negative_int, default=3, help="untimed runs first (default 3)")
    q.add_argument("--threads", type=positive_int, help="CPU threads (default: all)")
    q.add_argument("--compare", action="store_true",
                   help="time onnxruntime (and OpenVINO) on the original model side by side")
    q.add_argument("--save", metavar="DIR", help="write each output as DIR/NAME.npy")
    q.add_argument("--batch", type=positive_int, metavar="N",
                   help="a model compiled with --dynamic: random inputs of batch size N (default: its largest)")
    q.set_defaults(func=cmd_run)

    q = sub.add_parser("show", help="print what a compiled model directory holds",
                       description="Print a compiled model's summary without running it: what ran where, the "
                                   "tuning, and per kernel its provider, priced cost (ms), share and prims.")
    q.add_argument("dir", metavar="DIR")
    q.set_defaults(func=cmd_show)

    q = sub.add_parser("report", help="write an HTML page of a compiled model's plan",
                       description="Write one self-contained HTML page of a compiled model: the summary, the "
                                   "primitive graph coloured by kernel, per kernel its prims, runtime, priced and "
                                   "measured ms, a timeline of one inference, the latency against onnxruntime and "
                                   "the per-operator and greedy baseline plans; and the timeline as a PNG.")
    q.add_argument("dir", metavar="DIR")
    q.add_argument("-o", "--output", metavar="FILE.html", help="the page (default DIR/report.html)")
    q.add_argument("--png", metavar="FILE.png", help="the timeline picture (default next to the page)")
    q.add_argument("--repeat", type=positive_int, default=20, help="runs per kernel for the timeline (default 20)")
    q.add_argument("--threads", type=positive_int, help="CPU threads (default: all)")
    q.add_argument("--no-baselines", action="store_true",
                   help="do not build and time the per-operator and greedy plans of the source model")
    q.add_argument("--no-compare", action="store_true", help="do not time onnxruntime / OpenVINO")
    q.set_defaults(func=cmd_report)


def _non_negative_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return n


# ---------------------------------------------------------------------------------------------
# kernorch compile
# ---------------------------------------------------------------------------------------------

def check_output_dir(path: str) -> Path:
    """Before any tuning: ``path`` is (or can become) a directory this process can write to."""
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise KernorchError(f"-o {path}: exists and is not a directory")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise KernorchError(f"-o {path}: cannot create the directory ({e.strerror or type(e).__name__})") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".kernorch-write-test-", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise KernorchError(f"-o {path}: cannot write there ({e.strerror or type(e).__name__})") from None
    return d


def cmd_compile(args) -> int:
    shapes = parse_input_shapes(args.input_shape) or None
    created = not Path(args.output).exists()
    out = check_output_dir(args.output)
    try:
        return _compile(args, shapes, out)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)  # nothing of ours is left behind on failure
        raise


def _compile(args, shapes, out: Path) -> int:
    kw = {}
    if args.rewrites is not None:
        kw["rewrites"] = tuple(r for r in args.rewrites.split(",") if r)
    if args.providers is not None:
        kw["providers"] = tuple(p for p in args.providers.split(",") if p)
    t0 = t_start = time.perf_counter()
    model = kernorch.compile(args.model, target=args.target, strategy=args.strategy, cost=args.cost, db=args.db,
                             input_shapes=shapes, threads=args.threads, progress=not args.quiet,
                             regions=not args.no_regions, tuning=args.tuning, require_quiet=args.require_quiet,
                             cluster=None if args.ray is None else f"ray:{args.ray}", strict=args.strict,
                             precision=args.precision, accuracy_budget=args.accuracy_budget,
                             calibration=[_load_npz(p) for p in args.calibration] or None,
                             calibration_method=args.calibration_method, dynamic=parse_dynamic(args.dynamic),
                             profiles=parse_sizes("--profiles", args.profiles), **kw)
    secs = time.perf_counter() - t0
    try:
        model.save(out)
        shutil.copyfile(args.model, out / SOURCE)
    except OSError as e:
        raise KernorchError(f"-o {args.output}: cannot save the compiled model ({e.strerror or e})") from None
    if isinstance(model, kernorch.DynamicModel):
        text = f"kernorch compiled {args.model} -> {out} in {secs:.1f} s\n{model.summary()}"
        (out / SUMMARY).write_text(text + "\n")
        print(text.splitlines()[0] if args.quiet else
              f"{text}\n\nnext      kernorch run {out} --batch N --compare   (one batch size against onnxruntime)")
        return 0
    comparison = None
    if not args.no_compare and args.target == "cpu":
        from kernorch.frontend.inputs import random_inputs  # lazy: ml_dtypes, scipy; `kernorch --help` stays fast
        from kernorch.runtime.benchmark import compare  # lazy: torch, the code generator; as above

        feeds = random_inputs(model.graph, seed=0)
        comparison = compare(model, feeds, out / SOURCE, threads=args.threads, seconds=1.0, warmup=3)
    _write_summary(model, out, args.model)
    if args.quiet:
        print(_last_line(model, args.model, out, secs, comparison))
        return 0
    from kernorch.runtime.summary import kernel_table, plain_summary  # lazy: `import kernorch.cli` loads no runtime

    print(f"kernorch compiled {args.model} -> {out}")
    for line in plain_summary(model, comparison, time.perf_counter() - t_start):
        print(line)
    print()
    print(kernel_table(model))
    print(f"\nnext      kernorch run {out} --compare   (benchmark: median, p90, p99 side by side)\n"
          f"          kernorch show {out}              (this summary again)")
    return 0


def _last_line(model, source, out, secs, comparison) -> str:
    from kernorch.runtime.summary import what_ran_where  # lazy: `import kernorch.cli` loads no runtime

    line = f"compiled {source} -> {out} in {secs:.1f} s: {what_ran_where(model)}"
    x = comparison.speedup() if comparison is not None else None
    if x is not None:
        line += f"; {x:.2f}x onnxruntime's speed"
    return line


def _write_summary(model, out: Path, source: str) -> None:
    from kernorch.runtime.summary import kernel_table, plain_summary  # lazy: `import kernorch.cli` loads no runtime

    text = "\n".join([f"compiled model of {source}", *plain_summary(model), "", kernel_table(model), ""])
    try:
        (out / SUMMARY).write_text(text)
    except OSError as e:
        raise KernorchError(f"-o {out}: cannot write {SUMMARY} ({e.strerror or e})") from None


# ---------------------------------------------------------------------------------------------
# kernorch run / show
# ---------------------------------------------------------------------------------------------

def _load_npy(name: str, path: str) -> np.ndarray:
    if not Path(path).exists():
        raise InputError(f"--input {name}: no such file {path}")
    if Path(path).is_dir():
        raise InputError(f"--input {name}: {path} is a directory, not a .npy file")
    try:
        a = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        detail = "pickled object data" if "pickle" in str(e) else (str(e).splitlines()[0][:80] if str(e) else "")
        raise InputError(f"--input {name}: {path} is not a NumPy .npy array file ({detail or type(e).__name__})") \
            from None
    if not isinstance(a, np.ndarray):  # an .npz archive
        raise InputError(f"--input {name}: {path} is an .npz archive; save one array with numpy.save")
    return a


def _load_npz(path: str) -> dict[str, np.ndarray]:
    """One --calibration batch: an .npz archive's arrays by name."""
    try:
        z = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"--calibration {path}: no such file") from None
    except (ValueError, OSError, EOFError) as e:
        raise InputError(f"--calibration {path}: not a NumPy .npz archive ({str(e).splitlines()[0][:80]})") from None
    if isinstance(z, np.ndarray):
        raise InputError(f"--calibration {path}: one .npy array; save a batch with numpy.savez(path, **feeds)")
    with z:
        return {k: z[k] for k in z.files}


def _feeds(model, specs: list[str], batch: int | None = None) -> dict[str, np.ndarray]:
    from kernorch.frontend.inputs import random_inputs  # lazy: ml_dtypes, scipy; `kernorch --help` stays fast

    given = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--input {spec!r}: expected NAME=FILE.npy")
        given[name] = _load_npy(name, path)
    unknown = sorted(set(given) - set(model.input_names))
    if unknown:
        raise InputError(f"unknown input(s) {unknown}; the model's inputs are {model.input_names}")
    if isinstance(model, kernorch.DynamicModel):
        feeds = model.random_inputs(batch or model.axes.hi)
    elif batch is not None:
        raise InputError("--batch is for a model compiled with --dynamic; this one has fixed input shapes")
    else:
        feeds = random_inputs(model.executable.sig.graph, seed=0)
    feeds.update(given)
    return feeds


def _load(args, dynamic: bool = True):
    """The compiled model in ``args.dir`` (a DynamicModel only where the command takes one)."""
    threads = getattr(args, "threads", None)
    if threads:
        import torch

        torch.set_num_threads(threads)  # PyTorch kernels and the providers' sessions built on load
    model = kernorch.load(args.dir)
    if isinstance(model, kernorch.Decoder):
        raise KernorchError(f"{args.dir} holds a text decoder (compile_decoder): generate from Python "
                            f"(docs/DYNAMIC.md); its steps are saved models in {args.dir}/step and {args.dir}/prefill")
    if isinstance(model, kernorch.DynamicModel) and not dynamic:
        raise KernorchError(f"{args.dir} holds a model for batch sizes {model.axes.lo}..{model.axes.hi}; name one of "
                            f"its profiles: {', '.join(f'{args.dir}/batch-{b}' for b in model.profiles)}")
    for part in getattr(model, "profiles", {0: model}).values() if threads else ():
        for k in part.kernels:
            if hasattr(k, "num_threads"):
                k.num_threads = threads
    return model


def cmd_run(args) -> int:
    model = _load(args)
    feeds = _feeds(model, args.input, args.batch)
    outs = model.run(feeds)
    for name, t in outs.items():
        a = t.numpy()
        stats = f"min {a.min():.4g} max {a.max():.4g} mean {a.mean():.4g}" if a.size and a.dtype.kind == "f" else ""
        print(f"output {name}: {a.dtype}[{','.join(map(str, a.shape))}] {stats}")
        if args.save:
            try:
                Path(args.save).mkdir(parents=True, exist_ok=True)
                np.save(Path(args.save) / f"{name}.npy", a)
            except OSError as e:
                raise KernorchError(f"--save {args.save}: cannot write {name}.npy ({e.strerror or e})") from None
    if args.compare:
        return _compare(model, feeds, args)
    times = []
    for _ in range(args.warmup):
        model.run(feeds)
    for _ in range(args.repeat or 10):
        t0 = time.perf_counter()
        model.run(feeds)
        times.append(time.perf_counter() - t0)
    print(f"latency: median {np.median(times) * 1e3:.3f} ms over {len(times)} runs "
          f"(min {min(times) * 1e3:.3f} ms, p90 {np.percentile(times, 90) * 1e3:.3f} ms; "
          f"kernorch run {args.dir} --compare to benchmark against onnxruntime)")
    return 0


def _compare(model, feeds, args) -> int:
    from kernorch.runtime.benchmark import compare  # lazy: torch, the code generator; `kernorch --help` stays fast
    from kernorch.runtime.summary import latency_lines  # lazy: `import kernorch.cli` loads no runtime

    source = Path(args.dir) / SOURCE
    seconds = None if args.repeat and args.time is None else (args.time if args.time is not None else 3.0)
    c = compare(model, feeds, source if source.exists() else None, threads=args.threads, warmup=args.warmup,
                repeat=args.repeat, seconds=seconds, min_runs=10)
    how = f"{args.repeat} runs" if args.repeat else f"{seconds:g} s"
    print(f"\nbenchmark {args.dir}: {c.warmup} warm-up runs, then {how} interleaved round by round, "
          f"{c.threads} thread{'s' if c.threads != 1 else ''}, same inputs")
    print(c.table())
    print()
    for line in latency_lines(c):
        print(line)
    return 0


def cmd_show(args) -> int:
    from kernorch.runtime.summary import kernel_table, plain_summary  # lazy: `import kernorch.cli` loads no runtime

    model = _load(args)
    print(f"compiled model {args.dir}")
    if isinstance(model, kernorch.DynamicModel):
        print(model.summary())
        for b, part in model.profiles.items():
            print(f"\nprofile batch {b}")
            for line in plain_summary(part):
                print(line)
        return 0
    ins = ", ".join(f"{n}: {_type(model, n, True)}" for n in model.input_names)
    outs = ", ".join(f"{n}: {_type(model, n, False)}" for n in model.output_names)
    print(f"inputs    {ins}")
    print(f"outputs   {outs}")
    for line in plain_summary(model):
        print(line)
    print()
    print(kernel_table(model))
    if (Path(args.dir) / SOURCE).exists():
        print(f"\nsource    {Path(args.dir) / SOURCE} (kernorch run {args.dir} --compare times it against this)")
    return 0


def _type(model, name: str, is_input: bool) -> str:
    g = model.executable.sig.graph
    vs = g.inputs if is_input else g.outputs
    for v in vs:
        if g.name(v) == name:
            t = g.types[v]
            return f"{t.dtype}[{','.join(map(str, t.shape))}]"
    return "?"


# ---------------------------------------------------------------------------------------------
# kernorch report
# ---------------------------------------------------------------------------------------------

def cmd_report(args) -> int:
    from kernorch.runtime.html_report import write_report  # lazy: torch, compile(); `kernorch --help` stays fast

    page = Path(args.output) if args.output else Path(args.dir) / "report.html"
    png = Path(args.png) if args.png else page.with_suffix(".png")
    for f, flag in ((page, "-o"), (png, "--png")):
        if f.is_dir():
            raise KernorchError(f"{flag} {f}: is a directory; name a file")
        if not f.parent.exists():
            raise KernorchError(f"{flag} {f}: no such directory {f.parent}")
    model = _load(args, dynamic=False)
    source = Path(args.dir) / SOURCE
    page, made = write_report(model, page, png=png, source=source if source.exists() else None,
                              repeat=args.repeat, threads=args.threads, baselines=not args.no_baselines,
                              compare=not args.no_compare, title=f"kernorch plan of {Path(args.dir).resolve().name}")
    print(f"report    {page}" + (f"\ntimeline  {made}" if made else "  (no PNG: matplotlib is not installed)"))
    return 0
