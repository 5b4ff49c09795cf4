"""One compiled model for every batch size of a range (issue 46, runtime/dynamic.py): the profiles'
chunks cover a batch at the least measured cost (against brute force), outputs match onnxruntime
running the same model with a dynamic batch at every size of the range, a model whose samples
see each other is refused before tuning, out-of-range and inconsistent inputs are one line, and
the saved directory loads back."""

import io
import itertools
import json
import random

import numpy as np
import onnxruntime as ort
import pytest
import torch

import kernorch
from kernorch.cli_common import parse_dynamic, parse_sizes
from kernorch.errors import InputError, KernorchError, SavedModelError
from kernorch.runtime.dynamic import batch_dims, profile_sizes
from kernorch.runtime.dynamic_model import cheapest_cover, sample_sizes

KW = dict(threads=2, progress=False, regions=False, providers=("torch",))


class Net(torch.nn.Module):
    """Convolution, batch norm (inference), pooling, a classifier and a second output whose batch
    is flattened into its first axis (8 rows per sample)."""

    def __init__(self):
        super().__init__()
        self.c, self.n, self.fc = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.n(self.c(x)))
        return self.fc(y.mean((2, 3))).softmax(-1), y[:, :, ::4, ::4].reshape(-1, 16)


class Mixing(torch.nn.Module):
    """Each sample's output depends on the others (a batch mean): not a batch."""

    def forward(self, x):
        return torch.relu(x - x.mean(0, keepdim=True))


def _onnx(module, example, names=("x",)) -> bytes:
    f = io.BytesIO()
    torch.onnx.export(module, example, f, dynamo=False, input_names=list(names),
                      dynamic_axes={n: {0: "batch"} for n in names})
    return f.getvalue()


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    m = Net().eval()
    with torch.no_grad():
        m.n.running_mean.uniform_(-0.5, 0.5)
        m.n.running_var.uniform_(0.5, 2.0)
    compiled = kernorch.compile(m, torch.randn(2, 3, 16, 16), dynamic={"x": {0: (1, 6)}}, **KW)
    return m, compiled


def test_cover_is_the_cheapest_against_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        sizes = sorted(rng.sample(range(1, 17), rng.randint(1, 4)))
        lat = {s: rng.uniform(0.5, 2.0) * s ** rng.uniform(0.6, 1.0) for s in sizes}
        n = rng.randint(1, 16)
        got = cheapest_cover(n, lat)
        assert sum(got) >= n
        best = min(sum(lat[s] for s in combo)
                   for k in range(1, n + 1) for combo in itertools.combinations_with_replacement(sizes, k)
                   if sum(combo) >= n and sum(combo) - min(combo) < n)
        assert sum(lat[s] for s in got) == pytest.approx(best)


def test_outputs_match_onnxruntime_at_every_batch_size(net):
    m, compiled = net
    assert sorted(compiled.profiles) == [1, 2, 4, 6]
    reports = {b: m.report for b, m in compiled.profiles.items()}
    assert not reports[4].plan_transferred and all(reports[b].plan_transferred for b in (1, 2, 6))
    sess = ort.InferenceSession(_onnx(m, torch.randn(2, 3, 16, 16)), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for n in range(1, 7):
        x = rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
        probs, rows = compiled(x)
        want = sess.run(None, {"x": x})
        assert probs.shape == (n, 5) and rows.shape == (n * 8, 16)
        np.testing.assert_allclose(probs, want[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(rows, want[1], rtol=1e-4, atol=1e-5)
    assert compiled.axes.outputs == {"output_0": (0, 1), "output_1": (0, 8)}
    assert sum(compiled.chunks(5)) >= 5 and set(compiled.chunks(5)) <= {1, 2, 4, 6}


def test_out_of_range_and_bad_inputs_are_one_line(net):
    _, compiled = net
    with pytest.raises(InputError, match=r"input 'x' dim 0 is 7: this model was compiled for 1\.\.6"):
        compiled(np.zeros((7, 3, 16, 16), np.float32))
    with pytest.raises(InputError, match="missing input 'x'"):
        compiled.run({"y": np.zeros((2, 3, 16, 16), np.float32)})
    with pytest.raises(InputError, match="batch 9: this model was compiled for 1..6"):
        compiled.random_inputs(9)


def test_saved_directory_loads_back(net, tmp_path):
    _, compiled = net
    compiled.save(tmp_path / "m")
    back = kernorch.load(tmp_path / "m")
    assert isinstance(back, kernorch.DynamicModel) and back.latency == compiled.latency
    assert all(back.chunks(n) == compiled.chunks(n) for n in range(1, 7))
    x = np.random.default_rng(2).standard_normal((3, 3, 16, 16)).astype(np.float32)
    for a, b in zip(back(x), compiled(x)):
        np.testing.assert_array_equal(a, b)
    manifest = tmp_path / "m" / "dynamic.json"
    m = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**m, "lo": 9}))
    with pytest.raises(SavedModelError, match="not a dynamic kernorch model"):
        kernorch.load(tmp_path / "m")


def test_samples_that_see_each_other_are_refused_before_tuning():
    with pytest.raises(KernorchError, match="changes when the other samples change"):
        kernorch.compile(Mixing(), torch.randn(2, 4, 8), dynamic={"x": {0: (1, 4)}}, **KW)


def test_onnx_model_with_a_named_batch_dim(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.Linear(12, 3)).eval()
    path = tmp_path / "mlp.onnx"
    path.write_bytes(_onnx(m, torch.randn(2, 6)))
    compiled = kernorch.compile(str(path), dynamic={"x": {0: (2, 9)}}, profiles=(3, 8), **KW)
    assert sorted(compiled.profiles) == [3, 8]
    for n in sample_sizes(2, 9):
        x = torch.randn(n, 6)
        torch.testing.assert_close(compiled(x), m(x).detach(), rtol=1e-4, atol=1e-5)


def test_dynamic_specs_are_checked_by_name():
    assert batch_dims({"x": {0: (1, 16)}, "m": {1: (1, 16)}}, ["x", "m"]) == ({"x": 0, "m": 1}, 1, 16)
    for bad, words in [({"z": {0: (1, 4)}}, "unknown input 'z'"), ({"x": {0: (4, 4)}}, "1 <= lo < hi"),
                       ({"x": {0: (1, 4), 1: (1, 8)}}, "one {dim: (lo, hi)}"),
                       ({"x": {0: (1, 4)}, "m": {0: (1, 8)}}, "share one range"), ({}, "expects")]:
        with pytest.raises(KernorchError, match=words.replace("(", r"\(").replace(")", r"\)")):
            batch_dims(bad, ["x", "m"])
    assert profile_sizes(1, 16) == [1, 2, 4, 8, 16] and profile_sizes(3, 20) == [3, 4, 8, 16, 20]
    with pytest.raises(KernorchError, match="profiles="):
        profile_sizes(1, 8, (0, 4))
    assert parse_dynamic(["x=0:1..16"]) == {"x": {0: (1, 16)}} and parse_sizes("--profiles", "1,4") == (1, 4)
    with pytest.raises(KernorchError, match="NAME=DIM:LO..HI"):
        parse_dynamic(["x=0:1-16"])
    with pytest.raises(KernorchError, match="has no dynamic="):
        kernorch.compile(Net(), torch.randn(1, 3, 8, 8), profiles=(1, 2), **KW)


def test_a_plan_is_transferred_only_to_a_graph_of_its_structure():
    from kernorch.orchestrate.knobs import Knobs
    from kernorch.runtime import plan_cache

    torch.manual_seed(0)
    small = kernorch.compile(Net().eval(), torch.randn(1, 3, 16, 16), **KW)
    given = plan_cache.hint(small.graph, [i.members for i in small.executable.infos])
    same = kernorch.compile(Net().eval(), torch.randn(3, 3, 16, 16), knobs=Knobs(transfer=given), **KW)
    assert same.report.plan_transferred and len(same.kernels) == len(small.kernels)
    other = kernorch.compile(Mixing(), torch.randn(3, 4, 8), knobs=Knobs(transfer=given), **KW)
    assert not other.report.plan_transferred and other.report.measured > 0
    x = torch.randn(3, 4, 8)
    torch.testing.assert_close(torch.as_tensor(other(x)), Mixing()(x))
