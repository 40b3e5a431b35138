#!/usr/bin/env bash
# The main command's RL phase, timed: `ajet --conf examples/configs/calc.yaml` from a warmed-up model
# (scripts/run.sh's exp/main/models/calc-sft, copied so the run cannot touch it) for a fixed wall
# budget, no validation. Prints the mean and median GRPO step time, rollout time and generated
# tokens/s from the run's metrics.jsonl, with the commit and the uncommitted files under src/ that
# the build measured. Run it under the build lock so that no build runs beside it:
#
#   flock /work/build.lock bench/engine/rollout_rl_step.sh [--model DIR] [--seconds 150] [--label TEXT] [--set KEY=VALUE ...]
#
# --set passes a config override to ajet (for example --set ajet.rollout.max_env_worker=128).
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
model="$here/exp/main/models/calc-sft" seconds=150 label="" sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --label) label="$2"; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "rollout_rl_step: unknown argument '$1' (expected --model, --seconds, --label, --set)" >&2; exit 2 ;;
  esac
done
[ -f "$model/config.json" ] || { echo "rollout_rl_step: --model $model has no config.json (scripts/run.sh with AJET_STOP_AFTER=sft makes one)" >&2; exit 2; }
[ -x "$bin/ajet" ] || { echo "rollout_rl_step: $bin/ajet not found (build ajet, ajet-swarm, ajet-engine; AJET_BUILD_DIR picks the build)" >&2; exit 2; }
out="$(mktemp -d /tmp/rollout_rl_step.XXXXXX)"
trap 'rm -rf "$out"' EXIT
cp -r "$model" "$out/model"
commit="$(git -C "$here" rev-parse --short HEAD)"
dirty="$(git -C "$here" status --short -- src apps | awk '{print $2}' | tr '\n' ' ')"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
"$bin/ajet" --conf "$here/examples/configs/calc.yaml" --exp-dir "$out/exp" --set ajet.experiment_name=rl \
  --set "ajet.model.path=$out/model" --set "ajet.trainer_common.max_training_seconds=$seconds" \
  --set ajet.trainer_common.val_before_train=false --set ajet.trainer_common.test_freq=0 "${sets[@]}" > "$out/run.log" 2>&1 \
  || { echo "rollout_rl_step: the run failed; its log:" >&2; tail -30 "$out/run.log" >&2; exit 1; }
python3 - "$out/exp/rl/metrics.jsonl" "$commit" "$dirty" "$label" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys
path, commit, dirty, label, load0, load1 = sys.argv[1:7]
train = [r for r in (json.loads(l) for l in open(path) if l.strip()) if r.get("kind") == "train"]
if not train:
    sys.exit("rollout_rl_step: no train records in " + path)
def col(k):
    return [r[k] for r in train if k in r]
step, roll, tps = col("step_time_s"), col("rollout_time_s"), col("tokens_per_s")
# Dynamic sampling makes a step roll out 1-4 task batches: episodes per second of rollout compares runs.
episodes = sum(r.get("rollout", {}).get("episodes", 0) for r in train)
print(f"rollout_rl_step {label}: commit {commit}" + (f" + uncommitted {dirty}" if dirty.strip() else "") +
      f"; {len(step)} GRPO steps; step s mean {statistics.mean(step):.2f} median {statistics.median(step):.2f}; "
      f"rollout s mean {statistics.mean(roll):.2f}; episodes per rollout second {episodes / sum(roll):.1f}; "
      f"generated tokens/s median {statistics.median(tps):.0f}; "
      f"load {load0} -> {load1}")
PY
