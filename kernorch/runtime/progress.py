"""Progress on stderr while kernorch tunes: a rich bar on a terminal, plain timestamped lines
in logs (CI), nothing when disabled. The pipeline (compile.py) opens one per phase."""

from __future__ import annotations

import time
from contextlib import contextmanager


@contextmanager
def progress_bar(enabled: bool, label: str):
    """A rich progress bar on stderr (counts and ETA); on a non-terminal (CI logs) plain lines
    ``kernorch: LABEL ...`` at the start, every 10 s or 25% of the work, and at the end; nothing
    when disabled."""
    if not enabled:
        yield None
        return
    import sys

    if not sys.stderr.isatty():
        import threading

        t0 = time.perf_counter()
        state = {"done": 0, "total": 0, "shown": -1.0, "last": t0}
        lock = threading.Lock()
        print(f"kernorch: {label} ...", file=sys.stderr, flush=True)

        def line(now: float) -> None:
            state["last"] = now
            counts = f"{state['done']}/{state['total'] or '?'} " if state["total"] else ""
            print(f"kernorch: {label}: {counts}after {now - t0:.0f} s", file=sys.stderr, flush=True)

        def log(done: int, total: int) -> None:
            with lock:
                state.update(done=done, total=total)
                now = time.perf_counter()
                share = done / total if total else 0.0
                if now - state["last"] >= 10.0 or (total and share - state["shown"] >= 0.25 and done < total):
                    state["shown"] = share
                    line(now)

        stop = threading.Event()

        def heartbeat() -> None:  # a phase that reports no counts for a while (re-measuring, regions)
            while not stop.wait(30.0):
                with lock:
                    if time.perf_counter() - state["last"] >= 30.0:
                        line(time.perf_counter())

        beat = threading.Thread(target=heartbeat, daemon=True)
        beat.start()
        try:
            yield log
        finally:
            stop.set()
            beat.join()
        counts = f"{state['done']}/{state['total']} " if state["total"] else ""
        print(f"kernorch: {label}: {counts}done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as prog:
        task = prog.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        yield update
