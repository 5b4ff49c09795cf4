"""``kernorch.optimize(module, example_inputs)``: a drop-in ``nn.Module`` that runs the compiled plan.

    fast = kernorch.optimize(net, (x,))     # compiles (tunes) once, like torch.compile
    y = fast(x)                              # same call, same output structure as net(x)

The returned module's ``forward`` runs the compiled model on the inputs' static shapes (those of
the example inputs) and gives back what ``module.forward`` returns: a tensor, a tuple or list of
tensors, a named tuple or a dict. It is for inference: no autograd through it.
"""

from __future__ import annotations

from typing import Any

import torch

from kernorch.errors import InputError, KernorchError
from kernorch.runtime import compile as compile_module


class OptimizedModule(torch.nn.Module):
    """Wraps a CompiledModel; ``compiled`` is the CompiledModel (``summary()``, ``save()``)."""

    def __init__(self, compiled, structure: tuple, name: str) -> None:
        super().__init__()
        self.compiled = compiled
        self._structure = structure
        self._name = name

    def forward(self, *args, **kwargs):
        names = self.compiled.input_names
        if len(args) > len(names):
            raise InputError(f"{self._name} takes {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
        feeds = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names or k in feeds:
                raise InputError(f"{self._name}: unexpected or repeated input {k!r}; inputs are {names}")
            feeds[k] = v
        outs = list(self.compiled.run(feeds).values())
        kind, extra = self._structure
        if kind == "tensor":
            return outs[0]
        if kind == "dict":
            return dict(zip(extra, outs))
        if kind == "namedtuple":
            return extra(*outs)
        return list(outs) if kind == "list" else tuple(outs)

    def extra_repr(self) -> str:
        return f"{self._name}, {len(self.compiled.kernels)} kernels"


def _structure(out: Any) -> tuple:
    if isinstance(out, torch.Tensor):
        return ("tensor", None)
    if isinstance(out, dict):
        return ("dict", [str(k) for k in out])
    if isinstance(out, tuple) and hasattr(out, "_fields"):
        return ("namedtuple", type(out))
    if isinstance(out, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in out):
        return ("list" if isinstance(out, list) else "tuple", None)
    raise KernorchError(f"optimize: forward returns a {type(out).__name__}; expected a tensor, a tuple, list or "
                        f"dict of tensors")


def optimize(module: torch.nn.Module, example_inputs: Any, **compile_options) -> OptimizedModule:
    """Compile ``module`` on ``example_inputs`` (a tensor or a tuple of tensors) with
    ``kernorch.compile(module, example_inputs, **compile_options)`` and return a module whose
    ``forward`` runs the compiled plan and returns what ``module`` returns."""
    if not isinstance(module, torch.nn.Module):
        raise KernorchError(f"optimize expects a torch.nn.Module, got {type(module).__name__}")
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            structure = _structure(module(*args))
    finally:
        module.train(training)
    compiled = compile_module.compile(module, args, **compile_options)
    n_out = len(compiled.output_names)
    kind, extra = structure
    want = 1 if kind == "tensor" else len(extra._fields) if kind == "namedtuple" else len(extra) \
        if kind == "dict" else None
    if want is not None and want != n_out:
        raise KernorchError(f"optimize: {type(module).__name__} returns {want} output(s) but its export has {n_out}")
    return OptimizedModule(compiled, structure, type(module).__name__)
