#!/usr/bin/env bash
# Issue 49's decision runs that wait for a GPU, in one run bounded by a deadline.
#
# A lent device is held for minutes, so the parts run side by side on it, each a stream
# of `neural-testbed bandit` / `active` commands with a store of its own that starts as a
# copy of the committed study store (benchmarks/results/decision_study.db.gz), so the
# seeds it holds are reused, not recomputed. Each unit of seeds is its own transaction:
# a stream stopped at the deadline keeps every unit it finished. At the end the stores
# are copied, gzipped, to OUT with the logs (each command's last lines say its seconds
# a seed: the GPU's cost per agent).
#
# Parts (default: greedy seeds):
#   greedy  greedy against Thompson sampling on the reference's default bandit (10,000
#           steps, trained every 100): mlp, then the default ensemble of 100; SEEDS seeds.
#   seeds   the study's scale (the bandit at 1,000 steps trained every 100; active
#           learning at 200 labels in batches of 25, uniform and bald), seeds 0..SEEDS-1,
#           for AGENTS (default: those too slow for the 2-core CPU: ensemble ensemble+ bbb
#           hypermodel sgmcmc); a bandit stream and an active-learning stream.
#   full    the reference's scale of the study (10,000 steps; 500 labels) for every
#           agent of the study, cheapest first; 8 seeds. Hours of CPU per agent; on a
#           GPU, sgmcmc's bandit alone is 50 million steps one after another (100
#           trainings of 500,000), likely more than one session.
#
# Usage, on the device machine from the repository root (no install needed):
#   OUT=$OUT DEADLINE_S=540 bash tools/gpu_decisions.sh
#   OUT=$OUT SEEDS=16 AGENTS="sgmcmc hypermodel" bash tools/gpu_decisions.sh seeds
# SEEDS_PER_UNIT (default 8) seeds share a program and are stored together.
# To run it beside tools/gpu_rows.sh in one device call, see that script's header.
# Then, here, the new seeds into the committed store (exact duplicates are skipped):
#   gunzip -k OUT/*.db.gz && gunzip -c benchmarks/results/decision_study.db.gz > base.db
#   neural-testbed merge -o all.db base.db OUT/*.db && gzip -9 -c all.db \
#     > benchmarks/results/decision_study.db.gz
# and `neural-testbed correlate-decisions --seeds N ... --db all.db` (docs/decisions.md)
# gives the study of the seeds every agent has.
set -u
OUT=${OUT:?set OUT to the folder the logs and stores go to}
DEADLINE_S=${DEADLINE_S:-540}
SEEDS=${SEEDS:-32}
SEEDS_PER_UNIT=${SEEDS_PER_UNIT:-8}
AGENTS=${AGENTS:-ensemble ensemble+ bbb hypermodel sgmcmc}
FULL_AGENTS=${FULL_AGENTS:-mlp knn deep_kernel dropout laplace epinet ensemble bbb \
ensemble+ hypermodel sgmcmc}
PY=${PYTHON:-python3}
START=$(date +%s)
STOP_AT=$((START + DEADLINE_S - 20))  # 20 s to copy the stores
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT  # the stores, copied to OUT first
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the streams share one device
PARTS=("$@")
[ ${#PARTS[@]} -gt 0 ] || PARTS=(greedy seeds)
LOG=$OUT/decisions.log
say() { echo "[$(( $(date +%s) - START )) s] $*" | tee -a "$LOG"; }
CLI=("$PY" -m neural_testbed.cli)
STUDY=(--seeds-per-unit "$SEEDS_PER_UNIT" --quiet)
SMALL_BANDIT=(--steps 1000 --retrain-every 100)
SMALL_ACTIVE=(--steps 200 --batch-size 25 --priority uniform,bald)

# One command of a stream, stopped at the deadline: $1 the stream, then its words.
step() {
  local stream=$1 left t0 rc
  shift
  t0=$(date +%s)
  left=$((STOP_AT - t0))
  [ "$left" -gt 2 ] || { say "$stream: no time left for: $*"; return 1; }
  timeout -k 5 "$left" "${CLI[@]}" "$@" --db "$WORK/$stream.db" >> "$OUT/$stream.out" 2>&1
  rc=$?
  local why=""
  [ "$rc" = 124 ] && why=" (stopped at the deadline; its finished units are stored)"
  say "$stream: $* rc=$rc$why after $(( $(date +%s) - t0 )) s; $(tail -n 1 "$OUT/$stream.out")"
  return $rc
}
stream() {  # $1 the stream; its store starts as the committed one
  gunzip -c benchmarks/results/decision_study.db.gz > "$WORK/$1.db"
  case $1 in
    greedy) for a in mlp ensemble; do
              step greedy bandit --agent "$a" --seeds "$SEEDS" "${STUDY[@]}"; done ;;
    seeds-bandit) for a in $AGENTS; do step "$1" bandit --agent "$a" --seeds "$SEEDS" \
                    "${SMALL_BANDIT[@]}" "${STUDY[@]}"; done ;;
    seeds-active) for a in $AGENTS; do step "$1" active --agent "$a" --seeds "$SEEDS" \
                    "${SMALL_ACTIVE[@]}" "${STUDY[@]}"; done ;;
    full-bandit) for a in $FULL_AGENTS; do step "$1" bandit --agent "$a" --seeds 8 \
                   "${STUDY[@]}"; done ;;
    full-active) for a in $FULL_AGENTS; do step "$1" active --agent "$a" --seeds 8 \
                   --priority uniform,bald "${STUDY[@]}"; done ;;
  esac
}

say "start; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1)"
"$PY" -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tee -a "$LOG"
STREAMS=()
for part in "${PARTS[@]}"; do
  case $part in
    greedy) STREAMS+=(greedy) ;;
    seeds) STREAMS+=(seeds-bandit seeds-active) ;;
    full) STREAMS+=(full-bandit full-active) ;;
    *) say "unknown part '$part' (allowed: greedy, seeds, full)"; exit 2 ;;
  esac
done
for s in "${STREAMS[@]}"; do stream "$s" & done
wait
for s in "${STREAMS[@]}"; do
  [ -f "$WORK/$s.db" ] || continue
  # The project's merge copies what a stopped run's write-ahead log still held, too.
  say "$s: $("${CLI[@]}" merge -o "$OUT/$s.db" "$WORK/$s.db" 2>&1 | tail -n 1)"
  gzip -f "$OUT/$s.db"
done
say "done"
