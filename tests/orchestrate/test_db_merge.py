"""Merging tuning databases measured on several machines gives the union; conflicts follow one rule."""

import subprocess
import sys

import pytest

from kernorch.errors import KernorchError
from kernorch.orchestrate.db_merge import export_rows, merge_rows, read_rows
from kernorch.orchestrate.tuning_db import UNSETTLED, Record, TuningDB


def _db(path, rows):
    db = TuningDB(path)
    for key, target, rec, created in rows:
        db.put(key, target, "c3", rec, created=created)
    return db


def _all(db):
    return {(r.key, r.target, r.record.provider): (r.record, r.created) for r in db.rows()}


def test_merge_gives_the_union_and_keeps_machine_kinds_apart(tmp_path):
    a = _db(tmp_path / "a.sqlite", [("k1", "cpu-t2@epyc", Record("codegen:c", 1e-3, "ok"), 1.0),
                                    ("k2", "cpu-t2@epyc", Record("codegen:c", 2e-3, "ok"), 1.0)])
    b = _db(tmp_path / "b.sqlite", [("k1", "cpu-t2@xeon", Record("codegen:c", 5e-4, "ok"), 2.0),
                                    ("k3", "cpu-t2@xeon", Record("ort", None, "build_failed", "x"), 2.0)])
    want = {**_all(a), **_all(b)}
    counts = merge_rows(a, list(b.rows()))
    assert (counts.added, counts.replaced, counts.kept) == (2, 0, 0)
    assert _all(a) == want
    assert merge_rows(a, list(b.rows())).added == 0  # idempotent


@pytest.mark.parametrize("mine, theirs, winner", [
    (Record("c", 2e-3, "ok"), Record("c", 1e-3, "ok"), "theirs"),  # cheaper: less interference
    (Record("c", 1e-3, "ok", flags=UNSETTLED), Record("c", 2e-3, "ok"), "theirs"),  # settled beats unsettled
    (Record("c", None, "run_failed"), Record("c", 9e-3, "ok", flags=UNSETTLED), "theirs"),  # a price beats none
    (Record("c", 1e-3, "ok"), Record("c", 1e-3, "ok", samples=5), "theirs"),  # a tie: the newer one
    (Record("c", 1e-3, "ok"), Record("c", 3e-3, "ok"), "mine"),
])
def test_conflict_rule(tmp_path, mine, theirs, winner):
    a = _db(tmp_path / "a.sqlite", [("k", "t", mine, 1.0)])
    b = _db(tmp_path / "b.sqlite", [("k", "t", theirs, 2.0)])
    merge_rows(a, list(b.rows()))
    assert _all(a)[("k", "t", "c")][0] == (theirs if winner == "theirs" else mine)


def test_export_import_round_trip(tmp_path):
    a = _db(tmp_path / "a.sqlite", [("k1", "t", Record("codegen:c", 1e-3, "ok", samples=5, disturbed=2, min_s=9e-4,
                                                       spread=0.1, load=0.3, roofline_s=1e-4, flags=""), 3.0)])
    export_rows(a, tmp_path / "a.jsonl")
    b = TuningDB(tmp_path / "b.sqlite")
    merge_rows(b, read_rows(tmp_path / "a.jsonl"))
    assert _all(b) == _all(a)
    (tmp_path / "bad.jsonl").write_text('{"key": 1}\n')
    with pytest.raises(KernorchError, match="bad.jsonl:1"):
        list(read_rows(tmp_path / "bad.jsonl"))


def test_cli_merge(tmp_path):
    _db(tmp_path / "a.sqlite", [("k1", "t", Record("c", 1e-3, "ok"), 1.0)]).close()
    _db(tmp_path / "b.sqlite", [("k2", "t", Record("c", 1e-3, "ok"), 1.0)]).close()
    r = subprocess.run([sys.executable, "-m", "kernorch", "db", "merge", "--db", str(tmp_path / "a.sqlite"),
                        str(tmp_path / "b.sqlite")], capture_output=True, text=True)
    assert r.returncode == 0 and "1 records added" in r.stdout and "2 records" in r.stdout
