"""A tuning database that cannot be used is one line naming the file; old databases gain the evidence columns."""

import os
import sqlite3
import subprocess
import sys

import pytest

from kernorch.orchestrate.tuning_db import Record, TuningDB, TuningDBError
from kernorch.runtime import report as report_mod

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tiny_cnn.onnx")


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(TuningDBError, match="is a directory"):
        TuningDB(tmp_path)


def test_a_file_that_is_not_sqlite_is_refused(tmp_path):
    bad = tmp_path / "notes.sqlite"
    bad.write_text("not a database at all " * 100)
    with pytest.raises(TuningDBError, match="not a kernorch tuning database") as e:
        TuningDB(bad)
    assert "\n" not in str(e.value) and str(bad) in str(e.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_file_is_refused(tmp_path):
    path = tmp_path / "ro.sqlite"
    TuningDB(path).close()
    path.chmod(0o444)
    with pytest.raises(TuningDBError, match="read-only"):
        TuningDB(path)


def test_a_database_without_evidence_columns_is_upgraded_in_place(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE costs (key TEXT NOT NULL, target TEXT NOT NULL, version TEXT NOT NULL, "
                  "provider TEXT NOT NULL, seconds REAL, status TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '', "
                  "created REAL NOT NULL, PRIMARY KEY (key, target, version, provider))")
        c.execute("INSERT INTO costs VALUES ('k', 'cpu-t2', 'c3', 'codegen:c', 1e-3, 'ok', '', 0)")
    db = TuningDB(path)
    (old,) = db.get("k", "cpu-t2", "c3").values()
    assert old.seconds == 1e-3 and old.samples is None and old.flags == ""
    db.put("k2", "cpu-t2", "c3", Record("codegen:c", 2e-3, "ok", samples=5, disturbed=1, load=0.5))
    assert db.get("k2", "cpu-t2", "c3")["codegen:c"].disturbed == 1


def test_cli_names_the_bad_database_in_one_line(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"\x00garbage" * 64)
    r = subprocess.run([sys.executable, "-m", "kernorch", "compile", EXAMPLE, "-o", str(tmp_path / "out"),
                        "--db", str(bad), "--providers", "", "--no-regions"], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and str(bad) in r.stderr and "Traceback" not in r.stderr


def test_more_threads_than_free_cores_is_said(monkeypatch):
    monkeypatch.setattr(report_mod, "free_cores", lambda seconds=0.3: (1.0, 2))
    assert "other processes keep 1.0 of 2 cores busy" in report_mod.check_free_cores(2, require_quiet=False)
    assert report_mod.check_free_cores(1, require_quiet=False) == ""


def test_require_quiet_waits_then_refuses(monkeypatch):
    monkeypatch.setattr(report_mod, "free_cores", lambda seconds=0.3: (1.0, 2))
    monkeypatch.setattr(report_mod, "QUIET_WAIT_S", 0.0)
    with pytest.raises(report_mod.KernorchError, match="refuses to measure on a busy machine"):
        report_mod.check_free_cores(2, require_quiet=True)
