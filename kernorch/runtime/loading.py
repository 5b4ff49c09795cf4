"""``kernorch.load``: whichever kind of compiled model a directory holds, by its manifest — a
Decoder (decode.py), a DynamicModel (dynamic_model.py) or a CompiledModel (model.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kernorch.runtime import decode, dynamic_model


def load(path: str | os.PathLike, device: Any = None, **kw: Any):
    """Load a directory saved by ``save`` (see model.load for ``trust_libraries`` and ``env``)."""
    d = Path(path)
    if (d / decode.MANIFEST).is_file():
        return decode.load_decoder(d, device=device, **kw)
    return dynamic_model.load(d, device, **kw)
