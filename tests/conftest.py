"""Suite-wide setup. The suite runs in pytest's importlib mode (see pyproject.toml) so that test files in
different folders may share a basename (tests/fission/test_linear.py, tests/codegen/test_linear.py).
That mode puts no test folder on sys.path, so put each one there here: helper modules beside the tests
(cg_util.py, onnx_oracle.py, ...) stay importable by their bare names. Give helpers unique names.

Hypothesis profiles (registered below). "kernorch", the default and what CI runs, is derandomized:
every run draws the same examples, so a red run is red again on any machine. For a longer fuzz,

    HYPOTHESIS_PROFILE=kernorch-long python -m pytest tests/...

draws ten times the examples (1000), fresh random ones each run, and prints the @reproduce_failure
blob of a failure. Neither profile keeps an example database in the repo. A test's own
@settings(...) wins over the profile for the settings it names (some pin max_examples, or
derandomize=True), so the long profile widens the tests that leave those to it."""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _d in sorted(p for p in _HERE.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
    if str(_d) not in sys.path:
        sys.path.append(str(_d))

# Triton decides at import whether it interprets (its language functions are wrapped once). Without a
# GPU, tests/cuda run Triton kernels through the interpreter; any earlier import of triton (torch's
# dynamo exporter imports it) must already see TRITON_INTERPRET=1, or those kernels fail with
# "Cannot call @triton.jit'd outside of the scope of a kernel". So set it for the whole session here.
import os as _os  # noqa: E402

if _os.environ.get("KERNORCH_CUDA_TESTS") != "gpu":
    try:
        import torch as _torch

        _gpu = _torch.cuda.is_available()
    except ImportError:
        _gpu = False
    if not _gpu or _os.environ.get("KERNORCH_CUDA_TESTS") == "interpret":
        _os.environ.setdefault("TRITON_INTERPRET", "1")

# Tests never write outside their temp dirs. The tuning database (always), the C build cache and the
# bench model cache (unless set explicitly) point into one directory per test session, removed at
# exit; subprocesses inherit it. So no test writes ~/.cache/kernorch, whatever it forgets to pass.
# KERNORCH_TEST_CACHE=DIR keeps the build and model caches in DIR across runs (never the database).
import atexit as _atexit  # noqa: E402
import shutil as _shutil  # noqa: E402
import tempfile as _tempfile  # noqa: E402

SESSION_DIR = Path(_tempfile.mkdtemp(prefix="kernorch-tests-"))
_atexit.register(_shutil.rmtree, SESSION_DIR, ignore_errors=True)
_os.environ["KERNORCH_DB"] = str(SESSION_DIR / "tuning.sqlite")
_keep = Path(_os.environ["KERNORCH_TEST_CACHE"]) if _os.environ.get("KERNORCH_TEST_CACHE") else SESSION_DIR
_os.environ.setdefault("KERNORCH_CACHE_DIR", str(_keep / "build"))
_os.environ.setdefault("KERNORCH_MODEL_CACHE", str(_keep / "models"))

try:  # the hypothesis profiles of the docstring: CI derandomized, kernorch-long random and longer
    from hypothesis import settings as _hsettings

    _hsettings.register_profile("kernorch", database=None, derandomize=True)
    _hsettings.register_profile("kernorch-long", database=None, derandomize=False, max_examples=1000,
                                deadline=None, print_blob=True)
    _hsettings.load_profile(_os.environ.get("HYPOTHESIS_PROFILE", "kernorch"))
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass
