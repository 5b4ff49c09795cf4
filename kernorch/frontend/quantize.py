"""int8 post-training quantization: a float ONNX model becomes the QDQ model onnxruntime's quantizer
makes of it (the calibration, the scales and the rounding are that well-kept library's, so a user
comparing kernorch int8 with onnxruntime int8 compares kernels, not quantizers).

Weights are quantized per output channel, symmetric int8; activations per tensor, uint8 with a
zero point (x86's u8·s8 dot products, VNNI and AMX). The calibration feeds are the user's
(``calibration=``); without them random inputs stand in, and the compile report says so.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import onnx

from kernorch.errors import KernorchError
from kernorch.frontend.inputs import check_inputs, random_inputs
from kernorch.ir.graph import Graph

CALIBRATION_METHODS = ("minmax", "entropy", "percentile")  # onnxruntime's CalibrationMethod by name
RANDOM_BATCHES = 8  # random calibration inputs when the user gives none
RANDOM_NOTE = "calibrated on random inputs (pass calibration= real inputs for a representative int8 model)"


class QuantizationError(KernorchError):
    """onnxruntime's quantizer refused the model, or the calibration feeds do not fit it."""


def calibration_feeds(graph: Graph, calibration: Iterable[Any] | None) -> tuple[list[dict[str, np.ndarray]], str]:
    """The feeds to calibrate on, each checked against the model's inputs (by name, or positional;
    one array for a one-input model), and a note when random inputs stand in."""
    if calibration is None:
        return [random_inputs(graph, seed=1000 + k) for k in range(RANDOM_BATCHES)], RANDOM_NOTE
    feeds = []
    for k, item in enumerate(calibration):
        if not isinstance(item, (Mapping, list, tuple)):
            item = [item]
        try:
            by_id = check_inputs(graph, item)
        except KernorchError as e:
            raise QuantizationError(f"calibration batch {k}: {e}") from None
        feeds.append({graph.name(v): np.asarray(_numpy(a)) for v, a in by_id.items()})
    if not feeds:
        raise QuantizationError("calibration= gave no batches; pass an iterable of input feeds")
    return feeds, ""


def _numpy(a: Any) -> Any:
    return a.detach().cpu().numpy() if hasattr(a, "detach") else a


def quantize_int8(proto: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], method: str = "minmax") -> onnx.ModelProto:
    """The QDQ model onnxruntime's ``quantize_static`` makes of ``proto`` calibrated on ``feeds``."""
    from onnxruntime import quantization as q

    if method not in CALIBRATION_METHODS:
        raise QuantizationError(f"unknown calibration method {method!r}; choose one of {', '.join(CALIBRATION_METHODS)}")
    how = {"minmax": q.CalibrationMethod.MinMax, "entropy": q.CalibrationMethod.Entropy,
           "percentile": q.CalibrationMethod.Percentile}[method]

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    with tempfile.TemporaryDirectory(prefix="kernorch-int8-") as tmp, _quiet_root_logger():
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        onnx.save(proto, src)
        try:
            q.quantize_static(src, dst, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                              activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                              calibrate_method=how, extra_options={"WeightSymmetric": True},
                              calibration_cache_path=Path(tmp) / "calibration.json")
        except Exception as e:  # noqa: BLE001 - the quantizer's errors are many and unexported
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise QuantizationError(f"onnxruntime's quantizer failed on this model: {first[:300]}") from None
        return onnx.load(dst)


@contextlib.contextmanager
def _quiet_root_logger():
    """The quantizer logs advice ("consider pre-processing") on the root logger at WARNING."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
