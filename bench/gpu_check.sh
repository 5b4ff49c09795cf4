#!/usr/bin/env bash
# GPU check of target "cuda": one prepared script, under 10 minutes on one H200.
#   1. tests/cuda on the GPU: every kernel class, op and dtype the C tests cover, emitted as Triton
#      and checked against the reference interpreter; candy end to end against onnxruntime; the
#      tuning database; save/load; graph replay;
#   2. bench/gpu_bench.py: candy (224) and SegFormer-B0 (512), kernorch target=cuda (optimal and
#      greedy plans, roofline costs calibrated on the GPU) against PyTorch eager, torch.compile
#      (default, reduce-overhead) and onnxruntime (CUDA provider when installed, else CPU), float32,
#      TF32 off, printed as one table per model;
#   3. with MEASURED=1, candy again with measured costs (every candidate compiled in parallel,
#      checked and timed in CUDA graphs, tile sizes tuned).
# Usage, from the repository root:   bash bench/gpu_check.sh [LOG_DIR]      (default $OUT or /tmp)
# Needs torch with CUDA, triton, onnx, onnxruntime; highspy is used when present (else scipy's HiGHS).
# Models are exported to ONNX on the GPU box when they can be built there (SegFormer needs
# `transformers`, the exporter needs torch.onnx's TorchScript path). To not depend on either, export
# here first (candy 64/224 and SegFormer 512, about 28 MiB):
#   python -m bench.gpu_bench --export-only --cache .gpu_models && echo /.gpu_models/ >> .git/info/exclude
# and carry .gpu_models: the tests and the benchmark read it (without transformers there the
# SegFormer PyTorch columns are skipped; kernorch and onnxruntime still run).
# Each step is cut by `timeout` (tests 180 s, candy 150 s, segformer 240 s; MEASURED=1 adds 210 s: its tuning
# took 136 s on an H200). Runtimes
# run in the order eager, kernorch, onnxruntime, torch.compile and each logs its line as it finishes.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG_DIR=${1:-${OUT:-/tmp/kernorch-gpu-check}}
mkdir -p "$LOG_DIR"
PY=${PYTHON:-python3}
CACHE=${KERNORCH_GPU_CACHE:-/tmp/kernorch-gpu-cache}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KERNORCH_DB="$CACHE/tuning.sqlite" KERNORCH_CACHE_DIR="$CACHE/build" TRITON_CACHE_DIR="$CACHE/triton"
if [ -d .gpu_models ]; then export KERNORCH_MODEL_CACHE="$PWD/.gpu_models"; else export KERNORCH_MODEL_CACHE="$CACHE/models"; fi
unset TRITON_INTERPRET KERNORCH_CUDA_TESTS
mkdir -p "$CACHE"
T0=$SECONDS

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
$PY - <<'PY'
import importlib.util, sys
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__} (cuda {torch.version.cuda}), gpu: "
      f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'NONE'}")
for m in ("triton", "onnx", "onnxruntime", "transformers", "highspy", "scipy", "xdist"):
    spec = importlib.util.find_spec(m)
    if spec is None:
        print(f"  {m}: missing")
        continue
    mod = __import__(m)
    extra = f" providers {mod.get_available_providers()}" if m == "onnxruntime" else ""
    print(f"  {m}: {getattr(mod, '__version__', '?')}{extra}")
PY

echo "== 1. CUDA tests (tests/cuda on the GPU)"
XDIST=""
$PY -c "import xdist" 2>/dev/null && XDIST="-n 8"
KERNORCH_COMPILE_WORKERS=2 timeout 180 $PY -m pytest tests/cuda -q -p no:cacheprovider -o addopts="" $XDIST \
    -W ignore::UserWarning 2>&1 | tee "$LOG_DIR/gpu_tests.log" | tail -40
echo "tests: exit ${PIPESTATUS[0]} after $((SECONDS - T0)) s"

echo "== 2. benchmark"
timeout 150 $PY -m bench.gpu_bench --models candy --json "$LOG_DIR/bench_candy.json" 2>&1 | tee "$LOG_DIR/bench_candy.log"
echo "candy: exit ${PIPESTATUS[0]} after $((SECONDS - T0)) s"
timeout 240 $PY -m bench.gpu_bench --models segformer_b0 --json "$LOG_DIR/bench_segformer.json" 2>&1 \
    | tee "$LOG_DIR/bench_segformer.log"
echo "segformer: exit ${PIPESTATUS[0]} after $((SECONDS - T0)) s"

if [ "${MEASURED:-0}" = 1 ]; then
    echo "== 3. candy with measured costs"
    timeout 210 $PY -m bench.gpu_bench --models candy --cost measured --strategies optimal --compile-modes \
        --json "$LOG_DIR/bench_candy_measured.json" 2>&1 | tee "$LOG_DIR/bench_candy_measured.log"
    echo "measured: exit ${PIPESTATUS[0]} after $((SECONDS - T0)) s"
fi
echo "== done in $((SECONDS - T0)) s; logs in $LOG_DIR"
