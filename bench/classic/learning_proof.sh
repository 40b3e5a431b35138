#!/usr/bin/env bash
# Learning proof: held-out success before vs after RL, over several seeds, in one run of this script.
# For each seed it runs classic mode (`ajet --conf CONF`, the real front + engine + built-in agents)
# from the same warmed-up model, reads the first and the last validation record of metrics.jsonl
# (greedy success, mean success of k samples at the rollout temperature, pass@k), prints a table and
# appends it with the date to docs/benchmarks.md. The comparison is within one run: every seed starts
# from the same model and is validated on the same held-out tasks before and after.
#
#   bench/classic/learning_proof.sh [--no-append] --conf examples/configs/calc.yaml --model exp/main/models/calc-sft \
#       --label calc [--seeds "1 2 3"] [--set ajet.trainer_common.total_training_steps=12 ...]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
conf="" model="" label="run" seeds="1 2 3" sets=()
append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-append) append=0; shift ;;
    --conf) conf="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --label) label="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "learning_proof: unknown argument '$1' (expected --conf, --model, --label, --seeds, --set, --no-append)" >&2; exit 2 ;;
  esac
done
export AJET_BENCH_APPEND="$append"  # --no-append: print the table, leave docs/benchmarks.md alone
[ -n "$conf" ] || { echo "learning_proof: --conf is required" >&2; exit 2; }
[ -f "$conf" ] || { echo "learning_proof: --conf $conf: no such file" >&2; exit 2; }
[ -z "$model" ] || [ -f "$model/config.json" ] || { echo "learning_proof: --model $model: no config.json there" >&2; exit 2; }
[ -z "$model" ] || sets+=(--set "ajet.model.path=$model")
out="$here/exp/learning/$label-$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
for s in $seeds; do
  echo "learning_proof: $label seed $s → $out/seed$s" >&2
  start=$(date +%s)
  "$bin/ajet" --conf "$conf" --exp-dir "$out" --set "ajet.experiment_name=seed$s" --set "ajet.engine.seed=$s" \
    --set "ajet.task_reader.shuffle_seed=$s" "${sets[@]}" > "$out/seed$s.log" 2>&1 \
    || { echo "learning_proof: seed $s failed; see $out/seed$s.log" >&2; tail -20 "$out/seed$s.log" >&2; exit 1; }
  echo $(( $(date +%s) - start )) > "$out/seed$s.seconds"
done
python3 - "$here" "$out" "$label" "$conf" "$model" "$seeds" "${sets[*]:-}" <<'PY'
import json, os, sys, datetime, statistics
repo, out, label, conf, model, seeds, sets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6].split(), sys.argv[7]
rows = []
for s in seeds:
    recs = [json.loads(l) for l in open(os.path.join(out, f"seed{s}", "metrics.jsonl")) if l.strip()]
    val = [r for r in recs if r.get("kind") == "validation" and "validation" in r]
    train = [r for r in recs if r.get("kind") == "train"]
    if len(val) < 2:
        sys.exit(f"learning_proof: seed {s}: fewer than two validation records in metrics.jsonl (set val_before_train and test_freq)")
    a, b = val[0], val[-1]
    secs = int(open(os.path.join(out, f"seed{s}.seconds")).read())
    rows.append(dict(seed=s, steps=b["step"], tasks=b["validation"]["tasks"], k=b["validation"]["k"],
                     g0=a["validation"]["greedy_success"], g1=b["validation"]["greedy_success"],
                     s0=a["validation"]["sampled_success"], s1=b["validation"]["sampled_success"],
                     p0=a["validation"]["pass_at_k"], p1=b["validation"]["pass_at_k"],
                     r0=train[0]["rollout"]["reward_mean"] if train else 0, r1=train[-1]["rollout"]["reward_mean"] if train else 0,
                     secs=secs))
pct = lambda x: f"{100*x:.1f}"
lines = [f"### Learning proof: {label} ({datetime.date.today().isoformat()})", "",
         f"`bench/classic/learning_proof.sh --conf {conf}" + (f" --model {model}" if model else "") + (f" {sets}" if sets else "") + "`; "
         f"held-out success before → after RL (validation at step 0 and at the last step), per seed.", "",
         "| seed | RL steps | held-out tasks | greedy % | T=1 mean of k % | pass@k % | train reward (first → last step) | wall s |",
         "|---|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append(f"| {r['seed']} | {r['steps']} | {r['tasks']} | {pct(r['g0'])} → {pct(r['g1'])} | {pct(r['s0'])} → {pct(r['s1'])} (k={r['k']}) "
                 f"| {pct(r['p0'])} → {pct(r['p1'])} | {r['r0']:.3f} → {r['r1']:.3f} | {r['secs']} |")
d = lambda key0, key1: statistics.mean(r[key1] - r[key0] for r in rows)
lines += ["", f"Mean gain over {len(rows)} seeds: greedy {100*d('g0','g1'):+.1f} points, T=1 {100*d('s0','s1'):+.1f} points, "
          f"pass@k {100*d('p0','p1'):+.1f} points.", ""]
text = "\n".join(lines)
print(text)
if os.environ.get("AJET_BENCH_APPEND", "1") == "1":  # not after --no-append
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
