"""Text generation with a KV cache (issue 46, runtime/decode.py): a tiny GPT-2 and a tiny Llama
(RoPE, RMSNorm, grouped-query attention) compiled as fixed-shape steps over a preallocated cache
generate exactly the tokens transformers' own greedy search generates with its growing cache,
and onnxruntime running the same step models through the same loop agrees; the saved decoder
loads back; a prompt that does not fit is one line."""

import numpy as np
import pytest
import torch

import kernorch
from kernorch.cli import main
from kernorch.cli_common import EXIT_ERROR
from kernorch.errors import InputError, KernorchError, SavedModelError
from kernorch.frontend.decoder import decoder_step
from kernorch.runtime.decode import Decoder

from bench.decode import OrtStep  # onnxruntime running a step model with a compiled model's run()

KW = dict(threads=2, progress=False, regions=False, providers=("torch",))
SLOTS, CHUNK = 48, 8


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)  # a wide initializer: random small models otherwise repeat one token
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=500, n_positions=64, initializer_range=0.3,
                     attn_implementation="eager")
    return GPT2LMHeadModel(cfg).eval()


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, vocab_size=500, max_position_embeddings=64, initializer_range=0.3,
                      attn_implementation="eager")
    return LlamaForCausalLM(cfg).eval()


def _reference(lm, prompt, new):
    with torch.no_grad():
        return lm.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)


@pytest.fixture(scope="module")
def gpt2():
    lm = _gpt2()
    return lm, kernorch.compile_decoder(lm, max_length=SLOTS, chunk=CHUNK, **KW)


@pytest.mark.parametrize("prompt_len", [1, 8, 13])
def test_gpt2_tokens_equal_transformers_greedy_search(gpt2, prompt_len):
    lm, dec = gpt2
    prompt = torch.randint(0, 500, (1, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
    got = dec.generate(prompt, 24)
    want = _reference(lm, prompt, 24)
    assert got.tokens.tolist() == want.tolist()
    assert len(set(want[0, prompt_len:].tolist())) > 3  # a sequence, not one token repeated
    assert len(got.step_s) == 23


def test_onnxruntime_through_the_same_loop_agrees(gpt2):
    lm, dec = gpt2
    step, layout = decoder_step(lm, SLOTS, 1)
    prefill, _ = decoder_step(lm, SLOTS, CHUNK)
    on_ort = Decoder(OrtStep(step, 2), OrtStep(prefill, 2), layout, SLOTS, CHUNK)
    prompt = torch.randint(0, 500, (1, 11), generator=torch.Generator().manual_seed(3))
    assert on_ort.generate(prompt, 20).tokens.tolist() == dec.generate(prompt, 20).tokens.tolist()


def test_llama_style_decoder_generates_the_same_tokens():
    lm = _llama()
    dec = kernorch.compile_decoder(lm, max_length=SLOTS, chunk=CHUNK, **KW)
    prompt = torch.randint(0, 500, (1, 10), generator=torch.Generator().manual_seed(5))
    assert dec.generate(prompt, 20).tokens.tolist() == _reference(lm, prompt, 20).tolist()


def test_onnx_decoder_with_past_and_saved_decoder(gpt2, tmp_path, capsys):
    lm, dec = gpt2
    step, _ = decoder_step(lm, SLOTS, 1)  # an ONNX decoder-with-past: read as it is, no prefill step
    from_onnx = kernorch.compile_decoder(step, max_length=SLOTS, chunk=1, **KW)
    prompt = torch.randint(0, 500, (1, 6), generator=torch.Generator().manual_seed(7))
    want = dec.generate(prompt, 12).tokens.tolist()
    assert from_onnx.prefill is None and from_onnx.generate(prompt, 12).tokens.tolist() == want
    dec.save(tmp_path / "d")
    back = kernorch.load(tmp_path / "d")
    assert isinstance(back, Decoder) and back.generate(prompt, 12).tokens.tolist() == want
    assert main(["run", str(tmp_path / "d")]) == EXIT_ERROR  # the CLI runs fixed-shape models; says so in one line
    assert "holds a text decoder" in capsys.readouterr().err
    (tmp_path / "d" / "decoder.json").write_text('{"format": "kernorch-decoder", "version": 1, "slots": 4}')
    with pytest.raises(SavedModelError, match="not a kernorch decoder"):
        kernorch.load(tmp_path / "d")


def test_what_does_not_fit_is_one_line(gpt2):
    lm, dec = gpt2
    with pytest.raises(InputError, match=f"this decoder holds {SLOTS} tokens"):
        dec.generate(torch.zeros(1, 40, dtype=torch.int64), 10)
    with pytest.raises(KernorchError, match="position embeddings for 64 tokens"):
        kernorch.compile_decoder(lm, max_length=100, **KW)
    with pytest.raises(KernorchError, match="1 <= chunk <= max_length"):
        kernorch.compile_decoder(lm, max_length=8, chunk=16, **KW)
