"""``kernorch db stats | check | retune``: look into the tuning database and repair suspicious prices.

``check`` lists prices the measurer would not trust today (orchestrate.trust.doubt: unsettled,
far above the roofline, widely spread, or measured while other processes kept cores busy);
``retune MODEL`` re-measures those that MODEL's compile reaches, by compiling it with them
distrusted, and prints each price before and after.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

import kernorch
from kernorch.cli_common import parse_input_shapes, positive_int
from kernorch.errors import KernorchError
from kernorch.options import Env

# A price measured while other processes kept at least this many cores busy is suspect: the
# machine was shared, even when no sample was visibly preempted (hyperthread siblings, caches).
BUSY_LOAD = 0.5


def add_db_commands(sub, add_model_args) -> None:
    q = sub.add_parser("tune", help="measure what compiling the models would measure, without building",
                       description="Fill the tuning database for MODEL(s) (what `compile` would measure), here or "
                                   "on a Ray cluster (--ray), without building compiled models.")
    q.add_argument("models", metavar="MODEL", nargs="+", help="paths to .onnx files")
    q.add_argument("--input-shape", metavar="NAME=D0,D1,...", action="append", default=[],
                   help="pin a dynamic input dimension (repeatable; applies to every model)")
    _add_tuning_args(q, positive_int)
    q.add_argument("--ray", metavar="ADDRESS", help="measure on a Ray cluster ('auto', host:port or ray://...)")
    q.set_defaults(func=cmd_tune)

    db = sub.add_parser("db", help="inspect and repair the tuning database",
                        description="Inspect the tuning database (measured kernel prices) and re-measure "
                                    "suspicious prices.")
    dsub = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    for name, helptext in (("stats", "size, targets, providers and age of the database"),
                           ("check", "list suspicious prices (exit status 1 when there are any)")):
        q = dsub.add_parser(name, help=helptext, description=helptext)
        _add_db_arg(q)
        q.set_defaults(func=cmd_db_stats if name == "stats" else cmd_db_check)
    for name, helptext, arg in (
            ("export", "write every record to a JSON-lines file", "OUT"),
            ("import", "merge the records of a JSON-lines export into the database", "FILE"),
            ("merge", "merge other tuning databases into the database", "OTHER")):
        q = dsub.add_parser(name, help=helptext, description=helptext + " (conflicts: the more trustworthy "
                            "record wins, then the newer; prices stay keyed by the machine kind they were "
                            "measured on)")
        _add_db_arg(q)
        q.add_argument("paths", metavar=arg, nargs=1 if name != "merge" else "+")
        q.set_defaults(func=cmd_db_transfer, action=name)
    q = dsub.add_parser("retune", help="re-measure the suspicious prices MODEL's compile reaches",
                        description="Compile MODEL with the suspicious prices of its target distrusted, so each "
                                    "one it reaches is measured again; print each price before and after. Give "
                                    "the options the model was compiled with (--threads, --providers, "
                                    "--no-regions) so the same kernels are reached.")
    add_model_args(q)
    _add_tuning_args(q, positive_int)
    q.add_argument("--require-quiet", action="store_true", help="as for compile")
    q.set_defaults(func=cmd_db_retune)


def _add_db_arg(q) -> None:
    q.add_argument("--db", metavar="FILE", help="tuning database (default $KERNORCH_DB or ~/.cache/kernorch)")


def _add_tuning_args(q, positive_int) -> None:
    """The compile options that decide which kernels are measured, and where prices go."""
    _add_db_arg(q)
    q.add_argument("--threads", type=positive_int, help="CPU threads of the kernels (default: all)")
    q.add_argument("--providers", metavar="NAMES", help="external kernel providers, as for compile")
    q.add_argument("--no-regions", action="store_true", help="as for compile")


def suspicious(db) -> list[tuple[object, str]]:
    """(row, reason) for every stored price that should not be trusted."""
    from kernorch.orchestrate.trust import doubt  # lazy: sqlite3; `kernorch --help` stays fast

    out = []
    for row in db.rows():
        why = doubt(row.record)
        if row.record.ok and (row.record.load or 0.0) >= BUSY_LOAD:
            why = "; ".join(filter(None, [why, f"measured while other processes kept {row.record.load:.1f} "
                                               f"cores busy"]))
        if why:
            out.append((row, why))
    return out


def _open(path):
    from kernorch.orchestrate.tuning_db import TuningDB, default_path  # lazy: sqlite3; `kernorch --help` stays fast

    p = Path(path) if path else default_path()
    if not p.exists():
        raise KernorchError(f"tuning database {p} does not exist (nothing has been tuned into it yet)")
    return TuningDB(p)


def cmd_db_stats(args) -> int:
    with _open(args.db) as db:
        rows = list(db.rows())
        print(f"database  {db.path}  ({db.path.stat().st_size / 1e6:.1f} MB, {len(rows)} records)")
        if not rows:
            return 0
        now = time.time()
        print(f"age       oldest {_age(now - rows[0].created)}, newest {_age(now - rows[-1].created)}")
        targets = collections.Counter((r.target, r.version) for r in rows)
        print("targets   " + ", ".join(f"{t} (code generator {v}): {n}" for (t, v), n in sorted(targets.items())))
        status = collections.Counter(r.record.status for r in rows)
        print("status    " + ", ".join(f"{s} {n}" for s, n in status.most_common()))
        providers = collections.Counter(r.record.provider for r in rows if r.record.ok)
        print("priced by " + ", ".join(f"{p} {n}" for p, n in providers.most_common()))
        evidence = sum(1 for r in rows if r.record.ok and r.record.samples is not None)
        flagged = sum(1 for r in rows if r.record.doubtful)
        print(f"evidence  {evidence} prices with samples recorded, {flagged} flagged, "
              f"{len(suspicious(db))} suspicious (kernorch db check)")
    return 0


def cmd_db_check(args) -> int:
    with _open(args.db) as db:
        bad = suspicious(db)
        if not bad:
            print(f"OK: no suspicious prices in {db.path}")
            return 0
        print(f"{len(bad)} suspicious price(s) in {db.path}:")
        print(f"  {'key':<12} {'target':<8} {'provider':<14} {'ms':>10}  why")
        for row, why in bad:
            print(f"  {row.key[:12]:<12} {row.target.split('@')[0]:<8} {row.record.provider:<14} "
                  f"{row.record.seconds * 1e3:>10.4f}  {why}")
        print("re-measure them with: kernorch db retune MODEL --db FILE (with the options MODEL was compiled with)")
    return 1


def cmd_db_transfer(args) -> int:
    from kernorch.orchestrate.db_merge import export_rows, merge_rows, read_rows  # lazy: sqlite3; as above
    from kernorch.orchestrate.tuning_db import TuningDB, default_path  # lazy: sqlite3; as above

    if args.action == "export":
        with _open(args.db) as db:
            n = export_rows(db, args.paths[0])
        print(f"exported {n} records from {db.path} to {args.paths[0]}")
        return 0
    with TuningDB(args.db or default_path()) as db:
        for path in args.paths:
            if not Path(path).exists():
                raise KernorchError(f"{path} does not exist")
            if args.action == "import":
                c = merge_rows(db, read_rows(path))
            else:
                with TuningDB(path) as other:
                    c = merge_rows(db, list(other.rows()))
                    db.put_feature_rows(other.feature_rows())  # what the learned cost model trains on
            print(f"{path}: {c.added} records added, {c.replaced} replaced by better ones, {c.kept} kept")
        print(f"{db.path}: {db.count()} records")
    return 0


def cmd_tune(args) -> int:
    from kernorch.orchestrate.cluster import cluster_from  # lazy: torch, the providers; `kernorch --help` stays fast
    from kernorch.runtime.compile import tune  # lazy: torch, the code generator; as above

    kw = {} if args.providers is None else {"providers": tuple(p for p in args.providers.split(",") if p)}
    shapes = parse_input_shapes(args.input_shape) or None
    # One set of workers for every model.
    with cluster_from(None if args.ray is None else f"ray:{args.ray}") as cluster:
        for model in args.models:
            rep = tune(model, db=args.db, input_shapes=shapes, threads=args.threads, regions=not args.no_regions,
                       cluster=cluster, **kw)
            print(f"{model}: {rep.measured} kernels measured, {rep.cached} from the database, {rep.failed} "
                  f"rejected, {rep.seconds['total']:.1f} s" + (f"; {rep.timing_note()}" if rep.timing_note() else ""))
    return 0


def cmd_db_retune(args) -> int:
    from kernorch.orchestrate.machine import target_name  # lazy: the code generator; `kernorch --help` stays fast
    from kernorch.orchestrate.measure import CODEGEN_VERSION  # lazy: torch, the code generator; as above

    env = Env.read()  # this command's entry point: the environment read once
    threads = args.threads or env.threads
    target = target_name("cpu", threads, env.cc, env.cflags)
    with _open(args.db) as db:
        bad = [(row, why) for row, why in suspicious(db) if row.target == target and row.version == CODEGEN_VERSION]
        if not bad:
            print(f"OK: no suspicious prices for target {target} in {db.path}")
            return 0
        before = {(row.key, row.record.provider): (row.record.seconds, why) for row, why in bad}
        db.distrust({row.key for row, _ in bad})
        kw = {} if args.providers is None else {"providers": tuple(p for p in args.providers.split(",") if p)}
        kernorch.compile(args.model, db=db, input_shapes=parse_input_shapes(args.input_shape) or None,
                         threads=threads, regions=not args.no_regions, require_quiet=args.require_quiet,
                         progress=True, **kw)
        after = {(r.key, r.record.provider): r.record for r in db.rows() if r.target == target}
        redone = [k for k in before if k[0] not in db.distrusted]
        print(f"re-measured {len({k for k, _ in redone})} of {len({k for k, _ in before})} suspicious kernel(s) "
              f"for {target}:")
        for k in redone:
            new = after.get(k)
            now = "gone" if new is None or not new.ok else f"{new.seconds * 1e3:.4f} ms"
            print(f"  {k[0][:12]} {k[1]:<14} {before[k][0] * 1e3:.4f} ms -> {now}   (was: {before[k][1]})")
        left = len({k for k, _ in before} - {k for k, _ in redone})
        if left:
            print(f"{left} suspicious kernel(s) were not reached by this model's compile (other models or options)")
    return 0


def _age(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit} ago"
    return f"{seconds:.0f} s ago"
