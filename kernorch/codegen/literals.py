"""Constants as source text, shared by the printers (c.py, triton.py): each printer names its
own spelling of NaN and the infinities and of integer constants; rounding to float32 and the
bool convention are the same everywhere."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np


def literal(value, dtype: str, nan: str, inf: str, ninf: str, float32_suffix: str,
            integer: Callable[[int, str], str]) -> str:
    if dtype.startswith("float"):
        v = float(value)
        if math.isnan(v):
            return nan
        if math.isinf(v):
            return inf if v > 0 else ninf
        return repr(float(np.float32(v))) + float32_suffix if dtype == "float32" else repr(v)
    if dtype == "bool":
        return "1" if value else "0"
    return integer(int(value), dtype)
