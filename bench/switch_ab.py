"""End-to-end A/B of one of kernorch's A/B switches (SWITCHES: the Winograd 3x3 convolutions of
kernorch/codegen/winograd.py, the activation layout pairs of kernorch/rewrite/layouts.py, the window
sums written out tap by tap of kernorch/codegen/window.py, the depthwise row tiles of
kernorch/codegen/depthwise.py; the code generator's three through
CodegenOptions, the rewrite's as a module flag): a bench model compiled kn-own (measured costs, no
provider regions) twice, with the switch on and off, each on its own tuning database, then both timed with onnxruntime
and OpenVINO (f32) in one process, interleaved (bench.peers.interleaved).

    python -m bench.switch_ab resnet50 [--switch winograd] [--small] [--repeats 20] [--db DIR] [--threads 2]
    python -m bench.switch_ab mobilenetv3_large --switch activation-pairs
    python -m bench.switch_ab poolformer_s12 --switch window-sums
    python -m bench.switch_ab efficientnet_b0 --switch depthwise-tiles

Prints a table; asserts nothing. The two compiles measure every candidate (minutes each): run it
alone, nothing else on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from types import SimpleNamespace

from bench import peers
from bench.run import load_model
from kernorch.options import CodegenOptions
from kernorch.rewrite import layouts

SWITCHES = {"winograd": "winograd", "window-sums": "window_sums", "depthwise-tiles": "depthwise_tiles",  # -> field
            "activation-pairs": (layouts, "PAIR_ACTIVATION_CUTS")}  # ... or (module, flag)


def _compile(m: dict, db: Path, threads: int, switch: str, on: bool):
    if isinstance(SWITCHES[switch], str):
        options = CodegenOptions(**{SWITCHES[switch]: on})
        return peers.kernorch_compile(m["path"], "optimal", None, db, threads, regions=False, codegen=options)
    module, flag = SWITCHES[switch]
    default = getattr(module, flag)
    setattr(module, flag, on)
    try:
        return peers.kernorch_compile(m["path"], "optimal", None, db, threads, regions=False)
    finally:
        setattr(module, flag, default)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--switch", choices=sorted(SWITCHES), default="winograd")
    ap.add_argument("--small", action="store_true", help="the model's small input size")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--db", default=None, help="folder for the two tuning databases (default: a temporary one)")
    args = ap.parse_args(argv)
    m = load_model(args.model, SimpleNamespace(small=args.small, exporter="torchscript"))
    folder = Path(args.db or tempfile.mkdtemp(prefix=f"kn-{args.switch}-"))
    folder.mkdir(parents=True, exist_ok=True)
    runners = {"onnxruntime": peers.ort_runner("ort", m["path"], m["feeds"], args.threads, True)}
    if peers.openvino_available():
        runners["openvino f32"] = peers.openvino_runner(m["path"], m["feeds"], args.threads)
    for on in (False, True):
        label = f"kn-own, {args.switch} {'on' if on else 'off'}"
        db = folder / f"{args.switch}-{'on' if on else 'off'}.sqlite"
        model, wall = _compile(m, db, args.threads, args.switch, on)
        runners[label] = peers.kernorch_runner(label, model, m["feeds"], wall)
        print(f"{label}: compiled in {wall:.0f} s, {len(model.kernels)} kernels", flush=True)
    samples = peers.interleaved(runners, args.repeats, 0.05, 1.0)
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items() if v}
    ref = med["onnxruntime"]
    print(f"{args.model}, {args.threads} threads, median of {args.repeats} interleaved samples")
    print(f"{'runtime':32} {'ms':>9} {'onnxruntime / this':>19}")
    for k, v in med.items():
        print(f"{k:32} {v:9.2f} {ref / v:19.2f}")


if __name__ == "__main__":
    main()
