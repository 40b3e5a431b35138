#!/usr/bin/env bash
# On-policy distillation vs RL alone (docs/training.md "Distillation"), per seed:
#   1. the seed's calc warm-up (scripts/run.sh with AJET_STOP_AFTER=sft; reused when present), the
#      student's start;
#   2. a teacher: the same warm-up trained further with RL (`ajet --conf examples/configs/calc.yaml`
#      for TEACHER_STEPS steps; its final model; reused when present), served by its own front
#      (`ajet-swarm start --inference-key`, debug backbone: inference only);
#   3. two student runs from the warm-up for STEPS steps, validated every EVAL_EVERY steps (held-out
#      calc, 4 samples at T=1 and greedy): "rl" is the main command's RL (calc.yaml as is), "opd"
#      adds ajet.distillation with the teacher (advantage mode, k1, reward_weight REWARD_WEIGHT).
# Then for each seed: the held-out T=1 success OPD reaches at its last validation, the steps RL
# needs to reach it (its first validation at or above; "> STEPS" when never), their ratio, and the
# share of the student's sampled tokens among the teacher's top k, first vs last step. Prints a
# table with the medians and ranges; appends it with the date to docs/benchmarks.md.
#
#   bench/classic/opd_proof.sh [--no-append] [--seeds "1 2 3"] [--steps 30] [--eval-every 5]
#       [--teacher-steps 40] [--reward-weight 1.0] [--coef 1.0] [--rl-from EARLIER_OUT_DIR]
#       [--student calc-sft] [--mode advantage] [--estimator k1] [--lr LR] [--skew-correct 0.05]
#       [--target final|PCT] [--also-target PCT] [--set KEY=VALUE] [--teacher DIR] [--warmup-seed N]
# --student names the warm-up model the students start from: calc-sft (the main command's RL start),
# calc-gate (its first SFT stage: greedy ~50 %, far weaker at T=1) or calc-skewed (calc-sft fine-tuned
# to answer without the tool 95 % of the time, made here once per seed: a sparse-reward start).
# --skew-correct R (default 0.05) is calc-skewed's share of correct demos; another share makes
# calc-skewed-R (0.01: held-out T=1 0-1 %; 0.002: 0-0.2 %, where RL starts without a success).
# --target PCT measures the steps each arm needs to reach PCT % held-out T=1 success (default final:
# OPD's own last validation). --also-target PCT adds a second fixed level: its steps and ratio get a
# column and a median of their own. --set KEY=VALUE (repeatable) goes to both arms; --lr sets both
# arms' lr.
# --teacher DIR serves the model in DIR as every seed's teacher (it must share the students'
# tokenizer: with --warmup-seed N every seed's students start from seed N's warm-up, so that only the
# RL seed — sampling, task order — differs between seeds). The teacher is always calc-sft
# after the RL steps.
# --rl-from reuses the "rl" runs of an earlier invocation (same seeds and steps) instead of running
# them again, to compare another distillation setting with the same baseline.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
seeds="1 2 3" steps=30 eval_every=5 teacher_steps=40 reward_weight=1.0 coef=1.0 rl_from="" student=calc-sft append=1
mode=advantage estimator=k1 lr="" extra_set=() target=final teacher_dir="" warmup_seed="" skew_correct=0.05 also_target=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-append) append=0; shift ;;
    --seeds) seeds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --eval-every) eval_every="$2"; shift 2 ;;
    --teacher-steps) teacher_steps="$2"; shift 2 ;;
    --reward-weight) reward_weight="$2"; shift 2 ;;
    --coef) coef="$2"; shift 2 ;;
    --rl-from) rl_from="$2"; shift 2 ;;
    --student) student="$2"; shift 2 ;;
    --mode) mode="$2"; shift 2 ;;
    --estimator) estimator="$2"; shift 2 ;;
    --lr) lr="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --also-target) also_target="$2"; shift 2 ;;
    --teacher) teacher_dir="$2"; shift 2 ;;
    --warmup-seed) warmup_seed="$2"; shift 2 ;;
    --skew-correct) skew_correct="$2"; shift 2 ;;
    --set) extra_set+=(--set "$2"); shift 2 ;;
    *) echo "opd_proof: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bin="${AJET_BUILD_DIR:-$here/build}/bin"
for b in ajet ajet-swarm ajet-engine; do
  [ -x "$bin/$b" ] || { echo "opd_proof: $bin/$b is not built (scripts/build.sh)" >&2; exit 2; }
done
out="$here/exp/opd/$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
cd "$here"
front_pid=""
cleanup() { if [ -n "$front_pid" ]; then kill "$front_pid" 2>/dev/null || true; wait "$front_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT

# The students' model directory under each warm-up: calc-skewed-R for a share of correct demos other
# than calc-skewed's 0.05.
student_dir="$student"
if [ "$student" = calc-skewed ] && [ "$skew_correct" != 0.05 ]; then student_dir="calc-skewed-$skew_correct"; fi

final_model() { sed -n 's/^ajet: final model: \([^ ]*\).*/\1/p' "$1" | tail -1; }

for s in $seeds; do
  ws="${warmup_seed:-$s}"  # the seed whose warm-up (tokenizer, model) the students start from
  if [ "$ws" = 1 ]; then work="$here/exp/main"; else work="$here/exp/main-seed$ws"; fi
  if [ ! -f "$work/models/calc-sft/config.json" ]; then
    echo "opd_proof: seed $s: warm-up (scripts/run.sh, AJET_STOP_AFTER=sft)" >&2
    AJET_SEED="$s" AJET_WORK_DIR="$work" AJET_STOP_AFTER=sft "$here/scripts/run.sh" > "$out/seed$s-warmup.log" 2>&1
  fi
  if [ "$student" = calc-skewed ] && [ ! -f "$work/models/$student_dir/config.json" ]; then
    # The sparse-reward start: the warm-up fine-tuned to answer without the calculator 95 % of the time
    # (5 % correct demos, the rest calc's no_tool mistake), so that at T=1 only a few % of samples
    # succeed and most GRPO groups carry no reward signal (as bench/classic/skewed_start.sh, sparser).
    echo "opd_proof: seed $s: the sparse-reward student (calc-sft fine-tuned to skip the tool)" >&2
    "$bin/ajet" tasks demos --task calc --n 20000 --correct-ratio "$skew_correct" --error-mix 0,0,1 --seed "$((s + 100))" \
      > "$out/seed$s-skewed.jsonl"
    "$bin/ajet" sft --model "$work/models/calc-sft" --demos "$out/seed$s-skewed.jsonl" --out "$work/models/$student_dir" \
      --force --steps 150 --warmup 10 --lr 1e-3 --min-lr-ratio 0.3 --batch-tokens 4096 --seed "$s" --threads 2 \
      --log-every 50 > "$out/seed$s-skewed.log" 2>&1
  fi
  teacher_start=(--set "ajet.model.path=$work/models/calc-sft")
  common=(--set "ajet.model.path=$work/models/$student_dir" --set "ajet.engine.seed=$s"
          --set "ajet.task_reader.shuffle_seed=$s" --set "ajet.task_reader.builtin.seed=$s")
  arm_lr=(); [ -z "$lr" ] || arm_lr=(--set "ajet.trainer_common.optim.lr=$lr")  # both arms, never the teacher
  teacher="${teacher_dir:-$here/exp/opd/teacher-seed$ws}"
  if [ ! -f "$teacher/config.json" ]; then
    [ -z "$teacher_dir" ] || { echo "opd_proof: --teacher $teacher_dir has no config.json" >&2; exit 2; }
    echo "opd_proof: seed $s: teacher = the warm-up after $teacher_steps RL steps" >&2
    "$bin/ajet" --conf examples/configs/calc.yaml --exp-dir "$out/teacher-seed$s" "${common[@]}" "${teacher_start[@]}" \
      --set "ajet.trainer_common.total_training_steps=$teacher_steps" \
      --set "ajet.trainer_common.max_training_seconds=null" \
      --set "ajet.trainer_common.test_freq=$teacher_steps" > "$out/seed$s-teacher.log" 2>&1
    model="$(final_model "$out/seed$s-teacher.log")"
    [ -n "$model" ] || { echo "opd_proof: the teacher run left no final model ($out/seed$s-teacher.log)" >&2; exit 1; }
    rm -rf "$teacher.tmp" && cp -r "$model" "$teacher.tmp" && mv "$teacher.tmp" "$teacher"
  fi
  # The teacher's front: inference only (debug backbone), answering its --inference-key.
  key="opd-bench-$s"
  "$bin/ajet-swarm" start --port 0 --exp-dir "$out/teacher-front-seed$s" --fresh --inference-key "$key" \
    > "$out/seed$s-teacher-front.log" 2>&1 &
  front_pid=$!
  for _ in $(seq 1 100); do grep -q "ajet-swarm ready:" "$out/seed$s-teacher-front.log" && break; sleep 0.2; done
  url="$(sed -n 's/^ajet-swarm ready: \(http:[^ ]*\) .*/\1/p' "$out/seed$s-teacher-front.log" | head -1)"
  [ -n "$url" ] || { echo "opd_proof: the teacher's front did not start" >&2; cat "$out/seed$s-teacher-front.log" >&2; exit 1; }
  yaml="ajet:
  backbone: debug
  model:
    path: $teacher
  rollout:
    max_num_seqs: 64
  engine:
    threads: 2
    kv_cache_memory_mb: 256"
  python3 - "$url" "$yaml" <<'PY'
import json, sys, time, urllib.error, urllib.request
url, yaml = sys.argv[1], sys.argv[2]
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        return json.load(urllib.request.urlopen(req, timeout=600))
    except urllib.error.HTTPError as e:
        sys.exit(f"the teacher's front refused {path}: {e.read().decode()[:500]}")
post("/sync_train_config", {"yaml_as_string": yaml})
post("/start_engine", {})
for _ in range(600):
    if json.load(urllib.request.urlopen(url + "/get_engine_status"))["engine_status"] == "ENGINE.ROLLING":
        break
    time.sleep(0.5)
else:
    sys.exit("the teacher's engine did not start")
PY
  run_arm() {  # run_arm NAME EXTRA_FLAGS...
    local name="$1"; shift
    echo "opd_proof: seed $s: $name, $steps steps" >&2
    "$bin/ajet" --conf examples/configs/calc.yaml --exp-dir "$out/seed$s-$name" "${common[@]}" "${arm_lr[@]}" "${extra_set[@]}" \
      --set "ajet.trainer_common.total_training_steps=$steps" --set "ajet.trainer_common.max_training_seconds=null" \
      --set "ajet.trainer_common.test_freq=$eval_every" "$@" > "$out/seed$s-$name.log" 2>&1
  }
  if [ -n "$rl_from" ]; then
    ln -s "$rl_from/seed$s-rl" "$out/seed$s-rl" && ln -s "$rl_from/seed$s-rl.log" "$out/seed$s-rl.log"
  else
    run_arm rl
  fi
  run_arm opd --set "ajet.distillation.base_url=$url/v1" --set "ajet.distillation.api_key=$key" \
    --set "ajet.distillation.top_k=4" --set "ajet.distillation.reward_weight=$reward_weight" \
    --set "ajet.distillation.coef=$coef" --set "ajet.distillation.mode=$mode" \
    --set "ajet.distillation.estimator=$estimator"
  cleanup
  front_pid=""
done

python3 - "$here" "$out" "$seeds" "$steps" "$eval_every" "$teacher_steps" "$reward_weight" "$coef" "$student" "$append" "$mode" "$estimator" "$lr" "$target" "${extra_set[*]}" "$teacher_dir" "$warmup_seed" "$skew_correct" "$also_target" "$student_dir" <<'PY'
import datetime, glob, json, os, sqlite3, statistics, sys
repo, out, seeds, steps, every, teacher_steps, rw, coef, student, append, mode, est, lr, target_arg, extra, teacher_dir, warmup_seed, skew, also, student_name = sys.argv[1:]
seeds = seeds.split()
def records(run):
    path = sorted(glob.glob(os.path.join(out, run, "*", "metrics.jsonl")))[-1]
    return [json.loads(l) for l in open(path) if l.strip()]
def curve(recs):
    return [(r["step"], 100 * r["validation"]["sampled_success"], 100 * r["validation"]["greedy_success"])
            for r in recs if r.get("kind") == "validation"]
rows = []
for s in seeds:
    rl, opd = records(f"seed{s}-rl"), records(f"seed{s}-opd")
    c_rl, c_opd = curve(rl), curve(opd)
    # The target: a fixed held-out T=1 success (--target PCT), or OPD's own last validation (final).
    target = c_opd[-1][1] if target_arg == "final" else float(target_arg)
    reach_opd = next((st for st, t1, _ in c_opd if t1 >= target), None)
    reach_rl = next((st for st, t1, _ in c_rl if t1 >= target), None)
    reach2 = [next((st for st, t1, _ in c if t1 >= float(also)), None) for c in (c_opd, c_rl)] if also else [None, None]
    # The front's own metrics table holds every step's distill/* figures.
    db = sorted(glob.glob(os.path.join(out, f"seed{s}-opd", "*", "swarm", "*.sqlite")))[-1]
    con = sqlite3.connect(db)
    series = lambda name: [v for _, v in con.execute(
        "SELECT step, value FROM metrics WHERE name = ? ORDER BY step", (name,))]
    overlap, failed = series("distill/in_teacher_top_k"), int(sum(series("distill/failed")))
    secs = lambda recs: max(r.get("elapsed_s", 0) for r in recs)
    rows.append(dict(seed=s, start=c_rl[0][1], rl_end=c_rl[-1][1], opd_end=c_opd[-1][1], target=target, reach2=reach2,
                     reach_opd=reach_opd, reach_rl=reach_rl, ov0=overlap[0] if overlap else None,
                     ov1=overlap[-1] if overlap else None, failed=failed, s_rl=secs(rl), s_opd=secs(opd),
                     curve_rl=c_rl, curve_opd=c_opd))
n = int(steps)
def ratio(r, *reach):  # (value for the median, text): a run that never reaches it counts as its bound
    o, l = reach if reach else (r["reach_opd"], r["reach_rl"])
    if o and l: return l / o, "%.1fx" % (l / o)
    if o: return n / o, "> %.1fx" % (n / o)
    if l: return l / n, "< %.1fx" % (l / n)
    return 1.0, "neither"
med = lambda xs: statistics.median(xs)
what = "OPD's final T=1 success" if target_arg == "final" else f"{float(target_arg):g} % held-out T=1 success"
def teacher_text():
    if not teacher_dir:
        return f"the warm-up after {teacher_steps} RL steps"
    cfg = json.load(open(os.path.join(teacher_dir, "config.json")))
    params = cfg.get("num_hidden_layers"), cfg.get("hidden_size")
    return f"`{os.path.basename(os.path.normpath(teacher_dir))}` ({params[0]} layers, hidden {params[1]})"
lines = [f"### On-policy distillation vs RL alone: calc, tiny student from `{student_name}`"
         + (f" of seed {warmup_seed}'s warm-up" if warmup_seed else "")
         + f", teacher = {teacher_text()} ({datetime.date.today().isoformat()})", "",
         f"`bench/classic/opd_proof.sh --steps {steps} --eval-every {every} --reward-weight {rw} --coef {coef} --student {student} --mode {mode} --estimator {est}"
         + (f" --lr {lr}" if lr else "") + (f" --target {target_arg}" if target_arg != "final" else "") + (f" {extra}" if extra else "")
         + (f" --teacher {teacher_dir}" if teacher_dir else "") + (f" --warmup-seed {warmup_seed}" if warmup_seed else "")
         + (f" --skew-correct {skew}" if student_name != student else "") + (f" --also-target {also}" if also else "")
         + f"`: per seed, two runs from the same warm-up (`{student_name}`): `rl` is `examples/configs/calc.yaml`"
         + (f" with lr {lr}" if lr else "") + (f" and `{extra}`" if extra else "") +
         f", `opd` the same plus `ajet.distillation` ({mode} mode, {est}, coef {coef}, reward_weight {rw}, top_k 4) with the "
         f"teacher served by a second front. Held-out T=1 success (4 samples of 100 tasks) every {every} steps. "
         f"*Reaches* is each arm's first validation at or above {what}"
         + (f"; the column *{float(also):g} %* gives the same for {float(also):g} %: OPD / RL steps (ratio)" if also else "") + ".", "",
         f"| Seed | Start T=1 | RL at step {steps} | OPD at step {steps} | OPD reaches it at | RL reaches it at | RL / OPD steps | "
         + (f"{float(also):g} % | " if also else "") + "top-k overlap first → last | teacher failures | wall s RL / OPD |",
         "|---|---|---|---|---|---|---|" + ("---|" if also else "") + "---|---|---|"]
reach_text = lambda st: str(st) if st else "> " + steps
for r in rows:
    lines.append(f"| {r['seed']} | {r['start']:.1f} | {r['rl_end']:.1f} | {r['opd_end']:.1f} | "
                 f"{reach_text(r['reach_opd'])} | {reach_text(r['reach_rl'])} | "
                 f"{ratio(r)[1]} | "
                 + (f"{reach_text(r['reach2'][0])} / {reach_text(r['reach2'][1])} ({ratio(r, *r['reach2'])[1]}) | " if also else "")
                 + f"{(r['ov0'] or 0) * 100:.1f} → {(r['ov1'] or 0) * 100:.1f} % | {r['failed']} | "
                 f"{r['s_rl']:.0f} / {r['s_opd']:.0f} |")
ratios = [ratio(r)[0] for r in rows]
lines += ["", f"Median RL/OPD steps ratio {med(ratios):.1f}x (range {min(ratios):.1f}-{max(ratios):.1f}; a '>' or '<' ratio "
          f"counts as its bound, 'neither' as 1.0x); final T=1 median OPD {med([r['opd_end'] for r in rows]):.1f} % vs RL "
          f"{med([r['rl_end'] for r in rows]):.1f} %."]
if also:
    r2 = [ratio(r, *r["reach2"])[0] for r in rows]
    lines[-1] += f" To {float(also):g} %: median ratio {med(r2):.1f}x (range {min(r2):.1f}-{max(r2):.1f})."
lines += ["", "Curves (step: T=1 %):", ""]
for r in rows:
    lines.append(f"- seed {r['seed']}: rl " + ", ".join(f"{st}: {t1:.0f}" for st, t1, _ in r["curve_rl"]) +
                 "; opd " + ", ".join(f"{st}: {t1:.0f}" for st, t1, _ in r["curve_opd"]))
text = "\n".join(lines) + "\n"
print(text)
if append == "1":
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + text)
PY
