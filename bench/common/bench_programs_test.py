"""Every program in bench/ that adds to docs/benchmarks.md can be told not to (`--no-append`).

docs/benchmarks.md promises it in its first paragraph; this keeps the promise from going stale when a
benchmark is added. A program counts as appending when its source names docs/benchmarks.md:
  * C++ (*.cc): it must go through bench_cli.h (BenchCli gives --no-append and --smoke;
    append_to_benchmarks writes the section), and `--help` of a built binary that uses it lists
    --no-append;
  * Python (*.py): its `--help` lists --no-append;
  * shell (*.sh): the scripts have no --help, so their text must handle --no-append.
Files that only mention the document (they print a table for a person to paste) are listed in
NOT_APPENDING with the reason. Run by ctest (bench_programs_take_no_append) with AJET_SOURCE_DIR and
AJET_BINARY_DIR set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unittest

SOURCE = os.environ.get("AJET_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BINARY = os.environ.get("AJET_BINARY_DIR", os.path.join(SOURCE, "build"))

# Relative to bench/: sources that name docs/benchmarks.md without writing it.
NOT_APPENDING = {
    "common/bench_cli.cc": "the shared writer itself",
    "common/bench_cli.h": "the shared writer itself",
    "gpu/gpu_check.cc": "scripts/gpu-check.sh prints its table for a person to paste from the GPU machine",
    "classic/learning_record.py": "the record's format; names the document its backfilled lines came from",
    "classic/learning_page.py": "names it in the page it draws; writes docs/learning.html only",
    "classic/learning_page_test.py": "tests of the two above",
}


def appending_programs() -> list[str]:
    found = []
    for root, _, files in os.walk(os.path.join(SOURCE, "bench")):
        for name in files:
            if not name.endswith((".cc", ".py", ".sh")) or name == os.path.basename(__file__):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, os.path.join(SOURCE, "bench"))
            with open(path, encoding="utf-8") as f:
                if "benchmarks.md" in f.read() and rel not in NOT_APPENDING:
                    found.append(rel)
    return sorted(found)


class BenchProgramsTakeNoAppend(unittest.TestCase):
    def test_there_is_something_to_check(self):
        # A wrong SOURCE would find nothing and pass every test below.
        self.assertGreater(len(appending_programs()), 20, appending_programs())

    def test_cc_programs_use_the_shared_command_line(self):
        for rel in appending_programs():
            if not rel.endswith(".cc"):
                continue
            with self.subTest(rel), open(os.path.join(SOURCE, "bench", rel), encoding="utf-8") as f:
                text = f.read()
                # assertTrue, not assertIn: a failure names the file, not its whole text.
                self.assertTrue("BenchCli" in text and '#include "bench_cli.h"' in text,
                                f"{rel}: parse the command line with ajet::bench::BenchCli (it adds --no-append)")
                self.assertTrue("append_to_benchmarks" in text,
                                f"{rel}: write the section with ajet::bench::append_to_benchmarks")

    def test_built_cc_programs_list_no_append_in_their_help(self):
        # The shared command line, checked through a binary: if BenchCli lost the flag, all of them would.
        for name in ("merge_tokens", "episode_list_bench"):
            binary = os.path.join(BINARY, "bin", name)
            with self.subTest(name):
                if not os.path.exists(binary):
                    self.skipTest(f"{binary} is not built")
                out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertIn("--no-append", out.stdout)

    def test_python_programs_list_no_append_in_their_help(self):
        for rel in appending_programs():
            if not rel.endswith(".py"):
                continue
            with self.subTest(rel):
                out = subprocess.run([sys.executable, os.path.join(SOURCE, "bench", rel), "--help"],
                                     capture_output=True, text=True, timeout=60)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertIn("--no-append", out.stdout)

    def test_shell_programs_handle_no_append(self):
        for rel in appending_programs():
            if not rel.endswith(".sh"):
                continue
            with self.subTest(rel), open(os.path.join(SOURCE, "bench", rel), encoding="utf-8") as f:
                self.assertTrue("--no-append" in f.read(), f"{rel}: handle --no-append")


if __name__ == "__main__":
    unittest.main()
