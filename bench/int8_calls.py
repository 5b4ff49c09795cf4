"""Where a kn-own int8 ResNet-50 spends its call: the model's median, the oneDNN int8 convolution
calls timed inside it (each wrapped with a clock; their sum against ``bench.int8_floor``'s bare
calls), and the kernels timed in place summed per provider. Compiles on ``--db`` (a copy of a
``bench.int8`` database makes it a warm compile of a minute or less; empty: a cold one, ~15 min).

    python -m bench.int8_calls --db PATH [--model resnet50] [--threads 2] [--repeats 40]

Prints lines; asserts nothing. Run it alone.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import numpy as np
import torch

from bench import peers
from bench.int8 import calibration_batches
from bench.run import load_model


class _Clocked:
    """Stands in for ``torch.ops.onednn.qconv_pointwise`` while the model is built: the steps keep it."""

    def __init__(self, op) -> None:
        self.op, self.seconds = op, []

    def __call__(self, *args):
        t = time.perf_counter()
        out = self.op(*args)
        self.seconds.append(time.perf_counter() - t)
        return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=40)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(peers.machine_header(args.threads), flush=True)
    m = load_model(args.model, SimpleNamespace(small=False, exporter="torchscript"))
    clocked = _Clocked(torch.ops.onednn.qconv_pointwise)
    torch.ops.onednn.qconv_pointwise = clocked
    model, wall = peers.kernorch_compile(m["path"], "optimal", None, args.db, args.threads, regions=False,
                                         precision="int8", calibration=calibration_batches(m["feeds"], 8))
    x = [torch.from_numpy(np.ascontiguousarray(m["feeds"][n])) for n in model.input_names]
    for _ in range(5):
        model(*x)
    clocked.seconds.clear()
    times = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        model(*x)
        times.append(time.perf_counter() - t)
    calls = len(clocked.seconds) // args.repeats
    print(f"{args.model} int8 kn-own: compiled in {wall:.1f} s, {len(model.executable.infos)} kernels; "
          f"median {statistics.median(times) * 1e3:.2f} ms over {args.repeats} calls")
    print(f"oneDNN int8 convolutions inside the call: {calls} per call, "
          f"{sum(clocked.seconds) / args.repeats * 1e3:.2f} ms per call summed")
    per = {}
    for line in model.summary(m["feeds"], repeat=20).splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[0].isdigit():
            per.setdefault(parts[1], []).append(float(parts[2]))
    print("kernels timed in place, per provider: " + ", ".join(f"{k} {len(v)} kernels {sum(v):.2f} ms"
                                                                for k, v in per.items()))


if __name__ == "__main__":
    main()
