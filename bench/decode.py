"""Greedy text generation with a KV cache (issue 46): kernorch's compiled decoder next to
onnxruntime running the same fixed-cache step models through the same loop, PyTorch eager
(transformers' own growing cache) and torch.compile of the fixed-shape step, in one process.

    PYTHONPATH=. python -m bench.decode --layers 12 --prompt 128 --new 128

Prints the machine, compile times, whether the token ids are identical, the prefill time and
per-token latency p50 / p90 of each runtime (medians over --rounds generations, interleaved).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import kernorch
from bench.peers import CompileTimeout, alarm, machine_header
from kernorch.frontend.decoder import _Step, decoder_step
from kernorch.runtime.decode import Decoder, Generation


class OrtStep:
    """onnxruntime running one step model, with a compiled model's run()."""

    def __init__(self, proto, threads: int) -> None:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        self.sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.sess.get_inputs()]
        self.names = [o.name for o in self.sess.get_outputs()]

    def run(self, feeds):
        outs = self.sess.run(None, {k: np.asarray(v) for k, v in feeds.items()})
        return {n: torch.from_numpy(o) for n, o in zip(self.names, outs)}


class TorchStep:
    """The fixed-shape step module itself (eager or torch.compile'd), with a compiled model's run()."""

    def __init__(self, fn, layout) -> None:
        self.fn, self.layout = fn, layout
        self.input_names = ["input_ids", "attention_mask", "position_ids"]

    def run(self, feeds):
        with torch.no_grad():
            outs = self.fn(*[feeds[n] for n in self.input_names + self.layout.past_names()])
        return dict(zip(["logits", *self.layout.present_names()], outs))


def eager_growing(lm, prompt: torch.Tensor, new: int) -> Generation:
    """transformers' own decoding: a growing DynamicCache, one forward per token."""
    out = Generation(prompt)
    with torch.no_grad():
        t0 = time.perf_counter()
        res = lm(input_ids=prompt, use_cache=True, return_dict=True)
        out.prefill_s = time.perf_counter() - t0
        cache, tokens = res.past_key_values, [prompt]
        nxt = res.logits[0, -1].argmax().reshape(1, 1)
        for _ in range(new - 1):
            tokens.append(nxt)
            t1 = time.perf_counter()
            res = lm(input_ids=nxt, past_key_values=cache, use_cache=True, return_dict=True)
            out.step_s.append(time.perf_counter() - t1)
            cache, nxt = res.past_key_values, res.logits[0, -1].argmax().reshape(1, 1)
        tokens.append(nxt)
    out.tokens = torch.cat(tokens, dim=1)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--db", default=None)
    ap.add_argument("--no-torch-compile", action="store_true")
    a = ap.parse_args(argv)
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(a.threads)
    print(machine_header(a.threads))
    slots = a.prompt + a.new
    torch.manual_seed(0)
    lm = GPT2LMHeadModel(GPT2Config(n_layer=a.layers, n_positions=max(1024, slots),
                                    attn_implementation="eager")).eval()
    prompt = torch.randint(0, lm.config.vocab_size, (1, a.prompt), generator=torch.Generator().manual_seed(1))
    db = a.db or str(Path(tempfile.mkdtemp(prefix="kn-decode-")) / "tuning.sqlite")
    t0 = time.perf_counter()
    dec = kernorch.compile_decoder(lm, max_length=slots, chunk=a.chunk, threads=a.threads, db=db, progress=False)
    print(f"\nGPT-2 {a.layers} layers (random weights), prompt {a.prompt}, {a.new} new tokens, cache {slots} slots: "
          f"kernorch compile {time.perf_counter() - t0:.0f} s (step + prefill chunk of {a.chunk})")
    step, layout = decoder_step(lm, slots, 1)
    prefill, _ = decoder_step(lm, slots, a.chunk)
    runners = {"kernorch": dec.generate,
               "onnxruntime": Decoder(OrtStep(step, a.threads), OrtStep(prefill, a.threads), layout, slots,
                                      a.chunk).generate,
               "pytorch eager": lambda p, n: eager_growing(lm, p, n)}
    if not a.no_torch_compile:
        fn = torch.compile(_Step(lm, layout.layers).eval())
        try:
            t0 = time.perf_counter()
            with alarm(900):
                tc = Decoder(TorchStep(fn, layout), TorchStep(fn, layout), layout, slots, a.chunk)
                tc.generate(prompt, 4)
            print(f"torch.compile: first generation (compiles) {time.perf_counter() - t0:.0f} s")
            runners["torch.compile"] = tc.generate
        except CompileTimeout:
            print("torch.compile: gave up after 900 s")
    runs: dict[str, list[Generation]] = {k: [] for k in runners}
    for r in range(a.rounds):
        for name, gen in (list(runners.items())[r % len(runners):] + list(runners.items())[:r % len(runners)]):
            gen(prompt, 8)  # lead-in: the runtime's threads wake up before it is timed
            runs[name].append(gen(prompt, a.new))
    ref = runs["onnxruntime"][0].tokens
    print(f"\n| runtime | tokens identical to onnxruntime | prefill ms | per-token p50 ms | per-token p90 ms | "
          f"tokens/s | speed vs onnxruntime (p50) |")
    print("|---|---|---|---|---|---|---|")
    p50_ort = np.median([g.per_token_ms(50) for g in runs["onnxruntime"]])
    for name, gens in runs.items():
        same = all(g.tokens.tolist() == ref.tolist() for g in gens)
        p50 = float(np.median([g.per_token_ms(50) for g in gens]))
        p90 = float(np.median([g.per_token_ms(90) for g in gens]))
        pre = float(np.median([g.prefill_s for g in gens])) * 1e3
        print(f"| {name} | {'yes' if same else 'NO'} | {pre:.1f} | {p50:.2f} | {p90:.2f} | {1e3 / p50:.1f} | "
              f"{p50_ort / p50:.2f}x |")
    print(f"\ndistinct generated tokens: {len(set(ref[0, a.prompt:].tolist()))} of {a.new}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
