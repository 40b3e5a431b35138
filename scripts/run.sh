#!/usr/bin/env bash
# The README's main command: on a fresh machine, install, build, make the tiny tokenizer and model,
# warm the model up with `ajet sft` on calc demonstrations, then train the calc agent with RL through
# the swarm (`ajet --conf examples/configs/calc.yaml`: front + engine + built-in agents) and print
# where the reward curve is. Idempotent: outputs already present (build, tokenizer, models) are reused.
# Everything it makes lives under exp/main/ (git-ignored). Budget on 2 cores after the build: about
# 10 s tokenizer + 2-3 min SFT + 5-6 min RL.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
build="${AJET_BUILD_DIR:-$here/build}"
work="$here/exp/main"
conf="${AJET_RUN_CONF:-examples/configs/calc.yaml}"
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

# 3. Warm-up: SFT on calc demonstrations with the skewed mix of the reference experiment (30% correct,
#    mostly answers given without the tool), so RL starts from a model with some, not much, reward
#    and has to change behaviour (use the tool), not only sharpen it.
if [ ! -f "$work/models/calc-sft/config.json" ]; then
  if [ ! -s "$work/calc-demos.jsonl" ]; then
    say "sft: ajet tasks demos --task calc (30% correct, error mix 1,1,12)"
    "$bin/ajet" tasks demos --task calc --n 20000 --correct-ratio 0.3 --error-mix 1,1,12 --seed 1 \
      > "$work/calc-demos.jsonl.tmp"
    mv "$work/calc-demos.jsonl.tmp" "$work/calc-demos.jsonl"
  fi
  say "sft: ajet sft (${AJET_SFT_STEPS:-300} steps of 4096 tokens)"
  rm -rf "$work/models/calc-sft.tmp"
  "$bin/ajet" sft --model "$work/models/tiny-init" --demos "$work/calc-demos.jsonl" \
    --out "$work/models/calc-sft.tmp" --steps "${AJET_SFT_STEPS:-300}" --warmup 30 --lr 1e-3 \
    --batch-tokens 4096 --seed 1 --threads 2 --log-every 50
  mv "$work/models/calc-sft.tmp" "$work/models/calc-sft"
else
  say "sft: reusing $work/models/calc-sft"
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
