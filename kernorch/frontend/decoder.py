"""A causal language model as fixed-shape decoding steps over a preallocated KV cache.

Decoding grows the cache by one token per step, so every step would have new shapes. Here the
cache is a buffer of ``max_length`` slots per layer that the step reads whole, with an attention
mask marking the slots already written (the convention of transformers' and Optimum's
decoder-with-past ONNX models: ``input_ids``, ``attention_mask`` over past + new tokens,
``position_ids``, ``past_key_values.{i}.key/value`` in, ``logits`` and ``present.{i}.key/value``
out). A step of ``chunk`` tokens then has one shape at every position: it compiles once, and the
caller writes the new keys and values into the buffer in place (runtime/decode.py). Masked slots
add exactly zero attention weight, so the result equals decoding with a growing cache.

``decoder_step`` wraps a transformers causal LM (GPT-2, Llama, ...) this way and exports it to
ONNX; an ONNX decoder-with-past made elsewhere (Optimum) is used as it is, its past length pinned.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import onnx
import torch

from kernorch.errors import ExportError
from kernorch.frontend.onnx_import import load_model

IDS, MASK, POSITIONS = "input_ids", "attention_mask", "position_ids"


def past_name(layer: int, kv: str) -> str:
    return f"past_key_values.{layer}.{kv}"


def present_name(layer: int, kv: str) -> str:
    return f"present.{layer}.{kv}"


@dataclass(frozen=True)
class CacheLayout:
    """The KV cache a decoder reads: per layer a key and a value of shape [1, heads, slots, head_dim]."""

    layers: int
    heads: int
    head_dim: int
    dtype: torch.dtype = torch.float32

    def past_names(self) -> list[str]:
        return [past_name(i, kv) for i in range(self.layers) for kv in ("key", "value")]

    def present_names(self) -> list[str]:
        return [present_name(i, kv) for i in range(self.layers) for kv in ("key", "value")]


class _Step(torch.nn.Module):
    """``lm`` over a cache given as tensors; returns the logits and the new tokens' keys and values."""

    def __init__(self, lm: torch.nn.Module, layers: int) -> None:
        super().__init__()
        self.lm, self.layers = lm, layers

    def forward(self, input_ids, attention_mask, position_ids, *past):
        from transformers import DynamicCache  # lazy: transformers only for a module given as a transformers LM

        cache = DynamicCache()
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                      past_key_values=cache, use_cache=True, return_dict=True)
        slots = past[0].shape[2]
        new = []
        for i in range(self.layers):
            layer = out.past_key_values.layers[i]
            new += [layer.keys[:, :, slots:], layer.values[:, :, slots:]]
        return (out.logits, *new)


def cache_layout(lm: torch.nn.Module) -> CacheLayout:
    """The cache ``lm`` keeps, read off one token run through it."""
    with torch.no_grad():
        out = lm(input_ids=torch.zeros(1, 1, dtype=torch.int64), use_cache=True, return_dict=True)
    layers = out.past_key_values.layers
    _, heads, _, dim = layers[0].keys.shape
    return CacheLayout(len(layers), heads, dim, layers[0].keys.dtype)


def decoder_step(lm: torch.nn.Module, slots: int, chunk: int) -> tuple[onnx.ModelProto, CacheLayout]:
    """The ONNX step of ``chunk`` tokens over a cache of ``slots`` slots of a transformers causal LM."""
    if not hasattr(lm, "config") or not callable(getattr(lm, "forward", None)):
        raise ExportError(f"expected a transformers causal LM (a module with .config), got {type(lm).__name__}")
    lm.eval()
    layout = cache_layout(lm)
    example = (torch.zeros(1, chunk, dtype=torch.int64), torch.ones(1, slots + chunk, dtype=torch.int64),
               torch.arange(chunk).unsqueeze(0),
               *[torch.zeros(1, layout.heads, slots, layout.head_dim, dtype=layout.dtype)] * (2 * layout.layers))
    f = io.BytesIO()
    try:
        with torch.no_grad():  # the wrapper in eval mode: the exporter restores its mode, and with it lm's
            torch.onnx.export(_Step(lm, layout.layers).eval(), example, f, dynamo=False, opset_version=17,
                              input_names=[IDS, MASK, POSITIONS, *layout.past_names()],
                              output_names=["logits", *layout.present_names()])
    except Exception as e:  # noqa: BLE001 - the exporter raises many unrelated types; all mean one thing
        raise ExportError(f"exporting {type(lm).__name__}'s decoding step failed: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:160] if str(e) else ''}") from None
    return onnx.load_from_string(f.getvalue()), layout


def onnx_layout(model) -> tuple[onnx.ModelProto, CacheLayout]:
    """An ONNX decoder-with-past (Optimum's convention) and the cache it reads."""
    proto = load_model(model)
    inputs = {vi.name: vi for vi in proto.graph.input}
    missing = [n for n in (IDS, MASK, past_name(0, "key")) if n not in inputs]
    if missing:
        raise ExportError(f"not a decoder with past key/values: no input {missing[0]!r} (expected {IDS}, {MASK}, "
                          f"past_key_values.N.key/value)")
    layers = 0
    while past_name(layers, "key") in inputs:
        layers += 1
    dims = inputs[past_name(0, "key")].type.tensor_type.shape.dim
    if len(dims) != 4 or not dims[1].HasField("dim_value") or not dims[3].HasField("dim_value"):
        raise ExportError(f"{past_name(0, 'key')}: expected [batch, heads, past, head_dim] with fixed heads and dim")
    return proto, CacheLayout(layers, dims[1].dim_value, dims[3].dim_value)
