"""Measure only what can win (issue 47): a measured compile trains the learned cost model
(learned_cost.py) on every price this machine's tuning database holds with kernel features, and
prices the candidates it has not measured by the model's prediction, lowered to an optimistic
bound. planning.plan_kernels then solves, measures the kernels the plan picked that were only
predicted, and solves again until the plan holds measured kernels only: no unmeasured candidate,
even at its optimistic price, can then make the plan cheaper, so it need not be timed.

Why an optimistic bound and not the prediction: a prediction that is too high would hide a kernel
that wins, and nothing would ever measure it; priced at the low end of the model's held-out error
it gets its chance. The bound is a quantile of measured over predicted seconds: first on held-out
kernels of this database, then on the kernels this compile has measured (the model being compiled
is one the rows never saw), so a model that predicts well here measures little, and one that does
not measures more. With too few prices (a new machine, a new code-generator version) there is no
model and every candidate is timed, as with ``tuning="full"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernorch import codegen
from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.features import FEATURES_VERSION, kernel_features
from kernorch.orchestrate.learned_cost import LearnedCost
from kernorch.orchestrate.measure import ordered_outputs

MIN_ROWS = 300  # prices with features needed before the model is trusted to skip any timing
HELD_OUT = 0.2  # share of the kernels kept out of the first fit to measure the model's error
OPTIMISM_QUANTILE = 0.2  # unmeasured candidates are priced at this quantile of measured / predicted
CALIBRATION_MIN = 20  # measured kernels of the model being compiled needed to draw the optimism from them


@dataclass
class LearnedPrices:
    """``price(candidate)`` -> optimistic seconds in the model, from the fitted model, memoized by key."""

    measured: object  # orchestrate.measure.MeasuredCost
    model: object  # learned_cost.LearnedCost
    rows: int  # training prices
    error: float  # median |predicted - measured| / measured on held-out kernels
    rho: float  # Spearman rank correlation of predicted and measured on held-out kernels
    optimism: float  # the factor on predictions (<= 1)
    calibrated: int = 0  # this model's measured kernels the optimism was last drawn from (0: held-out rows)
    _memo: dict[str, float | None] = field(default_factory=dict)  # key -> predicted seconds in the model

    def predict_many(self, cands: list[Candidate]) -> None:
        """Predict every candidate of ``cands`` not predicted yet, in one call of the model."""
        m = self.measured
        todo = {m.key(c): c for c in cands if m.key(c) not in self._memo}
        rows, owners = [], []
        for key, c in todo.items():
            outs = ordered_outputs(m._pos, c)
            feats = kernel_features(m.g, c.nodes, outs, m.threads)
            for provider in self._providers(c, outs):
                rows.append((feats, provider))
                owners.append(key)
            self._memo[key] = None
        if not rows:
            return
        seconds = self.model.predict(np.array([r[0] for r in rows]), [r[1] for r in rows])
        for key, (_, provider), s in zip(owners, rows, seconds):
            total = float(s) + (m.native_overhead_s if provider.startswith("codegen") else m.kernel_overhead_s)
            if self._memo[key] is None or total < self._memo[key]:
                self._memo[key] = total

    def calibrate(self, cands: list[Candidate], min_kernels: int = CALIBRATION_MIN) -> None:
        """Draw the optimism from the measured kernels among ``cands`` (the caller passes those this
        compile timed: out of sample, unlike kernels the database already held, which the model was
        fitted on): OPTIMISM_QUANTILE of their measured over predicted seconds. Prices of a model the
        training rows never saw can be off by a common factor (its shapes, its layouts); held-out rows
        of the database do not show that, its own measured kernels do."""
        m = self.measured
        mine = {m.key(c): c for c in cands if m.has(c)}
        self.predict_many(list(mine.values()))
        ratios = [m.hot(c) / self._memo[k] for k, c in mine.items() if m.hot(c) and self._memo.get(k)]
        if len(ratios) >= min_kernels:
            self.optimism = min(1.0, float(np.quantile(ratios, OPTIMISM_QUANTILE)))
            self.calibrated = len(ratios)

    def _providers(self, c: Candidate, outs) -> list[str]:
        m = self.measured
        names = ["codegen:c"] if codegen.can_generate(m.g, c.nodes, outs) else []
        if m._external(c):
            names += [p.name for p in m.kernel_providers(c)]
        return names

    def __call__(self, c: Candidate) -> float | None:
        key = self.measured.key(c)
        if key not in self._memo:
            self.predict_many([c])
        price = self._memo[key]
        return None if price is None else self.optimism * price

    def describe(self) -> str:
        drawn = f"this model's {self.calibrated} measured kernels" if self.calibrated else "held-out prices"
        return (f"learned cost model: {self.rows} prices of this machine, held-out median error {self.error:.0%}, "
                f"rank correlation {self.rho:.2f}; unmeasured kernels priced at {self.optimism:.2f}x prediction "
                f"(from {drawn})")


def train(measured, min_rows: int | None = None, seed: int = 0) -> tuple[LearnedPrices | None, str]:
    """The model over ``measured``'s database rows for its target and code-generator version, or
    None and why not (too few prices, scikit-learn missing); ``min_rows``: MIN_ROWS."""
    min_rows = MIN_ROWS if min_rows is None else min_rows
    rows = measured.db.priced_features(measured.target, measured.version, FEATURES_VERSION)
    if len(rows) < min_rows:
        return None, (f"every candidate timed: the learned cost model needs {min_rows} prices with features on "
                      f"this machine, the tuning database holds {len(rows)}")
    try:
        import sklearn  # noqa: F401 - the trees' library, an optional dependency: say so rather than fail
    except ImportError:
        return None, "every candidate timed: the learned cost model needs scikit-learn (pip install scikit-learn)"
    keys = sorted({r[0] for r in rows})
    rng = np.random.default_rng(seed)
    held = set(rng.choice(keys, size=max(1, int(len(keys) * HELD_OUT)), replace=False).tolist())
    train_rows = [r for r in rows if r[0] not in held]
    test_rows = [r for r in rows if r[0] in held]
    first = LearnedCost.fit(np.array([r[1] for r in train_rows]), [r[2] for r in train_rows],
                            np.array([r[3] for r in train_rows]), seed=seed)
    pred = first.predict(np.array([r[1] for r in test_rows]), [r[2] for r in test_rows])
    meas = np.array([r[3] for r in test_rows])
    ratio = meas / pred
    from scipy.stats import spearmanr

    rho = float(spearmanr(pred, meas).correlation) if len(meas) > 2 else float("nan")
    model = LearnedCost.fit(np.array([r[1] for r in rows]), [r[2] for r in rows], np.array([r[3] for r in rows]),
                            seed=seed)
    optimism = min(1.0, float(np.quantile(ratio, OPTIMISM_QUANTILE)))
    prices = LearnedPrices(measured, model, len(rows), float(np.median(np.abs(pred - meas) / meas)), rho, optimism)
    return prices, prices.describe()
