"""Einsum as views, sums, elementwise products and matmuls.

Per operand: repeated letters become a diagonal view, letters no one else needs are summed.
Operands are then contracted left to right: letters shared with the next operand and needed
later are batch dims, shared letters needed nowhere else are the matmul's inner dim (a pair
that shares nothing is an elementwise product). Finally the result is permuted to the output.
"""

from __future__ import annotations

import math
import string

from kernorch.fission.registry import NodeContext, rule
from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.prims import Op

_ELLIPSIS_LETTERS = string.ascii_letters[::-1]  # letters for '...' dims, taken from those unused


class _Term:
    """An operand: its value and one letter per dimension."""

    def __init__(self, v: int, letters: str) -> None:
        self.v, self.letters = v, letters


def _parse(ctx: NodeContext, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.unsupported(f"equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    used = set(c for c in eq if c.isalpha())
    free = [c for c in _ELLIPSIS_LETTERS if c not in used]
    n_ell = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    ell = "".join(free[:n_ell][::-1]) if n_ell else ""
    out_terms = []
    for t, r in zip(terms, ranks):
        k = r - len(t.replace("...", "")) if "..." in t else 0
        t = t.replace("...", ell[len(ell) - k:] if k else "")
        if len(t) != r or (t and not t.isalpha()):
            raise ctx.unsupported(f"equation {equation!r} does not match an operand of rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {c: "".join(out_terms).count(c) for c in set("".join(out_terms))}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return out_terms, out


def _diagonal(ctx: NodeContext, t: _Term) -> _Term:
    """Repeated letters in one operand: keep the diagonal (one dim per distinct letter)."""
    uniq = "".join(dict.fromkeys(t.letters))
    if uniq == t.letters:
        return t
    shape = ctx.b.shape(t.v)
    size = {c: n for c, n in zip(t.letters, shape)}
    out_shape = [size[c] for c in uniq]
    idx = [ix.var(uniq.index(c)) for c in t.letters]
    return _Term(ctx.b.view(t.v, layout.make(out_shape, shape, idx)), uniq)


def _sum_out(ctx: NodeContext, t: _Term, keep: set[str]) -> _Term:
    axes = [d for d, c in enumerate(t.letters) if c not in keep]
    if not axes:
        return t
    return _Term(ctx.b.reduce(Op.SUM, t.v, axes, keepdims=False), "".join(c for c in t.letters if c in keep))


def _permute(ctx: NodeContext, t: _Term, letters: str) -> int:
    return ctx.b.permute(t.v, [t.letters.index(c) for c in letters])


def _contract(ctx: NodeContext, a: _Term, c: _Term, needed: set[str]) -> _Term:
    b = ctx.b
    sa = dict(zip(a.letters, b.shape(a.v)))
    sc = dict(zip(c.letters, b.shape(c.v)))
    shared = [x for x in a.letters if x in sc]
    batch = "".join(x for x in shared if x in needed)
    inner = "".join(x for x in shared if x not in needed)
    a_only = "".join(x for x in a.letters if x not in sc)
    c_only = "".join(x for x in c.letters if x not in sa)
    size = {x: max(sa.get(x, 1), sc.get(x, 1)) for x in a.letters + c.letters}
    if not inner:  # an elementwise (outer) product over batch + a_only + c_only
        letters = batch + a_only + c_only
        av = b.reshape(_permute(ctx, a, batch + a_only), [sa[x] for x in batch + a_only] + [1] * len(c_only))
        cv = _permute(ctx, c, batch + c_only)
        cv = b.reshape(cv, [sc[x] for x in batch] + [1] * len(a_only) + [sc[x] for x in c_only])
        return _Term(b.binary(Op.MUL, av, cv), letters)
    av, cv = _permute(ctx, a, batch + a_only + inner), _permute(ctx, c, batch + inner + c_only)
    # a contracted letter of size 1 on one side broadcasts over the other's
    av = b.broadcast_to(av, [sa[x] for x in batch + a_only] + [size[x] for x in inner])
    cv = b.broadcast_to(cv, [sc[x] for x in batch] + [size[x] for x in inner + c_only])
    m, k, n = (math.prod(size[x] for x in s) for s in (a_only, inner, c_only))
    av = b.reshape(av, [sa[x] for x in batch] + [m, k])
    cv = b.reshape(cv, [sc[x] for x in batch] + [k, n])
    y = b.matmul(av, cv)
    return _Term(b.reshape(y, [size[x] for x in batch + a_only + c_only]), batch + a_only + c_only)


@rule("Einsum")
def einsum(ctx: NodeContext):
    b = ctx.b
    xs = [v for v in ctx.inputs if v is not None]
    terms, out = _parse(ctx, ctx.attr_str("equation"), [len(b.shape(v)) for v in xs])
    ops = [_diagonal(ctx, _Term(v, t)) for v, t in zip(xs, terms)]
    for k in range(len(ops)):
        others = set(out).union(*(o.letters for j, o in enumerate(ops) if j != k))
        ops[k] = _sum_out(ctx, ops[k], others)
    acc = ops[0]
    for k in range(1, len(ops)):
        needed = set(out).union(*(o.letters for o in ops[k + 1:]))
        acc = _contract(ctx, acc, ops[k], needed)
    acc = _sum_out(ctx, acc, set(out))
    y = _permute(ctx, acc, out)
    size = dict(zip(acc.letters, b.shape(acc.v)))
    want = [size[c] for c in out]
    return [b.broadcast_to(y, want) if list(b.shape(y)) != want else y]
