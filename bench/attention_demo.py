"""The attention case of Korch's primitive-graph rewrites, on one ViT-Tiny attention block.

    python -m bench.attention_demo            # about 3-4 minutes on 2 cores (cold tuning)
    python -m bench.attention_demo --quick    # fewer timing repetitions

The block (dim 192, 3 heads, 197 tokens, batch 1, separate q/k/v Linears, softmax(q k^T * scale) v,
output projection; random weights, seed 0) is exported to ONNX once. kernorch compiles that file,
strategy ``optimal`` on measured costs into one fresh temporary tuning database, with no rewrites,
with ``DEFAULT_RULES`` (cleanups + merge of the q/k/v projections) and with ``ALL_RULES`` (adds
Korch's sum-to-matmul and div-past-matmul: the softmax's row sum becomes a matmul with a ones
column, the division moves past ``@ V``, and the two matmuls of ``exp(...)`` merge into one,
``exp(...) @ [ones | V]``). These three run without provider regions (``regions=False``): with them
the whole block goes to OpenVINO or onnxruntime as one kernel, whatever the rewrites, which the last
variant (ALL_RULES, regions on, as ``kernorch.compile`` does by default) shows. The compiled models,
onnxruntime on the same ONNX file and PyTorch eager are then timed round-robin in one process
(``bench.peers.interleaved``).
Prints one table: variant, prims after rewriting, rewrites applied, kernels, median and fastest
sample latency, max abs error vs the PyTorch module. With 2 threads on a 2-core machine any other
load multiplies every figure (the header gives the load average); compare medians with the mins.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bench import peers
from kernorch.orchestrate.machine import cpu_model

DIM, HEADS, TOKENS = 192, 3, 197
# variant -> (bench.peers rewrite spec: () none, None DEFAULT_RULES, "all" ALL_RULES; provider regions)
VARIANTS = {"kn no rewrites": ((), False), "kn DEFAULT_RULES": (None, False), "kn ALL_RULES": ("all", False),
            "kn ALL_RULES +regions": ("all", True)}
# rule name -> short label in the table (the cleanups are summed up as "cleanups")
SHORT = {"merge_linear": "merge", "merge_linear_concat": "merge_concat", "sum_to_matmul": "sum2mm",
         "div_past_matmul": "div_past_mm"}


class VitAttention(nn.Module):
    """ViT-Tiny's attention (timm ``Attention``) with q, k and v as three Linears."""

    def __init__(self, dim: int = DIM, heads: int = HEADS):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.reshape(b, n, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


def build_attention(seed: int = 0, tokens: int = TOKENS) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The block in eval mode with random weights, and its input ``x: [1, tokens, 192]``."""
    torch.manual_seed(seed)
    model = VitAttention().eval()
    x = torch.randn(1, tokens, DIM, generator=torch.Generator().manual_seed(seed + 1))
    return model, (x,)


def rewrites_label(counts: dict[str, int]) -> str:
    """``merge 1, sum2mm 1, ...`` for the structural rules; the cleanups summed as ``cleanups N``."""
    parts = [f"{SHORT[k]} {c}" for k, c in counts.items() if k in SHORT and c]
    cleanups = sum(c for k, c in counts.items() if k not in SHORT)
    if cleanups:
        parts.append(f"cleanups {cleanups}")
    return ", ".join(parts) or "-"


@contextmanager
def env(name: str, value: str):
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def main(argv=None) -> int:
    import kernorch
    from kernorch.frontend.torch_import import export_torch

    p = argparse.ArgumentParser(prog="python -m bench.attention_demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="5 interleaved repetitions instead of 15, shorter samples")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    repeats, min_sample_s, warmup_s = (5, 0.02, 0.2) if args.quick else (15, 0.05, 1.0)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    module, inputs = build_attention()
    with torch.no_grad():
        ref = module(*inputs).numpy()
    feeds = {"x": inputs[0].numpy()}
    rows: dict[str, dict] = {}
    runners: dict[str, peers.Runner] = {}
    with tempfile.TemporaryDirectory(prefix="kernorch-attention-") as tmp:
        path = Path(tmp) / "attention.onnx"
        path.write_bytes(export_torch(module, inputs, input_names=["x"]).SerializeToString())
        with env("KERNORCH_CACHE_DIR", str(Path(tmp) / "build")):
            db = str(Path(tmp) / "tuning.sqlite")
            for name, (spec, regions) in VARIANTS.items():
                t1 = time.perf_counter()
                model = kernorch.compile(str(path), strategy="optimal", cost="measured", db=db, regions=regions,
                                         rewrites=peers.rewrite_rules(spec), threads=args.threads, progress=False)
                wall = time.perf_counter() - t1
                r = model.report
                rows[name] = dict(prims=r.prims, rewrites=rewrites_label(r.rewrites), kernels=len(model.kernels))
                log(f"{name}: compiled in {wall:.1f} s, {r.prims} prims, {len(model.kernels)} kernels "
                    f"({r.measured} candidates measured, {r.cached} from the database)")
                runners[name] = peers.kernorch_runner(name, model, feeds, wall)
            runners["onnxruntime"] = peers.ort_runner("onnxruntime", path, feeds, args.threads, True)
            runners["PyTorch eager"] = peers.eager_runner(module, inputs)
            rows["onnxruntime"] = dict(prims="", rewrites="(reference)", kernels="")
            rows["PyTorch eager"] = dict(prims="", rewrites="(the module)", kernels="")
            for name, runner in runners.items():
                (out,) = runner.outputs()
                rows[name]["err"] = float(np.abs(np.asarray(out, np.float64) - ref).max())
            log(f"timing {len(runners)} runtimes, {repeats} interleaved repetitions")
            load = os.getloadavg()[0]
            errors: dict[str, str] = {}
            samples = peers.interleaved(runners, repeats, min_sample_s, warmup_s, errors=errors)
    for name, s in samples.items():
        rows[name]["ms"] = f"{statistics.median(s) * 1e3:.3f}"
        rows[name]["min"] = f"{min(s) * 1e3:.3f}"
    for name, e in errors.items():
        rows[name]["ms"] = f"failed: {e}"
    print(f"\nViT-Tiny attention block [1, {TOKENS}, {DIM}], {HEADS} heads; {args.threads} threads, "
          f"{cpu_model()}; load average {load:.1f} before timing, {os.getloadavg()[0]:.1f} after; "
          f"{repeats} interleaved repetitions")
    head = ("variant", "prims", "rewrites applied", "kernels", "median ms", "min ms", "max abs err")
    table = [head] + [(n, str(r["prims"]), r["rewrites"], str(r["kernels"]), r.get("ms", "-"), r.get("min", "-"),
                       f"{r['err']:.1e}") for n, r in rows.items()]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for k, row in enumerate(table):
        print("  ".join(c.ljust(w) if i in (0, 2) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if k == 0:
            print("  ".join("-" * w for w in widths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
