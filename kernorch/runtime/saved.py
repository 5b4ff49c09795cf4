"""The saved-model format: what is on disk, and nothing on disk that can run code when read.

A saved model is a directory::

    model.json           format name and version, target, the primitive graph, the kernel records
                         (one per kernel, in plan order), the compile report
    weights.safetensors  the graph's tensor constants, named by value id
    blobs/<sha256>.<ext> every other file, stored once under the SHA-256 of its bytes: generated
                         C libraries (.so) and their sources (.c), ONNX models of provider kernels

Readers here never unpickle. JSON objects become IR objects only through a table of the IR's own
frozen dataclasses and enums (``_IR_TYPES``); every file named by ``model.json`` is checked
against its hash before it is used; the graph is verified like any new graph. Whatever is wrong
(truncated, tampered, an unknown field) ends in one ``SavedModelError`` line naming the file.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from kernorch.errors import SavedModelError
from kernorch.ir import index, layout, prims
from kernorch.ir.graph import Graph, TensorType, verify
from kernorch.ir.tensors import to_numpy, to_torch

FORMAT = "kernorch-model"
VERSION = 2  # 1: pickles (graph.pkl, kernels.pkl), no longer read
MANIFEST = "model.json"
WEIGHTS = "weights.safetensors"
BLOBS = "blobs"
DTYPES = frozenset({"float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"})
_BLOB_NAME = re.compile(r"[0-9a-f]{64}\.[a-z]{1,8}")


def _ir_types() -> dict[str, type]:
    """The only classes a saved graph may name: the IR's dataclasses and enums."""
    out: dict[str, type] = {"TensorType": TensorType}
    for mod in (prims, layout, index):
        for name, obj in vars(mod).items():
            if isinstance(obj, type) and obj.__module__ == mod.__name__ and (
                    dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum)):
                out[name] = obj
    return out


_IR_TYPES = _ir_types()


# -- IR values <-> JSON ------------------------------------------------------------------------
def encode(x: Any) -> Any:
    """An IR value as JSON: tuples as lists, bytes as base64, dataclasses and enums by class name."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, (np.integer, np.floating, np.bool_)):
        return x.item()
    if isinstance(x, (tuple, list, frozenset)):
        return [encode(e) for e in (sorted(x) if isinstance(x, frozenset) else x)]
    if isinstance(x, bytes):
        return {"@bytes": base64.b64encode(x).decode()}
    if isinstance(x, enum.Enum) and _IR_TYPES.get(type(x).__name__) is type(x):
        return {"@enum": type(x).__name__, "value": x.value}
    if dataclasses.is_dataclass(x) and _IR_TYPES.get(type(x).__name__) is type(x):
        return {"@": type(x).__name__, **{f.name: encode(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    raise SavedModelError(f"cannot save a {type(x).__name__} in a model file")


def decode(x: Any) -> Any:
    """The inverse of ``encode``; lists come back as tuples. Raises on anything unknown."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, list):
        return tuple(decode(e) for e in x)
    if not isinstance(x, dict):
        raise ValueError(f"unexpected {type(x).__name__}")
    if set(x) == {"@bytes"}:
        return base64.b64decode(x["@bytes"], validate=True)
    if set(x) == {"@enum", "value"}:
        return _ir_class(x["@enum"], enum.Enum)(x["value"])
    cls = _ir_class(x.get("@"), object)
    if not dataclasses.is_dataclass(cls):
        raise ValueError(f"{cls.__name__} is not a record type")
    return cls(**{k: decode(v) for k, v in x.items() if k != "@"})


def _ir_class(name: Any, base: type) -> type:
    cls = _IR_TYPES.get(name) if isinstance(name, str) else None
    if cls is None or not issubclass(cls, base):
        raise ValueError(f"unknown type {str(name)[:40]!r}")
    return cls


def graph_json(g: Graph) -> dict:
    """The graph without its constants' data (those go to the weights file)."""
    return {"inputs": list(g.inputs), "outputs": list(g.outputs), "constants": sorted(g.constants),
            "names": [[v, n] for v, n in g.names.items()],
            "types": [[v, list(t.shape), t.dtype] for v, t in g.types.items()],
            "prims": [[p.op.value, list(p.inputs), p.output, None if p.attrs is prims.NO_ATTRS else encode(p.attrs),
                       p.origin] for p in g.prims]}


def graph_from_json(d: dict, constants: dict[int, np.ndarray]) -> Graph:
    g = Graph()
    for v, shape, dtype in d["types"]:
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {str(dtype)[:20]!r}")
        g.types[as_int(v)] = TensorType(tuple(as_int(s) for s in shape), dtype)
    g.inputs = [as_int(v) for v in d["inputs"]]
    g.outputs = [as_int(v) for v in d["outputs"]]
    g.names = {as_int(v): str(n) for v, n in d["names"]}
    for op, ins, out, attrs, origin in d["prims"]:
        a = prims.NO_ATTRS if attrs is None else decode(attrs)
        if not isinstance(a, prims.Attrs.__args__):  # type: ignore[attr-defined]
            raise ValueError(f"{type(a).__name__} is not an attribute record")
        g.prims.append(prims.Prim(prims.Op(op), tuple(as_int(v) for v in ins), as_int(out), a, str(origin)))
    for v in d["constants"]:
        v = as_int(v)
        if v not in constants:
            raise ValueError(f"constant %{v} is missing from {WEIGHTS}")
        t, a = g.types.get(v), constants[v]
        if t is None or tuple(a.shape) != t.shape or str(a.dtype) != t.dtype:
            raise ValueError(f"constant %{v} is {a.dtype}{list(a.shape)} in {WEIGHTS}, the graph says {t!r}")
        g.constants[v] = a
    verify(g)
    return g


def as_int(x: Any) -> int:
    if type(x) is not int:
        raise ValueError(f"expected an integer, got {str(x)[:20]!r}")
    return x


# -- the directory -----------------------------------------------------------------------------
def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Writer:
    """Writes a saved model's files; ``blob`` stores bytes once under their hash."""

    def __init__(self, d: Path) -> None:
        self.d = d
        self.written: set[str] = set()
        (d / BLOBS).mkdir(parents=True, exist_ok=True)

    def blob(self, data: bytes, ext: str) -> str:
        name = f"{sha256(data)}.{ext}"
        self.written.add(name)
        path = self.d / BLOBS / name
        if not path.exists() or path.stat().st_size != len(data):
            _write(path, data)
        return name

    def state(self, x: Any) -> Any:
        """A provider's kernel state as JSON: bytes become blobs, the rest must be JSON already."""
        if isinstance(x, bytes):
            return {"@blob": self.blob(x, "bin")}
        if isinstance(x, dict):  # bytes under a key like "onnx" are stored as blobs/<sha256>.onnx
            return {str(k): {"@blob": self.blob(v, k)} if isinstance(v, bytes) and re.fullmatch("[a-z]{1,8}", k)
                    else self.state(v) for k, v in x.items()}
        if isinstance(x, (list, tuple, frozenset)):
            return [self.state(e) for e in (sorted(x) if isinstance(x, frozenset) else x)]
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise SavedModelError(f"a kernel state holds a {type(x).__name__}, which a model file cannot")

    def weights(self, constants: dict[int, np.ndarray]) -> dict:
        from safetensors.torch import save  # (the torch side: NumPy has no bfloat16 of its own)

        data = save({str(v): to_torch(np.array(a, order="C")) for v, a in constants.items()})
        _write(self.d / WEIGHTS, data)
        return {"file": WEIGHTS, "sha256": sha256(data)}

    def manifest(self, m: dict) -> None:
        """Write ``model.json`` (last), then remove what an earlier save left: blobs this model
        does not use and the pickles of format 1."""
        _write(self.d / MANIFEST, json.dumps(m, separators=(",", ":")).encode())
        for p in (self.d / BLOBS).iterdir():
            if _BLOB_NAME.fullmatch(p.name) and p.name not in self.written:
                p.unlink()
        for old in ("graph.pkl", "kernels.pkl"):
            (self.d / old).unlink(missing_ok=True)


def _write(path: Path, data: bytes) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class Reader:
    """Reads a saved model's files, checking every one against the hash ``model.json`` gives."""

    def __init__(self, d: Path) -> None:
        self.d = d
        self.where = MANIFEST

    def fail(self, what: str) -> SavedModelError:
        return SavedModelError(f"{self.d}: {what}")

    def manifest(self) -> dict:
        if not (self.d / MANIFEST).is_file():
            if (self.d / "kernels.pkl").exists() or (self.d / "graph.pkl").exists():
                raise self.fail("saved by an older kernorch in the pickle format, which is no longer loaded "
                                "(loading a pickle can run code); compile the model again and save it")
            raise self.fail(f"not a saved kernorch model ({MANIFEST} missing)")
        try:
            m = json.loads((self.d / MANIFEST).read_bytes())
        except (ValueError, RecursionError) as e:
            raise self.fail(f"{MANIFEST} is truncated or not JSON ({one_line(e)})") from None
        if not isinstance(m, dict) or m.get("format") != FORMAT:
            raise self.fail(f"{MANIFEST} is not a kernorch model file")
        if m.get("version") != VERSION:
            v = m.get("version")
            newer = isinstance(v, int) and v > VERSION
            raise self.fail(f"saved in format version {str(v)[:12]}, this kernorch reads version {VERSION}; "
                            + ("upgrade kernorch" if newer else "compile the model again and save it"))
        return m

    def _read(self, name: str, sha: str) -> bytes:
        self.where = name
        try:
            data = (self.d / name).read_bytes()
        except OSError as e:
            raise self.fail(f"{name} cannot be read ({e.strerror or type(e).__name__})") from None
        if sha256(data) != sha:
            raise self.fail(f"{name} does not match its hash in {MANIFEST} (truncated or tampered)")
        return data

    def blob(self, name: Any) -> bytes:
        """The bytes of a blob, which must match its name."""
        if not isinstance(name, str) or not _BLOB_NAME.fullmatch(name):
            raise self.fail(f"{MANIFEST} names an invalid file {str(name)[:80]!r}")
        return self._read(f"{BLOBS}/{name}", name.split(".")[0])

    def blob_path(self, name: Any) -> Path:
        """The path of a blob whose bytes match its name (checked now)."""
        self.blob(name)
        return self.d / BLOBS / name

    def state(self, x: Any) -> Any:
        """The inverse of ``Writer.state``: blobs read back as bytes (hash-checked)."""
        if isinstance(x, dict):
            if set(x) == {"@blob"}:
                return self.blob(x["@blob"])
            return {k: self.state(v) for k, v in x.items()}
        if isinstance(x, list):
            return [self.state(e) for e in x]
        return x

    def weights(self, rec: Any) -> dict[int, np.ndarray]:
        from safetensors.torch import load

        if not isinstance(rec, dict) or rec.get("file") != WEIGHTS or not isinstance(rec.get("sha256"), str):
            raise self.fail(f"{MANIFEST} has no valid weights record")
        data = self._read(WEIGHTS, rec["sha256"])
        try:
            arrays = load(data)
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
            raise self.fail(f"{WEIGHTS} cannot be read ({one_line(e)})") from None
        out = {}
        for k, a in arrays.items():
            if not k.isdigit():
                raise self.fail(f"{WEIGHTS} holds an unknown tensor {k[:40]!r}")
            out[int(k)] = to_numpy(a)
        return out


def one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return (s[0] if s else type(e).__name__)[:200]
