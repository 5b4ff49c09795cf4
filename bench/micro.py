"""What the alternating micro-benchmarks (bench.window_micro, bench.depthwise_micro) share: their command
line (threads, calls per timing, alternated rounds), the thread count set, and the line that says so."""

from __future__ import annotations

import argparse

import torch


def parse(doc: str, argv=None) -> argparse.Namespace:
    """The parsed command line of a micro-benchmark whose module doc is ``doc``; prints its setting."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the variants; the median is quoted")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"threads={args.threads}, median over {args.rounds} alternated rounds of {args.repeat} calls, us")
    return args
