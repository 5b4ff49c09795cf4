"""The tuning database keeps every committed measurement, even when the writer is killed."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

from kernorch.orchestrate.tuning_db import Record, TuningDB


def test_roundtrip(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    db.put("k1", "cpu", "v1", Record("c", 1e-3, "ok"))
    db.put("k1", "cpu", "v1", Record("torch", None, "build_failed", "boom"))
    db.put("k2", "cpu", "v2", Record("c", 2e-3, "ok"))
    got = db.get("k1", "cpu", "v1")
    assert got["c"].ok and got["c"].seconds == 1e-3
    assert not got["torch"].ok and got["torch"].detail == "boom"
    assert db.get("k2", "cpu", "v1") == {}  # another code-generator version is another key
    assert set(db.get_many(["k1", "k2"], "cpu", "v1")) == {"k1"}


WRITER = """
import sys
from kernorch.orchestrate.tuning_db import Record, TuningDB
db = TuningDB(sys.argv[1])
i = 0
while True:
    db.put(f"k{i}", "cpu", "v", Record("c", i * 1e-6, "ok"))
    if i == 50:
        print("ready", flush=True)
    i += 1
"""


def test_sigkill_mid_run_leaves_a_usable_database(tmp_path):
    path = tmp_path / "kill.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    db = TuningDB(path)
    n = db.count()
    assert n > 50
    assert db.get("k10", "cpu", "v")["c"].seconds == 10 * 1e-6
