"""Text generation with a KV cache on compiled, fixed-shape decoding steps (frontend/decoder.py).

``compile_decoder(lm, max_length=256)`` compiles two steps of one causal LM: a prefill step of
``chunk`` tokens (a prompt of any length runs as chunks, the last padded and masked) and a
one-token step. Both read a cache of ``max_length`` slots per layer, preallocated once per
``generate`` call; after each step the new tokens' keys and values are copied into their slots
(a few KiB per layer and token, in place), and the attention mask opens them. Every step has
the shapes it was compiled for, so nothing is compiled while generating.

Saved as a directory: ``decoder.json`` (format, slots, chunk, cache layout) beside ``step/`` and
``prefill/``, each a saved model (model.py).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from kernorch.errors import InputError, KernorchError, SavedModelError
from kernorch.frontend.decoder import IDS, MASK, POSITIONS, CacheLayout, decoder_step, onnx_layout
from kernorch.runtime.compile import compile as compile_model
from kernorch.runtime.model import load as load_static

FORMAT = "kernorch-decoder"
VERSION = 1
MANIFEST = "decoder.json"


class Runner(Protocol):
    input_names: list[str]

    def run(self, feeds) -> dict[str, torch.Tensor]: ...


@dataclass
class Generation:
    """What ``generate`` produced: every token id (prompt first) and the seconds each step took."""

    tokens: torch.Tensor
    prefill_s: float = 0.0
    step_s: list[float] = field(default_factory=list)

    def per_token_ms(self, q: float) -> float:
        return float(np.percentile(self.step_s, q) * 1e3) if self.step_s else float("nan")


class Decoder:
    """Greedy decoding on ``step`` (one token) and ``prefill`` (``chunk`` tokens) over a cache of
    ``slots`` slots; each a compiled model or anything with ``input_names`` and ``run``."""

    def __init__(self, step: Runner, prefill: Runner | None, layout: CacheLayout, slots: int, chunk: int,
                 seconds: float | None = None) -> None:
        self.step, self.prefill, self.layout = step, prefill, layout
        self.slots, self.chunk, self.seconds = slots, chunk, seconds

    def generate(self, input_ids, max_new_tokens: int, eos_token_id: int | None = None) -> Generation:
        """Greedy continuation of ``input_ids`` ([1, P] or [P]); stops at ``eos_token_id``."""
        ids = torch.as_tensor(np.asarray(input_ids) if not isinstance(input_ids, torch.Tensor) else input_ids)
        ids = ids.reshape(1, -1).to(torch.int64)
        prompt = ids.shape[1]
        if prompt < 1 or max_new_tokens < 0 or prompt + max_new_tokens > self.slots:
            raise InputError(f"a prompt of {prompt} tokens and {max_new_tokens} new ones: this decoder holds "
                             f"{self.slots} tokens (compile_decoder(max_length=...))")
        shape = (1, self.layout.heads, self.slots, self.layout.head_dim)
        cache = [torch.zeros(shape, dtype=self.layout.dtype) for _ in range(2 * self.layout.layers)]
        out = Generation(ids)
        t0 = time.perf_counter()
        logits, t = None, 0
        while t < prompt:  # the prompt in chunks (one token at a time without a prefill step)
            runner, size = (self.prefill, self.chunk) if self.prefill is not None else (self.step, 1)
            valid = min(size, prompt - t)
            logits = self._run(runner, ids[:, t:t + valid], t, size, cache)[valid - 1]
            t += valid
        out.prefill_s = time.perf_counter() - t0
        tokens = [ids]
        for k in range(max_new_tokens):
            nxt = logits.argmax().reshape(1, 1)
            tokens.append(nxt)
            if k + 1 == max_new_tokens or eos_token_id is not None and int(nxt) == eos_token_id:
                break
            t1 = time.perf_counter()
            logits = self._run(self.step, nxt, t, 1, cache)[0]
            out.step_s.append(time.perf_counter() - t1)
            t += 1
        out.tokens = torch.cat(tokens, dim=1)
        return out

    def _run(self, runner: Runner, ids: torch.Tensor, t: int, size: int, cache: list[torch.Tensor]) -> torch.Tensor:
        """One step over tokens at positions t.. (padded to ``size``); writes their keys and values
        into the cache; the logits of the valid tokens."""
        valid = ids.shape[1]
        padded = torch.zeros(1, size, dtype=torch.int64)
        padded[:, :valid] = ids
        mask = torch.zeros(1, self.slots + size, dtype=torch.int64)
        mask[0, :t] = 1
        mask[0, self.slots:self.slots + valid] = 1
        feeds = {IDS: padded, MASK: mask}
        if POSITIONS in runner.input_names:
            # padding tokens take the last position: never one the model has no embedding for
            feeds[POSITIONS] = torch.arange(t, t + size, dtype=torch.int64).clamp(max=self.slots - 1).unsqueeze(0)
        feeds.update(zip(self.layout.past_names(), cache))
        outs = runner.run(feeds)
        for buf, name in zip(cache, self.layout.present_names()):
            new = outs[name]
            buf[:, :, t:t + valid] = new[:, :, new.shape[2] - size:new.shape[2] - size + valid]
        return outs["logits"][0, :valid]

    def save(self, path: str | os.PathLike) -> Path:
        d = Path(path)
        for name, m in (("step", self.step), ("prefill", self.prefill)):
            if m is not None:
                m.save(d / name)
        layout = {**asdict(self.layout), "dtype": str(self.layout.dtype).removeprefix("torch.")}
        try:
            (d / MANIFEST).write_text(json.dumps({"format": FORMAT, "version": VERSION, "slots": self.slots,
                                                  "chunk": self.chunk, "layout": layout, "seconds": self.seconds}))
        except OSError as e:
            raise KernorchError(f"{d}: cannot save the decoder ({e.strerror or type(e).__name__})") from None
        return d


def compile_decoder(model: Any, max_length: int = 256, chunk: int = 16, **options: Any) -> Decoder:
    """A Decoder of ``model`` (a transformers causal LM, or an ONNX decoder-with-past) holding
    ``max_length`` tokens; ``options`` are compile()'s (module docstring)."""
    if not isinstance(max_length, int) or not isinstance(chunk, int) or not 1 <= chunk <= max_length:
        raise KernorchError(f"compile_decoder: expected 1 <= chunk <= max_length, got chunk={chunk!r}, "
                            f"max_length={max_length!r}")
    longest = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(longest, int) and max_length > longest:
        raise KernorchError(f"compile_decoder: max_length={max_length} but {type(model).__name__} has position "
                            f"embeddings for {longest} tokens")
    t0 = time.perf_counter()
    steps = {}
    for size in sorted({1, chunk}):
        if isinstance(model, torch.nn.Module):
            proto, layout = decoder_step(model, max_length, size)
            pinned = None
        else:
            proto, layout = onnx_layout(model)
            pinned = _pinned(proto, layout, max_length, size)
        steps[size] = compile_model(proto, input_shapes=pinned, **options)
    return Decoder(steps[1], steps.get(chunk) if chunk > 1 else None, layout, max_length, chunk,
                   time.perf_counter() - t0)


def _pinned(proto, layout: CacheLayout, slots: int, size: int) -> dict[str, list[int]]:
    names = {vi.name for vi in proto.graph.input}
    shapes = {IDS: [1, size], MASK: [1, slots + size], **{n: [1, layout.heads, slots, layout.head_dim]
                                                          for n in layout.past_names()}}
    if POSITIONS in names:
        shapes[POSITIONS] = [1, size]
    return shapes


def load_decoder(path: str | os.PathLike, **kw: Any) -> Decoder:
    d = Path(path)
    try:
        m = json.loads((d / MANIFEST).read_text())
        if m.get("format") != FORMAT or m.get("version") != VERSION:
            raise ValueError(f"format {str(m.get('format'))[:30]!r} version {str(m.get('version'))[:10]}")
        lay = m["layout"]
        layout = CacheLayout(int(lay["layers"]), int(lay["heads"]), int(lay["head_dim"]),
                             getattr(torch, str(lay["dtype"])))
        slots, chunk = int(m["slots"]), int(m["chunk"])
        if not (isinstance(layout.dtype, torch.dtype) and 1 <= chunk <= slots
                and min(layout.layers, layout.heads, layout.head_dim) >= 1):
            raise ValueError("implausible layout, slots or chunk")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SavedModelError(f"{d / MANIFEST}: not a kernorch decoder ({type(e).__name__}: {e})") from None
    step = load_static(d / "step", **kw)
    prefill = load_static(d / "prefill", **kw) if chunk > 1 else None
    return Decoder(step, prefill, layout, slots, chunk, m.get("seconds"))
