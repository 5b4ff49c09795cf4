"""Memoized pricing: each distinct canonical key is checked for feasibility and priced once.
Candidate -> seconds or None; identical kernels of repeated blocks share one entry."""

from __future__ import annotations

from collections.abc import Callable

from kernorch.orchestrate.candidate import Candidate

CostFn = Callable[[Candidate], "float | None"]
KeyFn = Callable[[Candidate], str]
CanGenerate = Callable[[Candidate], bool]


def identity_key(cand: Candidate) -> str:
    """Default key: the candidate itself, so nothing is shared. The IR's key (structure, shapes,
    dtypes) must also tell apart which members a kernel writes."""
    return f"{sorted(cand.nodes)}->{sorted(cand.outputs)}"


class Pricer:
    """Wraps the caller's hooks. `can_generate` and `cost` are called at most once per key."""

    def __init__(self, cost: CostFn, can_generate: CanGenerate | None = None, key_fn: KeyFn | None = None,
                 region_cost: CostFn | None = None) -> None:
        self._cost = cost
        self._region_cost = region_cost
        self._region_prices: dict[str, float | None] = {}
        self._can_generate = can_generate
        self._key_fn = key_fn or identity_key
        self._keys: dict[Candidate, str] = {}
        self._feasible: dict[str, bool] = {}
        self._prices: dict[str, float | None] = {}
        self.cost_calls = 0
        self.generate_calls = 0

    def key(self, cand: Candidate) -> str:
        k = self._keys.get(cand)
        if k is None:
            k = self._keys[cand] = self._key_fn(cand)
        return k

    def can_generate(self, cand: Candidate) -> bool:
        if self._can_generate is None:
            return True
        k = self.key(cand)
        ok = self._feasible.get(k)
        if ok is None:
            self.generate_calls += 1
            ok = self._feasible[k] = bool(self._can_generate(cand))
        return ok

    def price(self, cand: Candidate) -> float | None:
        """Seconds, or None when the candidate cannot be generated or the cost declines it."""
        if not self.can_generate(cand):
            return None
        return self._memoized(self._prices, self._cost, cand)

    def _memoized(self, store: dict[str, float | None], fn: CostFn, cand: Candidate) -> float | None:
        k = self.key(cand)
        if k not in store:
            self.cost_calls += 1
            c = fn(cand)
            store[k] = None if c is None else float(c)
        return store[k]

    @property
    def prices_regions(self) -> bool:
        return self._region_cost is not None

    def price_region(self, cand: Candidate) -> float | None:
        """Seconds for running ``cand`` whole in an external runtime (regions.py), or None."""
        if self._region_cost is None:
            return None
        return self._memoized(self._region_prices, self._region_cost, cand)

    @property
    def distinct_keys(self) -> int:
        return len(self._prices)
