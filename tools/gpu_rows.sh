#!/usr/bin/env bash
# The published rows that wait for a GPU, computed in one run bounded by a deadline.
#
# A lent device is held for minutes, so every part of the table that is GPU work runs at
# once, each (agent, sweep) a `neural-testbed run` of its own with a store of its own
# (default configs, agent seed 0, as tools/publish_baselines.py computes them) on the
# problems the shipped table lacks for that agent. A run
# stopped at the deadline keeps every work unit it finished (each is its own
# transaction). At the end the stores are copied, gzipped, to OUT.
#
# Usage, on the device machine from the repository root (no install needed):
#   OUT=$OUT DEADLINE_S=480 bash tools/gpu_rows.sh                # the default parts
#   OUT=$OUT bash tools/gpu_rows.sh bbb:classification hmc:paper:6
# A part is AGENT:SWEEP[:PROBLEMS_PER_BATCH] (smaller batches commit more often).
# hmc needs blackjax, which the device image lacks: here, before the run,
#   .venv/bin/pip install --no-deps --target .gpu_deps blackjax==1.7.1
# and carry ".gpu_deps" (it is put on PYTHONPATH when present).
# With issue 49's decision runs side by side, in one device call (separate OUT folders):
#   mkdir -p $OUT/r $OUT/d; OUT=$OUT/r DEADLINE_S=540 bash tools/gpu_rows.sh &
#   OUT=$OUT/d DEADLINE_S=540 bash tools/gpu_decisions.sh; wait
# Then, here, to pack the rows into the table (the rows keep their device's stamp):
#   gunzip -k OUT/*.db.gz
#   PYTHONPATH=. python tools/publish_baselines.py --db B.db --out table.json.gz \
#     --resume-from-table          # B.db new; table.json.gz a copy of the shipped table
#   neural-testbed merge -o B.db OUT/*.db
#   PYTHONPATH=. python tools/publish_baselines.py --db B.db --out table.json.gz \
#     --computed-on "DATE on an NVIDIA H100 (16 CPU cores), JAX X, ..."
# (a part's stamp covers all its rows: hmc's on `paper` must also name the 2-core CPU that
# computed its 18 `quick` problems, as the hypermodel's `real` stamp names both machines)
# and copy table.json.gz into the package once tests/leaderboard/test_baselines.py passes.
set -u
OUT=${OUT:?set OUT to the folder the logs and stores go to}
DEADLINE_S=${DEADLINE_S:-480}
PY=${PYTHON:-python3}
START=$(date +%s)
STOP_AT=$((START + DEADLINE_S - 20))  # 20 s to copy the stores
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT  # the stores, copied to OUT first
[ -d .gpu_deps ] && export PYTHONPATH="${PYTHONPATH:-.}:$PWD/.gpu_deps"
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the parts share one device
PARTS=("$@")
[ ${#PARTS[@]} -gt 0 ] || PARTS=(bbb:classification hypermodel:classification
                                 sgmcmc:classification hmc:paper:6)
LOG=$OUT/rows.log
say() { echo "[$(( $(date +%s) - START )) s] $*" | tee -a "$LOG"; }

say "start; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1)"
"$PY" -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tee -a "$LOG"
for part in "${PARTS[@]}"; do
  IFS=: read -r agent sweep per_batch <<< "$part"
  more=()
  [ -n "${per_batch:-}" ] && more=(--problems-per-batch "$per_batch")
  # Only the problems the shipped table lacks for the agent: rows of another device on
  # a problem it holds would conflict with them when merged.
  # (baselines.rows_for: the rows whose problem definition is still the sweep's)
  todo=$("$PY" -c "import sys; from neural_testbed import leaderboard; \
from neural_testbed.leaderboard import baselines; sweep = leaderboard.get_sweep(sys.argv[2]); \
held = {r.problem_id for r in baselines.rows_for(baselines.load(), [sys.argv[1]], sweep)[0]}; \
print(' '.join(p for p in sweep if p not in held))" \
    "$agent" "$sweep") || { say "$part: cannot list its problems"; continue; }
  [ -n "$todo" ] || { say "$agent on $sweep: the table holds every problem"; continue; }
  say "$agent on $sweep: $(wc -w <<< "$todo") problems"
  (
    t0=$(date +%s)
    left=$((STOP_AT - t0)); [ "$left" -gt 1 ] || left=1
    timeout -k 5 "$left" "$PY" -m neural_testbed.cli run --agent "$agent" \
      --sweep "$sweep" --db "$WORK/$agent-$sweep.db" --quiet --keep-going "${more[@]}" \
      --problems $todo \
      > "$OUT/$agent-$sweep.out" 2>&1
    say "$agent on $sweep: rc=$? after $(( $(date +%s) - t0 )) s (124: stopped at the deadline)"
  ) &
done
wait
for part in "${PARTS[@]}"; do
  IFS=: read -r agent sweep _ <<< "$part"
  db="$agent-$sweep.db"
  [ -f "$WORK/$db" ] || continue
  # A backup holds what the write-ahead log of a stopped run still held.
  "$PY" -c "import sqlite3, sys; src = sqlite3.connect(sys.argv[1]); \
dst = sqlite3.connect(sys.argv[2]); src.backup(dst); print(sys.argv[3], \
dst.execute('select count(distinct problem_id) from results').fetchone()[0], \
'problems stored')" "$WORK/$db" "$OUT/$db" "$db" 2>&1 | tee -a "$LOG"
  gzip -f "$OUT/$db"
done
say "done"
