"""PyTorch module -> primitive graph, by exporting to ONNX in memory and importing that.

Going through ONNX keeps one frontend: everything the ONNX importer learns (fission rules, folding,
opaque fallback) serves PyTorch users too. Shapes are static: the example inputs fix them.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import re
import sys
import tempfile
import warnings
from typing import Any, Sequence

import onnx

from kernorch.errors import ExportError
from kernorch.frontend.onnx_import import ImportReport, import_onnx
from kernorch.ir.graph import Graph

TORCHSCRIPT_OPSET = 17
DYNAMO_OPSET = 18
_MAX_DETAIL = 300  # characters of the exporter's own message kept in ours
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the dynamo exporter colours its messages


def import_torch(module, example_inputs, dynamo: bool | None = None, input_names: Sequence[str] | None = None,
                 output_names: Sequence[str] | None = None) -> tuple[Graph, ImportReport]:
    """Export ``module`` (in eval mode) on ``example_inputs`` and import the result.

    ``example_inputs`` is a tensor or a tuple of tensors (positional arguments of ``forward``).
    Input names default to the parameter names of ``forward``. ``dynamo=False`` uses the
    TorchScript exporter (opset 17); ``dynamo=True`` the torch.export-based one (opset 18, needs
    onnxscript); ``None`` (default) the TorchScript one, and the dynamo one where that fails (an
    operator it has no symbolic for, as in recent transformers' language models). The report
    names the exporter that produced the model."""
    proto, exporter = export_torch_with(module, example_inputs, dynamo, input_names, output_names)
    g, report = import_onnx(proto)
    report.exporter = exporter
    return g, report


def export_torch(module, example_inputs, dynamo: bool | None = None, input_names: Sequence[str] | None = None,
                 output_names: Sequence[str] | None = None) -> onnx.ModelProto:
    """The ONNX model ``import_torch`` imports, as an in-memory ModelProto."""
    return export_torch_with(module, example_inputs, dynamo, input_names, output_names)[0]


def export_torch_with(module, example_inputs, dynamo: bool | None = None, input_names: Sequence[str] | None = None,
                      output_names: Sequence[str] | None = None) -> tuple[onnx.ModelProto, str]:
    """(the exported ModelProto, the exporter that made it: "torchscript" or "dynamo"). With
    ``dynamo=None`` a TorchScript failure falls back to the dynamo exporter; when both fail the
    one-line error gives both reasons."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ExportError(f"expected a torch.nn.Module, got {type(module).__name__}")
    args = _as_tuple(example_inputs)
    names = list(input_names) if input_names is not None else forward_names(module, len(args))
    if len(names) != len(args):
        raise ExportError(f"{len(names)} input names given for {len(args)} example inputs")
    exporters = ("torchscript", "dynamo") if dynamo is None else ("dynamo",) if dynamo else ("torchscript",)
    failures = []
    with _eval_mode(module), _quiet(), torch.no_grad():
        try:
            if output_names is None:
                output_names = _output_names(module, args, names)
        except Exception as e:  # noqa: BLE001 - the module itself fails on its example inputs
            raise ExportError(f"running {type(module).__name__} on the example inputs failed: "
                              f"{type(e).__name__}: {_one_line(e)}") from None
        for exporter in exporters:
            try:
                return _export(exporter, module, args, names, output_names), exporter
            except ExportError as e:
                failures.append(f"{exporter} exporter: {e}")
            except ImportError as e:
                failures.append(f"{exporter} exporter: {_one_line(e)} (it needs onnxscript: pip install onnxscript)")
            except Exception as e:  # noqa: BLE001 - the exporters raise many unrelated types; all mean one thing
                failures.append(f"{exporter} exporter: {type(e).__name__}: {_one_line(e)}")
    raise ExportError(f"exporting {type(module).__name__} to ONNX failed: " + "; ".join(failures))


def _export(exporter: str, module, args, names, output_names) -> onnx.ModelProto:
    import torch

    if exporter == "dynamo":
        return _export_dynamo(module, args, names, output_names)
    f = io.BytesIO()
    torch.onnx.export(module, args, f, dynamo=False, opset_version=TORCHSCRIPT_OPSET,
                      input_names=names, output_names=list(output_names) if output_names else None,
                      do_constant_folding=True)
    return onnx.load_from_string(f.getvalue())


def _export_dynamo(module, args, names, output_names) -> onnx.ModelProto:
    import torch

    try:
        import onnxscript  # noqa: F401
    except ImportError:
        raise ExportError("it needs onnxscript (pip install onnxscript)") from None
    prog = torch.onnx.export(module, args, dynamo=True, opset_version=DYNAMO_OPSET, input_names=names,
                             output_names=list(output_names) if output_names else None, verbose=False,
                             external_data=False, optimize=True)
    if prog is None:
        raise ExportError("it returned no program")
    return prog.model_proto


def _as_tuple(example_inputs) -> tuple:
    import torch

    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else example_inputs
    if not isinstance(args, (tuple, list)) or not args:
        raise ExportError("example_inputs must be a tensor or a non-empty tuple of tensors")
    for k, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise ExportError(f"example input {k} is a {type(a).__name__}, expected a torch.Tensor")
    return tuple(args)


def _output_names(module, args, input_names) -> list[str] | None:
    """Names for the exported outputs, from what ``forward`` returns: a dict's keys, a named tuple's
    fields, else ``output`` (one tensor) or ``output_0``, ``output_1``, ... (a tuple or list of
    tensors); None (the exporter's own names) for anything nested or clashing with an input."""
    import torch

    out = module(*args)
    if isinstance(out, torch.Tensor):
        names = ["output"]
    elif isinstance(out, dict) and all(isinstance(v, torch.Tensor) for v in out.values()):
        names = [str(k) for k in out]
    elif isinstance(out, tuple) and hasattr(out, "_fields") and all(isinstance(v, torch.Tensor) for v in out):
        names = list(out._fields)
    elif isinstance(out, (tuple, list)) and out and all(isinstance(v, torch.Tensor) for v in out):
        names = [f"output_{k}" for k in range(len(out))]
    else:
        return None
    if len(set(names)) != len(names) or set(names) & set(input_names):
        return None
    return names


def forward_names(module, n: int) -> list[str]:
    """Names of the first ``n`` positional parameters of ``forward``, else input_0, input_1, ..."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        names.append(p.name)
    if len(names) >= n and len(set(names[:n])) == n:
        return names[:n]
    return [f"input_{k}" for k in range(n)]


@contextlib.contextmanager
def _eval_mode(module):
    """Export in eval mode (dropout off, batch norm on running stats); restore the user's flags after."""
    flags = {m: m.training for m in module.modules()}
    module.eval()
    try:
        yield
    finally:
        for m, t in flags.items():
            m.training = t


@contextlib.contextmanager
def _quiet():
    """The exporters warn and log a lot that is not actionable for kernorch users."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), _native_stdout_dropped():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


@contextlib.contextmanager
def _native_stdout_dropped():
    """Drop what native code writes to file descriptor 1: the TorchScript exporter prints its
    whole graph (hundreds of lines) from C++ when an operator has no symbolic."""
    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
        saved = os.dup(fd)
    except (OSError, ValueError, io.UnsupportedOperation):  # no real descriptor (a notebook): nothing to drop
        yield
        return
    with tempfile.TemporaryFile() as sink:
        if sys.__stdout__ is not None:
            sys.__stdout__.flush()
        os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)


def _one_line(e: Any) -> str:
    """The first line of an exporter's message, without its terminal colours, at most _MAX_DETAIL long."""
    lines = [ln.strip() for ln in _ANSI.sub("", str(e)).splitlines() if ln.strip()]
    s = lines[0] if lines else type(e).__name__
    return s if len(s) <= _MAX_DETAIL else s[:_MAX_DETAIL - 3] + "..."
