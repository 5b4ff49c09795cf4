"""Tests of target "cuda" (Triton kernels, the CUDA pipeline and executable).

Without a GPU they run the same Triton programs through Triton's interpreter on CPU tensors:
TRITON_INTERPRET=1 is set for this folder's test modules only, before any generated kernel is
imported (Triton reads it when a kernel is decorated). With a GPU they run on it; set
KERNORCH_CUDA_TESTS=interpret to force the interpreter there. Skipped when triton is missing.
"""

import importlib.util
import os

import pytest

HAVE_TRITON = importlib.util.find_spec("triton") is not None


def on_gpu() -> bool:
    if os.environ.get("KERNORCH_CUDA_TESTS") == "interpret":
        return False
    import torch

    return torch.cuda.is_available()


@pytest.fixture(autouse=True, scope="module")
def triton_mode():
    if not HAVE_TRITON:
        pytest.skip("triton is not installed (pip install 'kernorch[cuda]'); target 'cuda' is untested")
    old = os.environ.get("TRITON_INTERPRET")
    if not on_gpu():
        os.environ["TRITON_INTERPRET"] = "1"
    yield
    if old is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = old
