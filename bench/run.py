"""kernorch against its peers, per model, in one process, interleaved.

    python -m bench                                   # every model, benchmark sizes, 2 threads
    python -m bench --small --quick --models candy,gpt2_block
    python -m bench --models light --threads 4 --exporter dynamo

Per model: every runtime is set up (kernorch is tuned into a fresh database: the cold compile,
then compiled again: the warm one), its output is checked once against onnxruntime, then all are
timed round-robin per repetition (so load drift hits every runtime alike) and the medians are
compared. Tables go to the terminal and, with the figures of this one run, to docs/BENCHMARKS.md
(one section per machine) and docs/benchmarks.png. Raw results: ``--json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import time
import traceback
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from bench import peers
from bench.peers import KERNORCH, MISMATCH_REL, CompileTimeout

BENCH_MODELS = ["candy", "segformer_b0", "efficientvit_b0", "vit_tiny", "gpt2_block", "cspdarknet53_mish", "gpt2",
                "bert_base"]
# torchvision families, run when named (`--models bench,resnet50,mobilenetv3_large`), not part of 'bench'
EXTRA_MODELS = ["resnet50", "mobilenetv3_large", "poolformer_s12", "efficientnet_b0"]
ROOT = Path(__file__).resolve().parents[1]
_T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:160]


def resolve_models(spec: str | None) -> list[str]:
    from bench.export import light_models

    light = list(light_models())
    if not spec:
        return BENCH_MODELS + light
    out = []
    for tok in (t.strip() for t in spec.split(",") if t.strip()):
        if tok == "bench":
            out += BENCH_MODELS
        elif tok == "light":
            out += light
        elif tok in BENCH_MODELS or tok in EXTRA_MODELS or tok in light:
            out.append(tok)
        elif f"light_{tok}" in light:
            out.append(f"light_{tok}")
        else:
            known = ", ".join(BENCH_MODELS + EXTRA_MODELS + light)
            raise SystemExit(f"unknown model {tok!r}; known: bench, light, {known}")
    return list(dict.fromkeys(out))


def load_model(name: str, args) -> dict:
    """Path, ONNX feeds and (bench models) the nn.Module with its inputs."""
    import onnx

    from bench.export import export_onnx, light_model_inputs, light_models

    if name in BENCH_MODELS or name in EXTRA_MODELS:
        from bench.models import build_model, resolve_size

        size = "small" if args.small else None
        module, inputs = build_model(name, size=size)
        path = export_onnx(name, args.exporter, size, verbose=False)
        g = onnx.load(str(path), load_external_data=False).graph
        inits = {i.name for i in g.initializer}
        names = [i.name for i in g.input if i.name not in inits]
        feeds = {n: t.numpy() for n, t in zip(names, inputs)}
        return dict(path=path, feeds=feeds, module=module, inputs=inputs, size=resolve_size(name, size),
                    source=f"{args.exporter} export")
    path = light_models()[name]
    return dict(path=path, feeds=light_model_inputs(path), module=None, inputs=None, size=224,
                source="onnx package light model")


# ---------------------------------------------------------------------------------------------
# one model
# ---------------------------------------------------------------------------------------------
def setup_runners(name: str, m: dict, args, rec: dict) -> dict:
    runners: dict[str, peers.Runner] = {}
    status = rec["runtimes"]

    def attempt(col: str, make, na: str | None = None) -> None:
        if col in args.skip or f"{name}:{col}" in args.skip:
            status[col] = dict(status="skipped", note="--skip")
            return
        if na:
            status[col] = dict(status="n/a", note=na)
            return
        log(f"{name}: setting up {col}")
        try:
            r = make()
        except CompileTimeout as e:
            status[col] = dict(status="timeout", note=str(e))
        except Exception as e:  # a peer failing is a result, not a crash
            status[col] = dict(status="failed", note=_short(e))
            if args.verbose:
                traceback.print_exc()
        else:
            runners[col] = r
            status[col] = dict(status="ok", setup_s=r.setup_s, **{k: v for k, v in r.extra.items() if k != "model"})
            log(f"{name}: {col} ready in {r.setup_s:.1f} s")

    no_module = "no nn.Module (ONNX-only model)" if m["module"] is None else None
    attempt("ort", lambda: peers.ort_runner("ort", m["path"], m["feeds"], args.threads, True))
    attempt("ort-noopt", lambda: peers.ort_runner("ort-noopt", m["path"], m["feeds"], args.threads, False))
    attempt("eager", lambda: peers.eager_runner(m["module"], m["inputs"]), no_module)
    # a fresh inductor cache, as kernorch's cold compile: setup times compare like with like
    inductor = Path(args.db).expanduser() / f"inductor-{name}"
    shutil.rmtree(inductor, ignore_errors=True)
    attempt("torch.compile", lambda: peers.torch_compile_runner(m["module"], m["inputs"], args.compile_timeout,
                                                                inductor), no_module)
    attempt("openvino", lambda: peers.openvino_runner(m["path"], m["feeds"], args.threads),
            None if peers.openvino_available() else "openvino not installed")
    setup_kernorch(name, m, args, rec, attempt)
    return runners


def setup_kernorch(name: str, m: dict, args, rec: dict, attempt) -> None:
    """Cold compile (fresh tuning database and build cache), warm compile, then the other variants
    on the same database."""
    dbdir = Path(args.db).expanduser()
    dbdir.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{m['size']}-{args.exporter}-t{args.threads}"
    db = dbdir / f"{stem}.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    compiles = rec["compiles"]

    def variant(col: str, tag: str | None = None):
        strategy, rw, regions = KERNORCH[col]
        model, wall = peers.kernorch_compile(m["path"], strategy, rw, db, args.threads, regions)
        compiles[tag or col] = peers.compile_record(model, wall)
        log(f"{name}: kernorch {tag or col}: {wall:.1f} s, {model.report.candidates} candidates "
            f"({model.report.measured} measured, {model.report.cached} cached), {len(model.kernels)} kernels")
        return model, wall

    with fresh_dir("KERNORCH_CACHE_DIR", dbdir / f"build-{stem}"):
        def optimal():
            model, wall = variant("kn-optimal", "cold")
            try:
                warm, _ = variant("kn-optimal", "warm")
                compiles["warm"]["same_plan"] = peers.plan_signature(warm) == peers.plan_signature(model)
                del warm
            except Exception as e:
                compiles["warm"] = dict(error=_short(e))
            return peers.kernorch_runner("kn-optimal", model, m["feeds"], wall)

        def other(col: str):
            model, wall = variant(col)
            return peers.kernorch_runner(col, model, m["feeds"], wall)

        attempt("kn-optimal", optimal)
        for col in KERNORCH:
            if col != "kn-optimal":
                attempt(col, lambda col=col: other(col))


@contextmanager
def fresh_dir(env: str, path: Path):
    """Point the cache directory variable ``env`` at an emptied ``path`` for the duration."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    saved = os.environ.get(env)
    os.environ[env] = str(path)
    try:
        yield path
    finally:
        if saved is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = saved


def verify(name: str, runners: dict, rec: dict) -> None:
    """Every runtime's outputs against onnxruntime (ORT_ENABLE_ALL), once, before timing."""
    ref_col = "ort" if "ort" in runners else "ort-noopt" if "ort-noopt" in runners else None
    rec["reference"] = ref_col
    if ref_col is None:
        return
    ref = runners[ref_col].outputs()
    for col, r in runners.items():
        st = rec["runtimes"][col]
        try:
            err = peers.rel_error(ref, r.outputs())
        except Exception as e:
            st.update(rel_err=float("inf"), mismatch=True, note=f"output check failed: {_short(e)}")
            continue
        st.update(rel_err=err, mismatch=not err <= MISMATCH_REL)
        if st["mismatch"]:
            log(f"{name}: MISMATCH {col} vs {ref_col}: max rel err {err:.3g}")


def analyse(name: str, runners: dict, m: dict, args, rec: dict, copy_bw: float | None) -> None:
    for col in ("kn-unfused", "kn-per-op", "kn-greedy", "kn-own", "kn-optimal"):
        if col in runners:
            try:
                bw = copy_bw if col == "kn-own" else None
                rec["kernels"][col] = peers.kernel_analysis(runners[col].extra["model"], m["feeds"],
                                                            args.profile_repeats, bw)
            except Exception as e:
                rec["kernels"][col] = dict(error=_short(e))


def bench_model(name: str, args, copy_bw: float | None) -> dict:
    import torch

    rec = dict(name=name, runtimes={}, compiles={}, kernels={})
    t0 = time.perf_counter()
    try:
        m = load_model(name, args)
    except Exception as e:
        rec["error"] = f"cannot build/export: {_short(e)}"
        log(f"{name}: {rec['error']}")
        return rec
    rec.update(size=m["size"], source=m["source"], path=str(m["path"]))
    runners = setup_runners(name, m, args, rec)
    verify(name, runners, rec)
    log(f"{name}: timing {len(runners)} runtimes, {args.repeats} interleaved repetitions")
    errors: dict[str, str] = {}
    samples = peers.interleaved(runners, args.repeats, args.min_sample_s, args.warmup_s,
                                log if args.verbose else lambda s: None, errors)
    for col, err in errors.items():
        rec["runtimes"][col].update(status="failed", note=f"while timing: {err}")
        log(f"{name}: {col} failed while timing: {err}")
    for col, s in samples.items():
        st = rec["runtimes"][col]
        st.update(median_ms=statistics.median(s) * 1e3, min_ms=min(s) * 1e3, samples=len(s),
                  spread=(max(s) - min(s)) / statistics.median(s))
    analyse(name, runners, m, args, rec, copy_bw)
    rec["seconds"] = time.perf_counter() - t0
    runners.clear()
    del m
    torch._dynamo.reset()
    gc.collect()
    return rec


# ---------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=None,
                   help="comma-separated: bench model names, light model names (with or without 'light_'), "
                        "'bench' (the six issue models plus gpt2 and bert_base), 'light' (the nine), "
                        f"extras named one by one ({', '.join(EXTRA_MODELS)}); default: bench and light")
    p.add_argument("--small", action="store_true", help="small input sizes for the bench models (quick runs)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions and shorter samples")
    p.add_argument("--threads", type=int, default=2, help="threads for every runtime (default 2)")
    p.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript")
    p.add_argument("--repeats", type=int, default=None, help="interleaved repetitions (default 15, --quick 5)")
    p.add_argument("--db", default=str(Path.home() / ".cache" / "kernorch" / "bench"),
                   help="directory for the tuning databases and build caches; each model starts from a "
                        "fresh file (the cold compile)")
    p.add_argument("--compile-timeout", type=float, default=900.0,
                   help="give up on torch.compile after this many seconds (reported as a timeout)")
    p.add_argument("--skip", default="", help=f"runtimes to leave out, comma-separated: {', '.join(peers.RUNTIMES)}; "
                                              "MODEL:RUNTIME leaves it out for one model only")
    p.add_argument("--out", default=str(ROOT / "docs" / "BENCHMARKS.md"), help="markdown file to update")
    p.add_argument("--plot", default=str(ROOT / "docs" / "benchmarks.png"))
    p.add_argument("--no-write", action="store_true", help="print only; do not touch --out / --plot")
    p.add_argument("--json", default=None, help="write the raw results here (default: DB/last-run.json)")
    p.add_argument("--from-json", default=None, help="only render the report of a saved run (its --json file)")
    p.add_argument("--label", default=None, help="run label for the markdown section (default: full / smoke)")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    a.skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    unknown = {s for s in a.skip if s.rpartition(":")[2] not in peers.RUNTIMES}
    if unknown:
        p.error(f"--skip: unknown runtimes {sorted(unknown)}")
    if a.threads < 1:
        p.error("--threads must be >= 1")
    a.repeats = a.repeats or (5 if a.quick else 15)
    a.min_sample_s = 0.02 if a.quick else 0.05
    a.warmup_s = 0.2 if a.quick else 1.0
    a.profile_repeats = 5 if a.quick else 20
    return a


def save_json(run: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(run, indent=1, default=str))
    tmp.replace(path)


def rerender(args) -> int:
    """``--from-json``: print and write the report of a saved run (its own command and date)."""
    from bench import report

    run = json.loads(Path(args.from_json).read_text())
    report.print_tables(run)
    if not args.no_write:
        report.write_markdown(run, Path(args.out), Path(args.plot))
    return 0


def main(argv=None) -> int:
    from bench import report

    args = parse_args(argv)
    if args.from_json:
        return rerender(args)
    models = resolve_models(args.models)
    cmd = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    import torch

    torch.set_num_threads(args.threads)
    machine = peers.machine_info(args.threads)
    log(f"{machine['cpu']}, {args.threads} threads; models: {', '.join(models)}")
    try:
        copy_bw = peers.copy_bandwidth(args.threads)
        log(f"copy bandwidth {copy_bw / 1e9:.1f} GB/s")
    except Exception as e:
        copy_bw = None
        log(f"copy bandwidth: {_short(e)}")
    started = datetime.now(timezone.utc)
    smoke = args.small or args.quick or not set(resolve_models(None)) <= set(models)  # extras may be added
    results: list[dict] = []
    run = dict(command=cmd, date=started.strftime("%Y-%m-%d %H:%M UTC"), machine=machine, copy_bw=copy_bw,
               threads=args.threads, exporter=args.exporter, repeats=args.repeats, small=args.small,
               quick=args.quick, label=args.label or ("smoke" if smoke else "full"), models=results, wall_s=0.0)
    json_path = Path(args.json) if args.json else Path(args.db).expanduser() / "last-run.json"
    for name in models:
        log(f"=== {name}")
        try:
            results.append(bench_model(name, args, copy_bw))
        except KeyboardInterrupt:
            log("interrupted: reporting what is done")
            break
        except Exception as e:
            traceback.print_exc()
            results.append(dict(name=name, error=_short(e), runtimes={}, compiles={}, kernels={}))
        run["wall_s"] = time.perf_counter() - _T0
        save_json(run, json_path)  # after every model: a crash or ^C loses nothing measured
    log(f"raw results: {json_path}")
    report.print_tables(run)
    if not args.no_write:
        report.write_markdown(run, Path(args.out), Path(args.plot))
        log(f"wrote {args.out} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
