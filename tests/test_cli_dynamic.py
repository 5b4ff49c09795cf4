"""`kernorch compile --dynamic`, `run --batch`, `show` on a dynamic directory, and the commands
that take one fixed-shape model (`report`; a saved text decoder anywhere) refusing in one line."""

import io
import re

import pytest
import torch

from kernorch.cli import main
from kernorch.cli_common import EXIT_ERROR, EXIT_OK


def _onnx(path):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(4, 3)).eval()
    f = io.BytesIO()
    torch.onnx.export(net, torch.randn(2, 3, 8, 8), f, dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "n"}})
    path.write_bytes(f.getvalue())
    return path


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_compile_dynamic_then_run_a_batch_size_and_show(tmp_path, capsys):
    model = _onnx(tmp_path / "m.onnx")
    out = tmp_path / "out"
    rc, text, _ = _run(capsys, "compile", model, "-o", out, "--dynamic", "x=0:1..5", "--profiles", "1,4",
                       "--cost", "model", "--threads", "2")
    assert rc == EXIT_OK and "dynamic   batch 1..5 (x dim 0); profiles compiled at batch 1, 4" in text
    rc, text, _ = _run(capsys, "run", out, "--batch", "3", "--repeat", "2")
    assert rc == EXIT_OK and re.search(r"output \S+: float32\[3,3\]", text)
    rc, text, _ = _run(capsys, "show", out)
    assert rc == EXIT_OK and "profile batch 4" in text
    rc, _, err = _run(capsys, "report", out)
    assert rc == EXIT_ERROR and "holds a model for batch sizes 1..5" in err and "batch-4" in err
    rc, _, err = _run(capsys, "run", out, "--batch", "9")
    assert rc == EXIT_ERROR and "batch 9: this model was compiled for 1..5" in err


@pytest.mark.parametrize("spec", ["x=0:1-5", "x=a:1..5"])
def test_malformed_dynamic_flag_is_one_line(tmp_path, capsys, spec):
    rc, _, err = _run(capsys, "compile", _onnx(tmp_path / "m.onnx"), "-o", tmp_path / "o", "--dynamic", spec)
    assert rc == EXIT_ERROR and "expected NAME=DIM:LO..HI" in err and not (tmp_path / "o").exists()
