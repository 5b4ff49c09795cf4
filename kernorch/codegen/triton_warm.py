"""Parallel Triton compilation in worker processes.

Triton compiles a program in the calling process, holding the GIL, in about 0.2-1 s. A plan or a
tuning batch has hundreds: workers compile them (``kernel.warmup`` on dtype placeholders) into
Triton's disk cache, so the first launch in the main process only loads a binary. Workers are
plain subprocesses (``python -m kernorch.codegen.triton_warm``) reading one JSON job per line and
answering one line each: unlike multiprocessing's spawn they never re-import the user's __main__.
Best effort throughout: a failed job or a dead worker only means the launch compiles instead.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from pathlib import Path


class Workers:
    def __init__(self, n: int) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the directory holding the kernorch package
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.pop("TRITON_INTERPRET", None)
        self.procs = [subprocess.Popen([sys.executable, "-m", "kernorch.codegen.triton_warm"], env=env, text=True,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                      for _ in range(n)]
        self.next = 0
        atexit.register(self.close)

    def submit(self, jobs: list) -> list[tuple[subprocess.Popen, int]]:
        """Send jobs round-robin; returns what ``wait`` needs."""
        counts: dict[int, int] = {}
        for job in jobs:
            alive = [k for k, p in enumerate(self.procs) if p.poll() is None]
            if not alive:
                break
            k = alive[self.next % len(alive)]
            self.next += 1
            try:
                self.procs[k].stdin.write(json.dumps(job) + "\n")
                self.procs[k].stdin.flush()
                counts[k] = counts.get(k, 0) + 1
            except OSError:
                continue
        return [(self.procs[k], c) for k, c in counts.items()]

    def close(self) -> None:
        for p in self.procs:
            try:
                p.stdin.close()
                p.wait(timeout=5)
            except Exception:  # noqa: BLE001
                p.kill()


def wait(pending: list[tuple[subprocess.Popen, int]]) -> list[str]:
    """Block until every submitted job answered; returns the error lines (empty: all compiled)."""
    errors = []
    for proc, count in pending:
        for _ in range(count):
            line = proc.stdout.readline()
            if not line:  # the worker died
                errors.append("worker exited")
                break
            msg = json.loads(line)
            if msg:
                errors.append(msg)
    return errors


def _warm(job: dict) -> None:
    import importlib.util

    import torch

    from kernorch.codegen.runner import TORCH_DTYPE  # lazy: a compile worker process loads torch with its first job

    torch.cuda.set_device(job["device"])
    name = Path(job["path"]).stem
    spec = importlib.util.spec_from_file_location(name, job["path"])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    args = [TORCH_DTYPE[d] for d in job["dtypes"]]
    for fn, warps in job["fns"]:
        getattr(mod, fn).warmup(*args, grid=(1,), num_warps=warps)


def main() -> None:
    for line in sys.stdin:
        try:
            _warm(json.loads(line))
            out = ""
        except Exception as e:  # noqa: BLE001 - reported, never fatal
            out = f"{type(e).__name__}: {e}"[:300]
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
