"""A learned cost model (issue 47): gradient-boosted trees over a kernel's features (features.py)
and its provider, trained on the tuning database's measured prices, predicting log2 seconds.

Why trees on logs: prices span six decades and depend on the features through thresholds (a
reduction that fits in cache, a convolution whose taps fit the registers), which trees find and a
linear model does not; a relative error is what a plan's choice depends on. scikit-learn's
histogram gradient boosting (LightGBM's algorithm) trains on 100k rows in seconds on one core. It
runs on one OpenMP thread: its threads spin at barriers, and beside PyTorch's pool or any other load
on a small machine a 2000-row fit took 50-75 s instead of 0.7 s (measured, loaded 2-vCPU VM).

Not yet used by compile(): bench/cost_model.py measures how well it ranks held-out models'
kernels against the roofline model, from prices other compiles left in a database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from kernorch.orchestrate.features import FEATURE_NAMES


@dataclass
class LearnedCost:
    """A fitted model: ``predict(features, providers)`` -> seconds."""

    providers: tuple[str, ...]  # one-hot columns, in this order; an unseen provider has none set
    model: object  # sklearn.ensemble.HistGradientBoostingRegressor

    @classmethod
    def fit(cls, features: np.ndarray, providers: Sequence[str], seconds: np.ndarray, seed: int = 0,
            max_iter: int = 300) -> "LearnedCost":
        from sklearn.ensemble import HistGradientBoostingRegressor  # lazy: only a fit needs scikit-learn
        from threadpoolctl import threadpool_limits  # lazy: scikit-learn's own dependency

        names = tuple(sorted(set(providers)))
        x = _design(features, providers, names)
        model = HistGradientBoostingRegressor(max_iter=max_iter, learning_rate=0.1, max_leaf_nodes=63,
                                              l2_regularization=1e-3, random_state=seed)
        with threadpool_limits(limits=1, user_api="openmp"):
            model.fit(x, np.log2(np.asarray(seconds, dtype=float)))
        return cls(names, model)

    def predict(self, features: np.ndarray, providers: Sequence[str]) -> np.ndarray:
        from threadpoolctl import threadpool_limits  # lazy: scikit-learn's own dependency

        with threadpool_limits(limits=1, user_api="openmp"):
            return np.exp2(self.model.predict(_design(features, providers, self.providers)))


def _design(features: np.ndarray, providers: Sequence[str], names: tuple[str, ...]) -> np.ndarray:
    features = np.asarray(features, dtype=float).reshape(len(providers), len(FEATURE_NAMES))
    onehot = np.array([[p == n for n in names] for p in providers], dtype=float).reshape(len(providers), len(names))
    return np.hstack([features, onehot])
