"""How well a learned cost model ranks kernels of models it never saw (issue 47), from the prices
earlier compiles left in tuning databases; nothing is timed.

    python -m bench.cost_model --db A.sqlite [--db B.sqlite ...] [--models resnet50,bert_base,...] [--backfill]

For each model, a compile with modelled costs (cost="model", regions off: kernorch's own plan) lists
every candidate kernel the orchestrator prices, with its database key and its features
(kernorch/orchestrate/features.py). Prices measured for those keys on this machine's signature at
``--threads`` (any code-generator version, settled prices only) are the data. Leave one model out:
the model of kernorch/orchestrate/learned_cost.py trains on the other models' kernels and predicts
the held-out model's; the roofline estimate each price was stored with (scaled per provider by its
median measured/roofline ratio on the training models) is the baseline. Per held-out model the
table gives the rows, Spearman's rank correlation of predicted and measured seconds (all of the
model's priced kernels, every provider) and the median relative error |predicted - measured| /
measured, for both; then what a plan's choice turns on: among the candidates that compute the same
values (same outputs, any provider), how often the model orders two of them as measured, picks the
measured fastest, and the measured time of its pick over the fastest's (median, 90% quantile).
"""

from __future__ import annotations

import argparse
import collections
import sqlite3
import tempfile
from pathlib import Path

import numpy as np

MODELS = ("resnet50", "mobilenetv3_large", "bert_base", "efficientvit_b0", "vit_tiny")


def model_kernels(name: str, threads: int, small: bool = False) -> dict[str, tuple[tuple[float, ...], frozenset]]:
    """Database key -> (features, the values it writes) of every candidate a modelled-cost compile
    of ``name`` prices."""
    import kernorch
    from kernorch.orchestrate.features import kernel_features
    from kernorch.runtime import compile as pipeline

    from bench.run import load_model

    args = argparse.Namespace(small=small, exporter="torchscript", depth=None)
    path = load_model(name, args)["path"]
    seen: dict[str, tuple[float, ...]] = {}
    plain = pipeline.plan_kernels

    def observing(dag, strategy, cost, rough, measured, key_fn, *rest, **kw):
        def observed(c):
            key = key_fn(c)
            if key not in seen:
                outs = sorted(c.outputs, key=measured._pos.__getitem__)
                seen[key] = kernel_features(measured.g, c.nodes, outs, threads), frozenset(outs)
            return rough(c)
        return plain(dag, strategy, cost, observed, measured, key_fn, *rest, **kw)

    pipeline.plan_kernels = observing
    try:
        with tempfile.TemporaryDirectory() as tmp:
            kernorch.compile(str(path), cost="model", regions=False, threads=threads, progress=False,
                             db=str(Path(tmp) / "db.sqlite"))
    finally:
        pipeline.plan_kernels = plain
    return seen


def measured_prices(dbs: list[str], threads: int) -> dict[tuple[str, str], tuple[float, float | None]]:
    """(key, provider) -> (seconds, roofline seconds stored with it): settled prices at ``threads``,
    the newest where several databases or versions hold one."""
    out: dict[tuple[str, str], tuple[float, float | None, float]] = {}
    for path in dbs:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
            rows = c.execute("SELECT key, provider, seconds, roofline_s, created, target FROM costs "
                             "WHERE status = 'ok' AND seconds > 0 AND flags NOT LIKE '%unsettled%'")
            for key, provider, seconds, roofline, created, target in rows:
                if not target.startswith(f"cpu-t{threads}@"):
                    continue
                if (key, provider) not in out or out[key, provider][2] < created:
                    out[key, provider] = (seconds, roofline, created)
    return {k: v[:2] for k, v in out.items()}


def backfill(dbs: list[str], feats: dict[str, tuple[float, ...]]) -> None:
    from kernorch.orchestrate.features import FEATURES_VERSION
    from kernorch.orchestrate.tuning_db import TuningDB

    for path in dbs:
        with TuningDB(path) as db:
            db.put_features(FEATURES_VERSION, feats.items())


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).correlation)


def choices(pred: np.ndarray, meas: np.ndarray, groups: list) -> dict[str, float]:
    """How the predictions choose among rows of the same group (the alternatives for the same
    values): share of pairs ordered as measured, share of groups whose measured fastest is picked,
    and the measured time of the pick over the fastest's (median, 90% quantile)."""
    by = collections.defaultdict(list)
    for i, grp in enumerate(groups):
        by[grp].append(i)
    agree = pairs = right = 0
    regret = []
    for idx in (np.array(v) for v in by.values() if len(v) > 1):
        p, m = pred[idx], meas[idx]
        order = np.sign(p[:, None] - p[None, :]) * np.sign(m[:, None] - m[None, :])
        agree, pairs = agree + (order > 0).sum(), pairs + (order != 0).sum()
        right += int(np.argmin(p) == np.argmin(m))
        regret.append(m[np.argmin(p)] / m.min())
    if not regret:
        return dict(groups=0, pairs_right=np.nan, pick_right=np.nan, regret_median=np.nan, regret_p90=np.nan)
    return dict(groups=len(regret), pairs_right=agree / max(pairs, 1), pick_right=right / len(regret),
                regret_median=float(np.median(regret)), regret_p90=float(np.quantile(regret, 0.9)))


def evaluate(data: dict[str, list[tuple]], seed: int = 0) -> list[dict]:
    """Leave one model out; ``data``: model -> [(features, provider, seconds, roofline, group)]."""
    from kernorch.orchestrate.learned_cost import LearnedCost

    rows = []
    for held in data:
        train = [r for m, rs in data.items() if m != held for r in rs]
        test = data[held]
        if not train or not test:
            continue
        model = LearnedCost.fit(np.array([r[0] for r in train]), [r[1] for r in train], np.array([r[2] for r in train]),
                                seed=seed)
        meas = np.array([r[2] for r in test])
        pred = model.predict(np.array([r[0] for r in test]), [r[1] for r in test])
        ratio = collections.defaultdict(list)
        for _, provider, seconds, roof, _ in train:
            if roof:
                ratio[provider].append(seconds / roof)
        scale = {p: float(np.median(v)) for p, v in ratio.items()}
        roof = np.array([(r[3] or np.nan) * scale.get(r[1], 1.0) for r in test])
        ok = np.isfinite(roof)
        rows.append(dict(model=held, rows=len(test), train_rows=len(train),
                         learned_rho=spearman(pred, meas), learned_err=float(np.median(np.abs(pred - meas) / meas)),
                         roofline_rho=spearman(roof[ok], meas[ok]),
                         roofline_err=float(np.median(np.abs(roof[ok] - meas[ok]) / meas[ok])),
                         **choices(pred, meas, [r[4] for r in test])))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", action="append", required=True, help="a tuning database (repeat for several)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--small", action="store_true", help="the bench's small sizes")
    ap.add_argument("--backfill", action="store_true",
                    help="also store the models' kernel features in every --db (databases written before compiles "
                         "stored them), so a compile on them can train the learned cost model")
    args = ap.parse_args(argv)
    prices = measured_prices(args.db, args.threads)
    by_key = collections.defaultdict(list)
    for (key, provider), (seconds, roof) in prices.items():
        by_key[key].append((provider, seconds, roof))
    data: dict[str, list[tuple]] = {}
    for name in [m for m in args.models.split(",") if m]:
        feats = model_kernels(name, args.threads, args.small)
        if args.backfill:
            backfill(args.db, {k: f for k, (f, _) in feats.items()})
        data[name] = [(feats[k][0], p, s, r, feats[k][1]) for k in feats for p, s, r in by_key.get(k, ())]
        print(f"{name}: {len(feats)} candidates priced by the orchestrator, {len(data[name])} measured prices found",
              flush=True)
    rows = evaluate({m: rs for m, rs in data.items() if rs})
    print(f"\n{'held-out model':20} {'prices':>7} {'train':>7} {'learned rho':>11} {'err':>6} {'roofline rho':>12} {'err':>6}"
          f" | {'groups':>6} {'pairs':>6} {'picks':>6} {'regret':>6} {'p90':>6}")
    for r in rows:
        print(f"{r['model']:20} {r['rows']:7d} {r['train_rows']:7d} {r['learned_rho']:11.3f} {r['learned_err']:6.2f} "
              f"{r['roofline_rho']:12.3f} {r['roofline_err']:6.2f} | {r['groups']:6d} {r['pairs_right']:6.3f} "
              f"{r['pick_right']:6.3f} {r['regret_median']:6.3f} {r['regret_p90']:6.2f}")
    print("pairs: alternatives for the same values ordered as measured; picks: the measured fastest predicted "
          "fastest; regret: measured time of the predicted fastest over the fastest's (median, 90% quantile)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
