"""Suite-wide setup. The suite runs in pytest's importlib mode (see pyproject.toml) so that test files in
different folders may share a basename (tests/fission/test_linear.py, tests/codegen/test_linear.py).
That mode puts no test folder on sys.path, so put each one there here: helper modules beside the tests
(cg_util.py, onnx_oracle.py, ...) stay importable by their bare names. Give helpers unique names."""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _d in sorted(p for p in _HERE.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
    if str(_d) not in sys.path:
        sys.path.append(str(_d))
