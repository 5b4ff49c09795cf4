"""The onnx package's backend conformance tests, run through kernorch (import -> fission -> interpreter).

Every node / pytorch-converted / pytorch-operator test whose model uses only op types that have
a fission rule is included, so claiming an op means passing all of its tests (``_expanded``
variants included). Variants that are not supported are excluded explicitly, with reasons
(``bench/conformance.py`` EXCLUDED, shared with the generated-kernel run ``tests/test_onnx_generated.py``).

Passing tests (onnx 1.23 test data, 2026-12-01): 1106 before runtime gathers (issue 13; counted at
c3e657e, the parent of the gather commit 2adb2fd), 1244 after (Gather / GatherElements / GatherND
with runtime indices, Scatter*, Range, CumSum, Trilu, and the expanded functions -- rotary
embeddings, attention with masks -- that use them), 0 failing; 1274 of 1274 run on 2026-12-05 (onnx 1.23.2,
docs/CONFORMANCE.md).
"""

from bench.conformance import EXCLUDED, selected_tests, suite
from kernorch.frontend import backend as kernorch_backend

globals().update(suite(kernorch_backend, __name__, selected_tests(), EXCLUDED))
