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
