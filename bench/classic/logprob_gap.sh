#!/usr/bin/env bash
# The training–inference logprob gap on the main command's RL config (examples/configs/calc.yaml), from
# the same warmed-up model, under several rollout settings: the token mean of |old − rollout logprob|
# over trained tokens (`rollout_logprob_diff`, recomputed old logprobs), per step, with the RL speed
# beside it. A float32 KV cache against the bfloat16 one (engine numerics), a rollout temperature below
# 1 (the trainer forms softmax(logits / T) like the sampler), and the async backbone (the policy
# versions in between add to the gap). Speed is async_vs_torch.sh's and engine_bench's job. Prints a
# table and appends it with the date to docs/benchmarks.md.
#
#   bench/classic/logprob_gap.sh [--no-append] --model exp/main/models/calc-sft [--steps 10] [--seed 1]
#
# AJET_BUILD_DIR picks the build tree (default: build). The model is copied, never written.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
model="" steps=10 seed=1 append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-append) append=0; shift ;;
    --model) model="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    *) echo "logprob_gap: unknown argument '$1' (expected --model, --steps, --seed, --no-append)" >&2; exit 2 ;;
  esac
done
[ -f "$model/config.json" ] || { echo "logprob_gap: --model DIR with a config.json is required" >&2; exit 2; }
[ -x "$bin/ajet" ] || { echo "logprob_gap: $bin/ajet is not built (set AJET_BUILD_DIR)" >&2; exit 2; }
case "$steps" in ''|*[!0-9]*|0) echo "logprob_gap: --steps must be a positive integer, got '$steps'" >&2; exit 2 ;; esac
out="$here/exp/logprob_gap/$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
cp -r "$model" "$out/model"
cd "$here"
# name | backbone | extra --set
variants=(
  "float32-cache|torch|"
  "bfloat16-cache|torch|ajet.engine.kv_cache_dtype=bfloat16"
  "temperature-0.7|torch|ajet.rollout.temperature=0.7"
  "async|async|"
)
for v in "${variants[@]}"; do
  IFS='|' read -r name backbone extra <<<"$v"
  echo "logprob_gap: $name → $out/$name" >&2
  sets=(--set "ajet.experiment_name=$name" --set "ajet.model.path=$out/model"
        --set "ajet.trainer_common.total_training_steps=$steps" --set "ajet.trainer_common.max_training_seconds=100000"
        --set "ajet.trainer_common.test_freq=100000" --set "ajet.trainer_common.val_before_train=false"
        --set "ajet.engine.seed=$seed" --set "ajet.task_reader.shuffle_seed=$seed")
  [ -n "$extra" ] && sets+=(--set "$extra")
  "$bin/ajet" --conf examples/configs/calc.yaml --exp-dir "$out" --backbone "$backbone" "${sets[@]}" \
    > "$out/$name.log" 2>&1 || { echo "logprob_gap: $name failed; see $out/$name.log" >&2; tail -20 "$out/$name.log" >&2; exit 1; }
done
AJET_BENCH_APPEND="$append" python3 - "$here" "$out" "$model" "$steps" "$seed" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import datetime, json, os, statistics, sys
repo, out, model, steps, seed, load = sys.argv[1:7]
steps = int(steps)
what = {"float32-cache": "torch, float32 KV cache (the default), T = 1",
        "bfloat16-cache": "torch, `ajet.engine.kv_cache_dtype: bfloat16`, T = 1",
        "temperature-0.7": "torch, float32 cache, `ajet.rollout.temperature: 0.7`",
        "async": "async (max_staleness 1), float32 cache, T = 1"}
rows = []
for name, label in what.items():
    recs = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl")) if l.strip()]
    train = [r for r in recs if r.get("kind") == "train"]
    gaps = [r["trainer"]["rollout_logprob_diff"] for r in train if "rollout_logprob_diff" in r.get("trainer", {})]
    assert len(train) == steps and gaps, f"{name}: {len(train)} steps, {len(gaps)} with the gap"
    rows.append((label, statistics.median(gaps), min(gaps), max(gaps), len(gaps),
                 statistics.mean(r["rollout"]["success_rate"] for r in train)))
base = rows[0][1]
lines = [f"### Training–inference logprob gap, classic calc RL ({datetime.date.today().isoformat()})", "",
         f"`bench/classic/logprob_gap.sh --model {model} --steps {steps} --seed {seed}`: examples/configs/calc.yaml from "
         f"the same warmed-up model, {steps} steps per run, one run per setting. Gap: the trainer's "
         "`rollout_logprob_diff`, the token mean of |recomputed old − rollout logprob| over a step's trained "
         "tokens, in nats (median and range over the steps); train success: the steps' mean (a lower "
         f"temperature samples more greedily). Load average (1/5/15 min) at the end: {load}.", "",
         "| rollout setting | gap, median (range) | vs float32 cache | steps with a gap | train success |",
         "|---|---|---|---|---|"]
for label, med, lo, hi, n, succ in rows:
    lines.append(f"| {label} | {med:.2e} ({lo:.2e}-{hi:.2e}) | {med / base:.1f}x | {n}/{steps} | {100 * succ:.1f}% |")
text = "\n".join(lines) + "\n"
print(text)
if os.environ.get("AJET_BENCH_APPEND", "1") == "1":  # not after --no-append
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
