#!/usr/bin/env bash
# Learning proof of multi-model training (issue 17): two models trained together on calc_duo (the
# caller writes the calculator call, the answerer reads the result and answers), one ajet-swarm front
# and engine per model, one launcher. Per seed: the main command's warm-up (scripts/run.sh with
# AJET_STOP_AFTER=sft: tokenizer, init, SFT → exp/main[-seedN]/models/calc-sft, reused when present),
# then `ajet --conf examples/configs/calc_duo.yaml` with both models starting from that checkpoint.
# Reports, per seed: the pair's held-out success (greedy and T=1) before and after RL, the caller's
# rate of right calculator calls, and each model's own training reward over the first and last three
# steps; appends the table to docs/benchmarks.md.
#   bench/classic/duo_proof.sh [--no-append] [SEED...]       (default: 1 2 3)
# Environment: AJET_BUILD_DIR (default build), AJET_DUO_SECONDS (RL time per seed, default 420).
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"
build="${AJET_BUILD_DIR:-$here/build}"
rl_seconds="${AJET_DUO_SECONDS:-420}"
append=1 args=()
for a in "$@"; do if [ "$a" = "--no-append" ]; then append=0; else args+=("$a"); fi; done
export AJET_BENCH_APPEND="$append"  # --no-append: print the table, leave docs/benchmarks.md alone
md="$here/docs/benchmarks.md"
[ "$append" = 1 ] || md=/dev/null
seeds=("${args[@]}")
[ "${#seeds[@]}" -gt 0 ] || seeds=(1 2 3)
for s in "${seeds[@]}"; do
  case "$s" in ''|*[!0-9]*) echo "duo_proof: seeds must be non-negative integers, got '$s'" >&2; exit 2 ;; esac
done
out="$here/exp/duo-proof"
mkdir -p "$out"
rows=()
for seed in "${seeds[@]}"; do
  if [ "$seed" = 1 ]; then work="$here/exp/main"; else work="$here/exp/main-seed$seed"; fi
  t0=$(date +%s)
  AJET_SEED="$seed" AJET_BUILD_DIR="$build" AJET_STOP_AFTER=sft "$here/scripts/run.sh" > "$out/warmup-seed$seed.log" 2>&1
  t_sft=$(( $(date +%s) - t0 ))
  model="$work/models/calc-sft"
  conf="$out/calc_duo-seed$seed.yaml"
  # The shipped config with this seed's model for both roles (paths there are relative to examples/configs).
  sed -e "s|../../exp/main/models/calc-sft|$model|g" "$here/examples/configs/calc_duo.yaml" > "$conf"
  log="$out/duo-seed$seed.log"
  t1=$(date +%s)
  "$build/bin/ajet" --conf "$conf" --exp-dir "$out/experiments-seed$seed" \
    --set "ajet.engine.seed=$seed" --set "ajet.task_reader.shuffle_seed=$seed" --set "ajet.task_reader.builtin.seed=$seed" \
    --set "ajet.trainer_common.max_training_seconds=$rl_seconds" 2>&1 | tee "$log"
  t_rl=$(( $(date +%s) - t1 ))
  exp="$(sed -n 's/^ajet: experiment directory //p' "$log" | tail -1)"
  row="$(python3 - "$exp/metrics.jsonl" "$seed" "$t_sft" "$t_rl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
val = [r for r in recs if r.get("kind") == "validation"]
train = [r for r in recs if r.get("kind") == "train"]
first, last = val[0], val[-1]
def mean(rs, model, key="reward_mean"):
    xs = [r.get(model, {}).get(key) for r in rs]
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")
head, tail = train[:3], train[-3:]
print(f"| {sys.argv[2]} | {len(train)} | {100*first['greedy_success']:.0f} → {100*last['greedy_success']:.0f} | "
      f"{100*first['sampled_success']:.0f} → {100*last['sampled_success']:.0f} "
      f"(+{100*(last['sampled_success']-first['sampled_success']):.0f}) | "
      f"{100*first['sampled_caller_right']:.0f} → {100*last['sampled_caller_right']:.0f} | "
      f"{mean(head,'caller'):.2f} → {mean(tail,'caller'):.2f} | {mean(head,'answerer'):.2f} → {mean(tail,'answerer'):.2f} | "
      f"{sys.argv[3]} + {sys.argv[4]} |")
PY
)"
  echo "$row"
  rows+=("$row")
done
header="| seed | RL steps | pair greedy success % (before → after) | pair T=1 success % | caller right at T=1 % | caller train reward (first 3 → last 3 steps) | answerer train reward | wall s (warm-up + RL) |
|---|---|---|---|---|---|---|---|"
echo "$header"
printf '%s\n' "${rows[@]}"
{
  echo
  echo "## $(date -u +%Y-%m-%d): multi-model training, calc_duo (bench/classic/duo_proof.sh ${seeds[*]})"
  echo
  echo "Two tiny models trained together by one launcher, one ajet-swarm front and engine each"
  echo "(examples/configs/calc_duo.yaml, RL budget ${rl_seconds} s per seed, both models start from the"
  echo "main command's warm-up of that seed). Held-out success of the pair on 100 validation tasks; each"
  echo "model's training reward is its own (caller: right calculator call; answerer: right final answer)."
  echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
  echo
  echo "$header"
  printf '%s\n' "${rows[@]}"
} >> "$md"
