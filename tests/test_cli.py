"""The CLI on the bundled example, the comparison rule of ``kernorch check``, and graph width."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from kernorch.cli import build_parser, main
from kernorch.frontend import reference
from kernorch.frontend.reference import compare
from kernorch.frontend.summary import graph_width
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_bundled_example_is_what_the_script_builds():
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import make_example
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    assert onnx.load(EXAMPLE).graph == make_example.build().graph
    assert EXAMPLE.stat().st_size < 100_000


def test_inspect_example(capsys):
    rc, out, err = _run(capsys, "inspect", EXAMPLE)
    assert (rc, err) == (0, "")
    for needle in ("input     input: float32[1,3,16,16]", "output    probs: float32[1,10]", "ONNX ops (10 nodes",
                   "primitives by kind", "opaque ops", "width", "import"):
        assert needle in out


def test_inspect_json_is_consistent(capsys):
    rc, out, _ = _run(capsys, "inspect", EXAMPLE, "--json")
    s = json.loads(out)
    assert rc == 0
    proto = onnx.load(EXAMPLE)
    assert sum(s["op_histogram"].values()) == len(proto.graph.node)
    assert s["op_histogram"]["Conv"] == 2
    assert sum(s["prims_by_kind"].values()) == s["prims"]
    assert s["prims_by_kind"]["opaque"] == sum(s["opaque"].values())
    assert s["width"] >= 1 and s["import_seconds"] > 0


def test_check_example_passes(capsys):
    rc, out, err = _run(capsys, "check", EXAMPLE, "--seed", "3")
    assert (rc, err) == (0, "")
    assert "probs" in out and "OK: 1 output(s) match onnxruntime" in out


def test_check_reports_a_mismatch(capsys, monkeypatch):
    real = reference.run_interpreter

    def wrong(graph, feeds):
        return {k: v + 1e-2 for k, v in real(graph, feeds).items()}

    monkeypatch.setattr(reference, "run_interpreter", wrong)
    rc, out, _ = _run(capsys, "check", EXAMPLE)
    assert rc == 1
    assert "MISMATCH: 1 of 1 output(s)" in out


def test_python_dash_m_and_subcommands():
    r = subprocess.run([sys.executable, "-m", "kernorch", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "inspect" in r.stdout and "check" in r.stdout
    r = subprocess.run([sys.executable, "-m", "kernorch"], capture_output=True, text=True)
    assert r.returncode == 2  # a command is required (argparse usage error)
    assert set(build_parser()._subparsers._group_actions[0].choices) >= {"inspect", "check"}


# -- the comparison rule ----------------------------------------------------------------------

def test_compare_tolerance_scales_with_the_reference():
    ref = {"y": np.array([100.0, -50.0], np.float32)}
    (ok,) = compare({"y": ref["y"] + np.float32(0.009)}, ref)   # 0.009 <= 1e-4 * 100
    (bad,) = compare({"y": ref["y"] + np.float32(0.02)}, ref)
    assert ok.ok and not bad.ok
    assert bad.max_abs == pytest.approx(0.02, rel=1e-3) and bad.max_rel == pytest.approx(2e-4, rel=1e-3)
    small = {"y": np.array([1e-3], np.float32)}
    assert compare({"y": small["y"] + np.float32(5e-5)}, small)[0].ok   # absolute floor of 1e-4


def test_compare_nan_inf_ints_and_shapes():
    nan = {"y": np.array([np.nan, np.inf, 1.0])}
    assert compare({"y": nan["y"].copy()}, nan)[0].ok
    assert not compare({"y": np.array([0.0, np.inf, 1.0])}, nan)[0].ok
    assert not compare({"y": np.array([np.nan, -np.inf, 1.0])}, nan)[0].ok
    ints = {"i": np.array([1, 2, 3])}
    assert compare({"i": np.array([1, 2, 3])}, ints)[0].ok
    assert not compare({"i": np.array([1, 2, 4])}, ints)[0].ok
    assert not compare({"y": np.zeros(3)}, {"y": np.zeros((3, 1))})[0].ok
    assert not compare({}, {"y": np.zeros(3)})[0].ok


# -- graph width ------------------------------------------------------------------------------

def _brute_width(g):
    """Live sets simulated step by step with explicit sets."""
    remaining = {}
    for p in g.prims:
        for v in p.inputs:
            remaining[v] = remaining.get(v, 0) + 1
    live = {v for v in g.inputs if remaining.get(v, 0) or v in g.outputs}
    best = len(live)
    for p in g.prims:
        if remaining.get(p.output, 0) or p.output in g.outputs:
            live.add(p.output)
        best = max(best, len(live))
        for v in p.inputs:
            remaining[v] -= 1
            if remaining[v] == 0 and v not in g.outputs:
                live.discard(v)
    return best


def test_width_of_chain_and_fan_out():
    b = Builder()
    x = b.input((4,), name="x")
    y = x
    for _ in range(5):
        y = b.unary(Op.EXP, y)
    b.g.outputs.append(y)
    assert graph_width(b.g) == _brute_width(b.g) == 2

    b = Builder()
    x = b.input((4,), name="x")
    w = b.constant(np.ones(4, np.float32))
    branches = [b.binary(Op.MUL, b.unary(op, x), w) for op in (Op.EXP, Op.TANH, Op.NEG, Op.ABS)]
    acc = branches[0]
    for t in branches[1:]:
        acc = b.binary(Op.ADD, acc, t)
    b.g.outputs.append(acc)
    assert graph_width(b.g) == _brute_width(b.g) == 5   # x and the four branches (weights not counted)


def test_width_of_example_matches_brute_force():
    from kernorch.frontend.onnx_import import import_onnx

    g, _ = import_onnx(EXAMPLE)
    assert graph_width(g) == _brute_width(g)


def test_cli_and_import_do_not_load_torch():
    """`kernorch inspect` stays fast (< 5 s on SegFormer-B0) because importing a model needs no torch."""
    code = ("import sys, kernorch, kernorch.cli\n"
            "from kernorch.frontend.onnx_import import import_onnx\n"
            "from kernorch.frontend.summary import summarize\n"
            f"import_onnx({str(EXAMPLE)!r})\n"
            "heavy = sorted(m for m in ('torch', 'triton', 'kernorch.runtime', 'kernorch.codegen') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_compile_then_run_roundtrip(tmp_path, capsys):
    """`kernorch compile` writes a directory that `kernorch run` loads and runs (no re-tuning)."""
    from kernorch.cli import main

    out = tmp_path / "compiled"
    assert main(["compile", str(EXAMPLE), "-o", str(out), "--cost", "model", "--db", str(tmp_path / "db.sqlite"),
                 "--quiet"]) == 0
    assert "compiled" in capsys.readouterr().out
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(out), "--input", f"input={tmp_path / 'x.npy'}", "--repeat", "2",
                 "--save", str(tmp_path / "outs")]) == 0
    text = capsys.readouterr().out
    assert "output probs: float32[1,10]" in text and "latency: median" in text
    import onnxruntime as ort

    sess = ort.InferenceSession(str(EXAMPLE), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"input": x})[0]
    assert np.abs(np.load(tmp_path / "outs" / "probs.npy") - want).max() < 1e-5


def test_run_rejects_unknown_inputs_in_one_line(tmp_path, capsys):
    from kernorch.cli import main

    out = tmp_path / "compiled"
    main(["compile", str(EXAMPLE), "-o", str(out), "--cost", "model", "--db", str(tmp_path / "db.sqlite"),
          "--quiet"])
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    assert main(["run", str(out), "--input", f"nope={tmp_path / 'x.npy'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernorch: error: unknown input(s) ['nope']") and err.count("\n") == 1


def test_inspect_lists_segments(capsys):
    rc, out, _ = _run(capsys, "inspect", EXAMPLE, "--segments")
    assert rc == 0
    assert "segments (" in out and "cut width" in out


def test_compile_providers_and_regions_flags(tmp_path, capsys):
    """--providers '' keeps kernorch's own kernels only; an unknown provider is one clear line."""
    from kernorch.cli import main

    out = tmp_path / "own"
    assert main(["compile", str(EXAMPLE), "-o", str(out), "--db", str(tmp_path / "db.sqlite"), "--providers", "",
                 "--no-regions", "--threads", "1"]) == 0
    text = capsys.readouterr().out
    assert "provider region" not in text
    providers = {line.split()[1] for line in text.splitlines() if line[:4].strip().isdigit()}
    assert providers and providers <= {"c", "linear", "torch"}, text
    assert main(["compile", str(EXAMPLE), "-o", str(out), "--providers", "tvm", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernorch: error: unknown provider(s) tvm") and err.count("\n") == 1


def test_compile_int8_with_calibration_files(tmp_path, capsys):
    """--precision int8 --calibration FILE.npz (repeatable): the summary names the calibration and
    the accuracy; a .npy given as a batch, or a missing file, is one line naming it."""
    from kernorch.cli import main

    rng = np.random.default_rng(0)
    batches = []
    for k in range(3):
        batches.append(tmp_path / f"batch{k}.npz")
        np.savez(batches[-1], input=rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    out = tmp_path / "int8"
    argv = ["compile", str(EXAMPLE), "-o", str(out), "--cost", "model", "--db", str(tmp_path / "db.sqlite"),
            "--precision", "int8", "--no-compare"]
    assert main(argv + [a for b in batches for a in ("--calibration", str(b))]) == 0
    text = capsys.readouterr().out
    assert "int8      calibrated on 3 batch(es) given by calibration= (minmax)" in text
    assert "accuracy  int8 vs float32 reference, probs: max rel err" in text
    np.save(tmp_path / "one.npy", np.zeros(3, np.float32))
    for bad, why in ((tmp_path / "one.npy", "one .npy array"), (tmp_path / "none.npz", "no such file")):
        assert main(argv[:3] + [str(tmp_path / "bad")] + argv[4:] + ["--calibration", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"kernorch: error: --calibration {bad}: {why}") and err.count("\n") == 1
