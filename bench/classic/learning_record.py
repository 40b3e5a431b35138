"""The record of fresh runs of the main command: bench/records/fresh_runs.jsonl.

One JSON object per line, one line per fresh run of `scripts/run.sh` (one seed), appended by
bench/classic/fresh_runs.sh and drawn by bench/classic/learning_page.py. Fields (FIELDS below, with
their types; every field is present, `null` where unknown):

  batch          the fresh_runs.sh invocation the run belongs to (its output directory's name), so
                 runs of one invocation stay together when the commit is unknown
  date           when the run set started: YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC)
  label          fresh_runs.sh --label
  commit         `git rev-parse HEAD` of the tree that was built (full SHA), or null
  commit_date    that commit's committer date (ISO 8601), or null
  dirty          tracked files differed from the commit (`git status --untracked-files=no`), or null
  cpu_model      /proc/cpuinfo "model name", or null
  cpus           logical CPUs the run could use (nproc), or null
  seed           AJET_SEED
  gate_reached   the warm-up race reached its gate
  gate_sft_step  the SFT step at which it did (symbolic steps included), or null
  rl_steps       RL steps run in what was left of the 10 minutes, or null
  t1_before, t1_after          held-out success at temperature 1 before/after RL, percent
  greedy_before, greedy_after  held-out greedy success before/after RL, percent
  gain           t1_after - t1_before, points
  seconds_after_build          wall time of the run after the build, or null
  backfilled     copied from a table of docs/benchmarks.md written before this record existed
  note           what else a reader should know (where a backfilled entry came from), or ""

A malformed line is an error naming the file, the line and what is wrong (RecordError). Python 3
standard library only.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import subprocess

RECORDS = os.path.join("bench", "records", "fresh_runs.jsonl")  # relative to the repository root

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}:\d{2}Z)?$")
_SHA = re.compile(r"^[0-9a-f]{40}$")


class RecordError(ValueError):
    """A record line that is not what FIELDS says: names the file, the line and the problem."""


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _percent(v) -> str | None:
    if not _number(v) or not 0 <= v <= 100:
        return "a number from 0 to 100"
    return None


def _kind(check, what):
    def judge(v):
        return None if check(v) else what
    return judge


def _nullable(judge):
    def inner(v):
        return None if v is None else judge(v)
    return inner


_int = _kind(lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
_count = _kind(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0")
_text = _kind(lambda v: isinstance(v, str) and v != "", "a non-empty string")
_bool = _kind(lambda v: isinstance(v, bool), "true or false")

# name -> judge(value) returning None when right, else what the value must be.
FIELDS = {
    "batch": _text,
    "date": _kind(lambda v: isinstance(v, str) and bool(_DATE.match(v)), "a date YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ"),
    "label": _text,
    "commit": _nullable(_kind(lambda v: isinstance(v, str) and bool(_SHA.match(v)), "a full 40-hex commit SHA")),
    "commit_date": _nullable(_text),
    "dirty": _nullable(_bool),
    "cpu_model": _nullable(_text),
    "cpus": _nullable(_kind(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1")),
    "seed": _int,
    "gate_reached": _bool,
    "gate_sft_step": _nullable(_count),
    "rl_steps": _nullable(_count),
    "t1_before": _percent,
    "t1_after": _percent,
    "greedy_before": _percent,
    "greedy_after": _percent,
    "gain": _kind(_number, "a number"),
    "seconds_after_build": _nullable(_count),
    "backfilled": _bool,
    "note": _kind(lambda v: isinstance(v, str), "a string"),
}

# The gain is computed from unrounded success rates; a table with one decimal can be off by 0.1.
GAIN_TOLERANCE = 0.15


def check_record(record, where: str) -> dict:
    """Returns `record` when it holds every field of FIELDS, rightly typed; else RecordError."""
    if not isinstance(record, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [name for name in FIELDS if name not in record]
    if missing:
        raise RecordError(f"{where}: missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    unknown = sorted(set(record) - set(FIELDS))
    if unknown:
        raise RecordError(f"{where}: unknown field {unknown[0]!r} (the fields: {', '.join(FIELDS)})")
    for name, judge in FIELDS.items():
        wrong = judge(record[name])
        if wrong:
            raise RecordError(f"{where}: field {name!r} must be {wrong}, got {json.dumps(record[name])}")
    expected = record["t1_after"] - record["t1_before"]
    if abs(record["gain"] - expected) > GAIN_TOLERANCE:
        raise RecordError(f"{where}: field 'gain' is {record['gain']} but t1_after - t1_before is {expected:.2f}")
    if record["gate_sft_step"] is not None and not record["gate_reached"]:
        raise RecordError(f"{where}: field 'gate_sft_step' is {record['gate_sft_step']} but gate_reached is false")
    return record


def parse_records(text: str, name: str) -> list[dict]:
    """The records of a .jsonl text (blank lines skipped); `name` is the file named in errors."""
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordError(f"{where}: not JSON: {e.msg} (column {e.colno})") from None
        records.append(check_record(record, where))
    return records


def read_records(path: str) -> list[dict]:
    """Every record of `path` in file order ([] when it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return parse_records(f.read(), path)


def append_records(path: str, records: list[dict]) -> None:
    """Checks every record first (nothing is written when one is wrong), then appends them."""
    for i, record in enumerate(records):
        check_record(record, f"new record {i + 1} for {path}")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def git_state(repo: str) -> dict:
    """commit, commit_date and dirty of the tree at `repo` (nulls outside a git checkout)."""
    def git(*args):
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout.strip()
    try:
        return {"commit": git("rev-parse", "HEAD"),
                "commit_date": git("show", "-s", "--format=%cI", "HEAD"),
                "dirty": git("status", "--porcelain", "--untracked-files=no") != ""}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "commit_date": None, "dirty": None}


def machine(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """cpu_model (the first "model name" of /proc/cpuinfo) and cpus (nproc's count), null if unknown."""
    model = None
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    model = " ".join(value.split())
                    break
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu_model": model, "cpus": cpus}


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
