"""Fission rules by op family; importing this package registers them all.

Each rule module imports the registry (fission/registry.py) and registers its ops; the registry
never imports the rules, so whoever needs the full table imports this package.
"""

from kernorch.fission.rules import constants, elementwise  # noqa: F401
from kernorch.fission.rules import shape_ops  # noqa: F401
from kernorch.fission.rules import indexing  # noqa: F401
from kernorch.fission.rules import activations, einsum, norms, reduce  # noqa: F401
from kernorch.fission.rules import linear  # noqa: F401
from kernorch.fission.rules import pool  # noqa: F401
from kernorch.fission.rules import resize  # noqa: F401
from kernorch.fission.rules import positions  # noqa: F401
from kernorch.fission.rules import quantize  # noqa: F401
from kernorch.fission.registry import RULES, Rule


def load_rules() -> dict[str, Rule]:
    """The table of every rule (op type -> rule): the modules above registered theirs on import."""
    return RULES
