"""Reading gcc's x86 assembly (AT&T syntax, ``-S``): the innermost loops of each function and what
their instructions say about the generated code's quality (vector width, FMAs, stack traffic)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = re.compile(r"^([A-Za-z_][\w.]*):")
_LOCAL = re.compile(r"^(\.L\w+):$")
_JUMP = re.compile(r"^j\w+\s+(\.L\w+)$")
_STACK = re.compile(r"\((%rsp|%rbp)\)")
_MEMORY = re.compile(r"-?\w*\(%\w+(?:,%\w+)?(?:,\d)?\)")


@dataclass
class Loop:
    function: str
    body: list[str]

    def count(self, prefix: str, width: str | None = None) -> int:
        """Instructions starting with ``prefix``, on ``width`` (x, y or z) registers if given."""
        return sum(1 for ins in self.body if ins.startswith(prefix)
                   and (width is None or f"%{width}mm" in ins))

    def packed_products(self, width: str) -> int:
        """Packed multiply-adds on ``width`` registers: FMAs, or multiplies where the tuning splits an
        FMA on a single dependency chain into a multiply and an add (gcc's Zen tunings do)."""
        return sum(1 for ins in self.body if re.match(r"(vfn?m(add|sub)\w*|vmul)ps\b", ins) and f"%{width}mm" in ins)

    def scalar_float_ops(self) -> int:
        """Scalar float arithmetic (``ss``): a tail loop, or an in-order reduction of a vector's lanes."""
        return sum(1 for ins in self.body if re.match(r"v(add|mul|sub|fn?m(add|sub)\w*)ss\b", ins))

    def vector_stack_traffic(self) -> list[str]:
        """Vector registers stored to or loaded from the stack: spills and reloads."""
        return [ins for ins in self.body if _STACK.search(ins) and re.search(r"%[xyz]mm", ins)]

    def repeated_reads(self) -> list[str]:
        """Memory operands read more than once in one pass of the loop (a source operand, not the
        destination, which AT&T syntax puts last): a value loaded again instead of kept in a register,
        e.g. a B vector folded into each of its FMAs when the tile needs more registers than the ISA has."""
        seen: set[str] = set()
        repeated: set[str] = set()
        for ins in self.body:
            if not ins.rstrip().endswith(")"):
                for op in _MEMORY.findall(ins):
                    (repeated if op in seen else seen).add(op)
            written = re.search(r",\s*%(r\w+|e\w+)$", ins)  # a general register set: its addresses change
            if written:
                seen = {op for op in seen if f"%{written.group(1)}" not in op}
        return sorted(repeated)

    def narrow_moves(self, width: str) -> list[str]:
        """Vector moves and inserts narrower than ``width``: a full vector loaded or stored in halves
        (extracts are left out: an in-order reduction of a vector's lanes needs them)."""
        narrower = {"z": ("x", "y"), "y": ("x",)}.get(width, ())
        return [ins for ins in self.body
                if re.match(r"v(movup|movap|movdqu|movdqa|insert)", ins)
                and any(f"%{w}mm" in ins for w in narrower)]


def functions(asm: str) -> dict[str, list[str]]:
    """Each global or static function's instructions (labels kept, directives and comments dropped)."""
    out: dict[str, list[str]] = {}
    body: list[str] | None = None
    for raw in asm.splitlines():
        line = raw.split("#", 1)[0].strip()
        m = _LABEL.match(line)
        if m and not m.group(1).startswith(".L"):
            body = out.setdefault(m.group(1), [])
        elif body is not None and line and (not line.startswith(".") or _LOCAL.match(line)):
            body.append(line)
    return out


def inner_loops(name: str, body: list[str]) -> list[Loop]:
    """The innermost loops of one function: a backward jump to a label and the lines between."""
    labels = {m.group(1): i for i, ln in enumerate(body) if (m := _LOCAL.match(ln))}
    spans = [(labels[m.group(1)], j) for j, ln in enumerate(body)
             if (m := _JUMP.match(ln)) and labels.get(m.group(1), j + 1) < j]
    inner = [(a, b) for a, b in spans if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]
    return [Loop(name, body[a:b + 1]) for a, b in inner]


# C wrappers around the GEMM tiles, so a test can compile (and call) them on their own: shared by
# test_asm_quality.py (reads their assembly) and test_gemm_helpers.py (runs them)
TILE_PROBES = r"""
void probe_tile(int64_t mr, int64_t K, const float *a, int64_t lda, const float *bp, float *t, int64_t pf)
{ kn_gemm_tile(mr, K, a, lda, bp, t, pf); }
void probe_tile16(int64_t mr, int64_t K, const float *a, int64_t lda, const float *bp, float *t, int64_t pf)
{ kn_gemm_tile16(mr, K, a, lda, bp, t, pf); }
void probe_tile_at(int64_t mr, int64_t K, const float *a, int64_t lda, const int32_t *wo, const float *bp,
                   float *t, int64_t pf) { kn_gemm_tile_at(mr, K, a, lda, wo, bp, t, pf); }
"""
