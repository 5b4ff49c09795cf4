"""The ``kernorch`` command (also ``python -m kernorch``).

Every user-facing failure is a KernorchError and prints as one line ``kernorch: error: ...`` with
exit status 2, never a traceback. A command is a subparser whose ``func(args) -> int`` returns the
exit status; later stages (compile, run, bench) add theirs in ``build_parser``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from dataclasses import asdict
from typing import Sequence

from kernorch import __version__
from kernorch.cli_common import EXIT_ERROR, EXIT_MISMATCH, EXIT_OK, add_model_args, parse_input_shapes, positive_int
from kernorch.cli_db import add_db_commands
from kernorch.cli_run import add_commands
from kernorch.errors import DynamicShapeError, KernorchError
from kernorch.options import Env

# The commands' heavy modules (onnx, torch, the code generator) are imported inside the command that
# needs them, so that `kernorch --help` and a usage error load none of them.


# ---------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------

def _import(args) -> tuple:
    from kernorch.frontend.onnx_import import import_onnx  # lazy: onnx; `kernorch --help` stays fast

    shapes = parse_input_shapes(args.input_shape) or None
    t0 = time.perf_counter()
    graph, report = import_onnx(args.model, input_shapes=shapes)
    return graph, report, time.perf_counter() - t0


def _cli_message(e: KernorchError) -> str:
    """The error's one line, in the CLI's own spelling (``--input-shape``, not ``input_shapes=``)."""
    if isinstance(e, DynamicShapeError) and hasattr(e, "input"):
        example = ",".join(map(str, e.example))
        return (f"input {e.input!r} has a dynamic dimension {e.dim} ({e.symbol!r}); "
                f"pin it with --input-shape {e.input}={example}")
    return " ".join(str(e).split()) or type(e).__name__


# ---------------------------------------------------------------------------------------------
# kernorch inspect
# ---------------------------------------------------------------------------------------------

def cmd_inspect(args) -> int:
    from kernorch.frontend.summary import summarize  # lazy: onnx; `kernorch --help` stays fast

    graph, report, secs = _import(args)
    s = summarize(graph, report, secs)
    if args.json:
        print(json.dumps({"model": args.model, **asdict(s)}, indent=2))
        return EXIT_OK
    nodes = sum(s.op_histogram.values())
    print(f"model     {args.model}")
    for name, t in s.inputs:
        print(f"input     {name}: {t}")
    for name, t in s.outputs:
        print(f"output    {name}: {t}")
    print(f"import    {secs:.3f} s  ({nodes} ONNX nodes -> {s.prims} primitives; {s.folded} nodes folded)")
    print(f"width     {s.width} live values (max along the topological order)")
    print(f"weights   {s.constants} constants, {_bytes(s.constant_bytes)}")
    _table(f"ONNX ops ({nodes} nodes, {len(s.op_histogram)} types)", s.op_histogram)
    _table(f"primitives by kind ({s.prims})", s.prims_by_kind)
    _table(f"opaque ops, kept whole ({sum(s.opaque.values())})", s.opaque)
    if args.segments:
        from kernorch.runtime.segments import segment_lines  # lazy: torch (the rewrites); as above

        for line in segment_lines(graph):
            print(line)
    return EXIT_OK


def _table(title: str, rows: dict[str, int]) -> None:
    print(f"\n{title}")
    if not rows:
        print("  (none)")
    w = max((len(k) for k in rows), default=0)
    for k, n in rows.items():
        print(f"  {k:<{w}}  {n:>6}")


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


# ---------------------------------------------------------------------------------------------
# kernorch check
# ---------------------------------------------------------------------------------------------

def cmd_check(args) -> int:
    from kernorch.frontend.inputs import describe_inputs, random_inputs  # lazy: ml_dtypes, scipy; as above
    from kernorch.frontend.reference import compare, run_interpreter, run_onnxruntime  # lazy: onnx; as above

    graph, report, secs = _import(args)
    feeds = random_inputs(graph, seed=args.seed)
    print(f"model     {args.model}")
    print(f"inputs    {describe_inputs(graph)} (random, seed {args.seed})")
    opaque = sum(n for n in report.opaque.values())
    print(f"import    {secs:.3f} s  ({len(graph.prims)} primitives, {opaque} opaque)")
    t0 = time.perf_counter()
    got = run_interpreter(graph, feeds)
    t1 = time.perf_counter()
    ref = run_onnxruntime(args.model, feeds)
    print(f"checked   reference interpreter {t1 - t0:.3f} s (the NumPy oracle, not kernorch's speed: "
          f"`kernorch compile` times the compiled model), onnxruntime {time.perf_counter() - t1:.3f} s")
    rows = compare(got, ref, tol=args.tol)
    w = max([len("output")] + [len(r.name) for r in rows])
    print(f"\n  {'output':<{w}}  {'shape':<18} {'max abs err':>12} {'max rel err':>12}")
    for r in rows:
        shape = "[" + ",".join(map(str, r.shape)) + "]"
        verdict = "ok" if r.ok else "MISMATCH"
        print(f"  {r.name:<{w}}  {shape:<18} {r.max_abs:>12.3e} {r.max_rel:>12.3e}  {verdict}")
    bad = [r.name for r in rows if not r.ok]
    if bad:
        print(f"\nMISMATCH: {len(bad)} of {len(rows)} output(s) differ from onnxruntime beyond "
              f"{args.tol:g} * max(1, max|ref|): {', '.join(bad)}")
        return EXIT_MISMATCH
    print(f"\nOK: {len(rows)} output(s) match onnxruntime (max abs err <= {args.tol:g} * max(1, max|ref|))")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# parser and entry point
# ---------------------------------------------------------------------------------------------

def cmd_doctor(args) -> int:
    from kernorch.runtime.doctor import report  # lazy: torch and the code generator; `kernorch --help` stays fast

    env = Env.read()
    print(report(args.threads or env.threads, env, refresh=args.refresh))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernorch", description="Optimal kernel orchestration for ONNX / PyTorch models.")
    p.add_argument("--version", action="version", version=f"kernorch {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    q = sub.add_parser("inspect", help="import a model and print what kernorch sees",
                       description="Import MODEL (fission into primitives) and print its ONNX op histogram, "
                                   "primitive counts by kind, opaque ops, graph width and import time.")
    add_model_args(q)
    q.add_argument("--json", action="store_true", help="print the summary as JSON")
    q.add_argument("--segments", action="store_true", help="also list the orchestrator's automatic segments")
    q.set_defaults(func=cmd_inspect)

    q = sub.add_parser("check", help="check the imported model against onnxruntime",
                       description="Import MODEL, run the primitive graph through the reference interpreter "
                                   "and the ONNX model through onnxruntime on the same seeded random inputs, "
                                   "and compare every output. Exit status 1 on a mismatch.")
    add_model_args(q)
    q.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    q.add_argument("--tol", type=float, default=1e-4,
                   help="mismatch when max abs err > TOL * max(1, max|ref|) (default 1e-4)")
    q.set_defaults(func=cmd_check)

    q = sub.add_parser("doctor", help="print what this machine is to kernorch, and its generated GEMM's speed",
                       description="Print the CPU, its ISA, the C compiler with kernorch's flags and what "
                                   "-march=native means to it, the threads and the machine signature prices are "
                                   "keyed by; then the generated GEMM's speed next to oneDNN's on three products "
                                   "(measured once per machine and cached; --refresh measures again).")
    q.add_argument("--threads", type=positive_int, help="threads (default $KERNORCH_NUM_THREADS or all CPUs)")
    q.add_argument("--refresh", action="store_true", help="measure the GEMM check again")
    q.set_defaults(func=cmd_doctor)

    add_commands(sub, add_model_args)
    add_db_commands(sub, add_model_args)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # NumPy's floating-point notes raised inside kernorch (inf - inf while comparing a candidate
    # with the reference, an empty timing series) are handled there; they are not the user's news.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"kernorch\.")
    try:
        return args.func(args)
    except KernorchError as e:
        print(f"kernorch: error: {_cli_message(e)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `kernorch show DIR | head`: the reader left; no traceback at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print("kernorch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
