"""The tuning database: measured kernel costs in a SQLite file, so a model is tuned once.

Rows are keyed by (canonical kernel key, target, code-generator version, provider). Every
measurement is committed on its own in WAL mode, so a run killed midway loses at most the kernel
in flight and the file stays readable.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS costs (
    key TEXT NOT NULL,
    target TEXT NOT NULL,
    version TEXT NOT NULL,
    provider TEXT NOT NULL,
    seconds REAL,            -- NULL when the kernel cannot be used (see status)
    status TEXT NOT NULL,    -- ok | cannot_generate | build_failed | verify_failed | run_failed
    detail TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    PRIMARY KEY (key, target, version, provider)
);
"""


def default_path() -> Path:
    """``$KERNORCH_DB``, else ``$XDG_CACHE_HOME/kernorch/tuning.sqlite`` (``~/.cache`` by default)."""
    if os.environ.get("KERNORCH_DB"):
        return Path(os.environ["KERNORCH_DB"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "kernorch" / "tuning.sqlite"


@dataclass(frozen=True)
class Record:
    provider: str
    seconds: float | None
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.seconds is not None


class TuningDB:
    """A thin, crash-safe store of measured costs."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        if str(self.path) != ":memory:":
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(SCHEMA)

    def get(self, key: str, target: str, version: str) -> dict[str, Record]:
        rows = self._conn.execute(
            "SELECT provider, seconds, status, detail FROM costs WHERE key=? AND target=? AND version=?",
            (key, target, version)).fetchall()
        return {r[0]: Record(*r) for r in rows}

    def get_many(self, keys: list[str], target: str, version: str) -> dict[str, dict[str, Record]]:
        out: dict[str, dict[str, Record]] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._conn.execute(
                f"SELECT key, provider, seconds, status, detail FROM costs "
                f"WHERE target=? AND version=? AND key IN ({marks})", (target, version, *chunk)).fetchall()
            for k, *rest in rows:
                out.setdefault(k, {})[rest[0]] = Record(*rest)
        return out

    def put(self, key: str, target: str, version: str, record: Record) -> None:
        """Store one measurement in its own transaction (durable before the next kernel starts)."""
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO costs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, target, version, record.provider, record.seconds, record.status, record.detail, time.time()))

    def count(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM costs").fetchone()[0]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
