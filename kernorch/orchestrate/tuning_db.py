"""The tuning database: measured kernel costs in a SQLite file, so a model is tuned once.

Rows are keyed by (canonical kernel key, target, code-generator version, provider) and carry the
evidence behind each price (clean and disturbed sample counts, minimum, spread, the load of other
processes, the roofline estimate, flags), so suspicious prices can be found and re-measured later
(``kernorch db check`` / ``retune``). Every measurement is committed on its own in WAL mode, so a
run killed midway loses at most the kernel in flight and the file stays readable.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from kernorch.errors import KernorchError
from kernorch.options import Env

SCHEMA = """
CREATE TABLE IF NOT EXISTS costs (
    key TEXT NOT NULL,
    target TEXT NOT NULL,
    version TEXT NOT NULL,
    provider TEXT NOT NULL,
    seconds REAL,            -- NULL when the kernel cannot be used (see status)
    status TEXT NOT NULL,    -- ok | cannot_generate | build_failed | verify_failed | run_failed | plan
    detail TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    PRIMARY KEY (key, target, version, provider)
);
CREATE TABLE IF NOT EXISTS features (
    key TEXT NOT NULL,       -- a kernel key, as in costs
    version TEXT NOT NULL,   -- orchestrate/features.py FEATURES_VERSION
    vals TEXT NOT NULL,      -- JSON list of floats, FEATURE_NAMES in order
    PRIMARY KEY (key, version)
);
"""
# Evidence columns, added to databases written before they existed (those rows read as NULL:
# "no evidence").
EVIDENCE = {"samples": "INTEGER", "disturbed": "INTEGER", "min_s": "REAL", "spread": "REAL", "load": "REAL",
            "roofline_s": "REAL", "flags": "TEXT NOT NULL DEFAULT ''"}
# Flags a price may carry (comma-separated in ``flags``).
UNSETTLED = "unsettled"  # never collected enough undisturbed samples
FAR_ABOVE_ROOFLINE = "far_above_roofline"  # still far above its roofline estimate after a re-measure
RETIMED = "retimed"  # timed again in turn with the alternatives a plan declined (recheck.py): settled


class TuningDBError(KernorchError):
    """The tuning database cannot be opened, read or written (the message names the file)."""


def default_path() -> Path:
    """``$KERNORCH_DB``, else ``$XDG_CACHE_HOME/kernorch/tuning.sqlite`` (``~/.cache`` by default):
    Env.db_path, read now (a compile passes the path its entry point read instead)."""
    return Env.read().db_path


@dataclass(frozen=True)
class Record:
    """One provider's attempt at one kernel, with the evidence behind its price."""

    provider: str
    seconds: float | None
    status: str
    detail: str = ""
    samples: int | None = None  # clean samples behind ``seconds``; None: no evidence recorded
    disturbed: int | None = None  # samples discarded because the process waited for a CPU
    min_s: float | None = None
    spread: float | None = None  # (max - min) / median of the clean samples
    load: float | None = None  # cores other processes kept busy while it was timed
    roofline_s: float | None = None  # the analytical estimate at the time
    flags: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.seconds is not None

    @property
    def flag_set(self) -> frozenset[str]:
        return frozenset(f for f in self.flags.split(",") if f)

    @property
    def doubtful(self) -> bool:
        """Flagged as a price not to trust (``retimed`` is the opposite: a settled price)."""
        return bool(self.flag_set & {UNSETTLED, FAR_ABOVE_ROOFLINE})


COLUMNS = [f.name for f in fields(Record)]
_SELECT = ", ".join(COLUMNS)


@dataclass(frozen=True)
class Row:
    """A stored record with where it belongs and when it was measured."""

    key: str
    target: str
    version: str
    created: float
    record: Record


class TuningDB:
    """A thin, crash-safe store of measured costs. Keys passed to ``distrust`` read as unknown
    until they are stored again (``kernorch db retune`` re-measures them that way)."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.distrusted: set[str] = set()
        memory = str(self.path) == ":memory:"
        if not memory and self.path.is_dir():
            raise TuningDBError(f"tuning database {self.path} is a directory; pass a file path (--db FILE)")
        if not memory and self.path.exists() and not os.access(self.path, os.W_OK):
            raise TuningDBError(f"tuning database {self.path} is read-only; pass a writable --db FILE or set KERNORCH_DB")
        try:
            if not memory:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
            if not memory:
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(SCHEMA)
            have = {r[1] for r in self._conn.execute("PRAGMA table_info(costs)")}
            for name, decl in EVIDENCE.items():
                if name not in have:
                    self._conn.execute(f"ALTER TABLE costs ADD COLUMN {name} {decl}")
        except (sqlite3.Error, OSError) as e:
            raise TuningDBError(f"tuning database {self.path}: {_why(e)}") from None

    def _query(self, sql: str, args: Iterable = ()) -> list[tuple]:
        try:
            return self._conn.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error as e:
            raise TuningDBError(f"tuning database {self.path}: {_why(e)}") from None

    def get(self, key: str, target: str, version: str) -> dict[str, Record]:
        return self.get_many([key], target, version).get(key, {})

    def get_many(self, keys: list[str], target: str, version: str) -> dict[str, dict[str, Record]]:
        out: dict[str, dict[str, Record]] = {}
        keys = [k for k in keys if k not in self.distrusted]
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for k, *rest in self._query(f"SELECT key, {_SELECT} FROM costs WHERE target=? AND version=? "
                                        f"AND key IN ({marks})", (target, version, *chunk)):
                out.setdefault(k, {})[rest[0]] = Record(*rest)
        return out

    def put(self, key: str, target: str, version: str, record: Record, created: float | None = None) -> None:
        """Store one measurement in its own transaction (durable before the next kernel starts);
        ``created`` keeps the time of a measurement taken elsewhere (merges)."""
        values = [getattr(record, c) for c in COLUMNS]
        try:
            with self._conn:
                self._conn.execute(
                    f"INSERT OR REPLACE INTO costs (key, target, version, created, {_SELECT}) "
                    f"VALUES (?, ?, ?, ?, {', '.join('?' * len(COLUMNS))})",
                    (key, target, version, time.time() if created is None else created, *values))
        except sqlite3.Error as e:
            raise TuningDBError(f"tuning database {self.path}: {_why(e)}") from None
        self.distrusted.discard(key)

    def put_features(self, version: str, items: Iterable[tuple[str, Sequence[float]]]) -> None:
        """Store what the learned cost model sees of each kernel key (orchestrate/features.py), in one
        transaction: a later compile on this machine trains on every price that has them."""
        self.put_feature_rows([(k, version, json.dumps([round(float(x), 6) for x in v])) for k, v in items])

    def feature_rows(self) -> list[tuple[str, str, str]]:
        """Every stored (key, features version, features as JSON): ``put_feature_rows`` of another
        database copies them (``kernorch db merge``)."""
        return self._query("SELECT key, version, vals FROM features")

    def put_feature_rows(self, rows: Iterable[tuple[str, str, str]]) -> None:
        try:
            with self._conn:
                self._conn.executemany("INSERT OR REPLACE INTO features (key, version, vals) VALUES (?, ?, ?)", rows)
        except sqlite3.Error as e:
            raise TuningDBError(f"tuning database {self.path}: {_why(e)}") from None

    def priced_features(self, target: str, version: str, features_version: str
                        ) -> list[tuple[str, list[float], str, float]]:
        """(key, features, provider, seconds) of every settled price stored for ``target`` by
        code-generator ``version`` whose kernel has features: the learned cost model's training rows."""
        rows = self._query(
            "SELECT c.key, f.vals, c.provider, c.seconds FROM costs c JOIN features f ON f.key = c.key "
            "WHERE c.target=? AND c.version=? AND f.version=? AND c.status='ok' AND c.seconds > 0 "
            f"AND c.flags NOT LIKE '%{UNSETTLED}%' AND c.flags NOT LIKE '%{FAR_ABOVE_ROOFLINE}%'",
            (target, version, features_version))
        return [(k, json.loads(v), p, s) for k, v, p, s in rows if k not in self.distrusted]

    def distrust(self, keys: Iterable[str]) -> None:
        self.distrusted.update(keys)

    def rows(self) -> Iterator[Row]:
        """Every stored record, oldest first."""
        for key, target, version, created, *rest in self._query(
                f"SELECT key, target, version, created, {_SELECT} FROM costs ORDER BY created"):
            yield Row(key, target, version, created, Record(*rest))

    def find(self, key: str, target: str, version: str, provider: str) -> Row | None:
        got = self._query(f"SELECT created, {_SELECT} FROM costs WHERE key=? AND target=? AND version=? "
                          f"AND provider=?", (key, target, version, provider))
        return Row(key, target, version, got[0][0], Record(*got[0][1:])) if got else None

    def count(self) -> int:
        return self._query("SELECT COUNT(*) FROM costs")[0][0]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _why(e: BaseException) -> str:
    """SQLite's and the OS's reasons in words a user can act on."""
    msg = str(e) or type(e).__name__
    if "not a database" in msg:
        return "not a kernorch tuning database (not SQLite, or corrupted); pass another --db or delete the file"
    if "readonly" in msg or "read-only" in msg or isinstance(e, PermissionError):
        return f"cannot write ({msg}); pass a writable --db FILE or set KERNORCH_DB"
    if "unable to open" in msg:
        return f"cannot open ({msg}); check that its folder exists and is writable"
    if "malformed" in msg:
        return "the file is corrupted (database disk image is malformed); delete it to start over"
    return msg
