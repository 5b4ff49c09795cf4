"""The suite writes only inside temp dirs: conftest.py points the default tuning database, the C build
cache and the bench model cache into a per-session directory, so a test that forgets ``db=`` (or
a subprocess that inherits the environment) cannot touch ~/.cache/kernorch."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import kernorch
from kernorch.codegen import toolchain
from kernorch.orchestrate.tuning_db import default_path

HOME_CACHE = Path.home() / ".cache" / "kernorch"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_cnn.onnx"


def _inside(p: Path, root: Path) -> bool:
    return Path(os.path.abspath(p)).is_relative_to(os.path.abspath(root))


SESSION = Path(os.environ["KERNORCH_DB"]).parent  # conftest.py's per-session directory


def test_defaults_point_outside_the_home_cache():
    assert _inside(SESSION, tempfile.gettempdir()) and SESSION.name.startswith("kernorch-tests-")
    assert _inside(default_path(), SESSION)
    assert not _inside(toolchain.cache_dir(), HOME_CACHE)
    assert not _inside(Path(os.environ["KERNORCH_MODEL_CACHE"]), HOME_CACHE)


def test_a_compile_without_db_writes_the_session_database():
    kernorch.compile(EXAMPLE, cost="model", progress=False)
    assert default_path().exists()


def test_subprocesses_inherit_the_guard():
    code = "from kernorch.orchestrate.tuning_db import default_path; print(default_path())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert _inside(Path(out), SESSION)
