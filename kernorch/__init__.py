"""kernorch: optimal kernel orchestration for tensor programs (Korch, ASPLOS 2024) in Python.

    model = kernorch.compile("model.onnx")            # or compile(nn_module, example_inputs)
    fast = kernorch.optimize(nn_module, example_inputs)   # a drop-in nn.Module running the plan
    y = model(x)
    model.save("out/"); model = kernorch.load("out/")
    dec = kernorch.compile_decoder(causal_lm, max_length=256)     # text generation with a KV cache
"""

from kernorch.errors import KernorchError

__all__ = ["CodegenOptions", "CompiledModel", "Decoder", "DynamicModel", "KernorchError", "compile", "compile_decoder",
           "load", "optimize"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """Lazy: importing any kernorch module (the CLI, the frontend) must not pay for torch + codegen."""
    if name == "compile":
        from kernorch.runtime.compile import compile  # lazy: torch + codegen load on first use, not on import

        return compile
    if name == "optimize":
        from kernorch.runtime.optimize import optimize  # lazy: as above

        return optimize
    if name == "CodegenOptions":
        from kernorch.options import CodegenOptions  # lazy: `import kernorch` stays at kernorch.errors (~1 ms)

        return CodegenOptions
    if name == "CompiledModel":
        from kernorch.runtime.model import CompiledModel  # lazy: as above

        return CompiledModel
    if name == "DynamicModel":
        from kernorch.runtime.dynamic_model import DynamicModel  # lazy: as above

        return DynamicModel
    if name in ("Decoder", "compile_decoder"):
        from kernorch.runtime import decode  # lazy: as above

        return getattr(decode, name)
    if name == "load":
        from kernorch.runtime.loading import load  # lazy: as above (a static, dynamic or decoder directory)

        return load
    raise AttributeError(f"module 'kernorch' has no attribute {name!r}")
