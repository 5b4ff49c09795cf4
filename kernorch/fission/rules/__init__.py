"""Fission rules by op family; importing this package registers them all."""

from kernorch.fission.rules import constants, elementwise  # noqa: F401
from kernorch.fission.rules import shape_ops  # noqa: F401
from kernorch.fission.rules import indexing  # noqa: F401
from kernorch.fission.rules import activations, einsum, norms, reduce  # noqa: F401
from kernorch.fission.rules import linear  # noqa: F401
from kernorch.fission.rules import pool  # noqa: F401
from kernorch.fission.rules import resize  # noqa: F401
from kernorch.fission.rules import positions  # noqa: F401
from kernorch.fission.rules import quantize  # noqa: F401
