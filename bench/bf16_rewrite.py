"""How much the bf16 rewrite alone (rewrite/precision.py) moves a model's output: the reference interpreter
on the float32 graph against the interpreter on the rewritten one (every dense product in bf16, the storage
pairs as the rewrite places them), with and without keeping float32 where a normalisation centres a value
(``_cancelling``). No kernel is built or timed: the figures are the rewrite's, so any load is fine.

    python -m bench.bf16_rewrite [MODEL ...]   (default: bert_base gpt2 vit_tiny segformer_b0 resnet50)

Prints one line per model: values rounded to bf16 and the output's max error relative to its largest
magnitude, and cosine, both ways.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from unittest import mock

import numpy as np

from bench.run import load_model
from kernorch.ir import interp
from kernorch.rewrite import precision
from kernorch.rewrite.pipeline import DEFAULT_RULES, apply_rewrites
from kernorch.runtime.sources import load_graph

MODELS = ["bert_base", "gpt2", "vit_tiny", "segformer_b0", "resnet50"]


def _error(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    o, r = np.asarray(out, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    return float(np.abs(o - r).max() / np.abs(r).max()), float(o @ r / np.linalg.norm(o) / np.linalg.norm(r))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    args = ap.parse_args(argv)
    print(f"{'model':20} {'kept float32 (rounded, max rel err, cosine)':>44} {'every pair (rounded, err, cosine)':>36}")
    for name in args.models:
        m = load_model(name, SimpleNamespace(small=False, exporter="torchscript", depth=None))
        g, _ = load_graph(m["path"], None, None, False)
        g, _ = apply_rewrites(g, DEFAULT_RULES)
        feeds = [m["feeds"][k] for k in m["feeds"]]
        ref = interp.run(g, feeds)[g.outputs[0]]
        cells = []
        for keep in (True, False):
            with mock.patch.object(precision, "_cancelling", precision._cancelling if keep else lambda *a: set()):
                bf, rounded = precision.bf16_storage(g)
            err, cos = _error(interp.run(bf, feeds)[bf.outputs[0]], ref)
            cells.append(f"{rounded:5d} {err:9.2e} {cos:9.5f}")
        print(f"{name:20} {cells[0]:>44} {cells[1]:>36}", flush=True)


if __name__ == "__main__":
    main()
