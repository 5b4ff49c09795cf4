"""One Options object per compile (kernorch/options.py): the environment is read once, at the
entry point; every setting reaches the code that uses it; a bad value is one line naming the
variable. The oracle for results is onnxruntime on the same tiny model."""

import collections.abc
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kernorch
from kernorch.errors import KernorchError
from kernorch.options import Env, Options

# The variables kernorch reads (options.py's docstring); nothing below an entry point may read them.
WATCHED = ("KERNORCH_CACHE_DIR", "KERNORCH_DB", "KERNORCH_NUM_THREADS", "KERNORCH_COMPILE_WORKERS", "CC",
           "TRITON_INTERPRET", "RAY_ADDRESS", "XDG_CACHE_HOME")
FAST = dict(cost="model", providers=(), regions=False, progress=False)


def _model() -> onnx.ModelProto:
    """y = softmax(exp(x) * x) over the last axis: a reduction and elementwise work, C kernels only."""
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Mul", ["e", "x"], ["m"]),
             helper.make_node("Softmax", ["m"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, x: np.ndarray) -> None:
    want = ort.InferenceSession(_model().SerializeToString()).run(None, {"x": x})[0]
    got = model(x)  # one output; NumPy in, NumPy out
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class _Guard(collections.abc.MutableMapping):
    """os.environ that fails the test when kernorch's variables are read."""

    def __init__(self, real, watched=WATCHED):
        self.real, self.watched = real, watched

    def __getitem__(self, key):
        if key in self.watched:
            raise AssertionError(f"{key} read after the entry point")
        return self.real[key]

    def __setitem__(self, key, value):
        self.real[key] = value

    def __delitem__(self, key):
        del self.real[key]

    def __iter__(self):
        return iter(self.real)

    def __len__(self):
        return len(self.real)

    def copy(self):
        return dict(self.real)


@pytest.fixture
def x():
    return np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)


@pytest.mark.parametrize("cost", ["model", "measured"])
def test_nothing_below_the_entry_point_reads_the_environment(cost, tmp_path, monkeypatch, x):
    opts = Options.from_env(**{**FAST, "cost": cost, "db": tmp_path / "db.sqlite"})
    monkeypatch.setattr(os, "environ", _Guard(os.environ))
    model = kernorch.compile(_model(), options=opts)
    _check(model, x)
    model.save(tmp_path / "m")
    _check(kernorch.load(tmp_path / "m", env=opts.env), x)


def test_nothing_below_the_entry_point_reads_the_environment_on_cuda(tmp_path, monkeypatch, x):
    """Target "cuda" (Triton's interpreter without a GPU); TRITON_INTERPRET is Triton's own too."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("a GPU run: tests/cuda cover it")
    opts = Options.from_env(**{**FAST, "target": "cuda", "db": tmp_path / "db.sqlite"})
    monkeypatch.setattr(os, "environ", _Guard(os.environ, tuple(w for w in WATCHED if w != "TRITON_INTERPRET")))
    model = kernorch.compile(_model(), options=opts)
    _check(model, x)
    model.save(tmp_path / "m")
    _check(kernorch.load(tmp_path / "m", env=opts.env), x)


def test_the_environment_changing_after_options_has_no_effect(tmp_path, monkeypatch, x):
    monkeypatch.setenv("KERNORCH_CACHE_DIR", str(tmp_path / "first"))
    monkeypatch.setenv("KERNORCH_NUM_THREADS", "1")
    monkeypatch.setenv("KERNORCH_DB", str(tmp_path / "first.sqlite"))
    opts = Options.from_env(**{**FAST, "cost": "measured"})
    monkeypatch.setenv("KERNORCH_CACHE_DIR", str(tmp_path / "second"))
    monkeypatch.setenv("KERNORCH_NUM_THREADS", "not a number")  # would fail if read now
    monkeypatch.setenv("KERNORCH_DB", str(tmp_path / "second.sqlite"))
    model = kernorch.compile(_model(), options=opts)
    _check(model, x)
    assert list((tmp_path / "first").glob("kn_*.so")) and not (tmp_path / "second").exists()
    assert (tmp_path / "first.sqlite").exists() and not (tmp_path / "second.sqlite").exists()
    assert {k.num_threads for k in model.kernels if hasattr(k, "num_threads")} == {1}


@pytest.mark.parametrize("threads", [1, 3])
def test_threads_reach_the_kernels(threads, monkeypatch, x):
    monkeypatch.setenv("KERNORCH_NUM_THREADS", str(threads))
    model = kernorch.compile(_model(), **FAST)  # from the environment
    assert {k.num_threads for k in model.kernels} == {threads}
    model = kernorch.compile(_model(), threads=4 - threads + 1, **FAST)  # the keyword wins
    assert {k.num_threads for k in model.kernels} == {4 - threads + 1}
    _check(model, x)


@pytest.mark.parametrize("name,value", [("KERNORCH_NUM_THREADS", "abc"), ("KERNORCH_NUM_THREADS", "0"),
                                        ("KERNORCH_COMPILE_WORKERS", "-1"), ("KERNORCH_COMPILE_WORKERS", "2.5"),
                                        ("TRITON_INTERPRET", "maybe")])
def test_a_bad_value_is_one_line_naming_the_variable(name, value, monkeypatch):
    monkeypatch.setenv(name, value)
    with pytest.raises(KernorchError) as e:
        kernorch.compile(_model(), **FAST)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{name}={value!r}")


def test_unknown_options_and_mixed_forms_are_one_line():
    with pytest.raises(KernorchError, match=r"^unknown option\(s\) thread; see docs/PYTHON_API.md$"):
        Options.from_env(thread=2)
    with pytest.raises(KernorchError, match="^pass either options= or keywords, not both \\(got strategy\\)$"):
        kernorch.compile(_model(), options=Options(), strategy="greedy")


def test_env_reads_each_variable(tmp_path):
    env = Env.read({"KERNORCH_CACHE_DIR": str(tmp_path / "c"), "XDG_CACHE_HOME": str(tmp_path / "x"),
                    "KERNORCH_NUM_THREADS": "5", "KERNORCH_COMPILE_WORKERS": "1", "CC": "clang",
                    "KERNORCH_CFLAGS": "-mtune=znver4  '-DX=a b'", "TRITON_INTERPRET": "On", "RAY_ADDRESS": "10.0.0.1:6379"})
    assert env == Env(tmp_path / "c", tmp_path / "x" / "kernorch" / "tuning.sqlite", 5, 1, "clang",
                      ("-mtune=znver4", "-DX=a b"), True, "10.0.0.1:6379")
    assert Env.read({"KERNORCH_DB": "/d.sqlite", "XDG_CACHE_HOME": "/x"}).db_path.as_posix() == "/d.sqlite"
    bare = Env.read({})
    assert (bare.compile_workers, bare.cc, bare.cflags, bare.triton_interpret, bare.ray_address) == \
        (0, None, (), False, "auto")
    assert bare.threads == len(os.sched_getaffinity(0))


def test_options_are_frozen():
    opts = Options()
    with pytest.raises(AttributeError):
        opts.threads = 3  # type: ignore[misc]
    assert opts.replace(threads=3).threads == 3 and opts.replace(threads=3).env is opts.env


@pytest.mark.parametrize("command", ["compile", "run"])
def test_the_cli_says_a_bad_value_in_one_line(command, tmp_path):
    """Every CLI command is an entry point: a bad variable is `kernorch: error: NAME=...`, exit 2."""
    import subprocess
    import sys

    onnx.save(_model(), tmp_path / "m.onnx")
    if command == "run":
        kernorch.compile(_model(), **FAST).save(tmp_path / "out")
    argv = ["compile", "m.onnx", "-o", "out", "--cost", "model"] if command == "compile" else ["run", "out"]
    env = {**os.environ, "KERNORCH_NUM_THREADS": "lots", "KERNORCH_DB": str(tmp_path / "db.sqlite")}
    r = subprocess.run([sys.executable, "-m", "kernorch", *argv], capture_output=True, text=True, cwd=tmp_path,
                       env=env, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    want = "KERNORCH_NUM_THREADS='lots' is not an integer >= 1; unset it or fix the value"
    assert r.stderr == f"kernorch: error: {want}\n"


def test_cuda_settings_reach_the_cuda_target(tmp_path, monkeypatch, x):
    """KERNORCH_COMPILE_WORKERS reaches the Triton precompile step; TRITON_INTERPRET as read into
    the Options (not the process's current value) decides the device."""
    pytest.importorskip("triton")
    import torch

    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs Triton's interpreter and no GPU")
    from kernorch.targets import cuda as cuda_target

    seen = []
    real = cuda_target.precompile
    monkeypatch.setattr(cuda_target, "precompile", lambda kernels, workers=0: (seen.append(workers),
                                                                                real(kernels, workers)))
    opts = Options.from_env({**os.environ, "KERNORCH_COMPILE_WORKERS": "3"},
                            **{**FAST, "target": "cuda", "db": tmp_path / "db.sqlite"})
    _check(kernorch.compile(_model(), options=opts), x)
    assert seen == [3]
    no_interpreter = Options.from_env({**os.environ, "TRITON_INTERPRET": "0"}, target="cuda", cost="model")
    with pytest.raises(KernorchError, match="^target 'cuda' needs a CUDA GPU"):
        kernorch.compile(_model(), options=no_interpreter)


def test_compile_keywords_are_the_options_fields_with_their_defaults():
    """Options is where a setting is declared: compile()'s keywords may not drift from it (the
    one difference: rewrites=None in Options means the DEFAULT_RULES compile() spells out)."""
    import dataclasses
    import inspect

    from kernorch.rewrite.pipeline import DEFAULT_RULES
    from kernorch.runtime.compile import compile

    keywords = {k: p.default for k, p in inspect.signature(compile).parameters.items()
                if p.kind is p.KEYWORD_ONLY and k != "options"}
    fields = {f.name: f.default for f in dataclasses.fields(Options) if f.name != "env"}
    assert set(keywords) == set(fields)
    fields["rewrites"] = DEFAULT_RULES
    assert {k: v for k, v in keywords.items() if v != fields[k]} == {}
