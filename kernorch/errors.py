"""One-line errors that name the culprit. Every user-facing failure is a KernorchError."""


class KernorchError(Exception):
    """Base of every error kernorch raises on purpose; str(err) is one line naming the culprit."""


class ModelLoadError(KernorchError):
    """The model file or proto cannot be read or is malformed."""


class UnsupportedOpError(KernorchError):
    """An ONNX operator has no fission rule and no reference implementation."""


class DynamicShapeError(KernorchError):
    """A graph input has a symbolic or unknown dimension that the user did not pin."""


class InputError(KernorchError):
    """A runtime input has the wrong name, shape or dtype."""


class CompilerError(KernorchError):
    """The system C compiler is missing or rejected generated code."""


class VerificationError(KernorchError):
    """A generated kernel disagrees with the reference interpreter."""


class ExportError(KernorchError):
    """A PyTorch module could not be exported to ONNX."""


class SavedModelError(KernorchError):
    """A saved model directory cannot be loaded: missing, truncated, tampered or of another format."""
