"""When a measured price is trusted: the rules the measurer applies before storing a price and
``kernorch db check`` applies to stored ones. Record(s) in, a reason or a chosen record out."""

from __future__ import annotations

import dataclasses

from kernorch.orchestrate.tuning_db import FAR_ABOVE_ROOFLINE, RETIMED, UNSETTLED, Record

# A price this many times its roofline estimate is re-measured before it is trusted, and flagged
# when it stays there. Generated kernels run 1-5x their roofline here; preempted ones 10-100x.
FAR_ABOVE_ROOFLINE_X = 20.0
# Added to the roofline before comparing: a call through ctypes or a provider costs microseconds
# the roofline's calibrated launch overhead (one tiny NumPy op) does not include.
DISPATCH_FLOOR_S = 25e-6
# A median this far above the fastest clean sample (relative, and absolute: microsecond kernels
# jitter by their whole cost without it mattering to any plan) makes a price suspect in ``db check``.
HIGH_SPREAD = 0.5
SPREAD_FLOOR_S = 20e-6


def roofline_ratio(rec: Record) -> float | None:
    if not rec.ok or rec.roofline_s is None:
        return None
    return rec.seconds / (rec.roofline_s + DISPATCH_FLOOR_S)


def needs_remeasure(rec: Record) -> bool:
    """Measure again later in the run: too few clean samples, or far above the roofline."""
    ratio = roofline_ratio(rec)
    return rec.ok and (UNSETTLED in rec.flag_set or (ratio is not None and ratio > FAR_ABOVE_ROOFLINE_X))


def doubt(rec: Record) -> str | None:
    """Why a stored price should not be trusted, or None."""
    if not rec.ok:
        return None
    why = []
    if UNSETTLED in rec.flag_set:
        why.append(f"unsettled ({rec.samples} clean / {rec.disturbed} disturbed samples)")
    ratio = roofline_ratio(rec)
    if ratio is not None and ratio > FAR_ABOVE_ROOFLINE_X:
        why.append(f"{ratio:.0f}x its roofline estimate")
    if rec.min_s is not None and rec.seconds - rec.min_s > max(HIGH_SPREAD * rec.min_s, SPREAD_FLOOR_S):
        why.append(f"median {rec.seconds / rec.min_s - 1:.0%} above the fastest sample")
    return "; ".join(why) or None


def rank(rec: Record) -> tuple:
    """Smaller is more trustworthy: a price before a failure, a settled price before an unsettled
    one, then the cheaper (interference only ever inflates a price)."""
    if not rec.ok:
        return (2, 0.0)
    return (1 if UNSETTLED in rec.flag_set else 0, rec.seconds)


def better(a: Record, b: Record) -> Record:
    """The more trustworthy of two attempts of one provider at one kernel (``a`` on a tie)."""
    return a if rank(a) <= rank(b) else b


def merge(old: dict[str, Record], new: dict[str, Record]) -> dict[str, Record]:
    """Per provider, the better attempt."""
    return {p: better(old[p], new[p]) if p in old and p in new else old.get(p) or new[p] for p in {*old, *new}}


def final(rec: Record) -> Record:
    """The record as stored after the last attempt: still far above its roofline -> flagged."""
    ratio = roofline_ratio(rec)
    if ratio is None or ratio <= FAR_ABOVE_ROOFLINE_X or FAR_ABOVE_ROOFLINE in rec.flag_set:
        return rec
    return dataclasses.replace(rec, flags=",".join(sorted(rec.flag_set | {FAR_ABOVE_ROOFLINE})))


def retimed(rec: Record) -> Record:
    """The record flagged as re-timed in turn beside a declined alternative (recheck.py)."""
    return dataclasses.replace(rec, flags=",".join(sorted(rec.flag_set | {RETIMED})))
