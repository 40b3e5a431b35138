#!/usr/bin/env bash
# Learning proof of multi-model training: two models trained together on calc_duo (the caller writes
# the calculator call, the answerer reads the result and answers), one launcher. Two placements per
# seed, in one run: "servers" (examples/configs/calc_duo.yaml: one ajet-swarm front and engine per
# model, each a full copy) and "adapters" (examples/configs/calc_duo_adapters.yaml: one front and
# engine, each model a LoRA adapter of the one base). Per seed: the main command's warm-up
# (scripts/run.sh with AJET_STOP_AFTER=sft: tokenizer, init, SFT → exp/main[-seedN]/models/calc-sft,
# reused when present), then each placement from that checkpoint.
# Reports, per seed and placement: the pair's held-out success (greedy and T=1) before and after RL,
# the caller's rate of right calculator calls, each model's own training reward over the first and
# last three steps, the peak resident memory of its fronts and engines together, and the process
# count; appends the table to docs/benchmarks.md.
#   bench/classic/duo_proof.sh [--no-append] [--placements servers,adapters] [SEED...]  (default: 1 2 3)
# Environment: AJET_BUILD_DIR (default build), AJET_DUO_SECONDS (RL time per run, default 420).
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"
build="${AJET_BUILD_DIR:-$here/build}"
rl_seconds="${AJET_DUO_SECONDS:-420}"
append=1 args=() placements="servers,adapters"
while [ $# -gt 0 ]; do
  case "$1" in
    --no-append) append=0 ;;
    --placements) placements="${2:?--placements needs servers, adapters or both}"; shift ;;
    *) args+=("$1") ;;
  esac
  shift
done
export AJET_BENCH_APPEND="$append"  # --no-append: print the table, leave docs/benchmarks.md alone
md="$here/docs/benchmarks.md"
[ "$append" = 1 ] || md=/dev/null
seeds=("${args[@]}")
[ "${#seeds[@]}" -gt 0 ] || seeds=(1 2 3)
for s in "${seeds[@]}"; do
  case "$s" in ''|*[!0-9]*) echo "duo_proof: seeds must be non-negative integers, got '$s'" >&2; exit 2 ;; esac
done
IFS=',' read -r -a modes <<< "$placements"
for m in "${modes[@]}"; do
  case "$m" in servers|adapters) ;; *) echo "duo_proof: --placements takes servers and/or adapters, got '$m'" >&2; exit 2 ;; esac
done
out="$here/exp/duo-proof"
mkdir -p "$out"

# Samples the summed RSS (MB) of every ajet-swarm and ajet-engine process every second until $1 exists;
# writes "peak_mb max_processes" to $2.
sample_rss() {
  local stop="$1" result="$2" peak=0 procs=0
  while [ ! -e "$stop" ]; do
    local kb=0 n=0
    for p in $(pgrep -x 'ajet-swarm|ajet-engine' || true); do
      local r; r=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
      kb=$((kb + ${r:-0})); n=$((n + 1))
    done
    [ $((kb / 1024)) -gt "$peak" ] && peak=$((kb / 1024))
    [ "$n" -gt "$procs" ] && procs=$n
    sleep 1
  done
  echo "$peak $procs" > "$result"
}

rows=()
for seed in "${seeds[@]}"; do
  if [ "$seed" = 1 ]; then work="$here/exp/main"; else work="$here/exp/main-seed$seed"; fi
  t0=$(date +%s)
  AJET_SEED="$seed" AJET_BUILD_DIR="$build" AJET_STOP_AFTER=sft "$here/scripts/run.sh" > "$out/warmup-seed$seed.log" 2>&1
  t_sft=$(( $(date +%s) - t0 ))
  model="$work/models/calc-sft"
  for mode in "${modes[@]}"; do
    if [ "$mode" = servers ]; then shipped=calc_duo.yaml; else shipped=calc_duo_adapters.yaml; fi
    conf="$out/$mode-seed$seed.yaml"
    # The shipped config with this seed's model (paths there are relative to examples/configs).
    sed -e "s|../../exp/main/models/calc-sft|$model|g" "$here/examples/configs/$shipped" > "$conf"
    log="$out/$mode-seed$seed.log"
    rm -f "$out/.stop" "$out/.rss"
    sample_rss "$out/.stop" "$out/.rss" &
    t1=$(date +%s)
    "$build/bin/ajet" --conf "$conf" --exp-dir "$out/experiments-$mode-seed$seed" \
      --set "ajet.engine.seed=$seed" --set "ajet.task_reader.shuffle_seed=$seed" --set "ajet.task_reader.builtin.seed=$seed" \
      --set "ajet.trainer_common.max_training_seconds=$rl_seconds" 2>&1 | tee "$log"
    t_rl=$(( $(date +%s) - t1 ))
    touch "$out/.stop"; wait
    read -r peak procs < "$out/.rss"
    exp="$(sed -n 's/^ajet: experiment directory //p' "$log" | tail -1)"
    row="$(python3 - "$exp/metrics.jsonl" "$seed" "$mode" "$peak" "$procs" "$t_sft" "$t_rl" <<'PY'
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
seed, mode, peak, procs, t_sft, t_rl = sys.argv[2:8]
print(f"| {seed} | {mode} | {len(train)} | {100*first['greedy_success']:.0f} → {100*last['greedy_success']:.0f} | "
      f"{100*first['sampled_success']:.0f} → {100*last['sampled_success']:.0f} "
      f"(+{100*(last['sampled_success']-first['sampled_success']):.0f}) | "
      f"{100*first['sampled_caller_right']:.0f} → {100*last['sampled_caller_right']:.0f} | "
      f"{mean(head,'caller'):.2f} → {mean(tail,'caller'):.2f} | {mean(head,'answerer'):.2f} → {mean(tail,'answerer'):.2f} | "
      f"{peak} MB, {procs} processes | {t_sft} + {t_rl} |")
PY
)"
    echo "$row"
    rows+=("$row")
  done
done
header="| seed | placement | RL steps | pair greedy success % (before → after) | pair T=1 success % | caller right at T=1 % | caller train reward (first 3 → last 3 steps) | answerer train reward | peak RSS of fronts + engines | wall s (warm-up + RL) |
|---|---|---|---|---|---|---|---|---|---|"
echo "$header"
printf '%s\n' "${rows[@]}"
{
  echo
  echo "## $(date -u +%Y-%m-%d): multi-model training, calc_duo on servers and on adapters (bench/classic/duo_proof.sh ${seeds[*]})"
  echo
  echo "Two models trained together by one launcher on calc_duo, from the main command's warm-up of each"
  echo "seed, RL budget ${rl_seconds} s per run. Placement \"servers\": examples/configs/calc_duo.yaml, one"
  echo "ajet-swarm front and engine per model, each training all weights. Placement \"adapters\":"
  echo "examples/configs/calc_duo_adapters.yaml, one front and engine, each model a LoRA adapter of the"
  echo "frozen base. Held-out success of the pair on 100 validation tasks; each model's training reward is"
  echo "its own (caller: right calculator call; answerer: right final answer). Peak RSS sampled every second."
  echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
  echo
  echo "$header"
  printf '%s\n' "${rows[@]}"
} >> "$md"
