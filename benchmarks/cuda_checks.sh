#!/usr/bin/env bash
# The checks that need a GPU, in one go (about six minutes on one H200): the device-parametrised
# tests on CUDA (tests/fl_fixtures.py: DEVICES), the paths' gap with and without TF32
# (benchmarks/tf32_gap.py), then the engine benchmark and the paper-protocol run with --device cuda, and
# the throughput of many runs in one process against a pool (benchmarks/grid_throughput.py; its log only).
# Usage (from the repository root, on a machine with CUDA and the project's packages):
#   bash benchmarks/cuda_checks.sh [LOG_DIR]
# The benchmarks' runs are recorded in $RECORDS/<benchmark>/ (default benchmarks/records/speed):
# commit them and run `python benchmarks/report.py` to put them into docs/performance.md.
# Each step has its own time limit, so that one slow step cannot hide the others' results; the
# script exits 1 if any step failed.
set -u
failed=0
log=${1:-build/cuda_checks}
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
py=${PYTHON:-python3}
rec=${RECORDS:-benchmarks/records/speed}
step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2; shift 2
    echo "== $name (limit ${limit}s) $(date +%T)"
    local t0=$SECONDS
    timeout "$limit" "$@" > "$log/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$log/$name.log"
    echo "== $name rc=$rc in $((SECONDS - t0))s"
    [ "$rc" -eq 0 ] || failed=1
}
if ! $py -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "cuda_checks: torch sees no CUDA device here ($py); run this on a machine with a GPU" >&2
    exit 2
fi
mkdir -p "$log"
nvidia-smi -L
$py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
step tests 150 $py -m pytest -q -p no:cacheprovider -k cuda tests/test_device_agnostic.py tests/test_engine.py \
    tests/test_engine_conv.py tests/test_engine_optim.py
step tf32_gap 60 $py benchmarks/tf32_gap.py --device cuda
step engine 150 $py benchmarks/engine_vs_sequential.py --device cuda --models logistic,mlp,fmnist_cnn,lenet5 \
    --record "$rec/engine_vs_sequential"
step scaling 300 $py benchmarks/scaling.py --device cuda --models fmnist_cnn --record "$rec/scaling"
step paper_run 120 $py benchmarks/paper_run.py --device cuda --record "$rec/paper_run"
step paper_run_nondeterministic 120 $py benchmarks/paper_run.py --device cuda --nondeterministic --record "$rec/paper_run"
step paper_run_tf32 120 $py benchmarks/paper_run.py --device cuda --tf32 --record "$rec/paper_run"
step paper_run_tf32_nondeterministic 120 $py benchmarks/paper_run.py --device cuda --tf32 --nondeterministic \
    --record "$rec/paper_run"
step grid_throughput 240 $py benchmarks/grid_throughput.py --device cuda --runs 48 --processes 4 --dataset fmnist \
    --n-train 10000 --clients 50 --rounds 3
exit $failed
