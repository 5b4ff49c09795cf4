"""kernorch: optimal kernel orchestration for tensor programs (Korch, ASPLOS 2024) in Python.

    model = kernorch.compile("model.onnx")            # or compile(nn_module, example_inputs)
    y = model(x)
    model.save("out/"); model = kernorch.load("out/")
"""

from kernorch.errors import KernorchError
from kernorch.runtime.compile import compile
from kernorch.runtime.model import CompiledModel, load

__all__ = ["CompiledModel", "KernorchError", "compile", "load"]
__version__ = "0.1.0"
