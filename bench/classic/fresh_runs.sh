#!/usr/bin/env bash
# Fresh runs of the main command: `scripts/run.sh` from an empty work directory for each seed
# (AJET_SEED: tokenizer corpus, initial weights, demos, SFT order, tasks, RL sampling), one after the
# other, on the build that exists. For each run: did the warm-up reach its gate, at which SFT step,
# held-out success before and after RL (T=1 over k samples, greedy), and the seconds after the build.
# Prints a table with the median and range, and appends it with the date to docs/benchmarks.md.
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
export AJET_BENCH_APPEND="$append"  # --no-append: print the table, leave docs/benchmarks.md alone
out="$here/exp/fresh/$label-$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
for s in $seeds; do
  echo "fresh_runs: seed $s → $out/seed$s (log: $out/seed$s.log)" >&2
  AJET_SEED="$s" AJET_WORK_DIR="$out/seed$s" "$here/scripts/run.sh" > "$out/seed$s.log" 2>&1 \
    || { echo "fresh_runs: seed $s failed; see $out/seed$s.log" >&2; tail -20 "$out/seed$s.log" >&2; exit 1; }
done
python3 - "$here" "$out" "$label" "$seeds" <<'PY'
import datetime, glob, json, os, re, statistics, sys
repo, out, label, seeds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
rows = []
for s in seeds:
    work = os.path.join(out, f"seed{s}")
    log = open(os.path.join(out, f"seed{s}.log")).read()
    secs = int(re.findall(r"done in (\d+) s after the build", log)[-1])
    rep = json.load(open(os.path.join(work, "models", "calc-gate", "sft_report.json")))
    rep2 = json.load(open(os.path.join(work, "models", "calc-sft", "sft_report.json")))
    gate = rep.get("stopped_at_success")
    # With the symbolic steps first (AJET_SFT_SYMBOLIC_STEPS), the gate's model started from the
    # winner's symbolic model: count those steps too.
    sym = 0
    if rep.get("model", "").endswith(("-symbolic", "-first")):
        m = re.search(r"\((\d+) symbolic steps", log)
        sym = int(m.group(1)) if m else 0
    metrics = sorted(glob.glob(os.path.join(work, "experiments", "*", "metrics.jsonl")))[-1]
    recs = [json.loads(l) for l in open(metrics) if l.strip()]
    val = [r for r in recs if r.get("kind") == "validation"]
    a, b = val[0]["validation"], val[-1]["validation"]
    rows.append(dict(seed=s, secs=secs, gate=gate, sym=sym, sft_steps=rep["steps"], sft_s=rep["train_seconds"],
                     sft2_steps=rep2["steps"], sft2_s=rep2["train_seconds"],
                     kept=rep.get("kept_step"), rl_steps=val[-1]["step"],
                     s0=100 * a["sampled_success"], s1=100 * b["sampled_success"],
                     g0=100 * a["greedy_success"], g1=100 * b["greedy_success"], k=b["k"], tasks=b["tasks"]))
med = lambda xs: statistics.median(xs)
rng = lambda xs: f"{min(xs):.1f}–{max(xs):.1f}"
lines = [f"### Fresh runs of the main command: {label} ({datetime.date.today().isoformat()})", "",
         f"`bench/classic/fresh_runs.sh --seeds \"{' '.join(seeds)}\"`: `scripts/run.sh` from an empty work directory per "
         "seed (AJET_SEED), one after the other on 2 cores, after the build. Held-out success on "
         f"{rows[0]['tasks']} validation tasks: T=1 is the mean of {rows[0]['k']} samples per task.", "",
         "| seed | warm-up gate | SFT steps (s): race + mix stage | RL steps | T=1 before → after (gain) | greedy before → after | s after build |",
         "|---|---|---|---|---|---|---|"]
for r in rows:
    sym = f"{r['sym']} symbolic + " if r["sym"] else ""
    gate = f"reached at {sym}{r['gate']['step']} ({100 * r['gate']['success']:.0f}%)" if r["gate"] else "MISSED"
    lines.append(f"| {r['seed']} | {gate} | {sym}{r['sft_steps']} ({r['sft_s']:.0f}) + {r['sft2_steps']} ({r['sft2_s']:.0f}) | {r['rl_steps']} | "
                 f"{r['s0']:.1f} → {r['s1']:.1f} ({r['s1'] - r['s0']:+.1f}) | {r['g0']:.0f} → {r['g1']:.0f} | {r['secs']} |")
gains = [r["s1"] - r["s0"] for r in rows]
finals = [r["s1"] for r in rows]
secs = [r["secs"] for r in rows]
lines += ["", f"Median (range) over {len(rows)} runs: final T=1 **{med(finals):.1f}%** ({rng(finals)}), RL gain "
          f"**{med(gains):+.1f}** ({rng(gains)}), **{med(secs):.0f} s** after the build ({min(secs)}–{max(secs)}); "
          f"warm-up gate reached in {sum(1 for r in rows if r['gate'])} of {len(rows)}.", ""]
ok = all(r["gate"] for r in rows) and min(gains) >= 25 and max(secs) <= 600 and med(finals) >= 90
lines.append(f"Targets (every gate reached, every gain >= 25, every run <= 600 s, median final >= 90%): "
             f"{'met' if ok else 'NOT met'}.")
text = "\n".join(lines) + "\n"
print(text)
open(os.path.join(out, "table.md"), "w").write(text)
if os.environ.get("AJET_BENCH_APPEND", "1") == "1":  # not after --no-append
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
