"""What every target's measurer shares (orchestrate.measure.MeasuredCost on CPU,
targets.cuda_measure.CudaMeasuredCost on CUDA): candidates keyed canonically, prices memoized
per key, an estimate standing in for candidates not measured yet (``fallback``, set by
planning.plan_kernels), and the tuning database consulted before anything is measured."""

from __future__ import annotations

from typing import Callable, Iterable

from kernorch.ir.graph import Graph
from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.tuning_db import RETIMED, Record, TuningDB


class PricedCandidates:
    """Subclasses set ``g``, ``db``, ``target`` (the database's target name), ``stats`` and
    ``progress``, call ``_start_memo()``, and implement ``prefetch`` and ``_remember``."""

    g: Graph
    db: TuningDB
    target: str

    def _start_memo(self) -> None:
        self._pos = {p.output: i for i, p in enumerate(self.g.prims)}
        self._memo: dict[str, float | None] = {}
        self.best: dict[str, Record] = {}
        self._keys: dict[Candidate, str] = {}
        self.fallback: Callable[[Candidate], float | None] | None = None
        self._in_context: dict[str, float] = {}
        self._scales: dict[str, float] = {}  # by provider, what being in the model did to prices
        self._scale = 1.0  # the same over every provider

    def price_in_context(self, seen: dict[str, float], min_kernels: int = 3) -> None:
        """Price as the model runs: the kernels in ``seen`` (by key) at the seconds they took
        inside a call of a built plan, every other kernel at its measured price times what being
        in the model did to the kernels seen of its provider (their in-context over measured
        time; over all providers while a provider has fewer than ``min_kernels`` seen). Provider
        regions keep their prices: they are timed whole, on the path they would run."""
        self._in_context.update(seen)
        sums: dict[str, list[float]] = {}
        for key, t in self._in_context.items():
            hot = self._memo.get(key)
            if hot:
                for name in (self._provider(key), ""):
                    acc = sums.setdefault(name, [0.0, 0.0, 0])
                    acc[0] += t
                    acc[1] += hot
                    acc[2] += 1
        every = sums.pop("", None)
        self._scale = every[0] / every[1] if every else 1.0
        self._scales = {name: t / hot for name, (t, hot, n) in sums.items() if n >= min_kernels}

    def _provider(self, key: str) -> str:
        best = self.best.get(key)
        return best.provider if best is not None else "?"

    def hot(self, cand: Candidate) -> float | None:
        """The price of ``cand`` timed alone (its inputs and weights hot), measured or stored."""
        return self._memo.get(self.key(cand))

    def key(self, cand: Candidate) -> str:
        k = self._keys.get(cand)  # every orchestration pass asks again
        if k is None:
            k = self._keys[cand] = self.g.kernel_key(cand.nodes, sorted(cand.outputs, key=self._pos.__getitem__))
        return k

    def __call__(self, cand: Candidate) -> float | None:
        k = self.key(cand)
        if k not in self._memo:
            if self.fallback is not None:
                return self.fallback(cand)
            self.prefetch([cand])
        if k in self._in_context:
            return self._in_context[k]
        price = self._memo.get(k)
        if price is None or not self._in_context:
            return price
        return price * self._scales.get(self._provider(k), self._scale)

    def settled(self, cand: Candidate) -> bool:
        """Whether the price in use was re-timed beside a declined alternative (recheck.py), by
        this compile or an earlier one on the same database."""
        best = self.best.get(self.key(cand))
        return best is not None and RETIMED in best.flag_set

    def has(self, cand: Candidate) -> bool:
        """Whether ``cand`` has been measured (or found in the database)."""
        return self.key(cand) in self._memo

    def prefetch(self, cands: Iterable[Candidate]) -> None:
        raise NotImplementedError

    def _remember(self, key: str, recs: dict[str, Record]) -> None:
        raise NotImplementedError

    def _unknown(self, cands: Iterable[Candidate], version: str) -> dict[str, Candidate]:
        """The candidates (by key, first of each) neither priced in this process nor stored in
        the database for ``version`` of the code generator; stored ones are remembered."""
        todo: dict[str, Candidate] = {}
        for c in cands:
            k = self.key(c)
            if k not in self._memo and k not in todo:
                todo[k] = c
        if todo:
            for k, recs in self.db.get_many(list(todo), self.target, version).items():
                self._remember(k, recs)
                self.stats.cached += 1
                del todo[k]
        return todo
