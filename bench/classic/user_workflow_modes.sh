#!/usr/bin/env bash
# Validation time of examples/first_agent (100 held-out tasks: one greedy and one sampled episode each,
# 200 episodes) with the agent started per episode against worker mode, in one run on the same model
# and machine, and the ratio. `ajet --conf examples/first_agent/config.yaml` with the debug backbone
# and val_only; the time is the validation record's time_s in metrics.jsonl. Appends a section to
# docs/benchmarks.md unless --no-append.
#   bench/classic/user_workflow_modes.sh [--no-append] [MODEL=exp/main/models/calc-sft] [REPEATS=1]
# Needs build/bin/ajet and the npm packages of examples/first_agent (npm install there, or a link to
# the cache of scripts/npm-deps.sh). Outputs: exp/bench/user_workflow_modes/.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"
append=1
if [ "${1:-}" = --no-append ]; then append=0; shift; fi
model="$(realpath "${1:-exp/main/models/calc-sft}")" repeats="${2:-1}"
out="exp/bench/user_workflow_modes/$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
rows=""
for (( i = 1; i <= repeats; i++ )); do
  declare -A t=()
  for mode in per_episode worker; do
    build/bin/ajet --conf examples/first_agent/config.yaml --exp-dir "$out/$mode-$i" --set "ajet.model.path=$model" \
      --set ajet.backbone=debug --set ajet.trainer_common.val_only=true --set ajet.trainer_common.val_pass_n=1 \
      --set "ajet.rollout.user_workflow_mode=$mode" > "$out/$mode-$i.log" 2>&1
    line=$(python3 - "$out/$mode-$i/first_agent/metrics.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["kind"] == "validation":
        v = r["validation"]
        print(f'{r["time_s"]:.2f} {v["greedy_success"] * 100:.0f} {v["sampled_success"] * 100:.0f}')
PY
)
    read -r secs greedy sampled <<< "$line"
    t[$mode]=$secs
    echo "run $i $mode: validation of 200 episodes $secs s (greedy $greedy%, sampled $sampled%)"
    rows+="| $i | $mode | $secs | $greedy % | $sampled % |"$'\n'
  done
  ratio=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.1f}')" "${t[per_episode]}" "${t[worker]}")
  echo "run $i: per_episode / worker = ${ratio}x"
  rows+="| $i | ratio | **${ratio}x** | | |"$'\n'
done
if [ "$append" = 1 ]; then
  {
    echo
    echo "## user_workflow: per episode vs worker mode (bench/classic/user_workflow_modes.sh), $(date +%Y-%m-%d)"
    echo
    echo "Validation of examples/first_agent (Node 20, openai 5.23.2): 100 held-out tasks, one greedy and one"
    echo "T=1 episode each (200 episodes, 32 in flight), debug backbone on $(basename "$model"), $(nproc) cores"
    echo "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))."
    echo
    echo "| run | mode | validation s | greedy | sampled |"
    echo "|---|---|---|---|---|"
    printf "%s" "$rows"
  } >> docs/benchmarks.md
  echo "appended to docs/benchmarks.md"
fi
