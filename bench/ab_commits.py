"""Two commits of kernorch on the same bench models, alternated on this machine: each commit checked
out in a worktree of its own (own tuning databases and build cache), ``python -m bench`` run with
onnxruntime (the machine's yardstick) and kn-own only, A B A B ..., then one table of medians. For
a change that must leave behaviour alone (a refactor): kn-own within the rounds' spread.

    python -m bench.ab_commits 296a697 HEAD [--models candy,vit_tiny] [--rounds 2] [--full-size]

Every round compiles cold (a few minutes per model on 2 cores). Run it alone; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.peers import RUNTIMES

ROOT = Path(__file__).resolve().parents[1]
KEEP = ("ort", "kn-own")


def _worktree(rev: str, folder: Path) -> Path:
    path = folder / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-f", "--detach", str(path), rev], check=True,
                   capture_output=True)
    return path


def _bench(tree: Path, folder: Path, tag: str, models: str, small: bool) -> dict:
    out = folder / f"{tag}.json"
    cmd = [sys.executable, "-m", "bench", "--models", models, "--no-write", "--db", str(folder / f"db-{tree.name}"),
           "--json", str(out), "--skip", ",".join(r for r in RUNTIMES if r not in KEEP)] + (["--small"] if small else [])
    env = {"PYTHONPATH": str(tree), "KERNORCH_CACHE_DIR": str(folder / f"build-{tree.name}")}
    subprocess.run(cmd, cwd=tree, env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--models", default="candy,vit_tiny")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--full-size", action="store_true", help="the bench models' full input sizes (default: --small)")
    args = ap.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="kn-ab-"))
    trees = {rev: _worktree(rev, folder) for rev in (args.a, args.b)}
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    machine = {}
    for k in range(args.rounds):
        for rev, tree in trees.items():
            run = _bench(tree, folder, f"{tree.name}-{k}", args.models, not args.full_size)
            machine = run["machine"]
            for m in run["models"]:
                rt = m["runtimes"]
                rows.setdefault((m["name"], rev), []).append((rt["ort"]["median_ms"], rt["kn-own"]["median_ms"]))
            print(f"round {k + 1} {rev}: done", flush=True)
    print(f"{machine.get('cpu')}, {machine.get('threads')} threads, load {machine.get('load_avg')}; "
          f"medians per round, ms")
    print(f"{'model':18} {'commit':10} {'onnxruntime':>24} {'kn-own':>24} {'kn-own / onnxruntime':>22}")
    for (model, rev), vals in sorted(rows.items()):
        ort = " ".join(f"{o:.2f}" for o, _ in vals)
        own = " ".join(f"{k:.2f}" for _, k in vals)
        ratio = statistics.median(k / o for o, k in vals)
        print(f"{model:18} {rev:10} {ort:>24} {own:>24} {ratio:22.3f}")
    for tree in trees.values():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


if __name__ == "__main__":
    main()
