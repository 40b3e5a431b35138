#!/usr/bin/env bash
# Validation time of examples/first_agent (100 held-out tasks: one greedy and one sampled episode each,
# 200 episodes) with the agent started per episode against worker mode, in one run on the same model
# and machine, and the ratio. `ajet --conf examples/first_agent/config.yaml` with the debug backbone
# and val_only; the time is the validation record's time_s in metrics.jsonl.
#   bench/classic/user_workflow_modes.sh [MODEL=exp/main/models/calc-sft] [REPEATS=1]
# Needs build/bin/ajet and the npm packages of examples/first_agent (npm install there, or a link to
# the cache of scripts/npm-deps.sh). Outputs: exp/bench/user_workflow_modes/.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"
model="$(realpath "${1:-exp/main/models/calc-sft}")" repeats="${2:-1}"
out="exp/bench/user_workflow_modes/$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
declare -A times
for (( i = 1; i <= repeats; i++ )); do
  for mode in per_episode worker; do
    build/bin/ajet --conf examples/first_agent/config.yaml --exp-dir "$out/$mode-$i" --set "ajet.model.path=$model" \
      --set ajet.backbone=debug --set ajet.trainer_common.val_only=true --set ajet.trainer_common.val_pass_n=1 \
      --set "ajet.rollout.user_workflow_mode=$mode" > "$out/$mode-$i.log" 2>&1
    t=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["kind"] == "validation":
        v = r["validation"]
        print(f"{r[\"time_s\"]:.2f} {v[\"tasks\"]} {v[\"greedy_success\"]:.3f} {v[\"sampled_success\"]:.3f}")' \
      "$out/$mode-$i/first_agent/metrics.jsonl")
    times[$mode-$i]="${t%% *}"
    echo "run $i $mode: validation ${t%% *} s (tasks, greedy, sampled success: ${t#* })"
  done
  python3 -c "import sys; print(f'run $i: per_episode / worker = {float(sys.argv[1]) / float(sys.argv[2]):.1f}x')" \
    "${times[per_episode-$i]}" "${times[worker-$i]}"
done
