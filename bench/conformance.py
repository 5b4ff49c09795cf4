"""The onnx package's backend conformance tests, run through kernorch two ways: the reference
interpreter (import -> fission -> interpreter: ``tests/test_onnx_backend.py``) and kernorch's own
generated C kernels (``kernorch.compile`` on target "cpu", ``GENERATED`` below:
``tests/test_onnx_generated.py`` runs a pinned subset). ``python -m bench.conformance`` runs every
selected test both ways and prints the counts, the failures by op type and the exclusions with
their reasons (docs/CONFORMANCE.md).

A test is selected when its model uses only op types that have a fission rule, so claiming an op
means passing all of its tests (``_expanded`` variants included); variants that are not supported
are excluded explicitly, each with its reason.
"""

from __future__ import annotations

import argparse
import collections
import functools
import re
import sys
import time
import unittest
import warnings

import onnx
import onnx.backend.test
from onnx.backend.test.case.node import collect_testcases
from onnx.backend.test.loader import load_model_tests

import kernorch
from kernorch.fission.rules import load_rules
from kernorch.frontend.backend import KernorchBackend, KernorchRep
from kernorch.ir.tensors import to_numpy

# (regex on the test name, reason) for both ways of running. Keep each line justified.
EXCLUDED = [
    (r"test_cast_.*(FLOAT8|FLOAT4|INT4|UINT4|BFLOAT16|STRING|string|e4m3|e5m2|INT2|UINT2)",
     "exotic dtypes (float8/float4/int4/int2/bfloat16/string) are out of scope"),
    (r"test_castlike_.*(FLOAT8|FLOAT4|INT4|UINT4|BFLOAT16|STRING|string|e4m3|e5m2|INT2|UINT2)",
     "exotic dtypes are out of scope"),
    (r"test_constantofshape_", "the shape is a runtime input: output shapes must be static"),
    (r"test_training_dropout", "training-mode Dropout draws random masks; only inference Dropout is supported"),
    (r"test_identity_(opt|sequence)", "optional and sequence types are not tensors"),
    (r"test_(hann|hamming|blackman)window_.*expanded",
     "the window length is a runtime input that Range turns into the output length: a data-dependent shape"),
    (r"test_center_crop_pad_.*expanded",
     "crop/pad sizes are computed from a runtime shape input: output shapes must be static"),
    (r"test_maxpool_with_argmax_",
     "MaxPool's Indices output (argmax positions) has no primitive form"),
]
# (regex, reason) excluded from the generated-kernel run only. Keep each line justified.
GENERATED_EXCLUDED = [
    # (softmax_precision: the expansion computes its softmax in float16)
    (r"(?<!b)float16|(?<!B)FLOAT16|fp16|test_attention_24_qk_matmul_output_mode3_softmax_precision",
     "float16: the C generator has no half type (codegen/scalar.py DTYPES) and no other provider is on"),
    (r"test_einsum_sum_bfloat16|test_attention_.*bf16",
     "reductions over bfloat16 are left to float32 kernels (codegen/feasible.py) that only providers supply"),
    (r"test_equal_string", "string tensors have no buffer type"),
    (r"test_(de)?quantizelinear_.*(e4m3|e5m2|float4|int4|int2|uint4|uint2)",
     "float8/float4/int4/int2 have no buffer type (the interpreter runs these QDQ variants opaque in NumPy)"),
    (r"test_(reduce_sum_empty_set_non_reduced_axis_zero|reshape_allowzero_reordered|shape_start_greater_than_end"
     r"|slice_start_out_of_bounds|split_zero_size_splits|tril_zero|triu_zero|causal_conv_with_state_kernel_size_one)",
     "zero-size values: the C generator refuses empty tensors (codegen/feasible.py) and no other provider is on"),
]

# kernorch's own kernels only: no provider regions, no external providers, nothing timed (the
# roofline picks the plan), and a kernel that cannot be built raises. Under cost="model" kernels are
# not checked against the interpreter at compile time: the conformance data is the check.
GENERATED = dict(target="cpu", cost="model", providers=(), regions=False, strict=True, threads=1, progress=False,
                 db=":memory:")


def _op_types(m: onnx.ModelProto | None) -> frozenset[str] | None:
    if m is None:
        return None
    ops = set()
    for n in m.graph.node:
        if n.domain not in ("", "ai.onnx"):
            return None
        ops.add(n.op_type)
    return frozenset(ops)


@functools.cache
def selected_tests() -> dict[str, frozenset[str]]:
    """{name: op types} of the conformance tests whose models use only claimed op types (read once
    per process: both test modules take them)."""
    claimed = set(load_rules())
    found: dict[str, frozenset[str]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node_cases = collect_testcases(None)  # node tests are generated in memory
    for case in node_cases:
        ops = _op_types(case.model)
        if ops and ops <= claimed:
            found[case.name] = ops
    for kind in ("pytorch-converted", "pytorch-operator"):
        for case in load_model_tests(kind=kind):
            if case.model_dir:
                ops = _op_types(onnx.load(f"{case.model_dir}/model.onnx"))
                if ops and ops <= claimed:
                    found[case.name] = ops
    return found


def excluded_by(name: str, excluded: list[tuple[str, str]]) -> str | None:
    """The reason ``name`` is excluded, or None."""
    return next((why for pattern, why in excluded if re.search(pattern, name)), None)


def suite(backend, module: str, names, excluded: list[tuple[str, str]]) -> dict[str, type]:
    """The onnx BackendTest's test case classes for ``names`` less ``excluded``, on ``backend``."""
    tests = onnx.backend.test.BackendTest(backend, module)
    for name in names:
        tests.include(rf"^{re.escape(name)}_cpu$")
    for pattern, _ in excluded:
        tests.exclude(pattern)
    return tests.enable_report().test_cases


class CompiledRep(KernorchRep):
    """The model compiled by ``kernorch.compile(**GENERATED)`` and run by its executable."""

    providers: set[str] = set()  # of every kernel compiled since cleared (``run`` reads it per test)

    def build(self, model, shapes):
        compiled = kernorch.compile(model, input_shapes=shapes, **GENERATED)
        CompiledRep.providers.update(getattr(k, "provider", type(k).__name__) for k in compiled.executable.kernels)
        return compiled

    def execute(self, compiled, feeds):
        out = compiled.run({k: a for k, a in feeds.items() if k in compiled.input_names})
        return [to_numpy(out[n]) for n in compiled.output_names]


class CompiledBackend(KernorchBackend):
    rep = CompiledRep


# Failures of the full run that were fixed, pinned into the CI subset: buffers of uint16/32/64
# (ir/tensors.py TORCH_DTYPES), bfloat16 outputs read back as ml_dtypes arrays.
REGRESSIONS = ("test_add_uint16", "test_mod_uint32", "test_less_equal_uint64_expanded", "test_celu_bfloat16")
SUBSET_STEP = 6  # the CI subset also takes every 6th test by sorted name: variants (attributes, dtypes) of each op


def subset(selected: dict[str, frozenset[str]], excluded: list[tuple[str, str]]) -> list[str]:
    """The pinned CI subset (tests/test_onnx_generated.py) of the tests not ``excluded``: per op type,
    the first by sorted name (among those whose model holds that op alone, if any), every
    SUBSET_STEP-th by sorted name, and REGRESSIONS."""
    kept = [n for n in sorted(selected) if excluded_by(n, excluded) is None]
    pick: dict[str, str] = {}
    for name in kept:
        for op in selected[name]:
            if op not in pick or (selected[name] == {op} and selected[pick[op]] != {op}):
                pick[op] = name
    return sorted(set(pick.values()) | set(kept[::SUBSET_STEP]) | set(REGRESSIONS))


class _Record(unittest.TestResult):
    """Outcome per onnx test name (``test_abs``): "pass", "skip" or the first line of the error."""

    def __init__(self) -> None:
        super().__init__()
        self.outcome: dict[str, str] = {}
        self.providers: dict[str, frozenset[str]] = {}  # compiled backends: the kernels' providers per test

    @staticmethod
    def _name(test) -> str:
        return test._testMethodName.removesuffix("_cpu")

    def addSuccess(self, test):
        self.outcome[self._name(test)] = "pass"

    def addSkip(self, test, reason):
        self.outcome[self._name(test)] = "skip"

    def addError(self, test, err):
        self.outcome[self._name(test)] = f"{err[0].__name__}: {str(err[1]).strip().splitlines()[0][:160]}" \
            if str(err[1]).strip() else err[0].__name__

    addFailure = addError


def run(backend, names, excluded, progress: bool = False) -> _Record:
    """The outcome of running each of ``names`` (less ``excluded``) on ``backend``."""
    cases = suite(backend, __name__, names, excluded)
    loader, record = unittest.TestLoader(), _Record()
    wanted = {f"{n}_cpu" for n in names}
    tests = [t for case in cases.values() for t in loader.loadTestsFromTestCase(case) if t._testMethodName in wanted]
    for k, t in enumerate(tests):
        CompiledRep.providers.clear()
        t.run(record)
        record.providers[record._name(t)] = frozenset(CompiledRep.providers)
        if progress and (k + 1) % 50 == 0:
            print(f"  {k + 1}/{len(tests)}", file=sys.stderr, flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.conformance", description=__doc__.split("\n\n")[0])
    ap.add_argument("--subset", action="store_true", help="only the pinned CI subset")
    ap.add_argument("-k", default="", help="only tests whose name contains this")
    ap.add_argument("--strategy", default="optimal", help="compile strategy (optimal, greedy, per-operator, unfused)")
    ap.add_argument("--threads", type=int, default=GENERATED["threads"], help="threads per generated kernel")
    args = ap.parse_args(argv)
    GENERATED.update(strategy=args.strategy, threads=args.threads)
    selected = selected_tests()
    every = subset(selected, EXCLUDED + GENERATED_EXCLUDED) if args.subset else sorted(selected)
    names = [n for n in every if args.k in n]
    t0 = time.monotonic()
    interp = run(KernorchBackend, names, EXCLUDED).outcome
    t1 = time.monotonic()
    record = run(CompiledBackend, names, EXCLUDED + GENERATED_EXCLUDED, progress=True)
    generated = record.outcome
    t2 = time.monotonic()
    count = lambda out, what: sum(v == what for v in out.values())  # noqa: E731
    print(f"selected conformance tests   {len(names)}")
    print(f"interpreter passes           {count(interp, 'pass')} of {len(interp) - count(interp, 'skip')} run "
          f"({t1 - t0:.0f} s)")
    print(f"generated kernels pass       {count(generated, 'pass')} of {len(generated) - count(generated, 'skip')} run "
          f"({t2 - t1:.0f} s)")
    kinds = collections.Counter("+".join(sorted(record.providers[n])) for n, why in generated.items() if why == "pass")
    print("  by the kernels' providers  " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
    for n, why in sorted(generated.items()):
        if why == "pass" and record.providers[n] != {"c"}:
            print(f"    {n}: {'+'.join(sorted(record.providers[n]))}")
    failed = {n: why for n, why in generated.items() if why not in ("pass", "skip")}
    by_op = collections.defaultdict(list)
    for n in sorted(failed):
        by_op["+".join(sorted(selected[n]))].append(n)
    if failed:
        print(f"\ngenerated-kernel failures by op type ({len(failed)})")
        for ops, tests in sorted(by_op.items()):
            print(f"  {ops:<24} {len(tests):>3}  " + ", ".join(tests))
            for n in tests:
                print(f"      {n}: {failed[n]}")
    interp_failed = sorted(n for n, why in interp.items() if why not in ("pass", "skip"))
    if interp_failed:
        print(f"\ninterpreter failures ({len(interp_failed)}): " + ", ".join(interp_failed))
    reasons = collections.Counter()
    for n in names:
        why = excluded_by(n, EXCLUDED + GENERATED_EXCLUDED)
        if why:
            reasons[("both" if excluded_by(n, EXCLUDED) else "generated", why)] += 1
    print(f"\nexcluded ({sum(reasons.values())})")
    for (where, why), k in sorted(reasons.items()):
        print(f"  {k:>3}  {where:<9} {why}")
    return 1 if failed or interp_failed else 0


if __name__ == "__main__":
    sys.exit(main())
