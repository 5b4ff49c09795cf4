"""The onnx package's backend conformance tests, run through kernorch (import -> fission -> interpreter).

Every node / pytorch-converted / pytorch-operator test whose model uses only op types that have
a fission rule is included, so claiming an op means passing all of its tests (``_expanded``
variants included). Variants that are not supported are excluded explicitly below, with reasons.

Passing tests (onnx 1.23 test data, 2026-12-01): 1106 before runtime gathers (issue 13; counted at
c3e657e, the parent of the gather commit 2adb2fd), 1244 after (Gather / GatherElements / GatherND
with runtime indices, Scatter*, Range, CumSum, Trilu, and the expanded functions -- rotary
embeddings, attention with masks -- that use them), 0 failing.
"""

import re
import warnings

import onnx
import onnx.backend.test
from onnx.backend.test.case.node import collect_testcases
from onnx.backend.test.loader import load_model_tests

from kernorch.fission.registry import load_rules
from kernorch.frontend import backend as kernorch_backend

CLAIMED = set(load_rules())

# (regex on the test name, reason). Keep each line justified.
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


def _op_types(m: onnx.ModelProto | None) -> set[str] | None:
    if m is None:
        return None
    ops = set()
    for n in m.graph.node:
        if n.domain not in ("", "ai.onnx"):
            return None
        ops.add(n.op_type)
    return ops


def selected_tests() -> list[str]:
    """Names of the conformance tests whose models use only claimed op types."""
    names = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node_cases = collect_testcases(None)  # node tests are generated in memory
    for case in node_cases:
        ops = _op_types(case.model)
        if ops and ops <= CLAIMED:
            names.append(case.name)
    for kind in ("pytorch-converted", "pytorch-operator"):
        for case in load_model_tests(kind=kind):
            if case.model_dir:
                ops = _op_types(onnx.load(f"{case.model_dir}/model.onnx"))
                if ops and ops <= CLAIMED:
                    names.append(case.name)
    return names


backend_test = onnx.backend.test.BackendTest(kernorch_backend, __name__)
for _name in selected_tests():
    backend_test.include(rf"^{re.escape(_name)}_cpu$")
for _pattern, _reason in EXCLUDED:
    backend_test.exclude(_pattern)

globals().update(backend_test.enable_report().test_cases)
