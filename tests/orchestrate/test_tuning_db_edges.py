"""Tuning-database edges (mutation testing): where the file lives by default, key lookups beyond one
SQL chunk, distrust, every evidence column and ``created`` kept, the journal mode read back by a
plain sqlite3 connection, and each error reason in words. Writes only under tmp_path."""

from __future__ import annotations

import sqlite3
import time

import pytest

from kernorch.orchestrate import tuning_db
from kernorch.orchestrate.tuning_db import Record, TuningDB, TuningDBError


def test_default_path_order(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNORCH_DB", str(tmp_path / "x.sqlite"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tuning_db.default_path() == tmp_path / "x.sqlite"
    monkeypatch.setenv("KERNORCH_DB", "")  # empty: unset
    assert tuning_db.default_path() == tmp_path / "xdg" / "kernorch" / "tuning.sqlite"
    monkeypatch.delenv("KERNORCH_DB")
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tuning_db.default_path() == tmp_path / "home" / ".cache" / "kernorch" / "tuning.sqlite"
    db = TuningDB()  # the default, created with its folders
    db.put("k", "cpu", "v", Record("c", 1.0, "ok"))
    db.close()
    assert (tmp_path / "home" / ".cache" / "kernorch" / "tuning.sqlite").is_file()


def test_every_field_round_trips_and_created_is_kept(tmp_path):
    path = tmp_path / "a" / "b" / "t.sqlite"  # folders are made
    full = Record("codegen:c", 2e-3, "ok", "d", samples=7, disturbed=2, min_s=1.5e-3, spread=0.25, load=1.5,
                  roofline_s=1e-4, flags="unsettled,far_above_roofline")
    before = time.time()
    with TuningDB(path) as db:
        db.put("k", "cpu", "v", full)
        db.put("old", "cpu", "v", Record("torch", None, "run_failed", "boom"), created=5.0)
        assert db.get("k", "cpu", "v") == {"codegen:c": full}
        assert db.count() == 2
        rows = list(db.rows())
        assert [r.key for r in rows] == ["old", "k"]  # oldest first
        assert rows[0].created == 5.0 and before <= rows[1].created <= time.time()
        assert (rows[1].target, rows[1].version, rows[1].record) == ("cpu", "v", full)
        found = db.find("old", "cpu", "v", "torch")
        assert found.created == 5.0 and found.record.detail == "boom" and not found.record.ok
        assert (found.key, found.target, found.version) == ("old", "cpu", "v")
        assert db.find("old", "cpu", "v", "codegen:c") is None and db.find("old", "gpu", "v", "torch") is None
    assert full.flag_set == {"unsettled", "far_above_roofline"} and Record("c", 1.0, "ok").flag_set == frozenset()
    assert not Record("c", None, "ok").ok and not Record("c", 1.0, "verify_failed").ok
    with sqlite3.connect(path) as c:  # read by plain SQLite: one committed row per put, journal in WAL
        assert c.execute("SELECT COUNT(*) FROM costs").fetchone()[0] == 2
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_lookups_beyond_one_chunk_and_distrust(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    keys = [f"k{i}" for i in range(1203)]
    for i, k in enumerate(keys):
        db.put(k, "cpu", "v", Record("c", float(i), "ok"))
    db.put("k7", "cpu-t2", "v", Record("c", -1.0, "ok"))  # another target: never mixed in
    got = db.get_many(keys + ["missing"], "cpu", "v")
    assert set(got) == set(keys) and all(got[k]["c"].seconds == float(i) for i, k in enumerate(keys))
    db.distrust(["k3", "k600"])
    assert "k3" not in db.get_many(keys, "cpu", "v") and db.get("k600", "cpu", "v") == {}
    db.put("k3", "cpu", "v", Record("c", 9.0, "ok"))  # stored again: trusted again
    assert db.get("k3", "cpu", "v")["c"].seconds == 9.0 and db.get("k600", "cpu", "v") == {}


def test_an_in_memory_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = TuningDB(":memory:")
    db.put("k", "cpu", "v", Record("c", 1.0, "ok"))
    assert db.count() == 1 and list(tmp_path.iterdir()) == []


def test_a_closed_database_is_one_line_naming_the_file(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    db.close()
    for call in (lambda: db.count(), lambda: db.put("k", "cpu", "v", Record("c", 1.0, "ok"))):
        with pytest.raises(TuningDBError, match=r"^tuning database .*t\.sqlite: .*closed database") as e:
            call()
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("err,says", [
    (sqlite3.DatabaseError("file is not a database"), "not a kernorch tuning database (not SQLite, or corrupted)"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "cannot write (attempt to write"),
    (sqlite3.OperationalError("disk is read-only"), "cannot write ("),
    (PermissionError("denied"), "cannot write (denied)"),
    (sqlite3.OperationalError("unable to open database file"), "cannot open (unable to open"),
    (sqlite3.DatabaseError("database disk image is malformed"), "the file is corrupted"),
    (sqlite3.OperationalError("database is locked"), "database is locked"),
    (OSError(), "OSError"),
])
def test_error_reasons_in_words(err, says):
    assert tuning_db._why(err).startswith(says)


def test_an_unopenable_path_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(TuningDBError, match="file/t.sqlite"):  # its folder is a file
        TuningDB(tmp_path / "file" / "t.sqlite")
