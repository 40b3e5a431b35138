#!/usr/bin/env bash
# RL changes behaviour, not only sharpness. A model that can copy numbers (the main command's warm-up)
# is fine-tuned on a skewed mix of calc demos where 60% answer without the tool (30% correct, error mix
# bad_expr:bad_copy:no_tool = 1:1:12, as in the reference experiment), so its greedy policy answers
# without the calculator and fails. Then GRPO with the tool-using reward, validating every few steps:
# greedy held-out success before RL and after each slice of RL seconds (validation time excluded).
# Target (issue 13): greedy held-out success >= 80% within 60 s of RL. Appends the table with the
# date to docs/benchmarks.md.
#
#   bench/classic/skewed_start.sh [--no-append] --model exp/main/models/calc-sft [--sft-steps 150] [--rl-steps 40] [--seed 1]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
model="" sft_steps=150 rl_steps=40 seed=1 every=5
append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-append) append=0; shift ;;
    --model) model="$2"; shift 2 ;;
    --sft-steps) sft_steps="$2"; shift 2 ;;
    --rl-steps) rl_steps="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --every) every="$2"; shift 2 ;;
    *) echo "skewed_start: unknown argument '$1' (expected --model, --sft-steps, --rl-steps, --seed, --every, --no-append)" >&2; exit 2 ;;
  esac
done
export AJET_BENCH_APPEND="$append"  # --no-append: print the table, leave docs/benchmarks.md alone
[ -f "$model/config.json" ] || { echo "skewed_start: --model DIR with a config.json is required" >&2; exit 2; }
out="$here/exp/skewed/$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
"$bin/ajet" tasks demos --task calc --n 20000 --correct-ratio 0.3 --error-mix 1,1,12 --seed "$((seed + 100))" > "$out/skewed.jsonl"
echo "skewed_start: ajet sft on the skewed mix ($sft_steps steps) → $out/skewed-sft" >&2
"$bin/ajet" sft --model "$model" --demos "$out/skewed.jsonl" --out "$out/skewed-sft" --steps "$sft_steps" --warmup 10 \
  --lr 1e-3 --min-lr-ratio 0.3 --batch-tokens 4096 --seed "$seed" --threads 2 --log-every 50 \
  --eval-task calc --eval-n 100 --eval-seed "$seed" > "$out/sft.log" 2>&1 \
  || { echo "skewed_start: sft failed; see $out/sft.log" >&2; tail -20 "$out/sft.log" >&2; exit 1; }
echo "skewed_start: RL from the skewed model ($rl_steps steps, validation every $every) → $out/rl" >&2
"$bin/ajet" --conf examples/configs/calc.yaml --exp-dir "$out" --set ajet.experiment_name=rl \
  --set "ajet.model.path=$out/skewed-sft" --set "ajet.trainer_common.total_training_steps=$rl_steps" \
  --set "ajet.trainer_common.test_freq=$every" --set ajet.trainer_common.val_pass_n=1 \
  --set "ajet.engine.seed=$seed" --set "ajet.task_reader.shuffle_seed=$seed" > "$out/rl.log" 2>&1 \
  || { echo "skewed_start: RL failed; see $out/rl.log" >&2; tail -20 "$out/rl.log" >&2; exit 1; }
python3 - "$here" "$out" "$model" "$sft_steps" "$rl_steps" <<'PY'
import datetime, json, os, sys
repo, out, model, sft_steps, rl_steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
recs = [json.loads(l) for l in open(os.path.join(out, "rl", "metrics.jsonl")) if l.strip()]
rl_s, points = 0.0, []
for r in recs:
    if r.get("kind") == "train":
        rl_s += r["step_time_s"]
    elif r.get("kind") == "validation":
        v = r["validation"]
        calls = r.get("greedy_rollout", {}).get("llm_calls", 0) / max(1, r.get("greedy_rollout", {}).get("episodes", 1))
        points.append((r["step"], rl_s, 100 * v["greedy_success"], 100 * v["sampled_success"], calls))
reached = next((p for p in points if p[2] >= 80), None)
lines = [f"### Skewed start: RL teaches the tool ({datetime.date.today().isoformat()})", "",
         f"`bench/classic/skewed_start.sh --model {model} --sft-steps {sft_steps} --rl-steps {rl_steps}`: the warmed-up calc "
         "model fine-tuned on demos of which 60% answer without the tool (30% correct, mix 1:1:12), then GRPO with the "
         "tool-using reward; held-out success on 100 tasks (greedy, and T=1 with one sample).", "",
         "| RL step | RL seconds | greedy | T=1 | model calls per greedy episode |", "|---|---|---|---|---|"]
for step, secs, g, s, calls in points:
    lines.append(f"| {step} | {secs:.0f} | {g:.0f}% | {s:.0f}% | {calls:.2f} |")
lines += ["", (f"Greedy held-out success reached {reached[2]:.0f}% after {reached[1]:.0f} s of RL (step {reached[0]}); target: >= 80% within 60 s."
               if reached else "Greedy held-out success never reached 80% (target: within 60 s)."), ""]
text = "\n".join(lines) + "\n"
print(text)
if os.environ.get("AJET_BENCH_APPEND", "1") == "1":  # not after --no-append
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
