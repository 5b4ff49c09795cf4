"""target="cuda" goes through the one pipeline (runtime/compile.py with targets/cuda.py): every
compile option is honoured or rejected with one line naming it, before any work is done."""

from pathlib import Path

import numpy as np
import pytest

import kernorch
from kernorch.targets import cuda as cuda_target

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"


@pytest.mark.parametrize("option, value", [("threads", 2), ("providers", ["onnxruntime"]), ("cluster", "ray"),
                                           ("require_quiet", True)])
def test_cpu_only_options_are_rejected_in_one_line(tmp_path, option, value):
    with pytest.raises(kernorch.KernorchError) as e:
        kernorch.compile(EXAMPLE, target="cuda", cost="measured", db=tmp_path / "db.sqlite", progress=False,
                         **{option: value})
    msg = str(e.value)
    assert "\n" not in msg and "target 'cuda'" in msg and option in msg


def test_cuda_options_on_the_cpu_target_are_rejected(tmp_path):
    from kernorch.targets.cuda_measure import CudaOptions

    with pytest.raises(kernorch.KernorchError, match="target 'cpu' does not take cuda_options"):
        kernorch.compile(EXAMPLE, target="cpu", cost="model", db=tmp_path / "db.sqlite", progress=False,
                         cuda_options=CudaOptions())


def test_shared_options_reach_the_cuda_target(tmp_path, monkeypatch):
    # tuning_budget, regions, knobs and rewrites reach the shared orchestration: the plan is made
    # by runtime.planning.plan_kernels on the CUDA measurer, and the kernels still match the oracle
    from kernorch.runtime import compile as pipeline

    seen = {}
    real = pipeline.plan_kernels

    def spy(dag, strategy, cost, rough, measured, key_fn, knobs, rep, progress, where):
        seen.update(knobs=knobs, measurer=type(measured).__name__, where=where)
        return real(dag, strategy, cost, rough, measured, key_fn, knobs, rep, progress, where)

    monkeypatch.setattr(pipeline, "plan_kernels", spy)
    model = kernorch.compile(EXAMPLE, target="cuda", cost="measured", db=tmp_path / "db.sqlite", progress=False,
                             tuning_budget=40, regions=False, rewrites=())
    assert seen["measurer"] == "CudaMeasuredCost" and seen["where"].startswith(" on ")
    assert seen["knobs"].max_candidates == 40 and seen["knobs"].regions is False
    assert not any(model.report.rewrites.values())
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    assert np.isfinite(model(x)).all()


def test_the_cuda_target_plans_without_cpu_layout_choices():
    from kernorch.orchestrate.knobs import Knobs

    assert not getattr(cuda_target.CudaTarget().knobs(Knobs()), "layouts", False)
