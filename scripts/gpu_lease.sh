#!/usr/bin/env bash
# A*PO from a sloppy pi_ref on one GPU, start to finish in one go: pi_ref by imitation (the demonstrator ignores the
# options in half its episodes), its greedy test evaluation beside stage 1, then three seeds side by side under a
# wall-clock training budget (APOConfig.max_minutes: the iteration past it is the last, evaluated and checkpointed),
# gathered into one table; ROUNDS > 1 re-anchors each seed on its own policy for further rounds. This is how the
# README's "At lr 2e-5, on a second lent H200" ran (371 s on an H200), and the longer run after it (MINUTES=4.2: its
# slowest seed was still in its test evaluation when the call ended).
#
#   bash scripts/gpu_lease.sh                          # the gpu profile (SmolLM2-135M-Instruct), as measured
#   MINUTES=10 LR=2e-5 bash scripts/gpu_lease.sh       # a longer lease: more iterations per seed
#   MINUTES=10 DEADLINE=560 bash scripts/gpu_lease.sh  # as long as the chain still ends 560 s after it started
#   ROUNDS=2 MINUTES=2 bash scripts/gpu_lease.sh       # re-anchored once: a second round from each seed's policy
#   PROFILE=ci SET="vstar_goals=16 greedy_search=True" MINUTES=0.1 SAVE=0 WORK=/tmp/x bash scripts/gpu_lease.sh
#                                                      # a dry run on a CPU in about a minute (tests/test_scripts.py)
#
# Settings (environment): PROFILE (gpu), LR (2e-5), MINUTES (1.5, each seed's training budget in a round), ROUNDS
# (1; each further round re-anchors: stage 1 from each seed's last policy, then the seed trains on with that policy
# as its pi_ref, as the tiny model's re-anchored runs did), DEADLINE (0: none; else the seconds after the start by
# which the chain should have gathered: each round's budget shrinks to fit, split evenly over the rounds left, which
# keep RESERVE seconds each, 150 by default, for the iteration past the budget, the seeds' val and test evaluations
# and the gather, and each later round the first stage 1's duration; an H200 lease measured 46-76 s per seed beyond
# the budget, and its slowest seed more, past a 600-s call), SET (the stage-1 recipe: the held one at beta2 0.03),
# NAME (the table's name), WORK (runs: the folder for pi_ref, stage 1 and the seeds), LOG (WORK/NAME_logs: each
# step's output, pi_ref's metrics.json, the gathered results.csv and a timeline; scripts/gpu_record.py records a
# lease from it), SAVE (1: write data/results/NAME_PROFILE_*.csv; round r > 1 as NAME_r<r>_PROFILE_*.csv).
set -uo pipefail
PROFILE=${PROFILE:-gpu}; LR=${LR:-2e-5}; MINUTES=${MINUTES:-1.5}; SAVE=${SAVE:-1}
DEADLINE=${DEADLINE:-0}; RESERVE=${RESERVE:-150}; ROUNDS=${ROUNDS:-1}
SET=${SET:-"vstar_goals=128 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03"}
NAME=${NAME:-apo_gpu_sloppy_lr${LR//-/}}; WORK=${WORK:-runs}; LOG=${LOG:-$WORK/${NAME}_logs}
REF=$WORK/pi_ref_${PROFILE}_skip_options_0.5
mkdir -p "$LOG"
apo() { python3 -m apo_helpers "$@"; }
stamp() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$LOG/timeline.txt"; }
fail() { stamp "$1 failed: see $LOG/$2"; exit 1; }

stamp "start: profile $PROFILE, lr $LR, $MINUTES minutes of training per seed, $ROUNDS round(s), deadline ${DEADLINE}s"
apo train-ref --profile "$PROFILE" --skip-options 0.5 --no-eval --out "$REF" > "$LOG/train_ref.log" 2>&1 ||
    fail train-ref train_ref.log
cp "$REF/metrics.json" "$LOG/pi_ref_metrics.json"
stamp "pi_ref trained"
apo evaluate --agent "$REF" --profile "$PROFILE" --split test --json \
    > "$LOG/pi_ref_test.json" 2> "$LOG/pi_ref_test.log" &
evaluation=$!
stage1_start=$SECONDS
# shellcheck disable=SC2086  # SET and RUN are lists of name=value words
apo vstar --ref "$REF" --profile "$PROFILE" --out "$WORK/vstar" --set $SET --json \
    > "$LOG/vstar.json" 2> "$LOG/vstar.log" || fail "stage 1" vstar.log
stage1_seconds=$((SECONDS - stage1_start))
stamp "stage 1 done"

budget() {  # minutes of training per seed in a round, $1 rounds left (this one too): MINUTES, or what DEADLINE leaves
    [ "$DEADLINE" = 0 ] && { echo "$MINUTES"; return; }
    local left=$((DEADLINE - SECONDS - $1 * RESERVE - ($1 - 1) * stage1_seconds))  # 6 s at least
    awk -v m="$MINUTES" -v left="$left" -v n="$1" \
        'BEGIN { b = left / n / 60; if (b < m) m = b; if (m < 0.1) m = 0.1; printf "%.2f", m }'
}

# round 1 trains the seeds from pi_ref; each later round re-anchors: stage 1 again from each seed's last policy,
# which becomes that seed's pi_ref (logs and tables of round r > 1 carry an r<r> prefix or _r<r> suffix)
out=$WORK/$NAME; name=$NAME; seed_ref=$REF; tag=""
for round in $(seq 1 "$ROUNDS"); do
    if [ "$round" -gt 1 ]; then
        prev=$out; out=$WORK/${NAME}_r$round; name=${NAME}_r$round; seed_ref="$prev/seed_{seed}/policy"; tag=r${round}_
        pids=()
        for seed in 0 1 2; do
            # shellcheck disable=SC2086
            apo vstar --ref "$prev/seed_$seed/policy" --profile "$PROFILE" --out "$WORK/vstar" --set $SET --json \
                > "$LOG/${tag}vstar_$seed.json" 2> "$LOG/${tag}vstar_$seed.log" &
            pids+=($!)
        done
        for k in 0 1 2; do wait "${pids[$k]}" || fail "round $round's stage 1 for seed $k" "${tag}vstar_$k.log"; done
        stamp "round $round stage 1 done: from each seed's policy"
    fi
    minutes=$(budget $((ROUNDS - round + 1)))
    stamp "round $round training budget: $minutes minutes per seed"
    RUN="$SET lr=$LR warmup=2 eval_every=1000 eval_episodes=64 checkpoint_every=1000 max_minutes=$minutes"
    TRAIN=(train --ref "$seed_ref" --vstar "$WORK/vstar" --profile "$PROFILE" --iterations 60 --skip-ref --out "$out")
    pids=()
    for seed in 0 1 2; do
        # shellcheck disable=SC2086
        apo "${TRAIN[@]}" --set $RUN --seeds "$seed" > "$LOG/${tag}seed_$seed.log" 2>&1 &
        pids+=($!)
    done
    for k in 0 1 2; do wait "${pids[$k]}" || fail "round $round, seed $k" "${tag}seed_$k.log"; done
    [ "$round" = 1 ] && { wait "$evaluation" || fail "pi_ref's test evaluation" pi_ref_test.log; }
    stamp "round $round seeds done"
    save=(); [ "$SAVE" = 1 ] && save=(--save --name "$name")
    # shellcheck disable=SC2086
    apo "${TRAIN[@]}" --set $RUN --seeds 0 1 2 --gather "${save[@]}" > "$LOG/${tag}gather.log" 2>&1 ||
        fail "round $round's gather" "${tag}gather.log"
    cp "$out/results.csv" "$LOG/${tag}results.csv"
    stamp "round $round gathered: $out/results.csv"
done
stamp "done: pi_ref's test result in $LOG/pi_ref_test.json"
