#!/usr/bin/env bash
# A*PO from a sloppy pi_ref on one GPU, start to finish in one go: pi_ref by imitation (the demonstrator ignores the
# options in half its episodes), its greedy test evaluation beside stage 1, then three seeds side by side under a
# wall-clock training budget (APOConfig.max_minutes: the iteration past it is the last, evaluated and checkpointed),
# gathered into one table. This is how the README's "At lr 2e-5, on a second lent H200" ran (371 s on an H200), and
# the longer run after it (MINUTES=4.2: its slowest seed was still in its test evaluation when the call ended).
#
#   bash scripts/gpu_lease.sh                          # the gpu profile (SmolLM2-135M-Instruct), as measured
#   MINUTES=10 LR=2e-5 bash scripts/gpu_lease.sh       # a longer lease: more iterations per seed
#   MINUTES=10 DEADLINE=560 bash scripts/gpu_lease.sh  # as long as the chain still ends 560 s after it started
#   PROFILE=ci SET="vstar_goals=16 greedy_search=True" MINUTES=0.1 SAVE=0 WORK=/tmp/x bash scripts/gpu_lease.sh
#                                                      # a dry run on a CPU in about a minute (tests/test_scripts.py)
#
# Settings (environment): PROFILE (gpu), LR (2e-5), MINUTES (1.5, each seed's training budget), DEADLINE (0: none;
# else the seconds after the start by which the chain should have gathered: once stage 1 is done the training budget
# shrinks to fit, keeping RESERVE seconds, 150 by default, for the iteration past the budget, the seeds' val and
# test evaluations and the gather; an H200 lease measured 46-76 s of it per seed beyond the budget, and its slowest
# seed more, past a 600-s call), SET (the stage-1 recipe: the held one at beta2 0.03), NAME (the table's name), WORK
# (runs: the folder for pi_ref, stage 1 and the seeds), LOG (WORK/NAME_logs: each step's output, pi_ref's
# metrics.json, the gathered results.csv and a timeline; scripts/gpu_record.py records a lease from it), SAVE (1:
# write data/results/NAME_PROFILE_*.csv).
set -uo pipefail
PROFILE=${PROFILE:-gpu}; LR=${LR:-2e-5}; MINUTES=${MINUTES:-1.5}; SAVE=${SAVE:-1}
DEADLINE=${DEADLINE:-0}; RESERVE=${RESERVE:-150}
SET=${SET:-"vstar_goals=128 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03"}
NAME=${NAME:-apo_gpu_sloppy_lr${LR//-/}}; WORK=${WORK:-runs}; LOG=${LOG:-$WORK/${NAME}_logs}
REF=$WORK/pi_ref_${PROFILE}_skip_options_0.5
TRAIN=(train --ref "$REF" --vstar "$WORK/vstar" --profile "$PROFILE" --iterations 60 --skip-ref --out "$WORK/$NAME")
mkdir -p "$LOG"
apo() { python3 -m apo_helpers "$@"; }
stamp() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$LOG/timeline.txt"; }
fail() { stamp "$1 failed: see $LOG/$2"; exit 1; }

stamp "start: profile $PROFILE, lr $LR, $MINUTES minutes of training per seed, deadline ${DEADLINE}s"
apo train-ref --profile "$PROFILE" --skip-options 0.5 --no-eval --out "$REF" > "$LOG/train_ref.log" 2>&1 ||
    fail train-ref train_ref.log
cp "$REF/metrics.json" "$LOG/pi_ref_metrics.json"
stamp "pi_ref trained"
apo evaluate --agent "$REF" --profile "$PROFILE" --split test --json > "$LOG/pi_ref_test.json" 2> "$LOG/pi_ref_test.log" &
evaluation=$!
# shellcheck disable=SC2086  # SET and RUN are lists of name=value words
apo vstar --ref "$REF" --profile "$PROFILE" --out "$WORK/vstar" --set $SET --json > "$LOG/vstar.json" 2> "$LOG/vstar.log" ||
    fail "stage 1" vstar.log
stamp "stage 1 done"
if [ "$DEADLINE" != 0 ]; then  # what is left of the deadline, less the reserve, if that is shorter (6 s at least)
    MINUTES=$(awk -v m="$MINUTES" -v left="$((DEADLINE - SECONDS - RESERVE))" \
        'BEGIN { b = left / 60; if (b < m) m = b; if (m < 0.1) m = 0.1; printf "%.2f", m }')
    stamp "training budget: $MINUTES minutes per seed"
fi
RUN="$SET lr=$LR warmup=2 eval_every=1000 eval_episodes=64 checkpoint_every=1000 max_minutes=$MINUTES"
seeds=()
for seed in 0 1 2; do
    # shellcheck disable=SC2086
    apo "${TRAIN[@]}" --set $RUN --seeds "$seed" > "$LOG/seed_$seed.log" 2>&1 &
    seeds+=($!)
done
for k in 0 1 2; do wait "${seeds[$k]}" || fail "seed $k" "seed_$k.log"; done
wait "$evaluation" || fail "pi_ref's test evaluation" pi_ref_test.log
stamp "seeds done"
save=(); [ "$SAVE" = 1 ] && save=(--save --name "$NAME")
# shellcheck disable=SC2086
apo "${TRAIN[@]}" --set $RUN --seeds 0 1 2 --gather "${save[@]}" > "$LOG/gather.log" 2>&1 || fail gather gather.log
cp "$WORK/$NAME/results.csv" "$LOG/results.csv"
stamp "gathered: $WORK/$NAME/results.csv, pi_ref's test result in $LOG/pi_ref_test.json"
