#!/usr/bin/env bash
# OpenBLAS's own kernel choice vs the one ajet picks at start-up (src/model/blas_kernel.h), in one run:
# the same `ajet-engine sft` steps (tiny preset, calc demos, 4096 tokens per step) and the same sampled
# generation (64 sequences of 256 tokens), alternating A (AJET_BLAS_KERNEL=keep: what OpenBLAS picks by
# itself) and B (the default) for --rounds rounds. Prints seconds per SFT step and generated tokens per
# second for each, their ratio, and appends the table with the date to docs/benchmarks.md.
#
#   bench/model/blas_kernel.sh [--threads 2] [--steps 12] [--rounds 2] [--no-append]
# Uses (and makes once, like scripts/run.sh) exp/main/tokenizer, exp/main/models/tiny-init and
# exp/main/calc-demos-correct.jsonl.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
threads=2 steps=12 rounds=2 append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --no-append) append=0; shift ;;
    *) echo "blas_kernel: unknown argument '$1' (expected --threads, --steps, --rounds, --no-append)" >&2; exit 2 ;;
  esac
done
work="$here/exp/main"
mkdir -p "$work/models"
if [ ! -f "$work/tokenizer/tokenizer.json" ]; then
  "$bin/ajet" tasks corpus --out "$work/corpus.txt"
  "$bin/ajet" tokenizer train --corpus "$work/corpus.txt" --vocab-size 1024 --out "$work/tokenizer"
fi
model="$work/models/tiny-init"
[ -f "$model/config.json" ] || "$bin/ajet" model init --preset tiny --tokenizer "$work/tokenizer" --seed 1 --out "$model"
demos="$work/calc-demos-correct.jsonl"
[ -s "$demos" ] || "$bin/ajet" tasks demos --task calc --n 20000 --correct-ratio 1.0 --seed 1 > "$demos"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
prompt='{"messages":[{"role":"system","content":"Use the calculator tool, then reply <answer>N</answer>."},{"role":"user","content":"17+75+27=?"}]}'

# run LABEL ENV...: one SFT run and one generation; prints "LABEL core sft_s_per_step gen_tokens_per_s".
run() {
  local label="$1"; shift
  rm -rf "$tmp/out"
  env "$@" "$bin/ajet-engine" sft --model "$model" --demos "$demos" --out "$tmp/out" --steps "$steps" --lr 2e-3 \
    --threads "$threads" --log-every 1000 > "$tmp/sft.log" 2>&1
  local core sft_s
  core="$(sed -n 's/.*USE_OPENMP \([A-Za-z0-9]*\) MAX_THREADS.*/\1/p' "$tmp/sft.log" | head -1)"
  sft_s="$(sed -n 's/^sft: \([0-9]*\) steps in \([0-9.]*\) s.*/\2 \1/p' "$tmp/sft.log" | awk '{printf "%.4f", $1 / $2}')"
  local t0 t1
  t0=$(date +%s.%N)
  echo "$prompt" | env "$@" "$bin/ajet-engine" generate --model "$model" --chat --n 64 --max-tokens 256 --ignore-eos --kv-cache-mb 256 \
    --temperature 1 --seed 1 --threads "$threads" > /dev/null 2>&1
  t1=$(date +%s.%N)
  echo "$label $core $sft_s $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", 64 * 256 / (b - a)}')"
}
results=()
for r in $(seq "$rounds"); do
  results+=("$(run A AJET_BLAS_KERNEL=keep)")
  results+=("$(run B AJET_BLAS_KERNEL=auto)")
  echo "blas_kernel: round $r: ${results[-2]} | ${results[-1]}" >&2
done
printf '%s\n' "${results[@]}" > "$tmp/results"
python3 - "$tmp/results" "$here" "$threads" "$steps" "$rounds" "$append" "$(uptime | sed 's/.*load average: //')" <<'PY'
import sys, datetime, statistics, platform
results, repo, threads, steps, rounds, append, load = sys.argv[1:8]
rows = [l.split() for l in open(results) if l.strip()]
def agg(label):
    rs = [r for r in rows if r[0] == label]
    return rs[0][1], statistics.median(float(r[2]) for r in rs), statistics.median(float(r[3]) for r in rs)
ca, sa, ga = agg("A"); cb, sb, gb = agg("B")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
model_no = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model\t")), "?")
lines = [f"### OpenBLAS kernel: OpenBLAS's own choice vs ajet's start-up choice ({datetime.date.today().isoformat()})", "",
         f"`bench/model/blas_kernel.sh --threads {threads} --steps {steps} --rounds {rounds}`: tiny preset, calc demos, "
         f"4096-token SFT steps; generation = 64 sampled sequences x 256 tokens (model load included). CPU: {cpu} (model {model_no}); "
         f"load average at the end {load}. Medians of {rounds} alternating rounds.", "",
         "| run | kernel | SFT s/step | generated tokens/s |", "|---|---|---|---|",
         f"| A: `AJET_BLAS_KERNEL=keep` | {ca} | {sa:.3f} | {ga:.0f} |",
         f"| B: default | {cb} | {sb:.3f} | {gb:.0f} |",
         f"| **B vs A** | | **{sa / sb:.2f}x faster** | **{gb / ga:.2f}x** |", ""]
print("\n".join(lines))
if append == "1":
    with open(f"{repo}/docs/benchmarks.md", "a") as f:
        f.write("\n" + "\n".join(lines) + "\n")
PY
