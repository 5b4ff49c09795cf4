"""What the ``kernorch`` command's modules share: exit statuses, the model arguments and the
argument types. cli.py (the parser's top and ``inspect``/``check``/``doctor``), cli_run.py and
cli_db.py all import it; it imports none of them, so the command's modules form no cycle."""

from __future__ import annotations

import argparse
from typing import Sequence

from kernorch.errors import KernorchError

EXIT_OK, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="path to an .onnx file")
    p.add_argument("--input-shape", metavar="NAME=D0,D1,...", action="append", default=[],
                   help="pin the shape of an input with dynamic dimensions (repeatable)")


def parse_input_shapes(specs: Sequence[str]) -> dict[str, list[int]]:
    """``["x=1,3,224,224"]`` -> ``{"x": [1, 3, 224, 224]}``; one-line error on a malformed spec."""
    out: dict[str, list[int]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            shape = [int(d) for d in dims.split(",")]
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d <= 0 for d in shape):
            raise KernorchError(f"--input-shape {spec!r}: expected NAME=D0,D1,... with positive integers")
        out[name] = shape
    return out


def positive_int(text: str) -> int:
    """argparse type: a positive integer, else argparse's one-line usage error (exit 2)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def parse_dynamic(specs: Sequence[str]) -> dict[str, dict[int, tuple[int, int]]] | None:
    """``["x=0:1..16"]`` -> ``{"x": {0: (1, 16)}}`` (compile()'s ``dynamic=``); None when none given."""
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for spec in specs:
        name, sep, rest = spec.rpartition("=")
        dim, colon, rng = rest.partition(":")
        lo, dots, hi = rng.partition("..")
        try:
            parsed = int(dim), int(lo), int(hi)
        except ValueError:
            parsed = None
        if not sep or not name or not colon or not dots or parsed is None or name in out:
            raise KernorchError(f"--dynamic {spec!r}: expected NAME=DIM:LO..HI (e.g. x=0:1..16), once per input")
        out[name] = {parsed[0]: (parsed[1], parsed[2])}
    return out or None


def parse_sizes(flag: str, text: str | None) -> tuple[int, ...] | None:
    """``"1,4,16"`` -> ``(1, 4, 16)``; one-line error naming ``flag`` on anything else."""
    if text is None:
        return None
    try:
        sizes = tuple(int(t) for t in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) <= 0:
        raise KernorchError(f"{flag} {text!r}: expected positive integers separated by commas")
    return sizes
