#!/usr/bin/env bash
# The README's main command: on a fresh machine, install, build, make the tiny tokenizer and model,
# warm the model up with `ajet sft` on calc demonstrations, then train the calc agent with RL through
# the swarm (`ajet --conf examples/configs/calc.yaml`: front + engine + built-in agents) and print
# where the reward curve is. AJET_RUN_TASK=frozenlake does the same for the grid-world task.
# AJET_SEED (default 1) changes every random choice of the pipeline: the tokenizer's corpus, the
# model's initial weights, the demos, the SFT order, the tasks and RL's sampling.
# Idempotent: outputs already present (build, tokenizer, models) are reused. Everything it makes
# lives under exp/main/ (seed 1) or exp/main-seedN/ (git-ignored; AJET_WORK_DIR picks another).
# Times and results on 2 cores: README.md, docs/classic.md.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
build="${AJET_BUILD_DIR:-$here/build}"
seed="${AJET_SEED:-1}"
case "$seed" in
  ''|*[!0-9]*) echo "run: AJET_SEED must be a non-negative integer, got '$seed'" >&2; exit 2 ;;
esac
if [ "$seed" = 1 ]; then work="${AJET_WORK_DIR:-$here/exp/main}"; else work="${AJET_WORK_DIR:-$here/exp/main-seed$seed}"; fi
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

# calc's initial weights (below); frozenlake keeps HF's std 0.02, with which its recipe was measured.
if [ "$task" = calc ]; then default_init="--init-std 0.05 --scaled-residual-init --embed-std 0.3"; else default_init=""; fi
INIT_FLAGS="${AJET_INIT_FLAGS-$default_init}"
init_dir="$work/models/tiny-init"  # frozenlake's (HF init); calc's is tiny-init-calc
if [ "$task" = calc ]; then init_dir="$work/models/tiny-init-calc"; fi

# 1. The tiny tokenizer, trained on rendered demos of the built-in tasks.
if [ ! -f "$work/tokenizer/tokenizer.json" ]; then
  say "tokenizer: corpus of rendered task demos → byte-level BPE (1024 ids)"
  "$bin/ajet" tasks corpus --seed "$seed" --out "$work/corpus.txt"
  "$bin/ajet" tokenizer train --corpus "$work/corpus.txt" --vocab-size 1024 --out "$work/tokenizer.tmp"
  rm -rf "$work/tokenizer" && mv "$work/tokenizer.tmp" "$work/tokenizer"
else
  say "tokenizer: reusing $work/tokenizer"
fi

# 2. A freshly initialised tiny model (hidden 128, 4 layers).
if [ ! -f "$init_dir/config.json" ]; then
  # Initial weights at std 0.05 with GPT-2's residual scaling and the embeddings at 0.3: with HF's 0.02
  # everywhere the copying that calc needs appeared after 400 to 1000+ SFT steps, or not at all; with
  # these, after 250-450 in most runs (docs/sft.md, bench/classic/warmup_variants.sh).
  say "model: ajet model init --preset tiny $INIT_FLAGS"
  rm -rf "$init_dir.tmp"
  # shellcheck disable=SC2086
  "$bin/ajet" model init --preset tiny --tokenizer "$work/tokenizer" --seed "$seed" $INIT_FLAGS --out "$init_dir.tmp"
  mv "$init_dir.tmp" "$init_dir"
else
  say "model: reusing $init_dir"
fi

# 3. Warm-up: SFT on generated demonstrations of the task, so RL starts from a model with some, not
#    all, reward. calc: correct demos until the model copies numbers (from the question into the tool
#    call, from the tool result into the answer: what a fresh model lacks, docs/sft.md). The step at
#    which copying appears varies with the seed and the machine's rounding, so the stage checks
#    held-out greedy success every 50 steps and stops at 50% (at most 1000 steps; it keeps the best
#    model and says so loudly when the gate is missed). frozenlake: 50% shortest paths, 50% random
#    walks, 150 steps.
#    calc then trains a second stage on 60%-correct demos (below), so that RL has mistakes to remove.
sft_model="$work/models/$task-sft"
demos() {  # demos NAME FLAGS...: $work/NAME.jsonl, made once
  local name="$1"; shift
  if [ ! -s "$work/$name.jsonl" ]; then
    say "sft: ajet tasks demos --task $task $*"
    "$bin/ajet" tasks demos --task "$task" "$@" > "$work/$name.jsonl.tmp"
    mv "$work/$name.jsonl.tmp" "$work/$name.jsonl"
  fi
}
sft() {  # sft FROM DEMOS OUT STEPS WARMUP LR MIN_LR_RATIO [EXTRA FLAGS...]
  local from="$1" demos_file="$2" out="$3" steps="$4" warmup="$5" lr="$6" min="$7"; shift 7
  say "sft: ajet sft $(basename "$demos_file") → $(basename "$out") (up to $steps steps of 4096 tokens)"
  # ajet sft writes the model directory atomically: OUT exists only once it is complete.
  "$bin/ajet" sft --model "$from" --demos "$demos_file" --out "$out" --force --steps "$steps" --warmup "$warmup" --lr "$lr" \
    --min-lr-ratio "$min" --batch-tokens 4096 --seed "$seed" --threads "${AJET_THREADS:-2}" \
    --log-every 50 "$@"
}
# The calc warm-up races AJET_SFT_CANDIDATES (default 2) candidates side by side, one intra-op thread
# each: candidate 0 is the seed's model and demo order, candidate k the same recipe from initial weights
# and an order of seed + 1000k. The first to pass the gate wins and the others stop; when none passes,
# the best by held-out success is kept. Copying appears abruptly at a step that varies from run to run
# (docs/sft.md), so the race bounds the warm-up's time where one candidate alone sometimes needs 2-3x.
# Each candidate starts with AJET_SFT_SYMBOLIC_STEPS (default 150; 0 skips it) steps on symbolic problems
# ("What is 9-79*40?": the tool call copies the query verbatim), which brings the copying sooner: the
# slowest seed measured went from no candidate at the gate by step 486 to the gate at 300 and 400 steps
# in all (docs/sft.md, "Symbolic problems first"). `ajet sft --candidates` runs the race (docs/sft.md,
# "Racing candidates"): the symbolic steps are its first stage (constant lr, evaluated every 50 steps as
# the measured recipe was), the regular demos with the gate its main stage, each candidate's time shared
# between them.
race_sft() {  # race_sft DEMOS SYMBOLIC_DEMOS OUT STEPS SECONDS
  local demos_file="$1" symbolic_demos="$2" out="$3" steps="$4" seconds="$5" n="${AJET_SFT_CANDIDATES:-2}"
  local symbolic_steps="${AJET_SFT_SYMBOLIC_STEPS:-150}" regular_steps regular_warmup
  case "$symbolic_steps" in ''|*[!0-9]*) echo "run: AJET_SFT_SYMBOLIC_STEPS must be a non-negative integer" >&2; exit 2 ;; esac
  # After the symbolic steps, the measured recipe's shorter warm-up and cosine (bench/classic/warmup_curriculum.sh).
  if [ "$symbolic_steps" -gt 0 ]; then regular_steps="${steps:-600}" regular_warmup=10; else regular_steps="${steps:-1000}" regular_warmup=30; fi
  say "sft: ajet sft --candidates $n ($symbolic_steps symbolic steps, then up to $regular_steps regular steps of 4096 tokens to 50% held-out greedy success; at most $seconds s)"
  "$bin/ajet" sft --candidates "$n" --candidate-init="--preset tiny --tokenizer '$work/tokenizer' $INIT_FLAGS" \
    --candidate-init-prefix "$work/models/tiny-init-candidate" --model "$init_dir" --out "$out" --force --seed "$seed" --threads "${AJET_THREADS:-2}" --max-seconds "$seconds" \
    --first-demos "$symbolic_demos" --first-steps "$symbolic_steps" --first-warmup 30 --first-lr 2e-3 --first-min-lr-ratio 1.0 \
    --demos "$demos_file" --steps "$regular_steps" --warmup "$regular_warmup" --lr 2e-3 --min-lr-ratio 0.3 \
    --stop-at-success "${AJET_SFT_STOP_AT:-0.5}" --batch-tokens 4096 --log-every 50 \
    --eval-task calc --eval-n 50 --eval-seed "$seed" --eval-every 50
}
# The 10-minute budget is shared out as it goes (seconds, counted from the end of the build): RL gets
# AJET_RL_SECONDS (150: ~20 GRPO steps of ~6 s on 2 cores, by which T=1 success has caught up with greedy
# success in the measured runs, plus start-up and validation); the race to the gate gets what is left
# but that and the second stage's minimum of 60 s; the second stage gets what the race left.
budget="${AJET_BUDGET_S:-600}" rl_seconds="${AJET_RL_SECONDS:-150}"
left_s() { echo $(( budget - ($(date +%s) - start) )); }
if [ ! -f "$sft_model/config.json" ]; then
  if [ "$task" = calc ]; then
    # Stage 1: correct demos until the model copies (the race to the 50% gate) → models/calc-gate.
    gate_model="$work/models/calc-gate"
    if [ ! -f "$gate_model/config.json" ]; then
      demos calc-demos-correct --n 20000 --correct-ratio 1.0 --seed "$seed"
      if [ "${AJET_SFT_SYMBOLIC_STEPS:-150}" != 0 ]; then  # the symbolic steps' demos, only when they run
        demos calc-demos-symbolic --n 20000 --correct-ratio 1.0 --seed "$seed" --params '{"word_problem_ratio": 0}'
      fi
      race_s=$(( $(left_s) - rl_seconds - 60 )); [ "$race_s" -ge 30 ] || race_s=30
      race_sft "$work/calc-demos-correct.jsonl" "$work/calc-demos-symbolic.jsonl" "$gate_model" "${AJET_SFT_STEPS:-}" "$race_s"
    else
      say "sft: reusing $gate_model"
    fi
    # Stage 2: demos of which 60% are correct (AJET_SFT2_CORRECT_RATIO) and the rest make one of calc's
    # three mistakes (a wrong expression, a miscopied result, no tool). The model keeps learning to copy
    # from the correct ones (greedy success climbs from the gate's ~50-70% to ~93-99%), while sampling at
    # temperature 1 makes the demos' mistakes part of the time: RL starts from a policy that knows the
    # task and still errs, and removes the mistakes. Trained on correct demos alone, T=1 success would
    # follow greedy up (~75%) and leave RL little to do (docs/sft.md, "The second stage's mix").
    # The longer the stage trains, the closer T=1 success comes to the mix's share of correct
    # demos: with 70% a faster machine's stage (~720-870 steps) started RL at 63-75%, leaving at most
    # ~25 points below the ~98% RL reaches; 60% keeps that room on any machine (docs/sft.md, "The
    # second stage's mix").
    # The stage trains until RL's share of the budget is all that is left (--max-seconds), its cosine
    # fitted to that time (--fit-schedule: the schedule's length follows the measured step time), at most
    # AJET_SFT2_STEPS steps. The longer it trains, the better the model copies, which is what sets the
    # final success (docs/benchmarks.md, the SFT recipe's runs).
    mix_ratio="${AJET_SFT2_CORRECT_RATIO:-0.6}"
    demos "calc-demos-mix$mix_ratio" --n 20000 --correct-ratio "$mix_ratio" --seed "$((seed + 100))"
    stage2_s=$(( $(left_s) - rl_seconds )); [ "$stage2_s" -ge 30 ] || stage2_s=30
    sft "$gate_model" "$work/calc-demos-mix$mix_ratio.jsonl" "$sft_model" "${AJET_SFT2_STEPS:-1000}" 10 1e-3 0.3 \
      --eval-task calc --eval-n 50 --eval-seed "$seed" --eval-every 100 --max-seconds "$stage2_s" --fit-schedule
  else
    demos frozenlake-demos --n 2000 --correct-ratio 0.5 --error-mix 0,1,0 --seed "$((seed + 4))"
    sft "$init_dir" "$work/frozenlake-demos.jsonl" "$sft_model" "${AJET_SFT_STEPS:-150}" 20 2e-3 0.25
  fi
else
  say "sft: reusing $sft_model"
fi
if [ "${AJET_STOP_AFTER:-}" = sft ]; then  # the warm-up only (bench/classic/duo_proof.sh starts from it)
  say "stopping after the warm-up (AJET_STOP_AFTER=sft): $sft_model"
  exit 0
fi

# 4. RL through the swarm: ajet starts ajet-swarm, which starts ajet-engine; the built-in calc agent
#    runs max_env_worker episodes at a time against the swarm's OpenAI endpoint.
#    RL gets what is left of the 10-minute budget (AJET_BUDGET_S, counted from the end of the build):
#    ajet starts no step that would end after it (ajet.trainer_common.max_training_seconds).
rl_flags=(--set "ajet.model.path=$sft_model" --set "ajet.engine.seed=$seed" --set "ajet.task_reader.shuffle_seed=$seed"
          --set "ajet.task_reader.builtin.seed=$seed")
if [ "$task" = calc ]; then
  left=$(( $(left_s) - 10 ))
  [ "$left" -ge 60 ] || left=60
  rl_flags+=(--set "ajet.trainer_common.max_training_seconds=$left")
fi
say "rl: ajet --conf $conf ${rl_flags[*]} ${AJET_RUN_FLAGS:-}"
log="$work/rl-$(date +%Y%m%d_%H%M%S).log"
# shellcheck disable=SC2086
"$bin/ajet" --conf "$conf" --exp-dir "$work/experiments" "${rl_flags[@]}" ${AJET_RUN_FLAGS:-} 2>&1 | tee "$log"
curve="$(sed -n 's/^ajet: reward curve: //p' "$log" | tail -1)"
say "done in $(( $(date +%s) - start )) s after the build"
if [ -n "$curve" ]; then
  echo "run: reward curve: $curve"
  echo "run: metrics:      $(dirname "$curve")/metrics.jsonl"
fi
