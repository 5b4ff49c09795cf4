#!/usr/bin/env bash
# Mutation testing of the safety-critical modules with mutmut (issue 15): plant small bugs in one
# module at a time, run only the narrow test folder that guards it, report the share of mutants
# killed and list the survivors (each is equivalent, or needs a test).
#
#   bench/mutation.sh                       # every module below (long: hours on 2 cores)
#   bench/mutation.sh ir/index.py           # one module (the path under kernorch/)
#   MAX_CHILDREN=4 KEEP=1 bench/mutation.sh runtime/memory.py
#   THRESHOLD=95 bench/mutation.sh codegen/window.py   # exit 1 when a module scores below (default 90%)
#
# Runs in a temporary copy of the working tree (tracked and untracked, not ignored, files), so nothing is written to the
# checkout (mutmut keeps its state in <copy>/mutants; KEEP=1 keeps the copy and prints its path,
# e.g. to run `mutmut show NAME` there). Needs `pip install mutmut` (3.x).
# Each mutant's tests run in a process forked from a fork server that has only collected the tests
# (process_isolation = "forkserver"): forked from mutmut's main process, which ran the whole suite
# for its stats, a child hangs in the first OpenMP region (the interpreter's torch convolutions: libgomp
# is not fork-safe), and every mutant whose tests reach one is counted a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# module (under kernorch/) -> the tests that guard it (folders, files or test ids)
SAFETY=tests/orchestrate/test_safety_nets.py
CG=tests/codegen
declare -A TESTS=(
  [orchestrate/measure.py]="tests/orchestrate/test_measure.py tests/orchestrate/test_measure_edges.py tests/orchestrate/test_trust.py"
  [providers/base.py]="tests/providers/test_base.py tests/providers/test_select.py"
  [providers/select.py]="tests/providers/test_select.py tests/providers/test_providers.py"
  [ir/oracle.py]="tests/ir $SAFETY"
  [orchestrate/tuning_db.py]="tests/orchestrate/test_tuning_db.py tests/orchestrate/test_tuning_db_errors.py tests/orchestrate/test_tuning_db_edges.py tests/orchestrate/test_safety_nets.py"
  [ir/index.py]="tests/ir/test_index_brute.py tests/ir/test_index_edges.py tests/ir/test_layout.py"
  [runtime/memory.py]="tests/runtime/test_memory.py tests/runtime/test_memory_edges.py"
  [orchestrate/solver.py]="tests/orchestrate/test_solver.py tests/orchestrate/test_solver_edges.py"
  # code generation (issue 44), vs interpreter
  [codegen/gemm.py]="$CG/test_gemm_kernels.py $CG/test_gemm_edges.py $CG/test_templates.py $CG/test_codegen_options.py $CG/test_amx_kernels.py"
  [codegen/amx.py]="$CG/test_amx_kernels.py $CG/test_packing.py"
  [codegen/gemm_helpers.py]="$CG/test_gemm_helpers.py"
  [codegen/gemm_product.py]="$CG/test_gemm_kernels.py $CG/test_gemm_edges.py $CG/test_amx_kernels.py"
  [codegen/winograd.py]="tests/codegen/test_winograd_kernels.py tests/codegen/test_templates.py tests/codegen/test_winograd_edges.py"
  [codegen/stencil.py]="tests/codegen/test_stencil_kernels.py tests/codegen/test_stencil_edges.py"
  [codegen/window.py]="tests/codegen/test_window_kernels.py tests/codegen/test_window_edges.py"
  [codegen/lower.py]="tests/codegen/test_templates.py tests/codegen/test_lower_edges.py"
  # the reference interpreter and the fission rules, against onnxruntime
  [ir/interp.py]="tests/fission"
)
for rule in activations constants einsum elementwise indexing linear norms pool positions quantize reduce resize shape_ops; do
  TESTS[fission/rules/$rule.py]="tests/fission"
done
ORDER=(orchestrate/measure.py providers/base.py providers/select.py ir/oracle.py orchestrate/tuning_db.py ir/index.py
       runtime/memory.py orchestrate/solver.py codegen/gemm.py codegen/gemm_helpers.py codegen/gemm_product.py
       codegen/winograd.py codegen/stencil.py codegen/window.py codegen/lower.py codegen/amx.py ir/interp.py
       fission/rules/{activations,constants,einsum,elementwise,indexing,linear,norms,pool,positions,quantize,reduce,resize,shape_ops}.py)
# a module whose share of killed mutants is below this fails the run (exit 1)
THRESHOLD=${THRESHOLD:-90}
MODULES=("$@")
[ ${#MODULES[@]} -eq 0 ] && MODULES=("${ORDER[@]}")
command -v mutmut >/dev/null || { echo "mutmut is not installed: pip install mutmut" >&2; exit 2; }

status=0
for mod in "${MODULES[@]}"; do
  tests=${TESTS[$mod]:-}
  [ -n "$tests" ] || { echo "unknown module $mod; choose from: ${ORDER[*]}" >&2; exit 2; }
  work=$(mktemp -d -t kn-mutation-XXXXXX)
  git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work" 2>/dev/null || true
  sel=$(printf '"%s", ' $tests)
  cat >> "$work/pyproject.toml" <<EOF

[tool.mutmut]
source_paths = ["kernorch"]
only_mutate = ["kernorch/$mod"]
pytest_add_cli_args_test_selection = [${sel%, }]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-x", "-q"]
also_copy = ["examples", "bench"]
process_isolation = "forkserver"
EOF
  # mutmut never mutates a decorated function: a fission rule module's @rule bodies (its whole logic)
  # would go untested. In the copy, each decorated function is registered after the module instead.
  [[ $mod == fission/rules/* ]] && python - "$work/kernorch/$mod" <<'EOF'
import ast, sys
path = sys.argv[1]
src = open(path).read()
lines = src.splitlines(True)
drop, tail = set(), []
for node in ast.parse(src).body:
    if isinstance(node, ast.FunctionDef) and node.decorator_list:
        expr = node.name
        for d in reversed(node.decorator_list):
            drop.update(range(d.lineno - 1, d.end_lineno))
            expr = f"({ast.get_source_segment(src, d)})({expr})"
        tail.append(f"{node.name} = {expr}\n")
open(path, "w").write("".join(ln for i, ln in enumerate(lines) if i not in drop) + "\n" + "".join(tail))
EOF
  echo "== kernorch/$mod  (tests: $tests)"
  (
    cd "$work"
    # PyTorch's OpenMP pool does not survive mutmut's fork: a child reaching a torch convolution hung
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    export KERNORCH_CACHE_DIR="$work/.build" KERNORCH_DB="$work/.tuning.sqlite"
    mutmut run --max-children "${MAX_CHILDREN:-2}" >"$work/run.log" 2>&1 || true
    mutmut export-cicd-stats >/dev/null 2>&1 || true
    python - "$mod" "$THRESHOLD" <<'EOF'
import json, subprocess, sys
from pathlib import Path
p = Path("mutants/mutmut-cicd-stats.json")
if not p.exists():
    print("   no results (see run.log)"); sys.exit(1)
s = json.loads(p.read_text())
killed, total = s.get("killed", 0), s.get("total", 0)
tested = total - s.get("skipped", 0) - s.get("not_checked", 0)
print(f"   {killed}/{tested} mutants killed ({100 * killed / max(tested, 1):.1f}%); "
      + ", ".join(f"{k} {v}" for k, v in s.items() if k not in ("killed", "total") and v))
out = subprocess.run(["mutmut", "results"], capture_output=True, text=True).stdout
for line in out.splitlines():  # mutants not killed: survived, timed out, suspicious (not "not checked")
    name, _, status = line.strip().rpartition(": ")
    if name and status in ("survived", "timeout", "suspicious", "no tests"):
        print(f"   {status}: {name}   (mutmut show {name})")
score = 100 * killed / max(tested, 1)
if score < float(sys.argv[2]):
    print(f"   BELOW THRESHOLD: {score:.1f}% < {sys.argv[2]}%")
    sys.exit(1)
EOF
  ) || status=1
  if [ -n "${KEEP:-}" ]; then echo "   kept: $work"; else rm -rf "$work"; fi
done
exit $status
