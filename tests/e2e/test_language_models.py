"""Language models from transformers configs with random weights (no hub downloads), exported at
static shapes: a GPT-2 (token + position embeddings, two decoder blocks), a BERT encoder with
input_ids + attention_mask (the tail padded), a Llama-style decoder (RMSNorm, rotary embeddings,
gated SiLU MLP, causal mask) and a T5 encoder. Each passes `kernorch check` (GPT-2 and BERT also
from the dynamo exporter), every strategy compiles and matches onnxruntime, the optimal plan has
no opaque prim, and the token embedding gather shares its kernel with the norm's statistics (and
for GPT-2 and BERT with the position add): the cost model's choice, pinned here and shown in the
summary. For Llama that needed the partition to count only fusable crossing values and the set
budget to let chains grow (orchestrate/partition.py, Note [fusable width]; enumerate.py, Note
[set budget])."""

import importlib.util
import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

import torch  # noqa: E402

import kernorch  # noqa: E402
from kernorch.cli import main  # noqa: E402
from kernorch.ir.prims import Kind, Op  # noqa: E402

SEQ = 16
BUILDERS = {"gpt2": ("input_ids",), "bert": ("input_ids", "attention_mask"), "llama": ("input_ids",),
            "t5_encoder": ("input_ids", "attention_mask")}
DYNAMO = ("gpt2", "bert")
POSITION_ADD = ("gpt2", "bert")  # learned position embeddings (Llama: rotary; T5: relative buckets)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from bench import language_models as lm

    d = tmp_path_factory.mktemp("language_models")
    out = {}
    for name, inputs in BUILDERS.items():
        model, args = getattr(lm, name)(SEQ, 2, seed=0, tiny=True)
        path = d / f"{name}.onnx"
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17, input_names=list(inputs),
                              output_names=["last_hidden_state"])
        out[name] = (path, {n: a.numpy() for n, a in zip(inputs, args)})
        if name in DYNAMO and importlib.util.find_spec("onnxscript") is not None:
            path = d / f"{name}_dynamo.onnx"
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
                torch.onnx.export(model, args, str(path), dynamo=True, opset_version=18, external_data=False,
                                  optimize=True, verbose=False, input_names=list(inputs),
                                  output_names=["last_hidden_state"])
            out[f"{name}_dynamo"] = (path, out[name][1])
    return out


@pytest.mark.parametrize("name", list(BUILDERS) + [f"{n}_dynamo" for n in DYNAMO])
def test_check_passes(name, models, capsys):
    if name not in models:
        pytest.skip("onnxscript (the dynamo exporter) is not installed")
    rc = main(["check", str(models[name][0])])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "OK: 1 output(s) match onnxruntime" in out
    assert "0 opaque" in out


@pytest.mark.parametrize("strategy", ["unfused", "per-operator", "greedy", "optimal"])
@pytest.mark.parametrize("name", list(BUILDERS))
def test_strategy_matches_onnxruntime(name, strategy, models, tmp_path):
    path, feeds = models[name]
    model = kernorch.compile(path, strategy=strategy, cost="model", db=tmp_path / "db.sqlite", progress=False)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = model.run(feeds)
    for out, w in zip(model.output_names, want):
        assert np.abs(got[out].numpy() - w).max() <= 1e-4 * max(1.0, float(np.abs(w).max()))
    if strategy != "optimal":
        return
    g = model.graph
    assert not any(p.kind is Kind.OPAQUE for p in g.prims)
    producer = {p.output: p for p in g.prims}
    token = next(p for p in g.prims if p.op is Op.GATHER)  # the token embedding: input_ids index it
    (kernel,) = [info for info in model.executable.infos if token.output in info.members]
    ops = {producer[v].op for v in kernel.members}
    want = {Op.GATHER, Op.SUM} | ({Op.ADD} if name in POSITION_ADD else set())
    assert want <= ops, sorted(o.value for o in ops)
    rows = [line.split() for line in model.summary().splitlines()]
    assert any("gather" in r and "sum" in r for r in rows), model.summary()


def test_padded_attention_mask_changes_bert_output(models, tmp_path):
    """The mask is a runtime input, not folded: padding more tokens changes the result, and the
    compiled model follows onnxruntime on both masks."""
    path, feeds = models["bert"]
    model = kernorch.compile(path, strategy="greedy", cost="model", db=tmp_path / "db.sqlite", progress=False)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    other = dict(feeds, attention_mask=np.ones_like(feeds["attention_mask"]))
    for f in (feeds, other):
        want = sess.run(None, f)[0]
        np.testing.assert_allclose(model.run(f)["last_hidden_state"].numpy(), want, atol=1e-4, rtol=1e-4)
    assert not np.allclose(sess.run(None, feeds)[0], sess.run(None, other)[0])


def test_saved_gpt2_reloads_with_its_gather_kernels(models, tmp_path):
    path, feeds = models["gpt2"]
    model = kernorch.compile(path, strategy="greedy", cost="model", db=tmp_path / "db.sqlite", progress=False,
                             regions=False)
    model.save(tmp_path / "saved")
    again = kernorch.load(tmp_path / "saved")
    assert any(p.op is Op.GATHER for p in again.graph.prims)
    np.testing.assert_array_equal(again.run(feeds)["last_hidden_state"].numpy(),
                                  model.run(feeds)["last_hidden_state"].numpy())


class _Logits(torch.nn.Module):
    """A causal LM called the plain way, ``model(input_ids).logits`` (no attention mask): transformers
    then looks for packed sequences with torch.diff, which the TorchScript exporter cannot export."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


@pytest.mark.skipif(importlib.util.find_spec("onnxscript") is None,
                    reason="onnxscript (the dynamo exporter) is not installed")
def test_llama_module_compiles_through_the_dynamo_fallback(tmp_path):
    """A grouped-query Llama handed to compile() as a module: the default export falls back to the
    dynamo exporter, says so, and the compiled model matches PyTorch."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    net = _Logits(LlamaForCausalLM(cfg)).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, SEQ))
    model = kernorch.compile(net, ids, cost="model", regions=False, progress=False, db=tmp_path / "db.sqlite")
    assert model.report.exporter == "dynamo"
    assert "dynamo ONNX exporter" in model.summary()
    with torch.no_grad():
        want = net(ids).numpy()
    assert np.abs(model(ids.numpy()) - want).max() <= 1e-4 * max(1.0, np.abs(want).max())
