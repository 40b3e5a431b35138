#!/usr/bin/env bash
# Warm-up curriculum probe: does training on symbolic calc problems first (the query is the expression,
# so the tool call copies it verbatim) bring the copying phase change sooner? On the work directory of a
# main-command run (scripts/run.sh with AJET_WORK_DIR / AJET_SEED; it holds the race's two initial
# models and its correct demos), both race candidates train K steps on symbolic-only correct demos
# (lr 2e-3, warmup 30, constant), then the race's recipe on the regular correct demos (warmup 10,
# cosine to 0.3 over 600 steps) until held-out greedy success reaches 50%, one intra-op thread each,
# side by side. Compare the total steps with the race's gate step in that run's log (calc-gate's
# sft_report.json). Appends its table with the date to docs/benchmarks.md.
#
#   AJET_SEED=S bench/classic/warmup_curriculum.sh [--no-append] WORK_DIR [K=150]   (S: the seed of the run that made WORK_DIR)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
append=1 args=()
for a in "$@"; do if [ "$a" = "--no-append" ]; then append=0; else args+=("$a"); fi; done
export AJET_BENCH_APPEND="$append"  # --no-append: print the table, leave docs/benchmarks.md alone
set -- "${args[@]}"
work="${1:?usage: warmup_curriculum.sh WORK_DIR [K]}" k="${2:-150}"
for f in "$work/models/tiny-init-calc/config.json" "$work/models/tiny-init-candidate1/config.json" "$work/calc-demos-correct.jsonl"; do
  [ -e "$f" ] || { echo "warmup_curriculum: $f is missing (run scripts/run.sh with AJET_WORK_DIR=$work first)" >&2; exit 2; }
done
seed="${AJET_SEED:-1}"
out="$here/exp/warmup/curriculum-$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
"$bin/ajet" tasks demos --task calc --n 20000 --correct-ratio 1.0 --seed "$seed" --params '{"word_problem_ratio": 0}' > "$out/symbolic.jsonl"
candidate() {  # candidate INDEX INIT ORDER_SEED
  local c="$1" init="$2" order="$3" d="$out/candidate$1"
  mkdir -p "$d"
  "$bin/ajet" sft --model "$init" --demos "$out/symbolic.jsonl" --out "$d/a" --steps "$k" --warmup 30 --lr 2e-3 \
    --min-lr-ratio 1.0 --batch-tokens 4096 --seed "$order" --threads 1 --log-every 50 --eval-task calc --eval-n 50 \
    --eval-seed "$seed" --eval-every 50 > "$d/a.log" 2>&1
  "$bin/ajet" sft --model "$d/a" --demos "$work/calc-demos-correct.jsonl" --out "$d/b" --steps 600 --warmup 10 --lr 2e-3 \
    --min-lr-ratio 0.3 --batch-tokens 4096 --seed "$order" --threads 1 --log-every 50 --eval-task calc --eval-n 50 \
    --eval-seed "$seed" --eval-every 50 --stop-at-success 0.5 > "$d/b.log" 2>&1
}
candidate 0 "$work/models/tiny-init-calc" "$seed" &
candidate 1 "$work/models/tiny-init-candidate1" "$((seed + 1000))" &
wait
python3 - "$here" "$out" "$k" "$work" "$seed" <<'PY'
import datetime, json, os, sys
repo, out, k, work, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
lines = [f"### Warm-up curriculum: {k} symbolic-only steps first ({datetime.date.today().isoformat()})", "",
         f"`AJET_SEED={seed} bench/classic/warmup_curriculum.sh {work} {k}`: held-out greedy success (50 calc problems) of the race's "
         "two candidates, one intra-op thread each, side by side.", "",
         "| candidate | after the symbolic steps | regular steps to the 50% gate | total steps |", "|---|---|---|---|"]
for c in (0, 1):
    try:
        a = json.load(open(os.path.join(out, f"candidate{c}", "a", "sft_report.json")))
        b = json.load(open(os.path.join(out, f"candidate{c}", "b", "sft_report.json")))
    except Exception:
        lines.append(f"| {c} | failed | | |"); continue
    gate = (b.get("stopped_at_success") or {}).get("step")
    total = f"{k + gate}" if gate else f"not by {k + b['steps']}"
    lines.append(f"| {c} | {100 * a['eval_after']['success_rate']:.0f}% | {gate or 'not reached'} | {total} |")
text = "\n".join(lines) + "\n"
print(text)
if os.environ.get("AJET_BENCH_APPEND", "1") == "1":  # not after --no-append
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
