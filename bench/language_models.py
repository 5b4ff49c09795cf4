"""Language-model builders from transformers configs with random weights (no hub downloads):
GPT-2 (token + position embeddings, decoder blocks), a BERT encoder (input_ids + attention_mask
with the tail padded), a Llama-style decoder and a T5 encoder. Static shapes: batch 1, ``size``
tokens; ``depth`` layers.

``tiny=True`` keeps the architecture and shrinks the width (64 hidden, 2 heads, vocabulary 1000)
for tests; the registered benchmark models are GPT-2 small and BERT-base widths.
"""

from __future__ import annotations

import torch
from torch import nn


class LastHidden(nn.Module):
    """``model(input_ids, attention_mask) -> last_hidden_state`` as one tensor (exportable)."""

    def __init__(self, model: nn.Module, decoder: bool) -> None:
        super().__init__()
        self.model, self.decoder = model, decoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None:
            # an explicit all-ones mask: without one, transformers looks for packed sequences in the
            # position ids (torch.diff), which the TorchScript exporter cannot export
            attention_mask = torch.ones_like(input_ids)
        extra = {"use_cache": False} if self.decoder else {}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False, **extra)[0]


def _ids(seq: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, seq), generator=g)


def gpt2(seq: int, layers: int, seed: int = 0, tiny: bool = False) -> tuple[nn.Module, tuple]:
    from transformers import GPT2Config, GPT2Model

    width = dict(n_embd=64, n_head=2, vocab_size=1000) if tiny else dict(n_embd=768, n_head=12, vocab_size=50257)
    cfg = GPT2Config(n_layer=layers, n_positions=max(seq, 64), bos_token_id=0, eos_token_id=0, **width)
    torch.manual_seed(seed)
    model = LastHidden(GPT2Model(cfg), decoder=True).eval()
    return model, (_ids(seq, cfg.vocab_size, seed),)


def bert(seq: int, layers: int, seed: int = 0, tiny: bool = False) -> tuple[nn.Module, tuple]:
    from transformers import BertConfig, BertModel

    width = (dict(hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=1000) if tiny
             else dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072, vocab_size=30522))
    cfg = BertConfig(num_hidden_layers=layers, max_position_embeddings=max(seq, 64), **width)
    torch.manual_seed(seed)
    model = LastHidden(BertModel(cfg, add_pooling_layer=False), decoder=False).eval()
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[0, seq - max(1, seq // 4):] = 0  # the last quarter is padding
    return model, (_ids(seq, cfg.vocab_size, seed), mask)


def llama(seq: int, layers: int, seed: int = 0, tiny: bool = False) -> tuple[nn.Module, tuple]:
    """A Llama-style decoder: RMSNorm, rotary embeddings, gated SiLU MLP, grouped-query causal
    attention."""
    from transformers import LlamaConfig, LlamaModel

    width = (dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                  vocab_size=1000) if tiny else
             dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, intermediate_size=5632,
                  vocab_size=32000))
    cfg = LlamaConfig(num_hidden_layers=layers, max_position_embeddings=max(seq, 64), **width)
    torch.manual_seed(seed)
    model = LastHidden(LlamaModel(cfg), decoder=True).eval()
    return model, (_ids(seq, cfg.vocab_size, seed),)


def t5_encoder(seq: int, layers: int, seed: int = 0, tiny: bool = False) -> tuple[nn.Module, tuple]:
    """A T5 encoder (RMS norm, relative position buckets) with a padded attention mask."""
    from transformers import T5Config, T5EncoderModel

    width = (dict(d_model=64, num_heads=2, d_kv=32, d_ff=128, vocab_size=1000) if tiny else
             dict(d_model=512, num_heads=8, d_kv=64, d_ff=2048, vocab_size=32128))
    cfg = T5Config(num_layers=layers, **width)
    torch.manual_seed(seed)
    model = LastHidden(T5EncoderModel(cfg), decoder=False).eval()
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[0, seq - max(1, seq // 4):] = 0
    return model, (_ids(seq, cfg.vocab_size, seed), mask)
