"""The record of fresh runs and its page: fresh_runs_report.py appends one record per run (read from
run directories laid out as scripts/run.sh leaves them), learning_record.py refuses a malformed line
naming it, learning_page.py draws every run and the right medians, and the committed page is the one
the committed record gives. Run by ctest (learning_page) with AJET_SOURCE_DIR set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("AJET_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(SOURCE, "bench", "classic"))
import fresh_runs_report  # noqa: E402
import learning_page  # noqa: E402
import learning_record  # noqa: E402

SHA_A = "a" * 40
SHA_B = "b" * 40


def record(**changes) -> dict:
    r = {"batch": "main-20270101_000000", "date": "2027-01-01T00:00:00Z", "label": "main",
         "commit": SHA_A, "commit_date": "2027-01-01T00:00:00+00:00", "dirty": False,
         "cpu_model": "Test CPU", "cpus": 2, "seed": 1, "gate_reached": True, "gate_sft_step": 250,
         "rl_steps": 40, "t1_before": 60.0, "t1_after": 90.0, "greedy_before": 99.0, "greedy_after": 99.0,
         "gain": 30.0, "seconds_after_build": 590, "backfilled": False, "note": ""}
    r.update(changes)
    if "gain" not in changes:
        r["gain"] = r["t1_after"] - r["t1_before"]
    return r


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def fake_run(out: str, seed: int, before: float, after: float, gate_step: int | None) -> None:
    """What scripts/run.sh leaves for one seed, as far as the report reads it."""
    work = os.path.join(out, f"seed{seed}")
    write(os.path.join(out, f"seed{seed}.log"),
          "sft: warm-up (150 symbolic steps first)\nrun.sh: done in 591 s after the build\n")
    gate = {"step": gate_step, "success": 0.7} if gate_step is not None else None
    write(os.path.join(work, "models", "calc-gate", "sft_report.json"),
          json.dumps({"steps": 300, "train_seconds": 80.0, "stopped_at_success": gate, "model": "m/cand-symbolic"}))
    write(os.path.join(work, "models", "calc-sft", "sft_report.json"), json.dumps({"steps": 500, "train_seconds": 250.0}))
    val = lambda step, t1, greedy: {"kind": "validation", "step": step, "validation": {  # noqa: E731
        "sampled_success": t1, "greedy_success": greedy, "k": 4, "tasks": 100}}
    write(os.path.join(work, "experiments", "calc_1", "metrics.jsonl"),
          "\n".join(json.dumps(v) for v in [val(0, before, 0.99), {"kind": "train", "step": 1},
                                              val(42, after, 1.0)]) + "\n")


class RecordAppend(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.repo = os.path.join(self.tmp.name, "repo")
        self.out = os.path.join(self.repo, "exp", "fresh", "main-20270101_120000")
        write(os.path.join(self.repo, "docs", "benchmarks.md"), "# Benchmarks\n")
        write(os.path.join(self.out, "run_set.json"), json.dumps({
            "date": "2027-01-01T12:00:00Z", "commit": SHA_B, "commit_date": "2026-12-31T10:00:00+00:00",
            "dirty": True, "cpu_model": "Test CPU @ 2.0GHz", "cpus": 2}))
        fake_run(self.out, 1, 0.60, 0.98, 100)
        fake_run(self.out, 2, 0.55, 0.75, None)

    def tearDown(self):
        self.tmp.cleanup()

    def test_each_run_becomes_one_record_and_the_page_is_redrawn(self):
        text = fresh_runs_report.report(self.repo, self.out, "main", ["1", "2"], append=True)
        self.assertIn("| 1 | reached at 150 symbolic + 100 (70%) |", text)
        path = os.path.join(self.repo, "bench", "records", "fresh_runs.jsonl")
        got = learning_record.read_records(path)
        self.assertEqual([r["seed"] for r in got], [1, 2])
        first, second = got
        self.assertEqual((first["commit"], first["dirty"], first["commit_date"]), (SHA_B, True, "2026-12-31T10:00:00+00:00"))
        self.assertEqual((first["cpu_model"], first["cpus"]), ("Test CPU @ 2.0GHz", 2))
        self.assertEqual((first["batch"], first["date"], first["label"]), ("main-20270101_120000", "2027-01-01T12:00:00Z", "main"))
        self.assertEqual((first["gate_reached"], first["gate_sft_step"], first["rl_steps"]), (True, 250, 42))
        self.assertEqual((first["t1_before"], first["t1_after"], first["gain"]), (60.0, 98.0, 38.0))
        self.assertEqual((first["greedy_before"], first["greedy_after"]), (99.0, 100.0))
        self.assertEqual((first["seconds_after_build"], first["backfilled"]), (591, False))
        self.assertEqual((second["gate_reached"], second["gate_sft_step"]), (False, None))
        self.assertAlmostEqual(second["gain"], 20.0)
        # The next invocation appends after them.
        fresh_runs_report.report(self.repo, self.out, "again", ["1"], append=True)
        self.assertEqual([r["label"] for r in learning_record.read_records(path)], ["main", "main", "again"])
        with open(os.path.join(self.repo, "docs", "benchmarks.md"), encoding="utf-8") as f:
            self.assertEqual(f.read().count("### Fresh runs of the main command:"), 2)
        with open(os.path.join(self.repo, "docs", "learning.html"), encoding="utf-8") as f:
            page = f.read()
        self.assertEqual(page.count("<circle"), 2 * 3)  # every run in both charts
        self.assertIn("seed 2, main, bbbbbbb*, 2027-01-01: T=1 55.0 → 75.0 (+20.0)", page)

    def test_no_append_changes_nothing_in_the_repository(self):
        fresh_runs_report.report(self.repo, self.out, "main", ["1", "2"], append=False)
        self.assertFalse(os.path.exists(os.path.join(self.repo, "bench", "records", "fresh_runs.jsonl")))
        self.assertFalse(os.path.exists(os.path.join(self.repo, "docs", "learning.html")))
        with open(os.path.join(self.repo, "docs", "benchmarks.md"), encoding="utf-8") as f:
            self.assertEqual(f.read(), "# Benchmarks\n")
        self.assertEqual(len(learning_record.read_records(os.path.join(self.out, "records.jsonl"))), 2)

    def test_the_snapshot_names_the_commit_and_whether_the_tree_was_dirty(self):
        git = lambda *a: subprocess.run(["git", "-C", self.repo, *a], capture_output=True, text=True,  # noqa: E731
                                        check=True).stdout.strip()
        git("init", "-q")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
        git("add", "docs/benchmarks.md")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "docs")
        clean = fresh_runs_report.snapshot(self.repo, os.path.join(self.tmp.name, "s1"))
        self.assertEqual(clean["commit"], git("rev-parse", "HEAD"))
        self.assertIs(clean["dirty"], False)
        self.assertTrue(clean["cpus"] >= 1)
        write(os.path.join(self.repo, "docs", "benchmarks.md"), "# changed\n")
        self.assertIs(fresh_runs_report.snapshot(self.repo, os.path.join(self.tmp.name, "s2"))["dirty"], True)
        with open(os.path.join(self.tmp.name, "s2", "run_set.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["commit"], clean["commit"])

    def test_a_wrong_new_record_is_refused_and_nothing_is_written(self):
        path = os.path.join(self.tmp.name, "r.jsonl")
        with self.assertRaisesRegex(learning_record.RecordError, r"new record 2 .*field 'seed' must be an integer"):
            learning_record.append_records(path, [record(), record(seed="1")])
        self.assertFalse(os.path.exists(path))


class Page(unittest.TestCase):
    # Commit A: three runs (finals 90, 95, 99; gains 30, 40, 20: one below +25). Commit B, older by
    # its date but appended later: two runs (finals 80, 100, median 90: on the target). One run of B
    # with a dirty tree and one of an unknown commit each get a column of their own.
    RECORDS = [
        record(seed=1, t1_before=60.0, t1_after=90.0),
        record(seed=2, t1_before=55.0, t1_after=95.0),
        record(seed=3, t1_before=79.0, t1_after=99.0),
        record(batch="b1", commit=SHA_B, commit_date="2026-06-01T00:00:00+00:00", seed=1, t1_before=54.0, t1_after=80.0),
        record(batch="b2", commit=SHA_B, commit_date="2026-06-01T00:00:00+00:00", seed=2, t1_before=72.0, t1_after=100.0),
        record(batch="b3", commit=SHA_B, commit_date="2026-06-01T00:00:00+00:00", dirty=True, seed=1, t1_before=50.0, t1_after=51.0),
        record(batch="old", commit=None, commit_date=None, dirty=None, date="2026-01-01", seed=7, t1_before=10.0,
               t1_after=40.0, backfilled=True, cpu_model=None),
    ]

    def test_columns_group_by_commit_in_commit_order_with_the_right_medians(self):
        cols = learning_page.columns(self.RECORDS)
        self.assertEqual([c.name for c in cols], ["unknown", "bbbbbbb", "bbbbbbb*", "aaaaaaa"])
        self.assertEqual([len(c.runs) for c in cols], [1, 2, 1, 3])
        self.assertEqual([c.median("t1_after") for c in cols], [40.0, 90.0, 51.0, 95.0])
        self.assertEqual([c.median("gain") for c in cols], [30.0, 27.0, 1.0, 30.0])
        self.assertEqual([c.final_met for c in cols], [False, True, False, True])
        self.assertEqual([c.gain_met for c in cols], [True, True, False, False])

    def test_the_page_draws_every_run_each_median_and_both_targets(self):
        page = learning_page.render(self.RECORDS)
        self.assertEqual(page.count("<circle"), 2 * len(self.RECORDS))
        for r in self.RECORDS:
            self.assertIn(learning_page._run_title(r).replace("'", "&#x27;"), page)
        self.assertIn("<title>median 95.0 over 3 runs</title>", page)
        self.assertIn("<title>median 90.0 over 2 runs</title>", page)
        self.assertIn("<title>median 27.0 over 2 runs</title>", page)
        self.assertIn("target: median ≥ 90 %", page)
        self.assertIn("target: every run ≥ +25", page)
        self.assertEqual(page.count('class="dot below"'), 2)  # gains 20 (commit A) and 1 (dirty)
        self.assertEqual(page.count('class="dot backfilled"'), 2)  # the unknown commit's run, hollow
        # The table: one row per column, in order, with the medians and the verdicts.
        rows = re.findall(r"<tr><td>(.*?)</tr>", page)
        self.assertEqual(len(rows), 4)
        self.assertIn('>95.0 %</td><td class="num miss">+30.0 (+20.0 to +40.0)</td>', rows[3])
        self.assertIn('>90.0 %</td><td class="num">+27.0 (+26.0 to +28.0)</td>', rows[1])
        self.assertTrue(rows[1].endswith('<td class="">met</td>'), rows[1])
        # Self-contained: no script runs, nothing is fetched, the records ride along as JSON.
        self.assertNotRegex(page, r"<script(?! type=\"application/json\")")
        self.assertNotRegex(page, r"(src|href)=\"(https?:)?//")
        embedded = re.search(r'<script type="application/json" id="fresh-runs">(.*?)</script>', page, re.S)
        self.assertEqual(json.loads(embedded.group(1)), self.RECORDS)

    def test_no_records_is_a_page_that_says_so(self):
        self.assertIn("No fresh runs recorded yet.", learning_page.render([]))


class MalformedLines(unittest.TestCase):
    def check(self, line: str, message: str) -> None:
        text = json.dumps(record()) + "\n\n" + line + "\n"
        with self.assertRaises(learning_record.RecordError) as caught:
            learning_record.parse_records(text, "fresh_runs.jsonl")
        self.assertEqual(str(caught.exception), message)

    def test_each_problem_is_named_with_its_line(self):
        self.check('{"seed": 1,', "fresh_runs.jsonl:3: not JSON: Expecting property name enclosed in double quotes (column 12)")
        self.check("[1, 2]", "fresh_runs.jsonl:3: expected a JSON object, got list")
        r = record()
        del r["seed"], r["gain"]
        self.check(json.dumps(r), "fresh_runs.jsonl:3: missing fields seed, gain")
        self.check(json.dumps(record(t1_after=101.0, gain=41.0)),
                   "fresh_runs.jsonl:3: field 't1_after' must be a number from 0 to 100, got 101.0")
        self.check(json.dumps(record(commit="abc1234")),
                   "fresh_runs.jsonl:3: field 'commit' must be a full 40-hex commit SHA, got \"abc1234\"")
        self.check(json.dumps(record(date="01/02/2027")),
                   "fresh_runs.jsonl:3: field 'date' must be a date YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ, got \"01/02/2027\"")
        self.check(json.dumps(record(gain=12.0)),
                   "fresh_runs.jsonl:3: field 'gain' is 12.0 but t1_after - t1_before is 30.00")
        self.check(json.dumps({**record(), "gian": 1}), "fresh_runs.jsonl:3: unknown field 'gian' (the fields: "
                   + ", ".join(learning_record.FIELDS) + ")")

    def test_the_generator_names_the_line_and_exits_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            records = os.path.join(tmp, "fresh_runs.jsonl")
            write(records, json.dumps(record()) + "\n" + json.dumps(record(seed=True)) + "\n")
            out = os.path.join(tmp, "learning.html")
            p = subprocess.run([sys.executable, os.path.join(SOURCE, "bench", "classic", "learning_page.py"),
                                "--records", records, "--out", out], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertEqual(p.stderr.strip(), f"learning_page: error: {records}:2: field 'seed' must be an integer, got true")
            self.assertFalse(os.path.exists(out))


class Committed(unittest.TestCase):
    def test_the_committed_page_is_drawn_from_the_committed_record(self):
        records = learning_record.read_records(os.path.join(SOURCE, learning_record.RECORDS))
        self.assertGreaterEqual(len(records), 36)  # the backfilled tables at least
        with open(os.path.join(SOURCE, learning_page.PAGE), encoding="utf-8") as f:
            self.assertTrue(f.read() == learning_page.render(records),
                            "docs/learning.html is not what bench/records/fresh_runs.jsonl gives: "
                            "run python3 bench/classic/learning_page.py")


if __name__ == "__main__":
    unittest.main()
