"""kn-own on model families the bench does not hold: transformers architectures from configs with
random weights (batch-norm statistics randomized), each compiled kn-own (measured costs, no provider
regions) and timed interleaved with onnxruntime and OpenVINO f32 in one process.

    python -m bench.unseen_sweep [NAME ...] [--repeats 9] [--threads 2] [--db PATH]

Prints one JSON line per model as it finishes, then a table. Every compile measures its candidates
(minutes each; the nine defaults take about 40 minutes on 2 cores): run it alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench import peers
from bench.hf_vision import LastHiddenState, efficientnet_b0, poolformer_s12


def _hf(model_cls: str, config_cls: str, **config):
    def build(seed: int = 0):
        import transformers

        torch.manual_seed(seed)
        return LastHiddenState(getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config))).eval()
    return build


def _image(side: int):
    return lambda: torch.randn(1, 3, side, side, generator=torch.Generator().manual_seed(0))


def _tokens(n: int, vocab: int):
    return lambda: torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(0))


# name -> (builder, input)
MODELS = {
    "efficientnet_b0": (lambda: efficientnet_b0(224), _image(224)),
    "regnet_y": (_hf("RegNetModel", "RegNetConfig", layer_type="y", hidden_sizes=[48, 104, 208, 440],
                     depths=[1, 3, 6, 6], groups_width=8), _image(224)),
    "convnext_t": (_hf("ConvNextModel", "ConvNextConfig", depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768]),
                   _image(160)),
    "deit_s": (_hf("DeiTModel", "DeiTConfig", hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
                   intermediate_size=1536), _image(224)),
    "swin_t": (_hf("SwinModel", "SwinConfig", image_size=224, embed_dim=96, depths=[2, 2, 6, 2],
                   num_heads=[3, 6, 12, 24], window_size=7), _image(224)),
    "bert_base": (_hf("BertModel", "BertConfig", num_hidden_layers=4), _tokens(128, 30522)),
    "poolformer_s12": (lambda: poolformer_s12(224), _image(224)),
    "mobilevit_s": (_hf("MobileViTModel", "MobileViTConfig", image_size=256), _image(256)),
    "llama_s": (_hf("LlamaModel", "LlamaConfig", vocab_size=32000, hidden_size=512, intermediate_size=1376,
                    num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4), _tokens(128, 32000)),
}


def _randomized(model: torch.nn.Module) -> torch.nn.Module:
    """Batch norms with non-trivial statistics, so a per-channel layout bug cannot hide."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model


def sweep_one(name: str, folder: Path, db: str, threads: int, repeats: int) -> dict:
    from kernorch.frontend.torch_import import export_torch

    build, make_input = MODELS[name]
    module, x = _randomized(build()), make_input()
    path = folder / f"{name}.onnx"
    path.write_bytes(export_torch(module, x, input_names=["x"]).SerializeToString())
    feeds = {"x": x.numpy()}
    model, wall = peers.kernorch_compile(path, "optimal", None, db, threads, regions=False)
    runners = {"onnxruntime": peers.ort_runner("ort", path, feeds, threads, True),
               "kn-own": peers.kernorch_runner("kn-own", model, feeds, wall)}
    if peers.openvino_available():
        runners["openvino f32"] = peers.openvino_runner(path, feeds, threads)
    err = peers.rel_error(runners["onnxruntime"].outputs(), runners["kn-own"].outputs())
    med = {k: statistics.median(v) * 1e3 for k, v in peers.interleaved(runners, repeats, 0.05, 0.5).items()}
    peer = min(v for k, v in med.items() if k != "kn-own")
    return dict(model=name, compile_s=round(wall), rel_err=err, **{k: round(v, 3) for k, v in med.items()},
                ort_over_kn=round(med["onnxruntime"] / med["kn-own"], 3), best_over_kn=round(peer / med["kn-own"], 3))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(MODELS), choices=list(MODELS), metavar="NAME")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--db", default=None, help="tuning database (default: a fresh one)")
    args = ap.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="kn-unseen-"))
    db = args.db or str(folder / "tuning.sqlite")
    t0, rows = time.perf_counter(), []
    for name in args.models:
        rows.append(sweep_one(name, folder, db, args.threads, args.repeats))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.threads} threads, medians of {args.repeats} interleaved samples, {time.perf_counter() - t0:.0f} s")
    print(f"{'model':16} {'kn-own ms':>10} {'ORT ms':>9} {'OV f32 ms':>10} {'ORT/kn':>7} {'best/kn':>8} {'rel err':>8}")
    for r in rows:
        print(f"{r['model']:16} {r['kn-own']:10.2f} {r['onnxruntime']:9.2f} {r.get('openvino f32', np.nan):10.2f} "
              f"{r['ort_over_kn']:7.2f} {r['best_over_kn']:8.2f} {r['rel_err']:8.1e}")


if __name__ == "__main__":
    main()
