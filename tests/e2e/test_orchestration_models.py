"""With the analytical cost, `optimal` never costs more than greedy, per-operator or unfused on the
benchmark models (its candidates include theirs), and every plan passes the validity checker."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernorch.orchestrate.from_graph import dag_from_graph  # noqa: E402
from kernorch.orchestrate.plan import check_plan  # noqa: E402


@pytest.mark.parametrize("name", ["candy", "gpt2_block", "efficientvit_b0", "vit_tiny", "segformer_b0",
                                  "cspdarknet53_mish"])
def test_optimal_is_never_worse_than_a_baseline(name, tmp_path):
    if name == "segformer_b0":
        pytest.importorskip("transformers")
    from bench.export import export_onnx
    from bench.orchestration_scale import plan_model

    path = export_onnx(name, "dynamo", size="small", cache_dir=tmp_path, verbose=False,
                       **({"depth": 2} if name == "vit_tiny" else {}))
    g, plans = plan_model(path)
    dag = dag_from_graph(g).without_dead()
    for plan, _ in plans.values():
        check_plan(dag, plan)
    best_baseline = min(plans[s][0].cost for s in ("greedy", "per-operator", "unfused"))
    assert plans["optimal"][0].cost <= best_baseline * (1 + 1e-6)
