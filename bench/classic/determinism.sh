#!/usr/bin/env bash
# The cost and the reach of ajet.deterministic (docs/determinism.md), on the main command's config
# (examples/configs/calc.yaml: dynamic sampling, 16 tasks x 8 episodes, 64 in flight, 2 threads)
# from one warmed-up model, STEPS steps per run:
#   1. ROUNDS rounds of a default run and a deterministic run (the order alternates per round): the
#      mean seconds per RL step and per episode, and their ratio deterministic / default;
#   2. identity: a second deterministic run of round 1's seed must give the same bytes (metrics.jsonl
#      without its wall-clock fields, every file of the final checkpoint); so must a run with
#      OpenBLAS forced to another kernel (OPENBLAS_CORETYPE, default Haswell), which the training
#      GEMMs use (the engine's rollout kernels are ajet's own in this mode).
# Prints a table; appends it with the date to docs/benchmarks.md (not with --no-append).
#
#   bench/classic/determinism.sh [--no-append] [--steps 20] [--rounds 3] [--core Haswell]
#       [--model exp/main/models/calc-sft]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
steps=20 rounds=3 core=Haswell model="$here/exp/main/models/calc-sft" append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-append) append=0; shift ;;
    --steps) steps="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --core) core="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    *) echo "determinism: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bin="${AJET_BUILD_DIR:-$here/build}/bin"
[ -x "$bin/ajet" ] || { echo "determinism: $bin/ajet is not built (scripts/build.sh)" >&2; exit 2; }
[ -f "$model/config.json" ] || {
  echo "determinism: no model at $model (scripts/run.sh makes exp/main/models/calc-sft)" >&2; exit 2; }
out="$here/exp/determinism/$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
cd "$here"
run() {  # run NAME DETERMINISTIC [ENV...]
  local name="$1" det="$2"; shift 2
  echo "determinism: $name" >&2
  env "$@" "$bin/ajet" --conf examples/configs/calc.yaml --exp-dir "$out" --set "ajet.experiment_name=$name" \
    --set "ajet.model.path=$model" --set "ajet.deterministic=$det" \
    --set "ajet.trainer_common.total_training_steps=$steps" --set "ajet.trainer_common.max_training_seconds=null" \
    --set "ajet.trainer_common.val_before_train=false" --set "ajet.trainer_common.test_freq=0" \
    --set "ajet.trainer_common.save_freq=$steps" \
    > "$out/$name.log" 2>&1 || { echo "determinism: $name failed; see $out/$name.log" >&2; tail -20 "$out/$name.log" >&2; exit 1; }
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) = 1 ]; then run "default-$round" false; run "det-$round" true
  else run "det-$round" true; run "default-$round" false; fi
done
run det-again true
run det-core true OPENBLAS_CORETYPE="$core"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$here" "$out" "$model" "$steps" "$rounds" "$core" "$load_before" "$load_after" "$append" <<'PY'
import datetime, glob, hashlib, json, os, re, statistics, sys
repo, out, model, steps, rounds, core, load_before, load_after, append = sys.argv[1:10]
steps, rounds = int(steps), int(rounds)
def records(name):
    return [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl")) if l.strip()]
def clockless(x):
    if isinstance(x, dict):
        return {k: clockless(v) for k, v in x.items() if not (k.endswith("_s") or k.endswith("seconds"))}
    return [clockless(v) for v in x] if isinstance(x, list) else x
def fingerprint(name):
    h = hashlib.sha256()
    for r in records(name):
        h.update(json.dumps(clockless(r), sort_keys=True).encode())
    files = sorted(glob.glob(os.path.join(out, name, "saved_checkpoints", "**"), recursive=True))
    files = [f for f in files if os.path.isfile(f)]
    assert files, f"{name}: no checkpoint"
    for f in files:
        h.update(os.path.relpath(f, os.path.join(out, name)).encode())
        h.update(open(f, "rb").read())
    return h.hexdigest()[:16], len(files)
def timing(name):
    train = [r for r in records(name) if r.get("kind") == "train"]
    assert len(train) == steps, f"{name}: {len(train)} of {steps} steps"
    # Step 1 pays the engine's warm-up; steps 2.. compare.
    secs = [r["step_time_s"] for r in train[1:]]
    eps = sum(r["rollout"]["episodes"] for r in train[1:])
    return dict(step=statistics.mean(secs), per_ep=sum(secs) / eps, train=statistics.mean(r["trainer"]["step_time_s"] for r in train[1:]),
                rollout=statistics.mean(r["rollout_time_s"] for r in train[1:]))
def kernel(name):
    m = re.search(r"\((OpenBLAS [^)]*)\)", open(os.path.join(out, name, "engine.log")).read())
    return m.group(1).split()[-2] if m else "?"
rows = {(m, k): timing(f"{m}-{k}") for k in range(1, rounds + 1) for m in ("default", "det")}
ratio_step = [rows[("det", k)]["step"] / rows[("default", k)]["step"] for k in range(1, rounds + 1)]
ratio_ep = [rows[("det", k)]["per_ep"] / rows[("default", k)]["per_ep"] for k in range(1, rounds + 1)]
fp = {n: fingerprint(n) for n in ("det-1", "det-again", "det-core", "default-1")}
lines = [f"### Deterministic mode: cost and identity, classic calc RL ({datetime.date.today().isoformat()})", "",
         f"`bench/classic/determinism.sh --steps {steps} --rounds {rounds} --core {core}`: examples/configs/calc.yaml from `{os.path.relpath(model, repo)}`, "
         f"{steps} steps a run, no validation, a checkpoint at the end; rounds alternate which mode runs first. Seconds per step and "
         "per episode are the means of steps 2.. (step 1 warms the engine up); dynamic sampling makes the work of a step differ "
         "between runs, so seconds per episode is the fairer of the two. "
         f"Load average (1/5/15 min) before: {load_before}, after: {load_after}.", "",
         "| round | default s/step | deterministic s/step | ratio | default ms/episode | deterministic ms/episode | ratio | train s/step default / det |",
         "|---|---|---|---|---|---|---|---|"]
for k in range(1, rounds + 1):
    a, b = rows[("default", k)], rows[("det", k)]
    lines.append(f"| {k} | {a['step']:.2f} | {b['step']:.2f} | {b['step'] / a['step']:.2f}x | {1000 * a['per_ep']:.1f} | "
                 f"{1000 * b['per_ep']:.1f} | {b['per_ep'] / a['per_ep']:.2f}x | {a['train']:.2f} / {b['train']:.2f} |")
same = lambda a, b: "**same bytes**" if fp[a][0] == fp[b][0] else "differs"
lines += ["", f"Deterministic / default: **{statistics.median(ratio_ep):.2f}x** the time per episode (median of {rounds} rounds; "
          f"{min(ratio_ep):.2f}-{max(ratio_ep):.2f}), {statistics.median(ratio_step):.2f}x per step ({min(ratio_step):.2f}-{max(ratio_step):.2f}).", "",
          f"Identity (sha-256 over metrics.jsonl without wall-clock fields and the {fp['det-1'][1]} checkpoint files):",
          f"- a second deterministic run vs the first: {same('det-1', 'det-again')} ({fp['det-1'][0]} / {fp['det-again'][0]});",
          f"- OpenBLAS forced to {core} (the other runs: {kernel('det-1')}, as ajet picks it) vs the first: {same('det-1', 'det-core')} ({fp['det-core'][0]});",
          f"- the default mode's run of the same seed vs the first: {same('det-1', 'default-1')} ({fp['default-1'][0]}).", ""]
text = "\n".join(lines) + "\n"
print(text)
if append == "1":
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
