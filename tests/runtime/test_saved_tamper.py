"""A saved model directory is data: tampered, truncated or old-format files are refused with one
line naming the directory, and nothing in them runs (pickle payloads, names of Python or C
functions, a replaced library)."""

import builtins
import hashlib
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernorch
from kernorch.codegen.toolchain import compiler
from kernorch.orchestrate.knobs import Knobs
from kernorch.runtime.saved import VERSION, SavedModelError
from saved_net import favour, net_and_input

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    net, x = net_and_input()
    # onnxruntime as the only provider, favoured over the built-in linear kernel whatever the timings
    # say, in a database of its own (no record from earlier in the session decides): its kernels carry
    # an ONNX model blob to tamper with
    with pytest.MonkeyPatch.context() as mp:
        favour(mp, "ort")
        model = kernorch.compile(net, x, regions=False, knobs=Knobs(context_rounds=0), threads=2, progress=False,
                                 providers=("ort",), db=tmp_path_factory.mktemp("db") / "tuning.sqlite")
    d = model.save(tmp_path_factory.mktemp("orig") / "model")
    kinds = [k["kind"] for k in json.loads((d / "model.json").read_text())["kernels"]]
    assert {"c", "provider", "reference"} <= set(kinds), kinds
    return d, x.numpy(), model(x.numpy())


@pytest.fixture
def copy(original, tmp_path):
    return Path(shutil.copytree(original[0], tmp_path / "model"))


@pytest.fixture
def marker(tmp_path):
    return tmp_path / "pwned"


class _Payload:
    """Unpickling it creates ``path`` (a stand-in for any code an attacker would run)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return builtins.open, (self.path, "w")


def _payload(marker: Path) -> bytes:
    data = pickle.dumps(_Payload(marker))
    pickle.loads(data).close()  # the payload is live: unpickling it does create the marker
    assert marker.exists()
    marker.unlink()
    return data


def _refused(d: Path, marker: Path | None = None, **kw) -> str:
    with pytest.raises(SavedModelError) as e:
        kernorch.load(d, **kw)
    msg = str(e.value)
    assert "\n" not in msg and str(d) in msg, msg
    assert marker is None or not marker.exists(), "loading ran the payload"
    return msg


def _manifest(d: Path) -> dict:
    return json.loads((d / "model.json").read_text())


def _write_manifest(d: Path, m: dict) -> None:
    (d / "model.json").write_text(json.dumps(m))


def _put_blob(d: Path, data: bytes, ext: str) -> str:
    name = f"{hashlib.sha256(data).hexdigest()}.{ext}"
    (d / "blobs" / name).write_bytes(data)
    return name


def _kernel(m: dict, kind: str) -> dict:
    return next(k for k in m["kernels"] if k["kind"] == kind)


def test_untouched_copy_loads(copy, original):
    assert np.array_equal(kernorch.load(copy)(original[1]), original[2])


def test_old_pickle_directory_is_refused_without_unpickling(tmp_path, marker):
    d = tmp_path / "old"
    d.mkdir()
    for name in ("graph.pkl", "kernels.pkl"):
        (d / name).write_bytes(_payload(marker))
    assert "compile the model again" in _refused(d, marker)
    run = subprocess.run([sys.executable, "-m", "kernorch", "run", str(d)], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert run.returncode != 0 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "compile the model again" in run.stderr and not marker.exists()


def test_pickle_payload_as_weights_is_not_unpickled(copy, marker):
    data = _payload(marker)
    (copy / "weights.safetensors").write_bytes(data)
    assert "does not match its hash" in _refused(copy, marker)
    m = _manifest(copy)
    m["weights"]["sha256"] = hashlib.sha256(data).hexdigest()  # a careful attacker fixes the hash
    _write_manifest(copy, m)
    assert "weights.safetensors cannot be read" in _refused(copy, marker)


def test_pickle_payload_as_an_onnx_model_is_not_unpickled(copy, marker):
    m = _manifest(copy)
    _kernel(m, "provider")["state"]["onnx"] = {"@blob": _put_blob(copy, _payload(marker), "onnx")}
    _write_manifest(copy, m)
    assert "ONNX model" in _refused(copy, marker)


def _set_attrs(m, value):
    m["graph"]["prims"][0][3] = value


def _set_provider(m, value):
    _kernel(m, "provider")["provider"] = value


def _set_taken(m, value):
    assert _kernel(m, "provider")["state"]["weights_taken"], "the ONNX model should have had its weights taken out"
    _kernel(m, "provider")["state"]["weights_taken"] = value


def _set_threads(m, value):
    _kernel(m, "provider")["state"]["threads"] = value


def _set_kind(m, value):
    _kernel(m, "reference")["kind"] = value


@pytest.mark.parametrize("tamper, value", [
    (_set_attrs, {"@": "system", "command": "touch {marker}"}),
    (_set_attrs, {"@": "Popen", "args": ["touch", "{marker}"]}),
    (_set_attrs, {"@": "Graph"}),
    (_set_attrs, {"@enum": "Op", "value": "__import__('os').system('touch {marker}')"}),
    (_set_attrs, {"@": "OpaqueAttrs", "op_type": "Relu", "node": "{marker}", "opset": 17}),
    (_set_provider, "os.system"),
    (_set_kind, "__import__"),
    (_set_taken, [[10 ** 9, 0]]),
    (_set_taken, [["__import__('os')", 0]]),
    (_set_threads, 10 ** 9),
    (_set_threads, "os.cpu_count()"),
], ids=["attrs-system", "attrs-popen", "attrs-graph", "enum-eval", "attrs-opaque", "provider-name", "kernel-kind",
        "weights-position", "weights-eval", "threads-huge", "threads-eval"])
def test_malicious_json_fields_run_nothing(copy, marker, tamper, value):
    m = _manifest(copy)
    tamper(m, json.loads(json.dumps(value).replace("{marker}", str(marker))))
    _write_manifest(copy, m)
    _refused(copy, marker)


def test_a_c_kernel_cannot_be_pointed_at_another_function(copy, marker):
    """``system`` resolves through a library's dependencies (libc); a kernel's function must be one
    its own source defines, and the library must be one of the directory's blobs."""
    m = _manifest(copy)
    name = _kernel(m, "c")["function"]
    _kernel(m, "c")["function"] = "system"
    _write_manifest(copy, m)
    _refused(copy, marker, trust_libraries=True)
    _kernel(m, "c")["function"] = name
    _kernel(m, "c")["lib"] = "../../../../usr/lib/x86_64-linux-gnu/libc.so.6"
    _write_manifest(copy, m)
    assert "invalid file" in _refused(copy, marker, trust_libraries=True)


def _evil_library(tmp_path: Path, marker: Path) -> bytes:
    """A shared library that creates ``marker`` as soon as it is opened."""
    src = tmp_path / "evil.c"
    src.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void f(void) {{ fclose(fopen("{marker}", "w")); }}\n')
    lib = tmp_path / "evil.so"
    subprocess.run([compiler(), "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    return lib.read_bytes()


def test_a_replaced_library_is_never_loaded_unless_trusted(copy, original, marker, tmp_path):
    m = _manifest(copy)
    _kernel(m, "c")["lib"] = _put_blob(copy, _evil_library(tmp_path, marker), "so")
    _write_manifest(copy, m)
    again = kernorch.load(copy)  # C kernels are generated again from the plan: the blob is not opened
    assert not marker.exists()
    assert np.array_equal(again(original[1]), original[2])


@pytest.mark.parametrize("change", ["truncated", "replaced"])
def test_a_library_changed_under_its_hash_is_never_opened(copy, original, marker, tmp_path, change):
    """A .so whose bytes no longer match its content-hash name (cut short, or another library put
    in its place): trusted, the load is refused before it is opened; untrusted, it is not opened."""
    lib = copy / "blobs" / _kernel(_manifest(copy), "c")["lib"]
    data = lib.read_bytes()
    lib.write_bytes(data[: len(data) // 2] if change == "truncated" else _evil_library(tmp_path, marker))
    assert "does not match its hash" in _refused(copy, marker, trust_libraries=True)
    assert np.array_equal(kernorch.load(copy)(original[1]), original[2])
    assert not marker.exists()


def test_a_changed_source_is_refused(copy):
    m = _manifest(copy)
    rec = _kernel(m, "c")
    source = (copy / "blobs" / rec["source"]).read_text()
    rec["source"] = _put_blob(copy, (source + "\n/* changed */\n").encode(), "c")
    _write_manifest(copy, m)
    assert "differs from the saved code" in _refused(copy)


def test_deeply_nested_json_is_one_line(copy):
    m = _manifest(copy)
    _write_manifest(copy, m)
    text = (copy / "model.json").read_text()
    (copy / "model.json").write_text(text[:-1] + ',"x":' + "[" * 100000 + "]" * 100000 + "}")
    _refused(copy)


@pytest.mark.parametrize("victim", ["model.json", "weights.safetensors", "blob"])
def test_truncated_file_is_one_line(copy, victim):
    path = copy / victim if victim != "blob" else copy / "blobs" / _kernel(_manifest(copy), "provider")["state"]["onnx"]["@blob"]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _refused(copy)


def test_missing_blob_is_one_line(copy):
    (copy / "blobs" / _kernel(_manifest(copy), "c")["source"]).unlink()
    assert "cannot be read" in _refused(copy)


@pytest.mark.parametrize("version, hint", [(VERSION + 1, "upgrade kernorch"), (1, "compile the model again"),
                                           ("2; rm -rf /", "compile the model again")])
def test_other_format_versions_are_named(copy, version, hint):
    m = _manifest(copy)
    m["version"] = version
    _write_manifest(copy, m)
    assert hint in _refused(copy)


def test_not_a_saved_model(tmp_path):
    assert "not a saved kernorch model" in _refused(tmp_path)


def test_saving_where_one_cannot_write_is_one_line(original, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    model = kernorch.load(original[0])
    with pytest.raises(kernorch.KernorchError) as e:
        model.save(blocker / "model")
    assert "\n" not in str(e.value) and "cannot save the model" in str(e.value), str(e.value)


def test_saving_over_an_old_save_leaves_only_the_new_model(original, tmp_path, marker):
    d = tmp_path / "model"
    d.mkdir()
    (d / "graph.pkl").write_bytes(_payload(marker))
    (d / "kernels.pkl").write_bytes(_payload(marker))
    (d / "blobs").mkdir()
    stale = _put_blob(d, b"an earlier model's library", "so")
    model = kernorch.load(original[0])
    model.save(d)
    assert not (d / "graph.pkl").exists() and not (d / "kernels.pkl").exists()
    assert not (d / "blobs" / stale).exists()
    assert sorted(p.name for p in (d / "blobs").iterdir()) == sorted(p.name for p in (original[0] / "blobs").iterdir())
    assert np.array_equal(kernorch.load(d)(original[1]), original[2])
