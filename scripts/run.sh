#!/usr/bin/env bash
# The README's main command: on a fresh machine, install, build, make the tiny tokenizer and model,
# warm the model up with `ajet sft` on calc demonstrations, then train the calc agent with RL through
# the swarm (`ajet --conf examples/configs/calc.yaml`: front + engine + built-in agents) and print
# where the reward curve is. AJET_RUN_TASK=frozenlake does the same for the grid-world task.
# Idempotent: outputs already present (build, tokenizer, models) are reused. Everything it makes
# lives under exp/main/ (git-ignored). Times on 2 cores: docs/learning.md.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
build="${AJET_BUILD_DIR:-$here/build}"
work="$here/exp/main"
task="${AJET_RUN_TASK:-calc}"  # calc (the default) or frozenlake
case "$task" in
  calc|frozenlake) ;;
  *) echo "run: AJET_RUN_TASK must be calc or frozenlake, got '$task'" >&2; exit 2 ;;
esac
conf="${AJET_RUN_CONF:-examples/configs/$task.yaml}"
start=$(date +%s)
say() { echo "run: [$(( $(date +%s) - start ))s] $*"; }

"$here/scripts/setup.sh"

# Build only what the main command runs (scripts/build.sh builds everything, tests included).
gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
say "building ajet, ajet-swarm, ajet-engine in $build"
cmake --build "$build" --target ajet ajet-swarm ajet-engine -j "${AJET_JOBS:-$(nproc)}"
bin="$build/bin"
start=$(date +%s)  # the 10-minute budget counts from here
mkdir -p "$work/models"

# 1. The tiny tokenizer, trained on rendered demos of the built-in tasks.
if [ ! -f "$work/tokenizer/tokenizer.json" ]; then
  say "tokenizer: corpus of rendered task demos → byte-level BPE (1024 ids)"
  "$bin/ajet" tasks corpus --out "$work/corpus.txt"
  "$bin/ajet" tokenizer train --corpus "$work/corpus.txt" --vocab-size 1024 --out "$work/tokenizer.tmp"
  rm -rf "$work/tokenizer" && mv "$work/tokenizer.tmp" "$work/tokenizer"
else
  say "tokenizer: reusing $work/tokenizer"
fi

# 2. A freshly initialised tiny model (hidden 128, 4 layers).
if [ ! -f "$work/models/tiny-init/config.json" ]; then
  say "model: ajet model init --preset tiny"
  rm -rf "$work/models/tiny-init.tmp"
  "$bin/ajet" model init --preset tiny --tokenizer "$work/tokenizer" --seed 1 --out "$work/models/tiny-init.tmp"
  mv "$work/models/tiny-init.tmp" "$work/models/tiny-init"
else
  say "model: reusing $work/models/tiny-init"
fi

# 3. Warm-up: SFT on generated demonstrations of the task, so RL starts from a model with some, not
#    all, reward. calc, in two stages: correct demos (500 steps) until the model copies numbers (from the question
#    into the tool call, from the tool result into the answer: what a fresh model lacks, docs/sft.md),
#    then a short stage on the reference experiment's mix (70% correct, the rest wrong expressions,
#    miscopied results, no tool), so the sampled policy makes the mistakes RL removes. frozenlake: half
#    shortest paths, half random walks.
sft_model="$work/models/$task-sft"
demos() {  # demos NAME FLAGS...: $work/NAME.jsonl, made once
  local name="$1"; shift
  if [ ! -s "$work/$name.jsonl" ]; then
    say "sft: ajet tasks demos --task $task $*"
    "$bin/ajet" tasks demos --task "$task" "$@" > "$work/$name.jsonl.tmp"
    mv "$work/$name.jsonl.tmp" "$work/$name.jsonl"
  fi
}
sft() {  # sft FROM DEMOS OUT STEPS WARMUP LR MIN_LR_RATIO [ORDER_SEED]
  say "sft: ajet sft $(basename "$2") → $(basename "$3") ($4 steps of 4096 tokens)"
  rm -rf "$3.tmp"
  "$bin/ajet" sft --model "$1" --demos "$2" --out "$3.tmp" --steps "$4" --warmup "$5" --lr "$6" \
    --min-lr-ratio "$7" --batch-tokens 4096 --seed "${8:-1}" --threads "${AJET_THREADS:-2}" --log-every 50
  mv "$3.tmp" "$3"
}
if [ ! -f "$sft_model/config.json" ]; then
  if [ "$task" = calc ]; then
    demos calc-demos-correct --n 20000 --correct-ratio 1.0 --seed 1
    demos calc-demos-mix --n 20000 --correct-ratio 0.7 --seed 2
    # The recipe measured in docs/sft.md (held-out greedy success 94% after 200 + 300 steps), with
    # the second part at 400 steps: a fresh run of 200 + 300 on other demos ended less far through
    # the copying (loss 0.084 instead of 0.018; 9% greedy after stage 2). One 450-step schedule
    # stopped mid-way (6%).
    [ -f "$work/models/calc-sft-copy-a/config.json" ] || \
      sft "$work/models/tiny-init" "$work/calc-demos-correct.jsonl" "$work/models/calc-sft-copy-a" 200 30 2e-3 0.5
    [ -f "$work/models/calc-sft-copy/config.json" ] || \
      sft "$work/models/calc-sft-copy-a" "$work/calc-demos-correct.jsonl" "$work/models/calc-sft-copy" 400 5 1.5e-3 0.3 11
    sft "$work/models/calc-sft-copy" "$work/calc-demos-mix.jsonl" "$sft_model" 60 5 5e-4 0.5
  else
    demos frozenlake-demos --n 2000 --correct-ratio 0.5 --error-mix 0,1,0 --seed 5
    sft "$work/models/tiny-init" "$work/frozenlake-demos.jsonl" "$sft_model" "${AJET_SFT_STEPS:-150}" 20 2e-3 0.25
  fi
else
  say "sft: reusing $sft_model"
fi

# 4. RL through the swarm: ajet starts ajet-swarm, which starts ajet-engine; the built-in calc agent
#    runs max_env_worker episodes at a time against the swarm's OpenAI endpoint.
say "rl: ajet --conf $conf ${AJET_RUN_FLAGS:-}"
log="$work/rl-$(date +%Y%m%d_%H%M%S).log"
# shellcheck disable=SC2086
"$bin/ajet" --conf "$conf" --exp-dir "$work/experiments" ${AJET_RUN_FLAGS:-} 2>&1 | tee "$log"
curve="$(sed -n 's/^ajet: reward curve: //p' "$log" | tail -1)"
say "done in $(( $(date +%s) - start )) s after the build"
if [ -n "$curve" ]; then
  echo "run: reward curve: $curve"
  echo "run: metrics:      $(dirname "$curve")/metrics.jsonl"
fi
