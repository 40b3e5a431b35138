#!/usr/bin/env bash
# Prefix caching off vs on, in one run: classic-mode RL steps (`ajet --conf CONF`: front + engine +
# built-in agents + trainer) from the same model, alternating A (ajet.engine.enable_prefix_caching=false)
# and B (true) for --rounds rounds. Every calc episode sends the same system prompt and tools block,
# and its second turn repeats its first, so most prompt tokens are already in the cache; each weight
# update empties it. Prints the median rollout seconds and step seconds per RL step, their ratio, and
# appends the table with the date to docs/benchmarks.md.
#
#   bench/engine/prefix_caching.sh [--conf examples/configs/calc.yaml] [--model DIR] [--steps 6]
#                                  [--rounds 2] [--threads 2] [--no-append]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
conf="$here/examples/configs/calc.yaml" model="" steps=6 rounds=2 threads=2 append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --conf) conf="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --no-append) append=0; shift ;;
    *) echo "prefix_caching: unknown argument '$1' (expected --conf, --model, --steps, --rounds, --threads, --no-append)" >&2; exit 2 ;;
  esac
done
[ -f "$conf" ] || { echo "prefix_caching: --conf $conf: no such file" >&2; exit 2; }
sets=(--set "ajet.trainer_common.total_training_steps=$steps" --set ajet.trainer_common.val_before_train=false
      --set ajet.trainer_common.test_freq=0 --set "ajet.engine.threads=$threads")
[ -z "$model" ] || sets+=(--set "ajet.model.path=$model")
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
  for mode in false true; do
    name="r$r-$mode"
    "$bin/ajet" --conf "$conf" --exp-dir "$out" --set "ajet.experiment_name=$name" \
      --set "ajet.engine.enable_prefix_caching=$mode" "${sets[@]}" > "$out/$name.log" 2>&1 \
      || { echo "prefix_caching: run $name failed; see its log:" >&2; tail -20 "$out/$name.log" >&2; exit 1; }
    echo "prefix_caching: round $r, prefix caching $mode done" >&2
  done
done
python3 - "$out" "$here" "$conf" "$steps" "$rounds" "$threads" "$append" "$(uptime | sed 's/.*load average: //')" <<'PY'
import json, os, sys, statistics, datetime
out, repo, conf, steps, rounds, threads, append, load = sys.argv[1:9]
def runs(mode):
    rollout, step, tps = [], [], []
    for r in range(1, int(rounds) + 1):
        recs = [json.loads(l) for l in open(os.path.join(out, f"r{r}-{mode}", "metrics.jsonl")) if l.strip()]
        train = [x for x in recs if x.get("kind") == "train"]
        rollout += [x["rollout_time_s"] for x in train]
        step += [x["step_time_s"] for x in train]
        tps += [x["tokens_per_s"] for x in train]
    return statistics.median(rollout), statistics.median(step), statistics.median(tps), len(step)
ra, sa, ta, n = runs("false")
rb, sb, tb, _ = runs("true")
lines = [f"### Prefix caching off vs on: classic-mode RL steps ({datetime.date.today().isoformat()})", "",
         f"`bench/engine/prefix_caching.sh --steps {steps} --rounds {rounds} --threads {threads}` on `{os.path.relpath(conf, repo)}`: "
         f"medians over {n} RL steps per setting (alternating runs; each weight update empties the cache). "
         f"Load average at the end {load}.", "",
         "| run | rollout s/step | step s | generated tokens/s |", "|---|---|---|---|",
         f"| A: `enable_prefix_caching: false` | {ra:.2f} | {sa:.2f} | {ta:.0f} |",
         f"| B: `enable_prefix_caching: true` | {rb:.2f} | {sb:.2f} | {tb:.0f} |",
         f"| **B vs A** | **{ra / rb:.2f}x faster** | **{sa / sb:.2f}x** | **{tb / ta:.2f}x** |", ""]
print("\n".join(lines))
if append == "1":
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + "\n".join(lines) + "\n")
PY
