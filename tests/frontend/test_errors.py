"""Bad input pins: every failure a user can cause is one line naming the culprit, as a
KernorchError from the API and as ``kernorch: error: ...`` (exit status 2) from the CLI."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernorch.cli import main
from kernorch.errors import DynamicShapeError, InputError, KernorchError, ModelLoadError, UnsupportedOpError
from kernorch.frontend.inputs import check_inputs
from kernorch.frontend.onnx_import import import_onnx
from kernorch.frontend.reference import run_interpreter


def _model(op="Relu", domain="", shape=(2, 4), dtype=TensorProto.FLOAT, weight=False):
    """x -> op -> y; ``weight`` adds a 4 KiB initializer so truncation cuts inside a tensor."""
    n = helper.make_node(op, ["x"], ["y"], name="n0", domain=domain)
    inits = [numpy_helper.from_array(np.ones(1024, np.float32), "unused")] if weight else []
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info("y", dtype, list(shape))], inits)
    ops = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(g, opset_imports=ops)


def _raises(exc, fn, *args, **kw) -> str:
    with pytest.raises(exc) as info:
        fn(*args, **kw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# -- files ------------------------------------------------------------------------------------

def test_nonexistent_path(tmp_path):
    p = tmp_path / "nope.onnx"
    assert _raises(ModelLoadError, import_onnx, p) == f"{p}: no such file"


def test_garbage_file(tmp_path):
    p = tmp_path / "garbage.onnx"
    p.write_bytes(b"this is not a protobuf\x00\xff\x01")
    assert _raises(ModelLoadError, import_onnx, p) == f"{p}: not a readable ONNX model (DecodeError)"


def test_truncated_file(tmp_path):
    data = _model(weight=True).SerializeToString()
    p = tmp_path / "truncated.onnx"
    p.write_bytes(data[: len(data) // 2])
    assert _raises(ModelLoadError, import_onnx, p) == f"{p}: not a readable ONNX model (DecodeError)"


def test_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    assert _raises(ModelLoadError, import_onnx, p) == f"{p}: not a readable ONNX model (empty file)"


# -- operators --------------------------------------------------------------------------------

def test_custom_domain_op():
    msg = _raises(UnsupportedOpError, import_onnx, _model("Foo", domain="com.example"))
    assert msg == "operator com.example::Foo (node 'n0') is not supported"


def test_made_up_op():
    msg = _raises(UnsupportedOpError, import_onnx, _model("FooBar"))
    assert msg == "operator FooBar (node 'n0') has no fission rule and no reference implementation (not a standard ONNX op)"


# -- dynamic shapes ---------------------------------------------------------------------------

def test_dynamic_dimension_named_then_pinned():
    m = _model(shape=("batch", 4))
    msg = _raises(DynamicShapeError, import_onnx, m)
    assert msg == "input 'x' has a dynamic dimension 0 ('batch'); pin it with input_shapes={'x': [...]}"
    g, _ = import_onnx(m, input_shapes={"x": [3, 4]})
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(run_interpreter(g, {"x": x})["y"], np.maximum(x, 0))


def test_unknown_dimension_without_a_name():
    m = _model(shape=(None, 4))
    assert _raises(DynamicShapeError, import_onnx, m) == \
        "input 'x' has a dynamic dimension 0 ('?'); pin it with input_shapes={'x': [...]}"


def test_pinning_an_unknown_input():
    assert _raises(ModelLoadError, import_onnx, _model(), input_shapes={"z": [1]}) == \
        "a shape is pinned for unknown input(s) ['z']; the model's inputs are ['x']"


# -- run-time inputs --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graph():
    return import_onnx(_model())[0]


def test_wrong_input_shape(graph):
    msg = _raises(InputError, check_inputs, graph, {"x": np.zeros((4, 2), np.float32)})
    assert msg == "input 'x' has shape [4,2], expected [2,4]"


def test_wrong_input_dtype(graph):
    msg = _raises(InputError, run_interpreter, graph, {"x": np.zeros((2, 4), np.float64)})
    assert msg == "input 'x' has dtype float64, expected float32"


def test_wrong_input_name(graph):
    msg = _raises(InputError, check_inputs, graph, {"y": np.zeros((2, 4), np.float32)})
    assert msg == "unknown input 'y'; the model's inputs are 'x' float32[2,4]"


def test_missing_input():
    m = _model()
    m.graph.node[0].CopyFrom(helper.make_node("Add", ["x", "x2"], ["y"], name="n0"))
    m.graph.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [2, 4]))
    g, _ = import_onnx(m)
    msg = _raises(InputError, check_inputs, g, {"x": np.zeros((2, 4), np.float32)})
    assert msg == "missing input 'x2' (float32[2,4])"


def test_wrong_number_of_positional_inputs(graph):
    msg = _raises(InputError, check_inputs, graph, [np.zeros((2, 4), np.float32)] * 2)
    assert msg == "expected 1 input(s) ('x' float32[2,4]), got 2"


def test_torch_tensor_inputs_are_checked_too(graph):
    torch = pytest.importorskip("torch")
    assert _raises(InputError, check_inputs, graph, {"x": torch.zeros(2, 4, dtype=torch.float64)}) == \
        "input 'x' has dtype float64, expected float32"
    assert check_inputs(graph, [torch.zeros(2, 4)])[graph.inputs[0]].shape == (2, 4)


# -- the CLI ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["inspect", "check"])
def test_cli_missing_file_is_one_line(capsys, tmp_path, command):
    p = tmp_path / "nope.onnx"
    rc, out, err = _cli(capsys, command, str(p))
    assert rc == 2
    assert err == f"kernorch: error: {p}: no such file\n"


def test_cli_garbage_and_unsupported(capsys, tmp_path):
    p = tmp_path / "garbage.onnx"
    p.write_bytes(b"\x08\x07garbage")
    rc, _, err = _cli(capsys, "inspect", str(p))
    assert (rc, err.count("\n")) == (2, 1) and err.startswith(f"kernorch: error: {p}: ")
    q = tmp_path / "custom.onnx"
    onnx.save(_model("Foo", domain="com.example"), q)
    rc, _, err = _cli(capsys, "check", str(q))
    assert (rc, err) == (2, "kernorch: error: operator com.example::Foo (node 'n0') is not supported\n")


def test_cli_dynamic_dimension_then_pinned(capsys, tmp_path):
    p = tmp_path / "dyn.onnx"
    onnx.save(_model(shape=("batch", 4)), p)
    rc, _, err = _cli(capsys, "inspect", str(p))
    assert (rc, err) == (2, "kernorch: error: input 'x' has a dynamic dimension 0 ('batch'); "
                            "pin it with --input-shape x=1,4\n")
    rc, out, err = _cli(capsys, "check", str(p), "--input-shape", "x=3,4")
    assert (rc, err) == (0, "") and "x' float32[3,4]" in out


@pytest.mark.parametrize("spec", ["x", "x=", "x=1,a", "x=0,4", "=1,4"])
def test_cli_bad_input_shape_spec(capsys, spec):
    rc, _, err = _cli(capsys, "inspect", "unused.onnx", "--input-shape", spec)
    assert (rc, err) == (2, f"kernorch: error: --input-shape {spec!r}: expected NAME=D0,D1,... with positive integers\n")


def test_cli_subprocess_prints_no_traceback(tmp_path):
    p = tmp_path / "truncated.onnx"
    data = _model(weight=True).SerializeToString()
    p.write_bytes(data[: len(data) // 2])
    r = subprocess.run([sys.executable, "-m", "kernorch", "check", str(p)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr == f"kernorch: error: {p}: not a readable ONNX model (DecodeError)\n"
    assert r.stdout == ""


def test_every_error_is_a_kernorch_error():
    for exc in (DynamicShapeError, InputError, ModelLoadError, UnsupportedOpError):
        assert issubclass(exc, KernorchError)
