#!/usr/bin/env bash
# Fresh runs of the main command: `scripts/run.sh` from an empty work directory for each seed
# (AJET_SEED: tokenizer corpus, initial weights, demos, SFT order, tasks, RL sampling), one after the
# other, on the build that exists. For each run: did the warm-up reach its gate, at which SFT step,
# held-out success before and after RL (T=1 over k samples, greedy), and the seconds after the build.
# Prints a table with the median and range, and appends it with the date to docs/benchmarks.md;
# appends one line per run to bench/records/fresh_runs.jsonl (the commit, dirty or not, the machine,
# the numbers: bench/classic/learning_record.py) and redraws docs/learning.html from that record,
# the main command's learning across commits (bench/classic/learning_page.py). --no-append: print
# the table, change none of the three (the records are in the output directory's records.jsonl).
#
#   bench/classic/fresh_runs.sh [--no-append] [--seeds "1 2 3"] [--label main]
#
# Targets (issue 13): every warm-up reaches its gate, RL adds >= 25 points of held-out T=1 success,
# each run takes <= 600 s after the build on 2 idle cores, the median final T=1 success is >= 90%.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
seeds="1 2 3" label="main"
append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-append) append=0; shift ;;
    --seeds) seeds="$2"; shift 2 ;;
    --label) label="$2"; shift 2 ;;
    *) echo "fresh_runs: unknown argument '$1' (expected --seeds, --label, --no-append)" >&2; exit 2 ;;
  esac
done
out="$here/exp/fresh/$label-$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
# The commit and machine measured, taken now: edits made while the runs go on are not credited.
python3 "$here/bench/classic/fresh_runs_report.py" --snapshot "$here" "$out"
for s in $seeds; do
  echo "fresh_runs: seed $s → $out/seed$s (log: $out/seed$s.log)" >&2
  AJET_SEED="$s" AJET_WORK_DIR="$out/seed$s" "$here/scripts/run.sh" > "$out/seed$s.log" 2>&1 \
    || { echo "fresh_runs: seed $s failed; see $out/seed$s.log" >&2; tail -20 "$out/seed$s.log" >&2; exit 1; }
done
no_append=()
[ "$append" = 1 ] || no_append=(--no-append)
python3 "$here/bench/classic/fresh_runs_report.py" "${no_append[@]}" --label "$label" --seeds "$seeds" "$here" "$out"
