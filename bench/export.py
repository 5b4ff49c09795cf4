"""Export the bench models to ONNX (cached), check them against PyTorch with onnxruntime.

    python -m bench.export --all                 # every model x both exporters, benchmark sizes
    python -m bench.export --all --small         # fast test sizes
    python -m bench.export candy vit_tiny --exporter dynamo --force

Files go to ``$KERNORCH_MODEL_CACHE`` or ``~/.cache/kernorch/models`` and are reused when present
(they are generated, never committed).
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import math
import os
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Optional

import numpy as np

from bench.models import MODELS, VERSION, Size, build_model, resolve_size

EXPORTERS = ("torchscript", "dynamo")
OPSETS = {"torchscript": 17, "dynamo": 18}
# (input names, output names) given to both exporters
_IO_NAMES = {"gpt2_block": (["hidden_states"], ["output"]), "segformer_b0": (["pixel_values"], ["logits"]),
             "gpt2": (["input_ids"], ["last_hidden_state"]),
             "bert_base": (["input_ids", "attention_mask"], ["last_hidden_state"])}
_DEFAULT_IO = (["input"], ["output"])


def default_cache_dir() -> Path:
    env = os.environ.get("KERNORCH_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kernorch" / "models"


def onnx_filename(name: str, exporter: str, size: Size = None, depth: Optional[int] = None, seed: int = 0) -> str:
    parts = [name, str(resolve_size(name, size))]
    if depth is not None:
        parts.append(f"d{depth}")
    if seed:
        parts.append(f"s{seed}")
    parts.append(f"v{VERSION}")
    return "-".join(parts) + f".{exporter}.opset{OPSETS[exporter]}.onnx"


def _export_to(model, inputs, path: Path, exporter: str, name: str) -> None:
    import torch

    in_names, out_names = _IO_NAMES.get(name, _DEFAULT_IO)
    # the dynamo exporter logs one warning per torchvision op it cannot register (torchvision is not installed)
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=OPSETS[exporter],
                              input_names=in_names, output_names=out_names, do_constant_folding=True)
            _static_output_shapes(path, model, inputs)
        elif exporter == "dynamo":
            torch.onnx.export(model, inputs, str(path), dynamo=True, opset_version=OPSETS[exporter],
                              input_names=in_names, output_names=out_names, external_data=False,
                              optimize=True, verbose=False)
        else:
            raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")


def _static_output_shapes(path: Path, model, inputs) -> None:
    """The TorchScript exporter leaves symbolic output dims (``Convoutput_dim_0``) where it could not infer
    through computed pads/shapes (ReflectionPad, F.pad); write the real static output shapes."""
    import onnx
    import torch

    ref = model(*inputs)
    refs = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    proto = onnx.load(str(path))
    changed = False
    for out, r in zip(proto.graph.output, refs):
        dims = out.type.tensor_type.shape.dim
        if [d.dim_value if d.HasField("dim_value") else None for d in dims] != list(r.shape):
            del dims[:]
            for n in r.shape:
                dims.add().dim_value = int(n)
            changed = True
    if changed:
        onnx.save(proto, str(path))


def export_onnx(name: str, exporter: str = "torchscript", size: Size = None, cache_dir=None, *,
                depth: Optional[int] = None, seed: int = 0, force: bool = False, check: Optional[bool] = None,
                atol: float = 1e-3, verbose: bool = True) -> Path:
    """Export ``name`` with ``exporter`` ('torchscript': opset 17, 'dynamo': opset 18), static shapes.

    The file is cached under ``cache_dir`` (default ``default_cache_dir()``) and reused unless ``force``.
    ``check``: run ``onnx.checker`` + onnxruntime against the PyTorch output; ``None`` = only after a
    fresh export. A failed check raises ``AssertionError`` (max abs error > ``atol``).
    """
    info = export_and_check(name, exporter, size, cache_dir, depth=depth, seed=seed, force=force, check=check,
                            atol=atol, verbose=verbose)
    return info["path"]


def export_and_check(name: str, exporter: str = "torchscript", size: Size = None, cache_dir=None, *,
                     depth: Optional[int] = None, seed: int = 0, force: bool = False, check: Optional[bool] = True,
                     atol: float = 1e-3, verbose: bool = True) -> dict:
    """Like ``export_onnx`` but returns a record: path, exported (bool), export_s, nodes, op_types, max_abs_err,
    rel_err (max abs err / max |torch output|)."""
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    if name not in MODELS:
        raise KeyError(f"unknown bench model {name!r}; known: {sorted(MODELS)}")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / onnx_filename(name, exporter, size, depth, seed)

    model = inputs = None
    exported = False
    export_s = None
    if force or not path.exists():
        model, inputs = build_model(name, size=size, depth=depth, seed=seed)
        fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp.onnx", dir=cache)
        os.close(fd)
        try:
            t0 = time.perf_counter()
            _export_to(model, inputs, Path(tmp), exporter, name)
            export_s = time.perf_counter() - t0
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)  # atomic: concurrent readers never see a half-written file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        exported = True

    import onnx

    proto = onnx.load(str(path))
    ops = Counter(n.op_type for n in proto.graph.node)
    info = dict(name=name, exporter=exporter, size=resolve_size(name, size), depth=depth, path=path,
                exported=exported, export_s=export_s, nodes=len(proto.graph.node), op_types=dict(sorted(ops.items())),
                max_abs_err=None, rel_err=None)
    if check is None:
        check = exported
    if check:
        onnx.checker.check_model(proto, full_check=True)
        if model is None:
            model, inputs = build_model(name, size=size, depth=depth, seed=seed)
        err, rel = _ort_vs_torch(path, model, inputs)
        info.update(max_abs_err=err, rel_err=rel)
    if verbose:
        print(_line(info), flush=True)
    if check and not info["max_abs_err"] <= atol:
        raise AssertionError(f"{name}/{exporter}: onnxruntime vs torch max abs err {info['max_abs_err']:.3g} > {atol}")
    return info


def _ort_vs_torch(path: Path, model, inputs) -> tuple[float, float]:
    import onnxruntime as ort
    import torch

    with torch.no_grad():
        ref = model(*inputs)
    refs = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs)}
    outs = sess.run(None, feeds)
    assert len(outs) == len(refs), (len(outs), len(refs))
    err = scale = 0.0
    for o, r in zip(outs, refs):
        r = r.numpy()
        assert o.shape == r.shape, (o.shape, r.shape)
        err = max(err, float(np.max(np.abs(o - r))))
        scale = max(scale, float(np.max(np.abs(r))))
    return err, err / max(scale, 1e-12)


def _line(info: dict) -> str:
    err = "-" if info["max_abs_err"] is None else f"{info['max_abs_err']:.2e}"
    t = "cached" if info["export_s"] is None else f"{info['export_s']:.1f}s"
    return (f"{info['name']:<18} {info['exporter']:<11} size={info['size']:<4} nodes={info['nodes']:<5} "
            f"max_abs_err={err:<9} export={t}")


# ------------------------------------------------------------------------------------------------------------
# the onnx package's light models (onnx/backend/test/data/light/*.onnx: weights are ConstantOfShape nodes)
# ------------------------------------------------------------------------------------------------------------
def light_models() -> dict[str, Path]:
    """The nine ``light_*.onnx`` models shipped in the installed onnx package, ``{stem: path}``."""
    import onnx

    d = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    paths = {Path(p).stem: Path(p) for p in sorted(glob.glob(str(d / "light_*.onnx")))}
    if not paths:
        raise FileNotFoundError(f"no light_*.onnx models under {d} (onnx package without test data?)")
    return paths


def _random_weight(shape: tuple[int, ...], role: str, rng: np.random.Generator) -> np.ndarray:
    if role in ("bn_scale", "bn_var"):
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    w = rng.standard_normal(shape, dtype=np.float32)  # float32 throughout: vgg19 has 140M weights
    w *= math.sqrt(1.0 / (math.prod(shape[1:]) or 1)) if role == "weight" else 0.1
    return w


def randomize_weights(model, seed: int = 0):
    """A copy of a light model (``onnx.ModelProto``) with random constants for its ConstantOfShape fills,
    and the softmax input as a second output.

    The shipped weights are fills of one value (0.02): every logit is equal and the softmax output is
    uniform whatever the code computes, so a check against them proves little. Conv/Gemm weights are
    scaled by fan-in and BatchNorm scale/var drawn from [0.5, 1.5], to keep activations in range; the
    logits (softmax input) become an output so that a check compares them too."""
    import onnx
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    roles: dict[str, str] = {}
    for n in model.graph.node:
        for k, name in enumerate(n.input):
            if n.op_type in ("Conv", "Gemm") and k == 1:
                roles[name] = "weight"
            elif n.op_type == "BatchNormalization" and k in (1, 4):
                roles[name] = "bn_scale" if k == 1 else "bn_var"
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(s) for s in inits[n.input[0]])
            w = _random_weight(shape, roles.get(n.output[0], "other"), rng)
            m.graph.initializer.append(numpy_helper.from_array(w, n.output[0]))
        else:
            keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.ir_version = max(m.ir_version, 4)  # initializers that are not graph inputs
    softmax = [n for n in keep if n.op_type == "Softmax"]
    if softmax and softmax[-1].output[0] == m.graph.output[0].name:
        logits = onnx.ValueInfoProto()
        logits.CopyFrom(m.graph.output[0])  # softmax keeps the shape
        logits.name = softmax[-1].input[0]
        m.graph.output.append(logits)
    return m


_NP_TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 10: np.float16, 11: np.float64, 9: np.bool_}


def light_model_inputs(path, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for a model's graph inputs (those that are not initializers), shapes from the graph;
    a symbolic or unknown dim becomes 1."""
    import onnx

    g = onnx.load(str(path)).graph
    inits = {i.name for i in g.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in g.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
        dtype = _NP_TYPES.get(tt.elem_type)
        if dtype is None:
            raise NotImplementedError(f"{path}: input {vi.name} has elem type {tt.elem_type}")
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[vi.name] = np.zeros(shape, dtype)
    return feeds


def light_model_info(name: str, path) -> dict:
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    ops = Counter(n.op_type for n in proto.graph.node)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    t0 = time.perf_counter()
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    outs = sess.run(None, light_model_inputs(path))
    ok = all(np.all(np.isfinite(o)) for o in outs)
    return dict(name=name, exporter=f"onnx-pkg(opset{proto.opset_import[0].version})", size=224, depth=None,
                path=Path(path), exported=False, export_s=None, nodes=len(proto.graph.node),
                op_types=dict(sorted(ops.items())), max_abs_err=None, rel_err=None, ort_run_s=time.perf_counter() - t0,
                ort_ok=ok)


# ------------------------------------------------------------------------------------------------------------
def _table(rows: list[dict]) -> str:
    out = [f"{'model':<20} {'exporter':<17} {'size':>4} {'#nodes':>6} {'max_abs_err':>11} {'rel_err':>9} "
           f"{'export':>8}  op types"]
    for r in rows:
        if "error" in r:
            out.append(f"{r['name']:<20} {r['exporter']:<17} FAILED: {r['error']}")
            continue
        err = "-" if r["max_abs_err"] is None else f"{r['max_abs_err']:.2e}"
        if r.get("ort_ok") is not None:
            err = "runs" if r["ort_ok"] else "NONFINITE"
        rel = "-" if r["rel_err"] is None else f"{r['rel_err']:.1e}"
        t = "cached" if r["export_s"] is None else f"{r['export_s']:.1f}s"
        if r["exporter"].startswith("onnx-pkg"):
            t = "-"
        out.append(f"{r['name']:<20} {r['exporter']:<17} {r['size']:>4} {r['nodes']:>6} {err:>11} {rel:>9} {t:>8}  "
                   + ",".join(r["op_types"]))
    union = sorted({op for r in rows if "op_types" in r for op in r["op_types"]})
    union_gen = sorted({op for r in rows if "op_types" in r and r["exporter"] in EXPORTERS for op in r["op_types"]})
    out.append("")
    out.append(f"op types, exported models ({len(union_gen)}): {', '.join(union_gen)}")
    out.append(f"op types, all incl. light ({len(union)}): {', '.join(union)}")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help=f"models to export (default with --all: all of {list(MODELS)})")
    p.add_argument("--all", action="store_true", help="every model, both exporters, plus the onnx light models")
    p.add_argument("--exporter", choices=EXPORTERS + ("both",), default="both")
    p.add_argument("--small", action="store_true", help="use the small test sizes")
    p.add_argument("--size", type=int, default=None, help="explicit size (image side / sequence length)")
    p.add_argument("--depth", type=int, default=None, help="depth knob (candy, vit_tiny, gpt2_block)")
    p.add_argument("--force", action="store_true", help="re-export even if cached")
    p.add_argument("--no-light", action="store_true", help="with --all: skip the onnx light models")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--json", default=None, help="write the table rows as JSON here")
    a = p.parse_args(argv)

    names = a.models or (list(MODELS) if a.all else [])
    if not names:
        p.error("name models or pass --all")
    exporters = EXPORTERS if a.exporter == "both" else (a.exporter,)
    size: Size = a.size if a.size is not None else ("small" if a.small else None)
    rows, failed = [], 0
    for name in names:
        for ex in exporters:
            try:
                rows.append(export_and_check(name, ex, size, a.cache_dir, depth=a.depth, force=a.force, check=True))
            except Exception as e:  # keep going: report every model
                failed += 1
                msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
                print(f"{name:<18} {ex:<11} FAILED {msg}", flush=True)
                rows.append(dict(name=name, exporter=ex, error=msg))
    if a.all and not a.no_light:
        for lname, lpath in light_models().items():
            try:
                r = light_model_info(lname, lpath)
                print(f"{lname:<18} onnx-pkg    nodes={r['nodes']:<5} ort={'ok' if r['ort_ok'] else 'NONFINITE'}")
                rows.append(r)
            except Exception as e:
                failed += 1
                rows.append(dict(name=lname, exporter="onnx-pkg", error=f"{type(e).__name__}: {e}"[:200]))
    print()
    print(_table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{k: (str(v) if isinstance(v, Path) else v) for k, v in r.items()} for r in rows], f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
