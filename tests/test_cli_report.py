"""What users see after a compile (issue 16): the plain-words summary with the measured latency
against onnxruntime, `kernorch show DIR`, `kernorch run DIR --compare` (benchmark_app-style table),
plain progress lines on a non-terminal and no stray warnings. Real console script, subprocess."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_cnn.onnx"


def kernorch(tmp_path, *argv, timeout=600) -> subprocess.CompletedProcess:
    """The installed console script (as tests/test_cli_errors.py runs it), temporary database."""
    exe = Path(sys.executable).parent / "kernorch"
    script = [str(exe)] if exe.exists() else [shutil.which("kernorch") or "kernorch"]
    env = {**os.environ, "KERNORCH_DB": str(tmp_path / "tuning.sqlite")}
    return subprocess.run(script + [str(a) for a in argv], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=tmp_path)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The README's compile, measured on a temporary database; (directory, stdout, stderr)."""
    tmp = tmp_path_factory.mktemp("report")
    r = kernorch(tmp, "compile", EXAMPLE, "-o", tmp / "tiny", "--threads", "1")
    assert r.returncode == 0, r.stderr
    return tmp / "tiny", r.stdout, r.stderr


def _prims_in_row(row: str) -> int:
    """A kernel-table row's primitive count: "19 prims: mul x6 ..." or the prims named one by one."""
    names = row.split(None, 4)[4]
    many = re.match(r"(\d+) prims:", names)
    return int(many[1]) if many else len(names.split())


def test_compile_says_what_it_did_and_what_it_bought(compiled):
    out_dir, out, _ = compiled
    lines = out.splitlines()
    assert lines[0] == f"kernorch compiled {EXAMPLE} -> {out_dir}"
    plan = next(ln for ln in lines if ln.startswith("plan "))
    counted = re.search(r"(runs as one (onnxruntime|OpenVINO) region|\d+ kernels? for (\d+) primitives)", plan)
    assert counted, plan
    tuning = next(ln for ln in lines if ln.startswith("tuning "))
    assert re.match(r"tuning +\d+\.\d s, strategy optimal: \d+ kernel timings, 0 reused from the tuning database",
                    tuning), tuning
    latency = next(ln for ln in lines if ln.startswith("latency ") and "onnxruntime" in ln)
    m = re.match(r"latency +kernorch (\d+\.\d+) ms vs onnxruntime (\d+\.\d+) ms \(medians of (\d+) and \d+ runs, "
                 r"same random inputs, 1 thread\): kernorch is ((\d+\.\d\d)x (faster|slower)|as fast \(within 1%\))$",
                 latency)
    assert m, latency
    kn, ort, runs = float(m[1]), float(m[2]), int(m[3])
    assert runs >= 5 and kn > 0 and ort > 0
    if m[5]:
        # the printed times are rounded to 0.001 ms: the ratio of the unrounded medians lies between
        # the ratios of the rounded ones, widened by half a unit either way (and the ratio's own rounding)
        num, den = (ort, kn) if m[6] == "faster" else (kn, ort)
        lo, hi = (num - 5e-4) / (den + 5e-4), (num + 5e-4) / max(den - 5e-4, 1e-9)
        assert lo - 0.006 <= float(m[5]) <= hi + 0.006, (latency, lo, hi)
    else:
        assert ort / kn == pytest.approx(1, abs=0.011)
    assert re.search(r"^time +import \d+\.\d s, rewrites \d+\.\d s, tuning \d+\.\d s, build \d+\.\d s "
                     r"\(\d+\.\d s wall clock", out, re.M)
    # the kernel table: every figure has its unit, one row per kernel, the prims never cut mid-word
    assert re.search(r"^kernels +\d+, priced total \d+\.\d+ ms", out, re.M)
    rows = [ln for ln in lines if re.match(r"^ +\d+ ", ln)]
    assert rows and all(ln.split()[-1] != "..." or ln.endswith(" ...") for ln in rows)
    if counted[3]:  # the plan's primitive count (rewrites may add views) is what the kernel table lists
        assert sum(_prims_in_row(ln) for ln in rows) == int(counted[3]), out
    assert "e-0" not in out  # no bare scientific-notation costs
    assert (out_dir / "summary.txt").read_text().startswith(f"compiled model of {EXAMPLE}")
    assert (out_dir / "source.onnx").read_bytes() == EXAMPLE.read_bytes()


def test_progress_is_plain_lines_on_a_non_terminal(compiled):
    _, _, err = compiled
    lines = err.splitlines()
    assert lines and all(ln.startswith("kernorch: ") for ln in lines), err
    assert any(re.match(r"kernorch: calibrating on the per-operator kernels: \d+/\d+ done in \d+\.\d s", ln)
               for ln in lines)
    assert any(ln.startswith("kernorch: pricing provider regions: done in") for ln in lines)
    assert "0/?" not in err and "\x1b[" not in err  # no empty bar, no terminal control codes
    for k, ln in enumerate(lines):  # once a phase says "done", no more counts under its label
        if " done in " in ln:
            label = ln.split(": ")[1]
            assert not any(x.startswith(f"kernorch: {label}: ") and " after " in x for x in lines[k + 1:]), err


def test_show_prints_the_saved_summary(tmp_path, compiled):
    out_dir, _, _ = compiled
    r = kernorch(tmp_path, "show", out_dir)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "inputs    input: float32[1,3,16,16]" in r.stdout and "outputs   probs: float32[1,10]" in r.stdout
    assert re.search(r"^plan ", r.stdout, re.M) and re.search(r"^kernels +\d+, priced total", r.stdout, re.M)
    r = kernorch(tmp_path, "show", tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("kernorch: error: ") and r.stderr.count("\n") == 1


def test_run_compare_is_a_side_by_side_benchmark(tmp_path, compiled):
    out_dir, _, _ = compiled
    r = kernorch(tmp_path, "run", out_dir, "--compare", "--repeat", "8", "--warmup", "2", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "benchmark" in r.stdout and "2 warm-up runs, then 8 runs interleaved" in r.stdout
    header = next(ln for ln in r.stdout.splitlines() if ln.startswith("runtime"))
    assert header.split()[:7] == ["runtime", "runs", "median", "ms", "p90", "ms", "p99"]
    rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines() if ln.split()[:1] in
            (["kernorch"], ["onnxruntime"], ["openvino"])}
    assert {"kernorch", "onnxruntime"} <= set(rows)
    for row in rows.values():
        runs, med, p90, p99, lo = int(row[1]), *map(float, row[2:6])
        assert runs == 8 and 0 < lo <= med <= p90 <= p99
    assert float(rows["onnxruntime"][7]) < 1e-4   # the same outputs as onnxruntime's
    assert re.search(r"kernorch is (\d+\.\d\dx (faster|slower)|as fast)", r.stdout)


def test_run_compare_without_the_source_model(tmp_path, compiled):
    d = tmp_path / "copy"
    shutil.copytree(compiled[0], d)
    (d / "source.onnx").unlink()
    r = kernorch(tmp_path, "run", d, "--compare", "--repeat", "3")
    assert r.returncode == 0, r.stderr
    assert "onnxruntime  (not run: the original ONNX model is not known)" in r.stdout


def test_no_stray_runtime_warnings(tmp_path):
    """exp(1e30 x) - exp(1e30 x) is inf - inf = nan: comparing candidates with the reference once
    leaked numpy's 'invalid value encountered in subtract' to the console."""
    g = h.make_graph([h.make_node("Mul", ["x", "k"], ["m"]), h.make_node("Exp", ["m"], ["e"]),
                      h.make_node("Sub", ["e", "e"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [4, 8])], [h.make_tensor_value_info("y", T.FLOAT, [4, 8])],
                     [numpy_helper.from_array(np.array(1e30, np.float32), "k")])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), tmp_path / "inf.onnx")
    r = kernorch(tmp_path, "compile", "inf.onnx", "-o", "out", "--no-compare", "--providers", "", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr, r.stderr


def test_cli_page_documents_every_command_and_flag():
    """inspect --segments went undocumented once; every command and option is in docs/CLI.md."""
    from kernorch.cli import build_parser

    page = (Path(__file__).resolve().parents[1] / "docs" / "CLI.md").read_text()
    sub = build_parser()._subparsers._group_actions[0].choices
    parsers = {(cmd,): p for cmd, p in sub.items() if cmd != "db"}
    parsers |= {("db", cmd): p for cmd, p in sub["db"]._subparsers._group_actions[0].choices.items()}
    missing = [f"{' '.join(cmd)} {opt}" for cmd, p in parsers.items() for a in p._actions
               for opt in a.option_strings if opt.startswith("--") and opt != "--help" and opt not in page]
    assert not missing
    # in the synopsis: `kernorch show`, `kernorch db      stats|check|...`
    undocumented = [cmd for cmd in parsers
                    if not re.search(r"kernorch +" + r" +(\w+\|)*".join(cmd) + r"\b", page)]
    assert not undocumented and "kernorch --version" in page


def test_run_threads(tmp_path, compiled):
    r = kernorch(tmp_path, "run", compiled[0], "--threads", "1", "--repeat", "3", "--warmup", "0")
    assert r.returncode == 0, r.stderr
    assert re.search(r"latency: median \d+\.\d+ ms over 3 runs", r.stdout)


def test_check_does_not_read_as_kernorch_being_slow(tmp_path):
    """`check` printed 'interpreter 2.899 s, onnxruntime 0.143 s', read as 'kernorch is 20x slower'."""
    r = kernorch(tmp_path, "check", EXAMPLE)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "interpreter" in ln)
    assert re.match(r"checked +reference interpreter \d+\.\d+ s \(the NumPy oracle, not kernorch's speed: "
                    r"`kernorch compile` times the compiled model\), onnxruntime \d+\.\d+ s$", line), line
