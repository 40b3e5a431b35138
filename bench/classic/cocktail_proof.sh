#!/usr/bin/env bash
# Learning proof of a cocktail: calc and frozenlake trained together in one classic-mode run
# (examples/configs/calc_cocktail.yaml: 24 GRPO steps of 16 tasks, 8 of each), against each task
# trained alone with the same episodes of that task (24 steps of 8 tasks, the same held-out tasks, the
# same settings otherwise). For every seed it prints held-out success per task (greedy, mean of 4
# samples at T=1, pass@4) at the start and at the end of each run, and appends a dated table to
# docs/benchmarks.md.
#
#   bench/classic/cocktail_proof.sh              # seeds 1 2 3
#   bench/classic/cocktail_proof.sh 4 5          # other seeds
#   bench/classic/cocktail_proof.sh --no-append  # print the table, leave docs/benchmarks.md alone
#
# The warm-up is made once and reused (it is the same for every seed): the tiny tokenizer, a tiny model
# with calc's initial weights (scripts/run.sh), and `ajet sft` on a shuffled mix of calc and frozenlake
# demos: stage 1 on correct calc demos and frozenlake demos (half shortest paths, half random walks)
# until held-out calc greedy success reaches 50% (calc's copying, docs/sft.md; at most
# AJET_SFT_STEPS=1000 steps), stage 2 (AJET_SFT2_STEPS=150 steps) on calc demos of which 70% are
# correct and the same frozenlake mix, so that RL starts from a model that knows both tasks and still
# errs when sampled. A seed then changes the engine's sampling and the order of training tasks.
# Environment: AJET_BUILD_DIR (build), AJET_WORK_DIR (exp/cocktail), AJET_THREADS (2),
# AJET_COCKTAIL_FLAGS (extra flags for every RL run, e.g. "--set ajet.trainer_common.total_training_steps=12").
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
work="${AJET_WORK_DIR:-$here/exp/cocktail}"
threads="${AJET_THREADS:-2}"
conf="$here/examples/configs/calc_cocktail.yaml"
append=1 args=()
for a in "$@"; do if [ "$a" = "--no-append" ]; then append=0; else args+=("$a"); fi; done
export AJET_BENCH_APPEND="$append"  # --no-append: print the table, leave docs/benchmarks.md alone
seeds=("${args[@]}")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3)
for s in "${seeds[@]}"; do
  case "$s" in ''|*[!0-9]*) echo "cocktail_proof: seeds must be non-negative integers, got '$s'" >&2; exit 2 ;; esac
done
for b in ajet ajet-swarm ajet-engine; do
  [ -x "$bin/$b" ] || { echo "cocktail_proof: $bin/$b is missing (build it, or set AJET_BUILD_DIR)" >&2; exit 2; }
done
start=$(date +%s)
say() { echo "cocktail_proof: [$(( $(date +%s) - start ))s] $*" >&2; }
mkdir -p "$work/models"

# 1. The warm-up (once).
model="$work/models/cocktail-sft"
demos() {  # demos OUT TASK FLAGS...: `ajet tasks demos` into OUT, made once
  local out="$1" task="$2"; shift 2
  [ -s "$out" ] || "$bin/ajet" tasks demos --task "$task" "$@" --out "$out"
}
mix_demos() {  # mix_demos OUT SEED IN...: the lines of IN... shuffled with SEED, made once
  local out="$1" seed="$2"; shift 2
  [ -s "$out" ] || python3 - "$out" "$seed" "$@" <<'PY'
import random, sys
lines = [l for path in sys.argv[3:] for l in open(path) if l.strip()]
random.Random(int(sys.argv[2])).shuffle(lines)
open(sys.argv[1], "w").writelines(lines)
PY
}
sft() {  # sft FROM DEMOS OUT STEPS WARMUP LR [FLAGS...]
  local from="$1" demos_file="$2" out="$3" steps="$4" warmup="$5" lr="$6"; shift 6
  say "sft: $(basename "$demos_file") -> $(basename "$out") (up to $steps steps)"
  "$bin/ajet" sft --model "$from" --demos "$demos_file" --out "$out" --force --steps "$steps" --warmup "$warmup" \
    --lr "$lr" --min-lr-ratio 0.3 --batch-tokens 4096 --seed 1 --threads "$threads" --log-every 50 "$@" \
    > "$out.log" 2>&1 || { tail -20 "$out.log" >&2; exit 1; }
}
if [ ! -f "$model/config.json" ]; then
  warm_start=$(date +%s)
  if [ ! -f "$work/tokenizer/tokenizer.json" ]; then
    say "tokenizer: corpus of every task's demos -> byte-level BPE (1024 ids)"
    "$bin/ajet" tasks corpus --seed 1 --out "$work/corpus.txt"
    "$bin/ajet" tokenizer train --corpus "$work/corpus.txt" --vocab-size 1024 --out "$work/tokenizer" > /dev/null
  fi
  if [ ! -f "$work/models/tiny-init/config.json" ]; then
    "$bin/ajet" model init --preset tiny --tokenizer "$work/tokenizer" --seed 1 --init-std 0.05 \
      --scaled-residual-init --embed-std 0.3 --out "$work/models/tiny-init" > /dev/null
  fi
  demos "$work/calc-correct.jsonl" calc --n 14000 --correct-ratio 1.0 --seed 1
  demos "$work/calc-mix70.jsonl" calc --n 6000 --correct-ratio 0.7 --seed 101
  # 4x4 lakes have ~2500 distinct training maps: 2000 demos, each three times in stage 1 (30% of it).
  demos "$work/frozenlake.jsonl" frozenlake --n 2000 --correct-ratio 0.5 --error-mix 0,1,0 --seed 5
  mix_demos "$work/stage1.jsonl" 1 "$work/calc-correct.jsonl" "$work/frozenlake.jsonl" "$work/frozenlake.jsonl" \
    "$work/frozenlake.jsonl"
  mix_demos "$work/stage2.jsonl" 2 "$work/calc-mix70.jsonl" "$work/frozenlake.jsonl"
  if [ ! -f "$work/models/cocktail-gate/config.json" ]; then
    sft "$work/models/tiny-init" "$work/stage1.jsonl" "$work/models/cocktail-gate" "${AJET_SFT_STEPS:-1000}" 30 2e-3 \
      --eval-task calc --eval-n 50 --eval-every 50 --stop-at-success 0.5
  fi
  sft "$work/models/cocktail-gate" "$work/stage2.jsonl" "$model" "${AJET_SFT2_STEPS:-150}" 10 1e-3
  echo $(( $(date +%s) - warm_start )) > "$work/warmup.seconds"
  say "warm-up done: $model ($(cat "$work/warmup.seconds") s)"
else
  say "warm-up: reusing $model"
fi

# 2. Per seed: the cocktail, then each task alone with the cocktail's episodes of that task.
alone=(--set 'ajet.task_reader.cocktail.tasks=[]' --set ajet.task_reader.cocktail.schedule.type=fixed
       --set ajet.task_reader.cocktail.schedule.start=null --set ajet.task_reader.type=builtin
       --set ajet.task_reader.builtin.seed=1 --set ajet.task_reader.builtin.num_validation_tasks=100
       --set ajet.data.train_batch_size=8)
calc_alone=("${alone[@]}" --set ajet.task_reader.builtin.generator=calc
            --set ajet.task_reader.builtin.num_training_tasks=4000)
frozenlake_alone=("${alone[@]}" --set ajet.task_reader.builtin.generator=frozenlake
                  --set ajet.task_reader.builtin.num_training_tasks=2000
                  --set 'ajet.task_reader.builtin.params={size: 4, hole_fraction: 0.2, slippery: false}')
out="$here/exp/learning/cocktail-$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
rl() {  # rl SEED NAME FLAGS...: one classic run into $out/seedSEED-NAME
  local seed="$1" name="$2"; shift 2
  say "seed $seed: $name"
  local t0; t0=$(date +%s)
  # shellcheck disable=SC2086
  "$bin/ajet" --conf "$conf" --exp-dir "$out" --set "ajet.experiment_name=seed$seed-$name" --set "ajet.model.path=$model" \
    --set "ajet.engine.seed=$seed" --set "ajet.task_reader.shuffle_seed=$seed" "$@" ${AJET_COCKTAIL_FLAGS:-} \
    > "$out/seed$seed-$name.log" 2>&1 || { tail -20 "$out/seed$seed-$name.log" >&2; exit 1; }
  echo $(( $(date +%s) - t0 )) > "$out/seed$seed-$name.seconds"
}
for s in "${seeds[@]}"; do
  rl "$s" cocktail
  rl "$s" calc-alone "${calc_alone[@]}"
  rl "$s" frozenlake-alone "${frozenlake_alone[@]}"
done

# 3. The table: held-out success per task at the first and the last validation of each run.
python3 - "$here" "$out" "$work" "${seeds[*]}" "${AJET_COCKTAIL_FLAGS:-}" <<'PY'
import datetime, json, os, statistics, sys
repo, out, work, seeds, flags = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5]

def records(name):
    path = os.path.join(out, name, "metrics.jsonl")
    return [json.loads(l) for l in open(path) if l.strip()]

def held_out(name, task):
    """(first, last) validation summaries of `task` in run `name`, and its step count and train episodes."""
    recs = records(name)
    val = [r for r in recs if r.get("kind") == "validation"]
    if len(val) < 2:
        sys.exit(f"cocktail_proof: {name}: fewer than two validation records")
    pick = (lambda r: r["cocktail"][task]) if "cocktail" in val[0] else (lambda r: r["validation"])
    train = [r for r in recs if r.get("kind") == "train"]
    episodes = sum((r["cocktail"][task]["episodes"] if "cocktail" in r else r["rollout"]["episodes"]) for r in train)
    return pick(val[0]), pick(val[-1]), val[-1]["step"], episodes

pct = lambda x: f"{100 * x:.1f}"
rows, gains = [], {}
for s in seeds:
    for task in ("calc", "frozenlake"):
        for run in ("cocktail", f"{task}-alone"):
            a, b, steps, episodes = held_out(f"seed{s}-{run}", task)
            secs = int(open(os.path.join(out, f"seed{s}-{run}.seconds")).read())
            rows.append(f"| {s} | {task} | {run} | {steps} | {episodes} | {pct(a['greedy_success'])} → {pct(b['greedy_success'])} "
                        f"| {pct(a['sampled_success'])} → {pct(b['sampled_success'])} | {pct(a['pass_at_k'])} → {pct(b['pass_at_k'])} | {secs} |")
            gains.setdefault((task, run.split("-")[-1] if run != "cocktail" else "cocktail"), []).append(
                (b["sampled_success"] - a["sampled_success"], b["sampled_success"]))
warm = open(os.path.join(work, "warmup.seconds")).read().strip() if os.path.exists(os.path.join(work, "warmup.seconds")) else "?"
lines = [f"### Cocktail learning proof: calc + frozenlake ({datetime.date.today().isoformat()})", "",
         f"`bench/classic/cocktail_proof.sh {' '.join(seeds)}`" + (f" with `AJET_COCKTAIL_FLAGS=\"{flags}\"`" if flags else "") +
         f": `examples/configs/calc_cocktail.yaml` (8 calc + 8 frozenlake tasks a step, 8 episodes each) against each task "
         f"alone with the same episodes of that task (8 tasks a step, same steps, same held-out tasks). Held-out success of "
         f"each task at the first and the last validation (100 tasks; greedy, mean of 4 samples at T=1, pass@4). One "
         f"warm-up for every seed ({warm} s, made once: calc + frozenlake demos, `ajet sft`).", "",
         "| seed | task | run | RL steps | train episodes of the task | greedy % | T=1 mean of 4 % | pass@4 % | wall s |",
         "|---|---|---|---|---|---|---|---|---|"] + rows + [""]
for task in ("calc", "frozenlake"):
    c, a = gains[(task, "cocktail")], gains[(task, "alone")]
    lines.append(f"{task}: T=1 gain in the cocktail {100 * statistics.mean(g for g, _ in c):+.1f} points (mean over "
                 f"{len(c)} seeds), alone {100 * statistics.mean(g for g, _ in a):+.1f}; final T=1 success cocktail "
                 f"{pct(statistics.mean(f for _, f in c))}% vs alone {pct(statistics.mean(f for _, f in a))}%.")
text = "\n".join(lines) + "\n"
print(text)
if os.environ.get("AJET_BENCH_APPEND", "1") == "1":  # not after --no-append
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
say "done; runs in $out"
