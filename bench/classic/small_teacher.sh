#!/usr/bin/env bash
# A `small` calc teacher for bench/classic/opd_proof.sh (--teacher): the `small` preset (hidden 512,
# 8 layers, ~25 M parameters) on the tokenizer of seed SEED's warm-up (exp/main for seed 1), trained
# with `ajet sft` on correct calc demonstrations: a first stage of symbolic problems (the tool call
# copies the query), then the regular demos until held-out greedy success reaches STOP_AT (checked
# every 50 steps) or MAX_STEPS/MAX_SECONDS end; then RL_STEPS steps of the main command's RL
# (examples/configs/calc.yaml; 0: none). Then its held-out success at T=1 and greedy (200 tasks).
# Prints the figures; the model is exp/opd/small-teacher-seedSEED (reused when present; the SFT model
# alone is kept as exp/opd/small-teacher-seedSEED.work/model).
#
#   bench/classic/small_teacher.sh [--seed 1] [--max-steps 600] [--max-seconds 2700] [--stop-at 0.9]
#       [--rl-steps 20]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
seed=1 max_steps=600 max_seconds=2700 stop_at=0.9 rl_steps=20
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="$2"; shift 2 ;;
    --max-steps) max_steps="$2"; shift 2 ;;
    --max-seconds) max_seconds="$2"; shift 2 ;;
    --stop-at) stop_at="$2"; shift 2 ;;
    --rl-steps) rl_steps="$2"; shift 2 ;;
    *) echo "small_teacher: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bin="${AJET_BUILD_DIR:-$here/build}/bin"
[ -x "$bin/ajet" ] || { echo "small_teacher: $bin/ajet is not built (scripts/build.sh)" >&2; exit 2; }
if [ "$seed" = 1 ]; then work="$here/exp/main"; else work="$here/exp/main-seed$seed"; fi
[ -f "$work/tokenizer/tokenizer.json" ] || {
  echo "small_teacher: no tokenizer in $work (run AJET_SEED=$seed AJET_STOP_AFTER=sft scripts/run.sh)" >&2
  exit 2
}
out="$here/exp/opd/small-teacher-seed$seed"
tmp="$here/exp/opd/small-teacher-seed$seed.work"
mkdir -p "$tmp"
sft_stage() {  # the SFT model, $tmp/model
  "$bin/ajet" tasks demos --task calc --n 20000 --correct-ratio 1.0 --seed "$seed" > "$tmp/correct.jsonl"
  "$bin/ajet" tasks demos --task calc --n 20000 --correct-ratio 1.0 --seed "$seed" \
    --params '{"word_problem_ratio": 0}' > "$tmp/symbolic.jsonl"
  rm -rf "$tmp/init"
  "$bin/ajet" model init --preset small --tokenizer "$work/tokenizer" --seed "$seed" \
    --scaled-residual-init --out "$tmp/init"
  # lr 1e-3 (the tiny warm-up's 2e-3 halved for the wider model); the first stage at a constant lr.
  "$bin/ajet" sft --candidates 1 --model "$tmp/init" --out "$tmp/model" --force --seed "$seed" --threads 2 \
    --max-seconds "$max_seconds" --first-demos "$tmp/symbolic.jsonl" --first-steps 100 --first-warmup 20 \
    --first-lr 1e-3 --first-min-lr-ratio 1.0 --demos "$tmp/correct.jsonl" --steps "$max_steps" --warmup 10 \
    --lr 1e-3 --min-lr-ratio 0.1 --stop-at-success "$stop_at" --batch-tokens 4096 --log-every 25 \
    --eval-task calc --eval-n 50 --eval-seed "$seed" --eval-every 50 2>&1 | tee "$tmp/sft.log" >&2
}
rl_stage() {  # RL_STEPS steps of calc.yaml from $tmp/model; prints the final model's directory
  "$bin/ajet" --conf examples/configs/calc.yaml --exp-dir "$tmp/rl" --set "ajet.model.path=$tmp/model" \
    --set "ajet.engine.seed=$seed" --set "ajet.task_reader.shuffle_seed=$seed" \
    --set "ajet.task_reader.builtin.seed=$seed" --set "ajet.engine.kv_cache_memory_mb=1024" \
    --set "ajet.trainer_common.total_training_steps=$rl_steps" \
    --set "ajet.trainer_common.max_training_seconds=null" \
    --set "ajet.trainer_common.test_freq=$rl_steps" 2>&1 | tee "$tmp/rl.log" >&2
  sed -n 's/^ajet: final model: \([^ ]*\).*/\1/p' "$tmp/rl.log" | tail -1
}
cd "$here"
if [ ! -f "$out/config.json" ]; then
  [ -f "$tmp/model/config.json" ] || sft_stage  # reused when present
  model="$tmp/model"
  if [ "$rl_steps" -gt 0 ]; then
    model="$(rl_stage)"
    [ -n "$model" ] || { echo "small_teacher: the RL run left no final model ($tmp/rl.log)" >&2; exit 1; }
  fi
  rm -rf "$out.tmp" && cp -r "$model" "$out.tmp" && mv "$out.tmp" "$out"
fi
for t in 0 1; do
  "$bin/ajet" sft --eval-only --model "$out" --eval-task calc --eval-n 200 --eval-seed "$seed" \
    --eval-temperature "$t" --threads 2 2>&1 | sed -n "s/^eval.*: /small teacher, T=$t: /p"
done
