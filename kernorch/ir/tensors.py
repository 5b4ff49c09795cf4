"""NumPy arrays <-> PyTorch tensors, bfloat16 included.

NumPy has no bfloat16 of its own: the oracle's arrays use ml_dtypes' ``bfloat16`` and PyTorch has
``torch.bfloat16``, and ``torch.from_numpy`` / ``Tensor.numpy`` refuse to convert between them. Both
store the same 16 bits, so a bfloat16 array crosses as an int16 view, without copying. Every place
that hands arrays between the interpreter and a kernel goes through these two functions.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import torch

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
# the IR's dtype names (TensorType.dtype) -> PyTorch's
TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "int64": torch.int64,
                "int32": torch.int32, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
                "int16": torch.int16, "bfloat16": torch.bfloat16, "uint16": torch.uint16, "uint32": torch.uint32,
                "uint64": torch.uint64}


def to_torch(a: Any) -> torch.Tensor:
    """A tensor sharing ``a``'s memory where it can (a read-only array is copied first)."""
    if isinstance(a, torch.Tensor):
        return a
    a = np.asarray(a)
    if not a.flags.writeable:
        a = a.copy()
    if a.dtype == BFLOAT16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def to_numpy(t: Any) -> np.ndarray:
    """An array of a tensor (on any device) or of anything NumPy takes; bfloat16 as ml_dtypes'."""
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(BFLOAT16)
        return t.numpy()
    return np.asarray(t)


def holds_int8(w) -> bool:
    """A float32 array (a quantized model's weight after rewrite/quantized.py) whose values are all
    integers in int8's range [-128, 127]: what an int8 kernel can multiply as it is."""
    w = np.asarray(w)
    return (w.dtype == np.float32 and w.size > 0 and float(w.min()) >= -128 and float(w.max()) <= 127
            and bool(np.array_equal(w, np.round(w))))
