#!/usr/bin/env bash
# Every GPU measurement in one timed run.
#
# Not a test. A lent GPU machine is held for minutes, so one script does all of it:
# first, alone on the device: the published rows that failed there before, recomputed
# (benchmarks/published_failures.py); mlp's `paper` sweep cold and warm with full-float32
# products (the command's) and with TensorFloat-32 ones (what full float32 costs;
# benchmarks/cold_and_warm.py), with its programs compiled one at a time (what compiling
# them side by side saves) and with threefry lowered to a CUDA kernel; with MORE=1 also
# each of XLA's GPU autotuners off, all 210 problems in one program and in 7 worker
# processes (so is a short sgmcmc), and mlp's 14-config `smoke` sweep with and without
# configs batched (benchmarks/config_sweep.py). Then, sharing the device, every default
# agent's `paper` sweep in three streams until the deadline, each `neural-testbed run`
# timed from a cold compilation cache of its own (upper bounds: taken beside the other
# streams); sgmcmc and the hypermodel, whose 500,000 and 2,000 steps are one after
# another, train all 210 problems in one program (`--problems-per-batch 210`, padded to
# T = 1000: one chain of steps, not seven). The streams' wall time, if all finish, is
# every default agent's `paper` sweep on one GPU together.
# At the deadline the streams are stopped (every row already written stays: each
# problem batch is its own transaction) and the stores are copied, gzipped, to OUT.
# (The published rows that still wait for a GPU are tools/gpu_rows.sh's job.)
#
# Usage (from the repository root, the project on PYTHONPATH, no install needed):
#   OUT=/tmp/out DEADLINE_S=560 bash benchmarks/gpu_session.sh
#   OUT=/tmp/out MORE=1 bash benchmarks/gpu_session.sh      # the longer measurements too
#   OUT=/tmp/out ALONE=0 bash benchmarks/gpu_session.sh     # only the three streams
# The stores in OUT hold the streams' rows: `neural-testbed leaderboard --db` reads them.
set -u
OUT=${OUT:?set OUT to the folder the logs and stores go to}
DEADLINE_S=${DEADLINE_S:-560}
PY=${PYTHON:-python3}
START=$(date +%s)
STOP_AT=$((START + DEADLINE_S - 20))  # 20 s to stop the streams and copy the stores
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT  # caches and stores; the stores are copied to OUT first
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # three processes share one device
LOG=$OUT/session.log
say() { echo "[$(( $(date +%s) - START )) s] $*" | tee -a "$LOG"; }
left() { echo $(( STOP_AT - $(date +%s) )); }
# `timeout` for what is left before the deadline (at least 1 s).
until_deadline() { local s; s=$(left); [ "$s" -gt 1 ] || s=1; timeout -k 5 "$s" "$@"; }
CLI=("$PY" -m neural_testbed.cli)

say "start; $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
"$PY" -c "import jax, sklearn; print('jax', jax.__version__, jax.devices(), \
'sklearn', sklearn.__version__)" 2>&1 | tee -a "$LOG"

if [ "${ALONE:-1}" != 0 ]; then
  # The published GP rows that failed on an H200: are they ok now that the GP agents set
  # repeated inputs aside there (benchmarks/gp_sampler_nans.py)?
  say "== alone on the device: the published rows that failed, recomputed"
  timeout 75 "$PY" benchmarks/published_failures.py --agents oracle_gp gp --problems h200 \
    2>&1 | tee -a "$LOG"
  # TensorFloat-32 first: on 2026-11-28 float32 ran first on the fresh machine and its
  # cold run compiled 9 s longer, an order effect to tell apart from the products.
  for precision in tensorfloat32 float32; do
    say "== alone on the device: mlp paper, cold then warm x2, products in $precision"
    until_deadline "$PY" benchmarks/cold_and_warm.py --sweep paper --repeats 2 \
      --matmul-precision "$precision" 2>&1 | tee -a "$LOG"
  done
  # The cold run is compile-bound (22.5 of 28.3 s on 2026-11-28). Against the float32 run
  # above: what compiling side by side saves (unmeasured on a GPU: one at a time is how it
  # was), and what the random draws' hash as one CUDA kernel saves (a fifth of each
  # program's optimised HLO on the CPU is that hash; the same bits, so the same rows; its
  # warm run says what it costs at run time).
  say "== alone on the device: mlp paper, cold then warm, programs compiled one at a time"
  until_deadline "$PY" benchmarks/cold_and_warm.py --sweep paper --repeats 1 \
    --compile-one-at-a-time 2>&1 | tee -a "$LOG"
  say "== alone on the device: mlp paper, cold then warm, threefry as a CUDA kernel"
  JAX_THREEFRY_GPU_KERNEL_LOWERING=true until_deadline "$PY" benchmarks/cold_and_warm.py \
    --sweep paper --repeats 1 2>&1 | tee -a "$LOG"
fi
if [ "${ALONE:-1}" != 0 ] && [ "${MORE:-0}" != 0 ]; then
  # A run on the GPU is compile-bound; do XLA's GPU autotuners make most of it? (Same
  # aggregate expected to within rounding: the kernels chosen may differ.)
  for flag in --xla_gpu_autotune_level=0 --xla_gpu_experimental_enable_fusion_autotuner=false; do
    say "== alone on the device: mlp paper, cold then warm, XLA_FLAGS=$flag"
    XLA_FLAGS="$flag" until_deadline "$PY" benchmarks/cold_and_warm.py --sweep paper \
      --repeats 1 2>&1 | tee -a "$LOG"
  done
  # Is a sweep on the GPU latency-bound? All 210 `paper` problems in one program (padded
  # to T = 1000) against one program per T (30 problems); sgmcmc with 20,000 steps shows
  # the cost of a step of each.
  say "== alone on the device: mlp paper, cold then warm, --problems-per-batch 210"
  until_deadline "$PY" benchmarks/cold_and_warm.py --sweep paper --repeats 1 \
    --problems-per-batch 210 2>&1 | tee -a "$LOG"
  # The same 7 units of 30 problems in 7 worker processes (the same rows as one process:
  # units do not depend on who runs them): do processes' programs overlap on one GPU?
  for way in "--problems-per-batch 30" "--problems-per-batch 210" "--workers 7"; do
    t0=$(date +%s%N)
    NEURAL_TESTBED_CACHE_DIR="$WORK/cache-sgmcmc-short" until_deadline "${CLI[@]}" run \
      --agent sgmcmc --set num_steps=20000 burn_in=4000 --sweep paper \
      --db "$WORK/short${way// /}.db" --quiet $way > "$WORK/short${way// /}.out" 2>&1
    rc=$?
    say "sgmcmc 20,000 steps, paper, $way: rc=$rc" \
        "$(( ($(date +%s%N) - t0) / 1000000 )) ms;" \
        "$(grep -h -E 'aggregate|time:' "$WORK/short${way// /}.out")"
  done
  say "== alone on the device: mlp smoke config sweep, --configs-per-batch 1 and 14"
  until_deadline "$PY" benchmarks/config_sweep.py --batches 1,14 2>&1 | tee -a "$LOG"
fi

say "== shared: every default agent's paper sweep, three streams until the deadline"
paper_stream() {  # $1: the stream's name (its store), then its agents, longest first
  local stream=$1 agent all_ok=0
  shift
  for agent in "$@"; do
    [ "$(left)" -gt 2 ] || return 1
    local t0=$(date +%s%N) more=()
    case $agent in sgmcmc|hypermodel) more=(--problems-per-batch 210) ;; esac
    NEURAL_TESTBED_CACHE_DIR="$WORK/cache-$agent" until_deadline "${CLI[@]}" run --agent "$agent" \
      --sweep paper --db "$WORK/$stream.db" --quiet --keep-going "${more[@]}" \
      > "$WORK/paper-$agent.out" 2>&1
    local rc=$?
    say "paper $agent ${more[*]} rc=$rc $(( ($(date +%s%N) - t0) / 1000000 )) ms" \
        "$(grep -h 'compil' "$WORK/paper-$agent.out" | tail -1)"
    [ "$rc" = 0 ] || all_ok=1
  done
  return $all_ok
}
# Each stream starts with an agent timed over 2 minutes (2026-11-27 and -28, beside other
# work) or never timed; mlp, ensemble+ and dropout, timed under 2, come last.
t_streams=$(date +%s)
paper_stream paper1 sgmcmc knn random_forest mlp &
paper_stream paper2 hypermodel epinet ensemble+ &
paper_stream paper3 bbb ensemble laplace deep_kernel dropout &
finished=0
for stream in $(jobs -p); do wait "$stream" && finished=$((finished + 1)); done
say "streams: $finished of 3 finished every agent; $(( $(date +%s) - t_streams )) s" \
    "from their start (all twelve agents' paper sweeps together, if 3 of 3)"
# Stop what is left of this session's runs (their stores are under WORK), nothing else.
pkill -f -- "--db $WORK/"
sleep 1
say "== streams stopped; copying the stores"
for db in paper1 paper2 paper3; do
  [ -f "$WORK/$db.db" ] || continue
  "$PY" -c "import sqlite3, sys; src = sqlite3.connect(sys.argv[1]); dst = sqlite3.connect(sys.argv[2]); \
src.backup(dst); print(sys.argv[1], dst.execute('select count(*) from results').fetchone()[0], 'rows')" \
    "$WORK/$db.db" "$WORK/$db-copy.db" 2>&1 | tee -a "$LOG"
  gzip -c "$WORK/$db-copy.db" > "$OUT/$db.db.gz"
done
tail -n 3 "$WORK"/*.out >> "$LOG" 2>/dev/null
say "done"
