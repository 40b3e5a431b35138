#!/usr/bin/env bash
# Dynamic sampling (DAPO) against plain GRPO batches, from the same warmed-up model in one run of this
# script: classic mode with swarm_mode_sample_collection_method rollout_until_finish_enough_tasks
# (every step trains on its 16 groups, uniform ones dropped) and with
# rollout_until_finish_enough_non_dummy_tasks (a step samples more task batches until 16 groups
# carry a signal, at most max_num_gen_batches). Same steps, seeds and held-out tasks; the two runs go
# side by side, so both see the same load. Prints held-out success before/after, the RL seconds and the gain per RL
# minute, and appends the table with the date to docs/benchmarks.md.
#
#   bench/classic/dynamic_sampling.sh [--no-append] --model exp/main/models/calc-sft [--steps 48] [--seed 1]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
model="" steps=48 seed=1 conf="examples/configs/calc.yaml"
append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-append) append=0; shift ;;
    --model) model="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --conf) conf="$2"; shift 2 ;;
    *) echo "dynamic_sampling: unknown argument '$1' (expected --model, --steps, --seed, --conf, --no-append)" >&2; exit 2 ;;
  esac
done
export AJET_BENCH_APPEND="$append"  # --no-append: print the table, leave docs/benchmarks.md alone
[ -f "$model/config.json" ] || { echo "dynamic_sampling: --model DIR with a config.json is required" >&2; exit 2; }
out="$here/exp/dynamic_sampling/$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
run() {
  local method="$1" start
  echo "dynamic_sampling: $method → $out/$method" >&2
  start=$(date +%s)
  "$bin/ajet" --conf "$conf" --exp-dir "$out" --set "ajet.experiment_name=$method" --set "ajet.model.path=$model" \
    --set "ajet.swarm_mode_sample_collection_method=$method" --set "ajet.trainer_common.total_training_steps=$steps" \
    --set "ajet.trainer_common.test_freq=$steps" --set "ajet.engine.seed=$seed" --set "ajet.task_reader.shuffle_seed=$seed" \
    > "$out/$method.log" 2>&1 || { echo "dynamic_sampling: $method failed; see $out/$method.log" >&2; tail -20 "$out/$method.log" >&2; exit 1; }
  echo $(( $(date +%s) - start )) > "$out/$method.seconds"
}
run rollout_until_finish_enough_tasks &
plain=$!
run rollout_until_finish_enough_non_dummy_tasks &
dynamic=$!
wait "$plain" && wait "$dynamic"
python3 - "$here" "$out" "$model" "$steps" <<'PY'
import datetime, json, os, sys
repo, out, model, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = []
for method, name in (("rollout_until_finish_enough_tasks", "plain (16 groups, uniform ones dropped)"),
                     ("rollout_until_finish_enough_non_dummy_tasks", "dynamic sampling (16 groups with a signal)")):
    recs = [json.loads(l) for l in open(os.path.join(out, method, "metrics.jsonl")) if l.strip()]
    val = [r for r in recs if r.get("kind") == "validation"]
    train = [r for r in recs if r.get("kind") == "train"]
    a, b = val[0]["validation"], val[-1]["validation"]
    rl_s = sum(r["step_time_s"] for r in train)
    episodes = sum(r["rollout"]["episodes"] for r in train)
    informative = [r.get("sampling", {}).get("informative_groups", 0) for r in train]
    rows.append(dict(name=name, s0=100 * a["sampled_success"], s1=100 * b["sampled_success"], g0=100 * a["greedy_success"],
                     g1=100 * b["greedy_success"], rl_s=rl_s, episodes=episodes,
                     informative=sum(informative) / max(1, len(informative))))
lines = [f"### Dynamic sampling vs plain GRPO batches ({datetime.date.today().isoformat()})", "",
         f"`bench/classic/dynamic_sampling.sh --model {model} --steps {steps}`: the same warmed-up model, {steps} RL steps each, "
         "the two runs side by side on 2 cores; held-out T=1 success is the mean of 4 samples on 100 tasks.", "",
         "| batches | T=1 before → after | greedy before → after | groups with a signal per step | episodes | RL s | T=1 points per RL minute |",
         "|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append(f"| {r['name']} | {r['s0']:.1f} → {r['s1']:.1f} | {r['g0']:.0f} → {r['g1']:.0f} | {r['informative']:.1f} | "
                 f"{r['episodes']} | {r['rl_s']:.0f} | {60 * (r['s1'] - r['s0']) / max(1, r['rl_s']):.2f} |")
p, d = rows
lines += ["", f"Dynamic sampling / plain: gain {(d['s1'] - d['s0']) / max(0.1, p['s1'] - p['s0']):.2f}x per step, "
          f"{(d['s1'] - d['s0']) / max(1, d['rl_s']) / max(1e-9, (p['s1'] - p['s0']) / max(1, p['rl_s'])):.2f}x per RL second.", ""]
text = "\n".join(lines) + "\n"
print(text)
if os.environ.get("AJET_BENCH_APPEND", "1") == "1":  # not after --no-append
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
