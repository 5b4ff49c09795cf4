"""Combine tuning databases measured on several machines: ``kernorch db export | import | merge``.

Rows keep their key, target (which names the machine kind, see machine.py), code-generator
version, provider, evidence and time of measurement. Conflict rule, for one (key, target, version,
provider): the more trustworthy record wins (trust.better: a price over a failure, a settled price
over an unsettled one, then the cheaper, since interference only ever inflates a price); between
equally ranked records the newer one wins. Merging is idempotent and order-independent up to ties.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kernorch.errors import KernorchError
from kernorch.orchestrate.trust import rank
from kernorch.orchestrate.tuning_db import Record, Row, TuningDB


@dataclass
class MergeCounts:
    added: int = 0
    replaced: int = 0
    kept: int = 0  # the database's own record was as good or better


def merge_rows(dst: TuningDB, rows: Iterable[Row]) -> MergeCounts:
    counts = MergeCounts()
    for row in rows:
        have = dst.find(row.key, row.target, row.version, row.record.provider)
        if have is None:
            counts.added += 1
        elif _wins(row, have):
            counts.replaced += 1
        else:
            counts.kept += 1
            continue
        dst.put(row.key, row.target, row.version, row.record, created=row.created)
    return counts


def _wins(new: Row, old: Row) -> bool:
    if new.record == old.record:
        return False
    if rank(new.record) != rank(old.record):
        return rank(new.record) < rank(old.record)
    return new.created > old.created  # a tie: the newer measurement


def export_rows(db: TuningDB, path: str | Path) -> int:
    """Every row as one JSON object per line; returns the count."""
    n = 0
    with open(path, "w") as f:
        for row in db.rows():
            f.write(json.dumps({"key": row.key, "target": row.target, "version": row.version,
                                "created": row.created, **dataclasses.asdict(row.record)}) + "\n")
            n += 1
    return n


def read_rows(path: str | Path) -> Iterator[Row]:
    """Rows of an ``export_rows`` file; a malformed line is one error naming file and line."""
    fields = {f.name for f in dataclasses.fields(Record)}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                record = Record(**{k: v for k, v in d.items() if k in fields})
                yield Row(str(d["key"]), str(d["target"]), str(d["version"]), float(d["created"]), record)
            except (ValueError, KeyError, TypeError) as e:
                raise KernorchError(f"{path}:{n}: not a kernorch tuning-database export line ({e})") from None
