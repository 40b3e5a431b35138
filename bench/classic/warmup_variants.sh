#!/usr/bin/env bash
# Warm-up variants: when does a fresh tiny model start copying numbers on calc, per recipe and seed?
# For each (variant, seed) it makes the seed's tokenizer and model, the variant's demos, and runs
# `ajet sft` with a held-out greedy check every --eval-every steps; the table gives the first step at
# which held-out greedy success reached 50% (the main command's gate) and the success at fixed steps.
# Two runs go side by side with one intra-op thread each (--parallel). Results: docs/sft.md and, with
# the date, docs/benchmarks.md.
#
#   bench/classic/warmup_variants.sh [--no-append] --variants "base init05" --seeds "1 2" [--steps 600] [--parallel 2]
#
# Variants (each is a function below): base (the main command's recipe before 2026-12-02), and the
# levers measured on 2026-12-02. Add one by writing a function variant_NAME that sets INIT_FLAGS,
# DEMOS (a command line printing demos JSONL) and SFT_FLAGS.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
variants="base" seeds="1" steps=600 parallel=2 eval_every=50 label=""
append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-append) append=0; shift ;;
    --variants) variants="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --parallel) parallel="$2"; shift 2 ;;
    --eval-every) eval_every="$2"; shift 2 ;;
    --label) label="$2"; shift 2 ;;
    *) echo "warmup_variants: unknown argument '$1' (expected --variants, --seeds, --steps, --parallel, --eval-every, --label, --no-append)" >&2; exit 2 ;;
  esac
done
export AJET_BENCH_APPEND="$append"  # --no-append: print the table, leave docs/benchmarks.md alone
out="$here/exp/warmup/${label:-run}-$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"

tokenizer() {  # tokenizer SEED: the seed's tokenizer dir (made once)
  local dir="$here/exp/warmup/tok-$1"
  if [ ! -f "$dir/tokenizer.json" ]; then
    "$bin/ajet" tasks corpus --seed "$1" --out "$dir.corpus.txt" >/dev/null
    "$bin/ajet" tokenizer train --corpus "$dir.corpus.txt" --vocab-size 1024 --out "$dir.tmp" >/dev/null
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
  fi
  echo "$dir"
}

# --- variants -----------------------------------------------------------------------------------
# Each sets INIT_FLAGS (ajet model init), DEMOS (command printing demos JSONL; $seed is set) and
# SFT_FLAGS (ajet sft, besides model, demos, out, steps, seed, eval).
variant_base() {
  INIT_FLAGS=()
  DEMOS="\"$bin/ajet\" tasks demos --task calc --n 20000 --correct-ratio 1.0 --seed $seed"
  SFT_FLAGS=(--warmup 30 --lr 2e-3 --min-lr-ratio 0.3 --batch-tokens 4096)
}
variant_init05() {  # larger initial weights, GPT-2 residual scaling
  variant_base
  INIT_FLAGS=(--init-std 0.05 --scaled-residual-init)
}
variant_embed1u() {  # init05, untied lm_head, input embeddings at std 1 (token identity stays large in the residual)
  variant_base
  INIT_FLAGS=(--init-std 0.05 --scaled-residual-init --untie-embeddings --embed-std 1.0)
}
variant_embed03() {  # init05 with tied embeddings at std 0.3
  variant_base
  INIT_FLAGS=(--init-std 0.05 --scaled-residual-init --embed-std 0.3)
}
variant_fresh60k() {  # three times as many distinct demos: none is seen twice in 800 steps
  variant_base
  DEMOS="\"$bin/ajet\" tasks demos --task calc --n 60000 --correct-ratio 1.0 --seed $seed"
}

# --- runs ---------------------------------------------------------------------------------------
run_one() {  # run_one VARIANT SEED
  local v="$1" seed="$2" dir="$out/$1-s$2"
  mkdir -p "$dir"
  "variant_$v"
  local tok; tok="$(tokenizer "$seed")"
  "$bin/ajet" model init --preset tiny --tokenizer "$tok" --seed "$seed" "${INIT_FLAGS[@]}" --out "$dir/init" >"$dir/log" 2>&1
  eval "$DEMOS" > "$dir/demos.jsonl"
  local t0; t0=$(date +%s)
  "$bin/ajet" sft --model "$dir/init" --demos "$dir/demos.jsonl" --out "$dir/sft" --steps "$steps" --seed "$seed" \
    --threads 1 --log-every 50 --eval-task calc --eval-n 50 --eval-every "$eval_every" "${SFT_FLAGS[@]}" >>"$dir/log" 2>&1 \
    || { echo "warmup_variants: $v seed $seed failed; see $dir/log" >&2; return 1; }
  echo $(( $(date +%s) - t0 )) > "$dir/seconds"
  echo "warmup_variants: $v seed $seed done ($(cat "$dir/seconds") s)" >&2
}
for seed in $seeds; do tokenizer "$seed" >/dev/null; done
jobs_run=0
for v in $variants; do
  declare -F "variant_$v" >/dev/null || { echo "warmup_variants: unknown variant '$v'" >&2; exit 2; }
  for seed in $seeds; do
    run_one "$v" "$seed" &
    jobs_run=$((jobs_run + 1))
    if [ "$jobs_run" -ge "$parallel" ]; then wait -n || true; jobs_run=$((jobs_run - 1)); fi
  done
done
wait || true

python3 - "$here" "$out" "$variants" "$seeds" "$steps" <<'PY'
import json, os, sys, datetime
repo, out, variants, seeds, steps = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split(), int(sys.argv[5])
lines = [f"### Warm-up variants ({datetime.date.today().isoformat()})", "",
         f"`bench/classic/warmup_variants.sh --variants \"{' '.join(variants)}\" --seeds \"{' '.join(seeds)}\" --steps {steps}`: "
         "held-out greedy success (50 calc problems) during `ajet sft` of a fresh tiny model, one intra-op thread per run, two runs side by side.", "",
         "| variant | seed | first step at >= 50% | success at 200 / 300 / 400 / 500 / 600 | best | loss at end | s |", "|---|---|---|---|---|---|---|"]
for v in variants:
    for s in seeds:
        d = os.path.join(out, f"{v}-s{s}")
        try:
            rep = json.load(open(os.path.join(d, "sft", "sft_report.json")))
        except Exception:
            lines.append(f"| {v} | {s} | failed | | | | |"); continue
        ev = {e["step"]: e["eval"]["success_rate"] for e in rep.get("eval_during", [])}
        if "eval_after" in rep: ev[rep["steps"]] = rep["eval_after"]["success_rate"]
        first = next((st for st in sorted(ev) if ev[st] >= 0.5), None)
        at = " / ".join(f"{100*ev[k]:.0f}" if k in ev else "-" for k in (200, 300, 400, 500, 600))
        best = max(ev.values()) if ev else 0
        secs = open(os.path.join(d, "seconds")).read().strip() if os.path.exists(os.path.join(d, "seconds")) else "?"
        lines.append(f"| {v} | {s} | {first if first is not None else 'never'} | {at} | {100*best:.0f}% | {rep.get('loss_after', float('nan')):.3f} | {secs} |")
text = "\n".join(lines) + "\n"
print(text)
open(os.path.join(out, "table.md"), "w").write(text)
if os.environ.get("AJET_BENCH_APPEND", "1") == "1":  # not after --no-append
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
