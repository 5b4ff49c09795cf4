"""C/OpenMP printer: KernelSpec -> C99 source. Syntax only; every loop decision is in the spec.

Each kernel becomes ``void NAME(void *const *args, int nthreads)``: args are the inputs, the
outputs, then the workspace base (when the kernel needs scratch), all contiguous row-major.
Element types: float, double, intN_t, uint8_t for bool (0/1), uint16_t for bfloat16 in memory. A
bfloat16 value is a float in registers: loaded by widening its bits, rounded to nearest-even
wherever the IR declares a bf16 result (so a kernel computes exactly what the interpreter does:
float32 arithmetic, rounded once per prim), stored as the top 16 bits of that rounded float.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from kernorch.codegen import literals
from kernorch.codegen.amx import HELPERS as AMX_HELPERS
from kernorch.codegen.clamps import plain_clamps
from kernorch.codegen.depthwise import HELPERS as DEPTHWISE_HELPERS
from kernorch.codegen.gemm_helpers import HELPERS as GEMM_HELPERS
from kernorch.codegen.winograd import HELPERS as WINOGRAD_HELPERS
from kernorch.codegen.transpose import HELPER as TRANSPOSE_HELPER
from kernorch.codegen.vnni import HELPERS as VNNI_HELPERS
from kernorch.codegen.kernel import Accum, Call, Decl, KernelSpec, Let, Loop, Parallel, Store, statements
from kernorch.ir.interp import NARROW_INTS
from kernorch.ir import index as ix

CTYPE = {"float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
         "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
         "bool": "uint8_t", "bfloat16": "float"}  # the type a scalar computes in
MEMORY_CTYPE = {**CTYPE, "bfloat16": "uint16_t"}  # the element type of a buffer

# {f}: "f" for float, "" for double; {F}: the type's literal suffix. Conditions combine with the
# non-short-circuit | and &: a data-dependent || is a branch, and in loops gcc cannot vectorize
# it costs a misprediction per element (15x on a max pool).
FLOAT_EXPR = {
    "neg": "(-{0})", "abs": "fabs{f}({0})", "exp": "exp{f}({0})", "log": "log{f}({0})", "sqrt": "sqrt{f}({0})",
    "recip": "(1.0{F} / {0})", "tanh": "kn_tanh{f}({0})", "erf": "kn_erf{f}({0})",
    "sigmoid": "kn_sigmoid{f}({0})",
    "softplus": "(({0} > 0 ? {0} : 0) + log1p{f}(exp{f}(-fabs{f}({0}))))",
    "relu": "((({0} > 0) | ({0} != {0})) ? {0} : 0)", "floor": "floor{f}({0})", "ceil": "ceil{f}({0})",
    "round": "rint{f}({0})", "sin": "sin{f}({0})", "cos": "cos{f}({0})",
    "sign": "({0} > 0 ? 1.0{F} : ({0} < 0 ? -1.0{F} : {0}))", "isnan": "({0} != {0})",
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "pow": "pow{f}({0}, {1})", "max": "((({0} > {1}) | ({0} != {0})) ? {0} : {1})",
    "min": "((({0} < {1}) | ({0} != {0})) ? {0} : {1})", "mod": "kn_fmod{f}({0}, {1})",
}
INT_EXPR = {
    "neg": "(-{0})", "abs": "({0} < 0 ? -{0} : {0})", "relu": "({0} > 0 ? {0} : 0)",
    "sign": "(({0} > 0) - ({0} < 0))", "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})",
    "div": "({1} == 0 ? 0 : {0} / {1})", "mod": "kn_imod({0}, {1})", "pow": "kn_ipow({0}, {1})",
    "max": "({0} > {1} ? {0} : {1})", "min": "({0} < {1} ? {0} : {1})",
}
ANY_EXPR = {
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})",
    "ge": "({0} >= {1})", "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})", "not": "(!{0})",
    "select": "({0} ? {1} : {2})",
}
FLOAT_SELECT = {"float32": "kn_self({0}, {1}, {2})", "float64": "kn_seld({0}, {1}, {2})"}
COMBINE = {"sum": "{a} + {v}", "prod": "{a} * {v}", "max": "(({v} > {a}) | ({v} != {v})) ? {v} : {a}",
           "min": "(({v} < {a}) | ({v} != {v})) ? {v} : {a}"}
INT_COMBINE = {**COMBINE, "max": "{v} > {a} ? {v} : {a}", "min": "{v} < {a} ? {v} : {a}"}
# Float max/min reduced across SIMD lanes: OpenMP's max/min (fast) plus a NaN flag, because the
# NumPy semantics propagate NaN and a NaN-propagating user-defined reduction is ~2x slower.
FLAGGED = {"max": "{a} = {v} > {a} ? {v} : {a}; {a}_nan |= {v} != {v};",
           "min": "{a} = {v} < {a} ? {v} : {a}; {a}_nan |= {v} != {v};"}

_MVEC = ["exp", "log", "sin", "cos", "tanh", "erf", "log1p", "pow"]

HEADER = r"""#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(KN_MVEC) && defined(__x86_64__)
/* glibc's libmvec: let the vectorizer call SIMD variants of these (math-vector.h only declares
   them under -ffast-math, which we do not use). */
#define KN_SIMD __attribute__((simd("notinbranch")))
%(mvec)s
#endif
#if defined(__AVX512BW__) && defined(__GNUC__) && !defined(__clang__)
/* Kernels on 1-byte integers (int8 plans' quantize / dequantize chains) spend their time widening
   bytes to floats and narrowing them back: 512-bit vectors halve the instructions where -mtune
   (rocketlake, sapphirerapids) would pick 256 (2 threads, SPR: a requantized residual add of
   56x56x256 0.35 -> 0.25 ms). Per function, so float32 kernels keep the tuning's width. */
#define KN_BYTES __attribute__((target("prefer-vector-width=512")))
#else
#define KN_BYTES
#endif
static inline int64_t kn_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b; return q - ((a %% b != 0) & ((a < 0) != (b < 0))); }
static inline int64_t kn_mod(int64_t a, int64_t b) {
  int64_t r = a %% b; return r + ((r != 0) & ((r < 0) != (b < 0))) * b; }
static inline int64_t kn_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t kn_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t kn_imod(int64_t a, int64_t b) { return b == 0 ? 0 : kn_mod(a, b); }
static inline int64_t kn_ipow(int64_t a, int64_t b) {
  int64_t r = 1; if (b < 0) return a == 1 ? 1 : (a == -1 ? (b & 1 ? -1 : 1) : 0);
  while (b) { if (b & 1) r *= a; a *= a; b >>= 1; } return r; }
static inline float kn_fmodf(float a, float b) {
  float r = fmodf(a, b); return ((r != 0) & ((r < 0) != (b < 0))) ? r + b : r; }
static inline double kn_fmod(double a, double b) {
  double r = fmod(a, b); return ((r != 0) & ((r < 0) != (b < 0))) ? r + b : r; }
/* Float select as bit operations: gcc turns "c ? load : pad" into a masked load, and cannot
   vectorize a masked gather (a pooling window); the bitwise form keeps the load plain. */
static inline float kn_self(uint8_t c, float a, float b) {
  union { float f; int32_t i; } x = {a}, y = {b}, r; int32_t m = -(int32_t)c;
  r.i = (x.i & m) | (y.i & ~m); return r.f; }
static inline double kn_seld(uint8_t c, double a, double b) {
  union { double f; int64_t i; } x = {a}, y = {b}, r; int64_t m = -(int64_t)c;
  r.i = (x.i & m) | (y.i & ~m); return r.f; }
/* bfloat16: the top half of a float32's bits, rounded to nearest even; a NaN stays a (quiet) NaN. */
static inline float kn_bf16_load(uint16_t h) { union { uint32_t u; float f; } c = {(uint32_t)h << 16}; return c.f; }
static inline uint16_t kn_bf16_bits(float f) {
  union { float f; uint32_t u; } c = {f};
  uint32_t r = (c.u + 0x7FFFu + ((c.u >> 16) & 1u)) >> 16;
  return (f != f) ? (uint16_t)((c.u >> 16) | 0x40u) : (uint16_t)r; }
static inline float kn_bf16_round(float f) { return kn_bf16_load(kn_bf16_bits(f)); }
static inline uint16_t kn_bf16_high(float f) { union { float f; uint32_t u; } c = {f}; return (uint16_t)(c.u >> 16); }
static inline void *kn_alloc(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }
%(gemm)s/* Sigmoid and tanh. In float through a rational function of x (MLAS's logistic: sigmoid(x) - 1/2, odd, clamped
   to [-18, 18]; |error| < 2e-7, NaN kept): ~13 multiply-adds and a division that gcc vectorizes inline, where
   libmvec costs 1.9-2.6x more (`python -m bench.math_micro`: a SiLU, tanh over 1.2M floats; Zen 3). */
static inline float kn_logistic_odd(float x) {
  x = x < -18.0f ? -18.0f : (x > 18.0f ? 18.0f : x);
  const float x2 = x * x;
  float p = KN_FMAF(x2, 4.37031012579801e-11f, 1.15627324459942e-07f);
  p = KN_FMAF(p, x2, 6.08574864600143e-05f); p = KN_FMAF(p, x2, 8.51377133304701e-03f);
  p = KN_FMAF(p, x2, 2.48287947061529e-01f);
  float q = KN_FMAF(x2, 6.10247389755681e-13f, 5.76102136993427e-09f);
  q = KN_FMAF(q, x2, 6.29106785017040e-06f); q = KN_FMAF(q, x2, 1.70198817374094e-03f);
  q = KN_FMAF(q, x2, 1.16817656904453e-01f); q = KN_FMAF(q, x2, 9.93151921023180e-01f);
  return p * x / q; }
static inline float kn_sigmoidf(float x) { return kn_logistic_odd(x) + 0.5f; }
static inline float kn_tanhf(float x) { return 2.0f * kn_logistic_odd(2.0f * x); }  /* 2 sigmoid(2x) - 1 */
static inline double kn_tanh(double x) { return tanh(x); }
static inline double kn_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
/* erf in float as a rational function of x (Eigen's and XLA's: odd, clamped to [-4, 4], |error| < 4e-7): GELU
   over 1.2M floats 2.1x faster than with libmvec's erff (bench.math_micro, Zen 3). */
static inline float kn_erff(float x) {
  x = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
  const float x2 = x * x;
  float p = KN_FMAF(x2, -2.72614225801306e-10f, 2.77068142495902e-08f);
  p = KN_FMAF(p, x2, -2.10102402082508e-06f); p = KN_FMAF(p, x2, -5.69250639462346e-05f);
  p = KN_FMAF(p, x2, -7.34990630326855e-04f); p = KN_FMAF(p, x2, -2.95459980854025e-03f);
  p = KN_FMAF(p, x2, -1.60960333262415e-02f);
  float q = KN_FMAF(x2, -1.45660718464996e-05f, -2.13374055278905e-04f);
  q = KN_FMAF(q, x2, -1.68282697438203e-03f); q = KN_FMAF(q, x2, -7.37332916720468e-03f);
  q = KN_FMAF(q, x2, -1.42647390514189e-02f);
  return x * p / q; }
static inline double kn_erf(double x) { return erf(x); }
%(winograd)s%(depthwise)s%(transpose)s%(amx)s%(vnni)s""" % {"gemm": GEMM_HELPERS, "vnni": VNNI_HELPERS, "depthwise": DEPTHWISE_HELPERS, "amx": AMX_HELPERS, "winograd": WINOGRAD_HELPERS, "transpose": TRANSPOSE_HELPER, "mvec": "\n".join(f"KN_SIMD float {f}f(float); KN_SIMD double {f}(double);" if f != "pow" else
                         "KN_SIMD float powf(float, float); KN_SIMD double pow(double, double);" for f in _MVEC)}


def literal(value, dtype: str) -> str:
    if dtype == "bfloat16":  # a float holding the bf16 value
        value, dtype = float(np.asarray(value, dtype="float32").astype(ml_dtypes.bfloat16)), "float32"
    return literals.literal(value, dtype, "NAN", "INFINITY", "(-INFINITY)", "f", _integer)


def _integer(v: int, dtype: str) -> str:
    if dtype == "int64" and v == -(1 << 63):
        return "(-INT64_C(9223372036854775807) - 1)"
    return f"INT64_C({v})" if dtype == "int64" else f"(({CTYPE[dtype]}){v})"


class _Printer:
    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        self.lines: list[str] = []
        self.tables: dict[tuple[int, ...], str] = {}
        self.types: dict[str, str] = {}
        self.flagged: set[str] = set()
        self.bf16_buffers = {a.name for a in spec.args if a.dtype == "bfloat16"} | _bf16_arrays(spec.body)
        self.exact: set[str] = set()  # float scalars that hold a bf16 value exactly (Note [bf16-exact values])
        self.plain = plain_clamps(spec.body)  # max/min written without NaN propagation (codegen/clamps.py)

    def idx(self, e: ix.Expr) -> str:
        return ix.render(e, lambda i: f"v{i}", self.spec.sizes, self._table)

    def _table(self, t: tuple[int, ...]) -> str:
        if t not in self.tables:
            self.tables[t] = f"{self.spec.name}_tab{len(self.tables)}"
        return self.tables[t]

    def emit(self, depth: int, s: str) -> None:
        self.lines.append("  " * depth + s)

    def stmt(self, s, d: int) -> None:
        if isinstance(s, Let):
            self.types[s.name] = s.dtype
            self.emit(d, f"const {CTYPE[s.dtype]} {s.name} = {self.expr(s)};")
            if self._bf16_exact(s):
                self.exact.add(s.name)
        elif isinstance(s, Store):
            tgt = s.buf if s.offset is None else f"{s.buf}[{self.idx(s.offset)}]"
            bits = "kn_bf16_high" if s.value in self.exact else "kn_bf16_bits"  # an exact value: its top half
            value = f"{bits}({s.value})" if s.buf in self.bf16_buffers else s.value
            self.emit(d, f"{tgt} = {value};")
        elif isinstance(s, Accum):
            a = s.acc if s.offset is None else f"{s.acc}[{self.idx(s.offset)}]"
            if s.offset is None and s.acc in self.flagged:
                self.emit(d, FLAGGED[s.op].format(a=a, v=s.value))
                return
            comb = (COMBINE if s.dtype.startswith("float") else INT_COMBINE)[s.op]
            self.emit(d, f"{a} = {comb.format(a=a, v=s.value)};")
        elif isinstance(s, Decl):
            init = "" if s.init is None else f" = {literal(s.init, s.dtype)}"
            self.types[s.name] = s.dtype
            self.emit(d, f"{CTYPE[s.dtype]} {s.name}{init};")
        elif isinstance(s, Loop):
            flagged = [v for v, op, dt in s.reductions if op in FLAGGED and dt.startswith("float")]
            for v in flagged:
                self.emit(d, f"int {v}_nan = 0;")
            clauses = "".join(f" reduction({self._red(op, dt)}:{v})" for v, op, dt in s.reductions)
            clauses += "".join(f" reduction(|:{v}_nan)" for v in flagged)
            self.flagged.update(flagged)
            if s.simd:
                self.emit(d, f"#pragma omp simd{clauses}")
            v = f"v{s.var}"
            self.emit(d, f"for (int64_t {v} = {self.idx(s.lo)}; {v} < {self.idx(s.hi)}; {v}++) {{")
            for b in s.body:
                self.stmt(b, d + 1)
            self.emit(d, "}")
            for v in flagged:
                self.emit(d, f"if ({v}_nan) {v} = NAN;")
            self.flagged.difference_update(flagged)
        elif isinstance(s, Parallel):
            self.parallel(s, d)
        elif isinstance(s, Call):
            self.emit(d, f"{s.fn}({', '.join(map(self._arg, s.args))});")
        else:
            raise TypeError(s)

    def _arg(self, a) -> str:
        if isinstance(a, str):
            return a
        if isinstance(a, tuple):
            return f"({a[0]} + {self.idx(a[1])})"
        return self.idx(a)

    @staticmethod
    def _red(op: str, dtype: str) -> str:
        if op == "sum":
            return "+"
        if op == "prod":
            return "*"
        return op

    def parallel(self, p: Parallel, d: int) -> None:
        self.emit(d, "{")
        if p.threads:
            self.emit(d + 1, "#pragma omp parallel num_threads(nthreads)")
        self.emit(d + 1, "{")
        for a in p.arrays:
            ct = MEMORY_CTYPE[a.dtype]
            self.emit(d + 2, f"{ct} *restrict {a.name} = ({ct} *)kn_alloc({a.count} * sizeof({ct}));")
        if p.threads:
            self.emit(d + 2, "#pragma omp for schedule(static)")
        v = f"v{p.var}"
        self.emit(d + 2, f"for (int64_t {v} = 0; {v} < {p.extent}; {v}++) {{")
        for s in p.body:
            self.stmt(s, d + 3)
        self.emit(d + 2, "}")
        for a in p.arrays:
            self.emit(d + 2, f"free({a.name});")
        self.emit(d + 1, "}")
        self.emit(d, "}")

    def expr(self, s: Let) -> str:
        if s.dtype == "bfloat16" and s.op not in ("imm", "load") and not (s.op == "cast" and s.args[0] in self.exact):
            return f"kn_bf16_round({self._expr(s)})"
        return self._expr(s)

    def _bf16_exact(self, s: Let) -> bool:
        """Note [bf16-exact values]: rounding to bf16 a float that already holds a bf16 value is the
        identity, and a bf16 plan's epilogues do it at every step (a product rounded, widened,
        passed through ReLU, rounded again to store): a quarter of a 1x1 convolution's time on AMX
        tiles. Exact: bf16 results and loads, widenings of exact values, and sign, max/min, ReLU
        and selects of exact values (they pick one of their operands or zero)."""
        if s.dtype == "bfloat16":
            return True
        if not s.dtype.startswith("float"):
            return False
        if s.op == "load":
            return s.attr[0] in self.bf16_buffers
        if s.op == "imm":
            return bool(np.float32(s.attr) == np.float32(s.attr).astype(ml_dtypes.bfloat16).astype(np.float32))
        operands = s.args[1:] if s.op == "select" else s.args
        return s.op in ("cast", "relu", "neg", "abs", "max", "min", "select") and all(a in self.exact for a in operands)

    def _expr(self, s: Let) -> str:
        if s.op == "imm":
            return literal(s.attr, s.dtype)
        if s.op == "load":
            buf, off = s.attr
            at = buf if off is None else f"{buf}[{self.idx(off)}]"
            return f"kn_bf16_load({at})" if buf in self.bf16_buffers else at
        if s.op == "cond":
            e, lo, hi = s.attr
            r = self.idx(e)
            parts = ([f"{lo} <= {r}"] if lo is not None else []) + ([f"{r} < {hi}"] if hi is not None else [])
            return "(" + " & ".join(f"({p})" for p in parts) + ")"
        if s.op == "cast":
            src = self.types[s.args[0]]
            if s.dtype == "bool":
                return f"({s.args[0]} != 0)"
            if s.dtype in NARROW_INTS and src in ("float32", "float64", "bfloat16"):  # through int32, as interp._cast
                return f"(({CTYPE[s.dtype]})(int32_t){s.args[0]})"
            return f"(({CTYPE[s.dtype]}){s.args[0]})"
        if s.name in self.plain:  # Note [clamps before a narrowing cast] in codegen/clamps.py
            return INT_EXPR[s.op].format(*self.plain[s.name])
        return c_expr(s.op, _computed(s.dtype), [_computed(self.types[a]) for a in s.args], s.args)

    def function(self) -> list[str]:
        sp = self.spec
        wide = "KN_BYTES " if any(a.dtype in ("uint8", "int8", "bfloat16") for a in sp.args if a.role != "ws") else ""
        self.emit(0, f"{wide}void {sp.name}(void *const *args, int nthreads) {{")
        self.emit(1, "(void)nthreads;")
        ws = len([a for a in sp.args if a.role != "ws"])
        for k, a in enumerate(sp.args):
            ct = MEMORY_CTYPE[a.dtype]
            if a.role == "ws":
                self.emit(1, f"{ct} *restrict {a.name} = ({ct} *)((char *)args[{ws}] + {a.offset});")
            else:
                const = "const " if a.role == "in" else ""
                self.emit(1, f"{const}{ct} *restrict {a.name} = ({const}{ct} *)args[{k}];")
        for s in sp.body:
            self.stmt(s, 1)
        self.emit(0, "}")
        out = [f"/* {sp.name}: key {sp.key}", *[" * " + line for line in sp.comment.splitlines()],
               *[" * " + n for n in sp.notes], " */"]
        for t, nm in self.tables.items():
            out.append(f"static const int64_t {nm}[{len(t)}] = {{{', '.join(map(str, t))}}};")
        return out + self.lines


def _bf16_arrays(body) -> set[str]:
    """The names of the bf16 scratch arrays the parallel loops in ``body`` declare (stored as bits)."""
    return {a.name for s in statements(body) if isinstance(s, Parallel) for a in s.arrays if a.dtype == "bfloat16"}


def _computed(dtype: str) -> str:
    """The dtype a scalar of ``dtype`` computes in (bfloat16 arithmetic is float32's)."""
    return "float32" if dtype == "bfloat16" else dtype


def c_expr(op: str, dtype: str, arg_types: list[str], args) -> str:
    """One scalar operation as a C expression (args are SSA names, so repeating them is free)."""
    if op == "select" and dtype in FLOAT_SELECT:
        tmpl = FLOAT_SELECT[dtype]
    elif op in ANY_EXPR:
        tmpl = ANY_EXPR[op]
    elif dtype.startswith("float") or (arg_types and arg_types[0].startswith("float")):
        t = dtype if dtype.startswith("float") else arg_types[0]
        f = "f" if t == "float32" else ""
        tmpl = FLOAT_EXPR[op].replace("{f}", f).replace("{F}", f)
    else:
        tmpl = INT_EXPR[op]
    return tmpl.format(*args)


def emit_kernel(spec: KernelSpec) -> str:
    """The C source of one kernel function (without the shared header)."""
    return "\n".join(_Printer(spec).function()) + "\n"


def emit_module(specs: list[KernelSpec]) -> str:
    """One translation unit holding many kernels (one compiler call per batch)."""
    return HEADER + "\n" + "\n".join(emit_kernel(s) for s in specs)
