"""Kernel providers: the backends that can implement a candidate kernel (onnxruntime, OpenVINO,
PyTorch ops; kernorch's own code generator plugs in behind the same interface). A candidate's
cost is the minimum over the providers that run it correctly (``best_provider``)."""

from kernorch.providers.base import BuiltKernel, Provider, ProviderError, verify
from kernorch.providers.ort import OrtProvider
from kernorch.providers.ov import OpenVinoProvider
from kernorch.providers.select import ProviderRecord, best_provider
from kernorch.providers.timing import MedianTimer
from kernorch.providers.torch_ops import TorchProvider


def default_providers(threads: int | None = None, bf16_tolerance: float | None = None) -> list[Provider]:
    """Every provider this package has, installed or not (``best_provider`` records the missing);
    ``bf16_tolerance``: the accuracy budget of OpenVINO's bf16 regions (``precision="bf16"``)."""
    return [OrtProvider(threads), OpenVinoProvider(threads), TorchProvider("eager", threads),
            TorchProvider("onednn", threads), TorchProvider("channels_last", threads), TorchProvider("jit", threads),
            OpenVinoProvider(threads, precision="bf16", tolerance=bf16_tolerance)]


__all__ = ["BuiltKernel", "MedianTimer", "OpenVinoProvider", "OrtProvider", "Provider", "ProviderError",
           "ProviderRecord", "TorchProvider", "best_provider", "default_providers", "verify"]
