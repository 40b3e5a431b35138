#!/usr/bin/env bash
# The async backbone against torch on the main command's RL config (examples/configs/calc.yaml:
# dynamic sampling, 16 tasks x 8 episodes a step, 64 in flight), from the same warmed-up model, the same
# number of steps, the same seeds and held-out tasks. torch trains each step with generation paused;
# async rolls out step s+1 while step s trains (ajet.async.max_staleness 1). The runs alternate
# (torch, async, torch, async, ...; never side by side, since overlap is about using the cores a run
# leaves idle). Prints RL steps per second (steps / the seconds from the end of the step-0 validation to
# the last step's record, every batch trained), the ratio, held-out success before/after and the
# staleness, and appends the table with the date to docs/benchmarks.md.
#
#   bench/classic/async_vs_torch.sh [--no-append] --model exp/main/models/calc-sft [--steps 20] [--rounds 2] [--seed 1]
#
# AJET_BUILD_DIR picks the build tree (default: build). The model is copied, never written.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
model="" steps=20 rounds=2 seed=1 conf="examples/configs/calc.yaml"
append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-append) append=0; shift ;;
    --model) model="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --conf) conf="$2"; shift 2 ;;
    *) echo "async_vs_torch: unknown argument '$1' (expected --model, --steps, --rounds, --seed, --conf, --no-append)" >&2; exit 2 ;;
  esac
done
export AJET_BENCH_APPEND="$append"  # --no-append: print the table, leave docs/benchmarks.md alone
[ -f "$model/config.json" ] || { echo "async_vs_torch: --model DIR with a config.json is required" >&2; exit 2; }
[ -x "$bin/ajet" ] || { echo "async_vs_torch: $bin/ajet is not built (set AJET_BUILD_DIR)" >&2; exit 2; }
out="$here/exp/async_vs_torch/$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
cp -r "$model" "$out/model"
cd "$here"
run() {
  local backbone="$1" round="$2" name="$1-$2"
  echo "async_vs_torch: $name → $out/$name" >&2
  "$bin/ajet" --conf "$conf" --exp-dir "$out" --backbone "$backbone" --set "ajet.experiment_name=$name" \
    --set "ajet.model.path=$out/model" --set "ajet.trainer_common.total_training_steps=$steps" \
    --set "ajet.trainer_common.max_training_seconds=100000" --set "ajet.trainer_common.test_freq=$steps" \
    --set "ajet.trainer_common.val_before_train=true" --set "ajet.async.max_staleness=1" \
    --set "ajet.engine.seed=$seed" --set "ajet.task_reader.shuffle_seed=$seed" \
    > "$out/$name.log" 2>&1 || { echo "async_vs_torch: $name failed; see $out/$name.log" >&2; tail -20 "$out/$name.log" >&2; exit 1; }
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$rounds"); do
  run torch "$round"
  run async "$round"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$here" "$out" "$model" "$steps" "$rounds" "$load_before" "$load_after" <<'PY'
import datetime, json, os, statistics, sys
repo, out, model, steps, rounds, load_before, load_after = sys.argv[1:8]
steps, rounds = int(steps), int(rounds)
def one(name):
    recs = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl")) if l.strip()]
    val = [r for r in recs if r.get("kind") == "validation"]
    train = [r for r in recs if r.get("kind") == "train"]
    assert len(train) == steps and len(val) >= 2, f"{name}: {len(train)} steps, {len(val)} validations"
    rl_s = train[-1]["elapsed_s"] - val[0]["elapsed_s"]
    stale = [r["staleness"] for r in train if isinstance(r.get("staleness"), dict)]
    return dict(rl_s=rl_s, sps=steps / rl_s, eps=sum(r["rollout"]["episodes"] for r in train) / rl_s, s0=100 * val[0]["validation"]["sampled_success"],
                s1=100 * val[-1]["validation"]["sampled_success"], g1=100 * val[-1]["validation"]["greedy_success"],
                p1=100 * val[-1]["validation"]["pass_at_k"],
                rollout=statistics.mean(r["rollout_time_s"] for r in train),
                wait=statistics.mean(r["train_wait_s"] for r in train),
                stale_mean=statistics.mean(s["mean"] for s in stale if s.get("mean") is not None) if stale else None,
                stale_max=max(s["max"] for s in stale) if stale else None,
                stale_pos=sum(1 for s in stale if s["max"] > 0))
runs = {(b, k): one(f"{b}-{k}") for k in range(1, rounds + 1) for b in ("torch", "async")}
lines = [f"### Async backbone vs torch, classic calc RL ({datetime.date.today().isoformat()})", "",
         f"`bench/classic/async_vs_torch.sh --model {model} --steps {steps} --rounds {rounds}`: examples/configs/calc.yaml "
         f"(dynamic sampling, 16 tasks x 8 episodes, 64 in flight, engine.threads 2) from the same warmed-up model, {steps} "
         "steps per run, runs alternating torch/async; async with max_staleness 1 and the defaults ajet.async.trainer_threads "
         "(1 of 2), decode_threads_while_training (2) and trainer_nice (19). RL s: from the end of the step-0 validation to the "
         "last step's record (every batch trained). Dynamic sampling makes a step's work differ between runs (1-4 task "
         "batches), so episodes per second is given too. Held-out: 100 tasks, T=1 success = mean of 4 samples. "
         f"Load average (1/5/15 min) before: {load_before}, after: {load_after}.", "",
         "| run | RL s | steps/s | episodes/s | rollout s/step | wait s/step | staleness mean / max (batches > 0) | T=1 before → after | greedy after | pass@4 after |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for (b, k), r in runs.items():
    stale = "-" if r["stale_max"] is None else f"{r['stale_mean']:.2f} / {r['stale_max']} ({r['stale_pos']}/{steps})"
    lines.append(f"| {b} {k} | {r['rl_s']:.0f} | {r['sps']:.3f} | {r['eps']:.1f} | {r['rollout']:.2f} | {r['wait']:.2f} | {stale} | "
                 f"{r['s0']:.1f} → {r['s1']:.1f} | {r['g1']:.0f}% | {r['p1']:.0f}% |")
ratios = [runs[("async", k)]["sps"] / runs[("torch", k)]["sps"] for k in range(1, rounds + 1)]
t_sps = sum(runs[("torch", k)]["sps"] for k in range(1, rounds + 1)) / rounds
a_sps = sum(runs[("async", k)]["sps"] for k in range(1, rounds + 1)) / rounds
t_s1 = sum(runs[("torch", k)]["s1"] for k in range(1, rounds + 1)) / rounds
a_s1 = sum(runs[("async", k)]["s1"] for k in range(1, rounds + 1)) / rounds
t_eps = sum(runs[("torch", k)]["eps"] for k in range(1, rounds + 1)) / rounds
a_eps = sum(runs[("async", k)]["eps"] for k in range(1, rounds + 1)) / rounds
lines += ["", f"async / torch steps per second: {a_sps / t_sps:.2f}x (per round: {', '.join(f'{x:.2f}x' for x in ratios)}), "
          f"episodes per second: {a_eps / t_eps:.2f}x; "
          f"held-out T=1 after {steps} steps: async {a_s1:.1f}% vs torch {t_s1:.1f}% ({a_s1 - t_s1:+.1f} points; one run's "
          "noise on 400 samples is about 2.5 points, a difference of two runs about 3.5).", ""]
text = "\n".join(lines) + "\n"
print(text)
if os.environ.get("AJET_BENCH_APPEND", "1") == "1":  # not after --no-append
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
