#!/usr/bin/env python3
"""The report of bench/classic/fresh_runs.sh, in two calls.

  fresh_runs_report.py --snapshot REPO OUT
      before the runs: writes OUT/run_set.json with the date, the commit measured (and whether the
      tree was dirty) and the machine, so that edits made while the runs go on are not credited.
  fresh_runs_report.py [--no-append] --label LABEL --seeds "1 2 3" REPO OUT
      after them: reads each seed's work directory OUT/seedN and log OUT/seedN.log, prints the table
      (median and range, the targets of issue 13), writes it to OUT/table.md and the run records to
      OUT/records.jsonl; unless --no-append, appends the table to docs/benchmarks.md, the records to
      bench/records/fresh_runs.jsonl, and regenerates docs/learning.html from them.

Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import learning_page  # noqa: E402
import learning_record  # noqa: E402


def snapshot(repo: str, out: str) -> dict:
    run_set = {"date": learning_record.now_utc(), **learning_record.git_state(repo), **learning_record.machine()}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "run_set.json"), "w", encoding="utf-8") as f:
        json.dump(run_set, f, indent=1)
    return run_set


def read_run(out: str, seed: str) -> dict:
    """One seed's numbers from its work directory and log."""
    work = os.path.join(out, f"seed{seed}")
    with open(os.path.join(out, f"seed{seed}.log"), encoding="utf-8", errors="replace") as f:
        log = f.read()
    secs = int(re.findall(r"done in (\d+) s after the build", log)[-1])
    with open(os.path.join(work, "models", "calc-gate", "sft_report.json"), encoding="utf-8") as f:
        rep = json.load(f)
    with open(os.path.join(work, "models", "calc-sft", "sft_report.json"), encoding="utf-8") as f:
        rep2 = json.load(f)
    gate = rep.get("stopped_at_success")
    # With the symbolic steps first (AJET_SFT_SYMBOLIC_STEPS), the gate's model started from the
    # winner's symbolic model: count those steps too.
    sym = 0
    if rep.get("model", "").endswith(("-symbolic", "-first")):
        m = re.search(r"\((\d+) symbolic steps", log)
        sym = int(m.group(1)) if m else 0
    metrics = sorted(glob.glob(os.path.join(work, "experiments", "*", "metrics.jsonl")))[-1]
    with open(metrics, encoding="utf-8") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    val = [r for r in recs if r.get("kind") == "validation"]
    a, b = val[0]["validation"], val[-1]["validation"]
    return dict(seed=seed, secs=secs, gate=gate, sym=sym, sft_steps=rep["steps"], sft_s=rep["train_seconds"],
                sft2_steps=rep2["steps"], sft2_s=rep2["train_seconds"], rl_steps=val[-1]["step"],
                s0=100 * a["sampled_success"], s1=100 * b["sampled_success"],
                g0=100 * a["greedy_success"], g1=100 * b["greedy_success"], k=b["k"], tasks=b["tasks"])


def table(rows: list[dict], label: str, seeds: list[str], today: str) -> str:
    med = statistics.median
    rng = lambda xs: f"{min(xs):.1f}–{max(xs):.1f}"  # noqa: E731
    lines = [f"### Fresh runs of the main command: {label} ({today})", "",
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
    return "\n".join(lines) + "\n"


def records(rows: list[dict], run_set: dict, label: str, batch: str) -> list[dict]:
    """One learning_record line per run."""
    out = []
    for r in rows:
        out.append({
            "batch": batch, "date": run_set["date"], "label": label,
            "commit": run_set.get("commit"), "commit_date": run_set.get("commit_date"), "dirty": run_set.get("dirty"),
            "cpu_model": run_set.get("cpu_model"), "cpus": run_set.get("cpus"),
            "seed": int(r["seed"]),
            "gate_reached": bool(r["gate"]),
            "gate_sft_step": r["sym"] + r["gate"]["step"] if r["gate"] else None,
            "rl_steps": r["rl_steps"],
            "t1_before": round(r["s0"], 4), "t1_after": round(r["s1"], 4),
            "greedy_before": round(r["g0"], 4), "greedy_after": round(r["g1"], 4),
            "gain": round(r["s1"] - r["s0"], 4),
            "seconds_after_build": r["secs"],
            "backfilled": False, "note": "",
        })
    return out


def report(repo: str, out: str, label: str, seeds: list[str], append: bool) -> str:
    with open(os.path.join(out, "run_set.json"), encoding="utf-8") as f:
        run_set = json.load(f)
    rows = [read_run(out, s) for s in seeds]
    text = table(rows, label, seeds, datetime.date.today().isoformat())
    new = records(rows, run_set, label, os.path.basename(os.path.normpath(out)))
    with open(os.path.join(out, "table.md"), "w", encoding="utf-8") as f:
        f.write(text)
    learning_record.append_records(os.path.join(out, "records.jsonl"), new)
    if append:
        with open(os.path.join(repo, "docs", "benchmarks.md"), "a", encoding="utf-8") as f:
            f.write("\n" + text)
        path = os.path.join(repo, learning_record.RECORDS)
        learning_record.append_records(path, new)
        learning_page.write_page(learning_record.read_records(path), os.path.join(repo, learning_page.PAGE))
    return text


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--snapshot", action="store_true", help="before the runs: write OUT/run_set.json")
    p.add_argument("--no-append", action="store_true",
                   help="print the table; leave docs/benchmarks.md, the record and docs/learning.html alone")
    p.add_argument("--label", default="main")
    p.add_argument("--seeds", default="1 2 3")
    p.add_argument("repo")
    p.add_argument("out")
    a = p.parse_args(argv)
    if a.snapshot:
        snapshot(a.repo, a.out)
        return 0
    print(report(a.repo, a.out, a.label, a.seeds.split(), append=not a.no_append))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
