#!/usr/bin/env bash
# One GPU lease, used to the last second: WORKERS copies of one paper-grid command share the GPU
# and one records folder (each run claimed before it is computed: fedlib.claims), each starting a
# run only if it is estimated to end before the lease does (--budget: fedlib.grid.run_grid),
# then every record they wrote is packed into ONE archive.
#
# Usage (from the repository root, on the machine with the GPU):
#   bash benchmarks/gpu_lease.sh SECONDS WORKERS -- COMMAND...
# COMMAND: the plan's command (python -m workbook.plan --run: the plan's head, the default; this
# script adds --together), a paper-grid command line (python -m fedlib.grid, fedlib-grid, or its
# old path benchmarks/paper_grid.py) or a benchmarks/table3_like_for_like.py one, without
# --budget, --device and --workers (this script adds --device cuda --budget B), e.g.
#   bash benchmarks/gpu_lease.sh 560 16 -- python -m workbook.plan --run
#   bash benchmarks/gpu_lease.sh 560 16 -- python benchmarks/table3_like_for_like.py \
#       --results benchmarks/records/clust_psi_pfl/table3_like_for_like --seeds 3
#   bash benchmarks/gpu_lease.sh 560 16 -- python -m fedlib.grid psi-pfl \
#       --out benchmarks/records/psi_pfl/comparison --datasets fmnist
#   bash benchmarks/gpu_lease.sh 560 16 -- python -m fedlib.grid clust-psi-pfl-table3 \
#       --out benchmarks/records/clust_psi_pfl/table3_like_for_like --seeds 3
# SECONDS: the whole script's time, start to archive; give the lease command a limit a little
# above it (SECONDS=560 in a 600 s command). The workers' budget is what is left after the data
# is prepared, less $LEASE_MARGIN seconds (default 30: their start-up and the packing).
# WORKERS: the processes sharing the GPU (each with OMP_NUM_THREADS=1 and FEDLIB_SHARING=WORKERS,
# which their records keep as host['processes'] and their estimates match).
#
# Writes to $OUT (default ./lease_out; at most four files, for a lease that brings back few):
#   records.tgz   the records written during this lease (*.json of the records folder, newer than
#                 its start); unpack with: tar xzf records.tgz -C <records folder>
#   lease.log     this script's output: the GPU, the data, a utilisation line every 60 s, each
#                 worker's exit status and the tail of its log
#   logs.tgz      the workers' whole logs
#   checkpoints.tgz  the round-level checkpoints of the runs the budget stopped (fedlib.checkpoint),
#                 written under $FEDLIB_CHECKPOINTS (default .lease/checkpoints, which git ignores):
#                 unpack with tar xzf checkpoints.tgz -C .lease/checkpoints, let the next lease carry
#                 .lease, and its runs resume where these stopped
# A run starts only if all of it fits (FEDLIB_WHOLE_RUNS=1, the default here); with
# FEDLIB_WHOLE_RUNS=0 a resumable method's run (MethodInfo.resumable) starts on its first rounds and
# stops at a round boundary before the budget ends, with a checkpoint. A worker still
# running at SECONDS - 10 is stopped: its run keeps what its last checkpoint holds. Needs nvidia-smi and torch with CUDA; exits 2 without
# them or on bad arguments, 1 if a worker failed (the archive is written all the same).
set -u

usage() {
    echo "usage: bash benchmarks/gpu_lease.sh SECONDS WORKERS -- python -m fedlib.grid ... |" \
         "python benchmarks/table3_like_for_like.py ... (without --budget, --device, --workers)" >&2
}
refuse() {  # refuse MESSAGE: exit 2 before any work
    echo "gpu_lease: $1" >&2
    usage
    exit 2
}

# ---------------------------------------------------------------- arguments
[ $# -ge 4 ] || refuse "expected SECONDS WORKERS -- COMMAND..., got $# arguments"
total=$1 workers=$2
[[ $total =~ ^[0-9]+$ ]] && [ "$total" -ge 60 ] || refuse "SECONDS must be a whole number ≥ 60, got '$total'"
[[ $workers =~ ^[0-9]+$ ]] && [ "$workers" -ge 1 ] && [ "$workers" -le 64 ] \
    || refuse "WORKERS must be a whole number in [1, 64], got '$workers'"
[ "$3" = "--" ] || refuse "expected -- after WORKERS, got '$3'"
shift 3
cmd=("$@")
kind=""
prev=""
for arg in "${cmd[@]}"; do
    case $arg in
        *paper_grid.py|fedlib-grid|*/fedlib-grid) kind=paper_grid ;;  # the grid command, its old path, its script
        fedlib.grid) [ "$prev" = -m ] && kind=paper_grid ;;  # python -m fedlib.grid
        *table3_like_for_like.py) kind=table3 ;;
        workbook.plan) [ "$prev" = -m ] && kind=plan ;;  # python -m workbook.plan --run: the plan's head
        --budget|--budget=*|--device|--device=*|--workers|--workers=*)
            refuse "leave $arg out of the command: this script sets --device cuda and --budget, and runs WORKERS copies" ;;
        --list|--list-datasets|--report)
            refuse "$arg computes nothing: give the command that trains" ;;
    esac
    prev=$arg
done
[ -n "$kind" ] || refuse "the command must run python -m workbook.plan --run, python -m fedlib.grid (or benchmarks/paper_grid.py) or benchmarks/table3_like_for_like.py"
option() {  # option NAME: the value of --NAME in the command (last one wins), else empty
    local i value=""
    for ((i = 0; i < ${#cmd[@]}; i++)); do
        case ${cmd[i]} in
            "--$1") value=${cmd[i + 1]:-} ;;
            "--$1="*) value=${cmd[i]#--$1=} ;;
        esac
    done
    echo "$value"
}
if [ "$kind" = plan ]; then
    case " ${cmd[*]} " in *" --run "*) ;; *) refuse "the plan command computes nothing without --run" ;; esac
    case " ${cmd[*]} " in *" --together "*) refuse "leave --together out: this script sets it" ;; esac
fi
case ${cmd[0]##*/} in python*) py=${cmd[0]} ;; *) py=${PYTHON:-python3} ;; esac
[ "$kind" != paper_grid ] || [ -n "$(option out)" ] || refuse "the grid command (python -m fedlib.grid) needs --out (the records folder)"

# ---------------------------------------------------------------- the GPU
command -v nvidia-smi > /dev/null 2>&1 || refuse "no CUDA here: nvidia-smi is not on PATH; run this on the GPU machine"
"$py" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" > /dev/null 2>&1 \
    || refuse "no CUDA here: torch ($py) sees no CUDA device (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"

start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
out=${OUT:-./lease_out}
mkdir -p "$out"
log=$out/lease.log
: > "$log"
say() { echo "[$(elapsed) s] $*" | tee -a "$log"; }
work=$(mktemp -d)
stamp=$work/start
touch "$stamp"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
# The paper tables are registered through fedlib's entry points (pyproject.toml): a checkout that
# is not installed here (a bare lease machine) has none, and the plan and the grids would find no
# table. Then a metadata folder on PYTHONPATH registers them, as `pip install -e .` would.
if ! "$py" -c "import sys; from fedlib.tables import load_tables; sys.exit(0 if load_tables() else 1)" 2> /dev/null; then
    "$py" - "$work/meta" <<'PY' || refuse "could not register fedlib's entry points here (pip install -e . does it)"
import pathlib, sys, tomllib
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info = pathlib.Path(sys.argv[1]) / f"{project['name']}-{project['version']}.dist-info"
info.mkdir(parents=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
(info / "entry_points.txt").write_text("".join(
    f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items())
    for group, entries in project.get("entry-points", {}).items()))
PY
    export PYTHONPATH=$work/meta:$PYTHONPATH
fi
export FEDLIB_CHECKPOINTS=${FEDLIB_CHECKPOINTS:-$PWD/.lease/checkpoints}
# a run starts only if all of it fits (fedlib.grid.whole_runs): a lease that brings back a few files
# of 16 MiB cannot return WORKERS runs' checkpoints; FEDLIB_WHOLE_RUNS=0 starts resumable runs on
# their first rounds and packs their checkpoints
export FEDLIB_WHOLE_RUNS=${FEDLIB_WHOLE_RUNS:-1}
mkdir -p "$FEDLIB_CHECKPOINTS"

say "gpu_lease: $total s, $workers workers: ${cmd[*]}"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader 2>&1 | tee -a "$log"
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" \
    2>&1 | tee -a "$log"

# ---------------------------------------------------------------- the records folder and the data
if [ "$kind" = plan ]; then  # the records root: the plan's runs go to its folders
    records=$(option records)
    records=${records:-benchmarks/records}
    datasets=${LEASE_DATASETS:-fmnist adult}
elif [ "$kind" = paper_grid ]; then
    records=$(option out)
    datasets=${LEASE_DATASETS:-$("${cmd[@]}" --list-datasets 2>> "$log" | tr '\n' ' ')}
else
    records=$(option results)
    if [ -z "$records" ]; then
        name=$(option name)
        records=$("$py" -c "from fedlib.paths import results_dir; print(results_dir())")/${name:-table3_like_for_like}
    fi
    dataset=$(option dataset)
    datasets=${LEASE_DATASETS:-${dataset:-fmnist}}
fi
[ -n "${datasets// /}" ] || refuse "found no data set to prepare (the command's filters select no run?); set LEASE_DATASETS"
mkdir -p "$records"
depth=1
[ "$kind" = plan ] && depth=4  # the records root's folders (clust_psi_pfl/table3_like_for_like/…)
say "records: $records; preparing the data once: $datasets (FEDLIB_DATA=${FEDLIB_DATA:-default})"
# shellcheck disable=SC2086  # one word per data set
"$py" -m fedlib.datasets prepare $datasets 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { say "gpu_lease: preparing the data failed"; exit 1; }

budget=$((total - $(elapsed) - ${LEASE_MARGIN:-30}))
[ "$budget" -ge 10 ] || { say "gpu_lease: only ${budget} s left for the runs after preparing the data"; exit 1; }

# ---------------------------------------------------------------- the workers
pids=()
# The plan's command: WORKERS plan processes (each builds the plan, one core a minute), each taking
# its runs in plan order through claims, a window of 4 at a time, the FedAvg family's runs of a
# window together (--together: at most 4 a group, only as many as their summed estimates let end in
# time, fedlib.grid.fitting_prefix). One process with --workers WORKERS would train each window's
# group in that process while its pool waits, and a group cut by the lease leaves a checkpoint too
# large to bring back.
extra=()
[ "$kind" = plan ] && extra=(--together)
for ((i = 1; i <= workers; i++)); do
    OMP_NUM_THREADS=1 FEDLIB_SHARING=$workers "${cmd[@]}" --device cuda --budget "$budget" ${extra[@]+"${extra[@]}"} \
        > "$work/worker-$i.log" 2>&1 &
    pids+=($!)
done
say "started $workers workers with --budget $budget"

stop=$((start + total - 10))  # the packing's reserve
last_util=0
alive=$workers
while [ "$alive" -gt 0 ]; do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2> /dev/null && alive=$((alive + 1)); done
    [ "$alive" -gt 0 ] || break
    now=$(date +%s)
    if [ $((now - last_util)) -ge 60 ]; then
        last_util=$now
        n=$(find "$records" -maxdepth "$depth" -name '*.json' -newer "$stamp" | wc -l)
        say "$alive workers running, $n records written; GPU $(nvidia-smi --query-gpu=utilization.gpu,memory.used \
            --format=csv,noheader 2>&1 | head -n 1)"
    fi
    if [ "$now" -ge "$stop" ]; then
        say "gpu_lease: time is up: stopping the $alive workers still running (their runs keep their last checkpoints)"
        for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null; done
        sleep 3
        for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null; done
        break
    fi
    sleep 2
done

failed=0
for ((i = 1; i <= workers; i++)); do
    wait "${pids[i - 1]}"
    rc=$?
    [ "$rc" -eq 0 ] || failed=1
    { echo "== worker $i: exit $rc; the end of its log:"; tail -n 12 "$work/worker-$i.log"; } | tee -a "$log"
done

# ---------------------------------------------------------------- the archive
(cd "$records" && find . -maxdepth "$depth" -type f -name '*.json' -newer "$stamp" | sed 's|^\./||' | sort) > "$work/new"
tar czf "$out/records.tgz" -C "$records" -T "$work/new"
tar czf "$out/logs.tgz" -C "$work" $(cd "$work" && ls worker-*.log)
say "packed $(wc -l < "$work/new") records into $out/records.tgz; unpack: tar xzf records.tgz -C $records"
(cd "$FEDLIB_CHECKPOINTS" && find . -maxdepth 1 -type f -name '*.pt' | sed 's|^\./||' | sort) > "$work/checkpoints"
if [ -s "$work/checkpoints" ]; then
    tar czf "$out/checkpoints.tgz" -C "$FEDLIB_CHECKPOINTS" -T "$work/checkpoints"
    say "packed $(wc -l < "$work/checkpoints") checkpoints ($(du -sh "$out/checkpoints.tgz" | cut -f1)) into" \
        "$out/checkpoints.tgz; unpack: tar xzf checkpoints.tgz -C .lease/checkpoints"
fi
rm -rf "$work"
exit $failed
