"""Every failure a user can cause on the command line is one line ``kernorch: error: ...`` naming the
culprit, exit status 2, never a traceback (issue 16, "Seen"). Each test runs the real console script
in a subprocess, with a temporary tuning database."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"


def _script() -> list[str]:
    """The installed ``kernorch`` console script (next to this Python), else ``python -m kernorch``."""
    exe = Path(sys.executable).parent / "kernorch"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("kernorch")
    return [found] if found else [sys.executable, "-m", "kernorch"]


def kernorch(tmp_path, *argv, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "KERNORCH_DB": str(tmp_path / "tuning.sqlite")}
    return subprocess.run(_script() + [str(a) for a in argv], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=tmp_path)


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr
    assert r.stderr.startswith("kernorch: error: ") and r.stderr.count("\n") == 1, r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr
    return r.stderr


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def loop_model(outer_scope: bool) -> onnx.ModelProto:
    """x -> Relu -> Loop (3 trips, acc = acc + acc, or acc + x read from the outer scope) -> Exp."""
    body_nodes = [h.make_node("Identity", ["c"], ["co"]),
                  h.make_node("Add", ["a", "x" if outer_scope else "a"], ["ao"])]
    body = h.make_graph(body_nodes, "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                         h.make_tensor_value_info("a", T.FLOAT, [2, 3])],
                        [h.make_tensor_value_info("co", T.BOOL, []), h.make_tensor_value_info("ao", T.FLOAT, [2, 3])])
    inits = [h.make_tensor("n", T.INT64, [], [3]), h.make_tensor("t", T.BOOL, [], [True])]
    g = h.make_graph([h.make_node("Relu", ["x"], ["r"]),
                      h.make_node("Loop", ["n", "t", "r"], ["l"], body=body, name="the_loop"),
                      h.make_node("Exp", ["l"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])], [h.make_tensor_value_info("y", T.FLOAT, [2, 3])],
                     inits, value_info=[h.make_tensor_value_info("l", T.FLOAT, [2, 3])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def dynamic_model() -> onnx.ModelProto:
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """The bundled example compiled once (roofline costs, fast) for the run/show tests."""
    tmp = tmp_path_factory.mktemp("compiled")
    r = kernorch(tmp, "compile", EXAMPLE, "-o", tmp / "tiny", "--cost", "model", "--quiet", "--no-compare")
    assert r.returncode == 0, r.stderr
    return tmp / "tiny"


# -- -o is checked before tuning starts -------------------------------------------------------

def test_output_naming_an_existing_file_fails_before_tuning(tmp_path):
    (tmp_path / "afile").write_text("not a directory")
    r = kernorch(tmp_path, "compile", EXAMPLE, "-o", "afile", "--db", tmp_path / "db.sqlite")
    one_line_error(r, "-o afile: exists and is not a directory")
    assert not (tmp_path / "db.sqlite").exists()  # nothing was tuned (the proof, not a wall-clock bound)
    assert (tmp_path / "afile").read_text() == "not a directory"


def test_output_in_a_place_that_cannot_be_written(tmp_path):
    (tmp_path / "afile").write_text("")
    r = kernorch(tmp_path, "compile", EXAMPLE, "-o", "afile/sub", "--db", tmp_path / "db.sqlite")
    one_line_error(r, "-o afile/sub: cannot create the directory (Not a directory)")
    assert not (tmp_path / "db.sqlite").exists()
    if os.geteuid() == 0:  # root writes through permission bits: use a read-only file system
        r = kernorch(tmp_path, "compile", EXAMPLE, "-o", "/sys/kernorch-test-out", "--db", tmp_path / "db.sqlite")
        one_line_error(r, "-o /sys/kernorch-test-out: cannot create the directory")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            r = kernorch(tmp_path, "compile", EXAMPLE, "-o", "ro", "--db", tmp_path / "db.sqlite")
            one_line_error(r, "-o ro: cannot write there (Permission denied)")
        finally:
            ro.chmod(0o700)
    assert not (tmp_path / "db.sqlite").exists()


# -- run --input ------------------------------------------------------------------------------

def test_run_input_that_is_not_an_npy_file(tmp_path, compiled):
    (tmp_path / "garbage.npy").write_text("garbage\n")
    r = kernorch(tmp_path, "run", compiled, "--input", "input=garbage.npy")
    one_line_error(r, "--input input: garbage.npy is not a NumPy .npy array file")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    r = kernorch(tmp_path, "run", compiled, "--input", "input=obj.npy")
    one_line_error(r, "obj.npy is not a NumPy .npy array file (pickled object data)")
    r = kernorch(tmp_path, "run", compiled, "--input", "input=missing.npy")
    one_line_error(r, "--input input: no such file missing.npy")


def test_run_input_of_the_wrong_shape_or_dtype(tmp_path, compiled):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    one_line_error(kernorch(tmp_path, "run", compiled, "--input", "input=x.npy"), "input 'input'", "shape")
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 16, 16), np.float64))
    one_line_error(kernorch(tmp_path, "run", compiled, "--input", "input=x.npy"), "input 'input'", "float64")


# -- --input-shape ----------------------------------------------------------------------------

def test_check_input_shape_of_the_wrong_rank_is_an_error_not_a_mismatch(tmp_path):
    r = kernorch(tmp_path, "check", EXAMPLE, "--input-shape", "input=1,3,16")
    one_line_error(r, "input 'input' has rank 4 [1,3,16,16]; the pinned shape [1,3,16] has rank 3")
    _save(dynamic_model(), tmp_path / "dyn.onnx")
    r = kernorch(tmp_path, "compile", "dyn.onnx", "-o", "out", "--cost", "model", "--input-shape", "x=2,4,1")
    one_line_error(r, "input 'x' has rank 2 [N,4]; the pinned shape [2,4,1] has rank 3")
    assert not (tmp_path / "out").exists()  # the directory made for the output is removed again


def test_input_shape_cannot_override_a_static_dimension(tmp_path):
    r = kernorch(tmp_path, "check", EXAMPLE, "--input-shape", "input=2,3,16,16")
    one_line_error(r, "dimension 0 is static (1) and cannot be pinned to 2")
    _save(dynamic_model(), tmp_path / "dyn.onnx")
    r = kernorch(tmp_path, "check", "dyn.onnx", "--input-shape", "x=5,4")
    assert r.returncode == 0, r.stderr   # pinning the dynamic dim only is fine
    one_line_error(kernorch(tmp_path, "check", "dyn.onnx", "--input-shape", "x=5,3"), "dimension 1 is static (4)")


def test_cli_suggests_its_own_spelling_not_pythons(tmp_path):
    _save(dynamic_model(), tmp_path / "dyn.onnx")
    for cmd in (["check", "dyn.onnx"], ["compile", "dyn.onnx", "-o", "out", "--cost", "model"]):
        err = one_line_error(kernorch(tmp_path, *cmd), "input 'x' has a dynamic dimension 0 ('N')",
                             "pin it with --input-shape x=1,4")
        assert "input_shapes" not in err
    err = one_line_error(kernorch(tmp_path, "check", "dyn.onnx", "--input-shape", "z=1,4"))
    assert "input_shapes" not in err and "unknown input(s) ['z']" in err


# -- Loop models ------------------------------------------------------------------------------

def test_loop_body_reading_an_outer_scope_value(tmp_path):
    _save(loop_model(outer_scope=True), tmp_path / "loop.onnx")
    for cmd in (["check", "loop.onnx"], ["compile", "loop.onnx", "-o", "out"], ["inspect", "loop.onnx"]):
        one_line_error(kernorch(tmp_path, *cmd), "Loop node 'the_loop'", "reads 'x' from the enclosing graph")
    assert not (tmp_path / "tuning.sqlite").exists()


def test_a_loop_model_compiles_and_runs(tmp_path):
    """The Loop that once ended in 'required value N is written by no candidate'."""
    _save(loop_model(outer_scope=False), tmp_path / "loop.onnx")
    r = kernorch(tmp_path, "compile", "loop.onnx", "-o", "out", "--quiet", "--no-compare")
    assert r.returncode == 0, r.stderr
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = kernorch(tmp_path, "run", "out", "--input", "x=x.npy", "--save", "outs")
    assert r.returncode == 0, r.stderr
    assert np.allclose(np.load(tmp_path / "outs" / "y.npy"), np.exp(8 * np.maximum(x, 0)), rtol=1e-5)


def test_no_plan_is_said_in_the_users_terms(tmp_path):
    """Whatever leaves the solver without a plan, the user reads neither 'Infeasible' nor
    'required value N is written by no candidate'."""
    code = ("import sys\n"
            "import kernorch.runtime.compile as c\n"
            "from kernorch.orchestrate.solver import SolverError\n"
            "def boom(*a, **k):\n"
            "    raise SolverError('no executable solution found (Infeasible) and no start solution given')\n"
            "c.plan_kernels = boom\n"
            "from kernorch.cli import main\n"
            f"sys.exit(main(['compile', {str(EXAMPLE)!r}, '-o', 'out', '--cost', 'model']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "KERNORCH_DB": str(tmp_path / "db.sqlite")}, timeout=300)
    err = one_line_error(r, "no kernel plan computes the whole model", "kernorch check")
    assert "Infeasible" not in err and "required value" not in err


# -- the Python API ---------------------------------------------------------------------------

def test_compile_of_bytes_never_prints_the_bytes():
    import kernorch
    from kernorch.errors import ModelLoadError

    junk = bytes(range(256)) * 40
    with pytest.raises(ModelLoadError) as info:
        kernorch.compile(junk, cost="model", progress=False)
    msg = str(info.value)
    assert msg == "the given 10240 bytes: not a serialized ONNX model (DecodeError)"
    with pytest.raises(ModelLoadError, match="got int$"):
        kernorch.compile(3, cost="model", progress=False)


# -- argument validation, --version -----------------------------------------------------------

def test_version(tmp_path):
    from kernorch import __version__

    r = kernorch(tmp_path, "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"kernorch {__version__}"


@pytest.mark.parametrize("argv", [["--repeat", "0"], ["--repeat", "x"], ["--threads", "-1"], ["--threads", "1.5"]])
def test_run_rejects_bad_counts(tmp_path, compiled, argv):
    r = kernorch(tmp_path, "run", compiled, *argv)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"argument {argv[0]}: expected a positive integer, got {argv[1]!r}" in r.stderr


def test_compile_rejects_bad_thread_counts(tmp_path):
    r = kernorch(tmp_path, "compile", EXAMPLE, "-o", "out", "--threads", "0")
    assert r.returncode == 2 and "argument --threads: expected a positive integer, got '0'" in r.stderr
    assert not (tmp_path / "out").exists()


# -- the tuning database (its errors are tuning_db.py's; here: what the command line shows) ------

@pytest.mark.parametrize("kind", ["text", "random", "directory", "unwritable", "home"])
def test_a_bad_tuning_database_is_one_line(tmp_path, kind):
    argv = ["compile", EXAMPLE, "-o", "out", "--cost", "model", "--no-compare"]
    env_home = None
    if kind == "text":
        (tmp_path / "db.sqlite").write_text("garbage garbage\n")
        argv += ["--db", "db.sqlite"]
        want = "tuning database db.sqlite: not a kernorch tuning database"
    elif kind == "random":
        (tmp_path / "db.sqlite").write_bytes(np.random.default_rng(0).bytes(4096))
        argv += ["--db", "db.sqlite"]
        want = "tuning database db.sqlite: not a kernorch tuning database"
    elif kind == "directory":
        (tmp_path / "dbdir").mkdir()
        argv += ["--db", "dbdir"]
        want = "tuning database dbdir is a directory"
    elif kind == "unwritable":
        argv += ["--db", "/sys/kernorch-test.sqlite"]
        want = "tuning database /sys/kernorch-test.sqlite: cannot"
    else:  # no --db, no $KERNORCH_DB, and a home whose .cache cannot be created
        env_home = "/sys"
        want = "tuning database /sys/.cache/kernorch/tuning.sqlite: cannot"
    if kind in ("unwritable", "home") and os.geteuid() != 0 and not Path("/sys").exists():
        pytest.skip("needs a read-only /sys")
    env = {k: v for k, v in os.environ.items() if k != "KERNORCH_DB"}
    if env_home:
        env["HOME"] = env_home
    else:
        env["KERNORCH_DB"] = str(tmp_path / "unused.sqlite")
    r = subprocess.run(_script() + [str(a) for a in argv], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=300)
    one_line_error(r, want)
    assert not (tmp_path / "out").exists()
