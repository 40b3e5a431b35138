"""The shell blocks of the user documents, run as written: a document that stops working when pasted fails.

For each document in DOCUMENTS, its ```sh / ```bash fenced blocks run in order, in one bash session (as
if pasted top to bottom into one terminal), from a stand-in for the repository root after the README's
build: a scratch directory whose entries link to the source tree, `build` links to the build tree, and
`examples/` and `clients/` are copies (so `npm install`, `pip install` and `exp/` outputs never touch
the checkout). The session runs with `set -e -o pipefail`: the first failing command fails the document,
named with its block and line.

Directives (one-line HTML comments directly above a block's fence; invisible when the page is rendered):

    <!-- test: skip: REASON -->           the block is not run; the test lists it with REASON
    <!-- test: replace: OLD => NEW -->    the test runs the block with every OLD replaced by NEW (shrinks
                                          sizes: --episodes 256 => --episodes 4; or stands in for a step
                                          that takes minutes). OLD must occur, so a stale directive fails
    <!-- test: expect: REGEX -->          the block's output must match REGEX (Python re, MULTILINE)

Blocks of documents whose text others own carry their directives in EXTERNAL_DIRECTIVES below, keyed by
the block's first line (a stale key fails). Every block is either run or listed as skipped.

Bounded and isolated: where `unshare` can make user, network and PID namespaces (no privileges needed),
each document runs in its own, with only a loopback interface: the documents' port 10086 cannot clash
with anything on the machine, nothing is reachable from outside, and every process the document started
dies with it. Elsewhere the document runs in its own process group (killed at the end), and port 10086
must be free. `npm install` is stood in for by a link to the packages of scripts/npm-deps.sh (the same
pinned versions, checked; no network): without them the documents that need npm are skipped loudly.
Waiting is done by the documents' own commands (they wait for the server and the engine, saying why);
the test only has a generous deadline per document.

Run by ctest (`docs_commands`, label e2e) with AJET_BINARY_DIR and AJET_SOURCE_DIR set;
AJET_DOCS_TEST_KEEP=1 keeps the scratch roots and each document's .docs_test_output.log;
AJET_DOCS_TEST_ONLY=doc1.md,doc2.md runs only those documents; AJET_DOCS_TEST_NO_NAMESPACES=1 tries
the fallback.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

SOURCE_DIR = os.environ.get("AJET_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))

# The documents whose commands a user pastes. New examples are picked up by the glob.
DOCUMENTS = ["README.md", "docs/examples.md"] + sorted(
    os.path.relpath(p, SOURCE_DIR) for p in glob.glob(os.path.join(SOURCE_DIR, "examples", "*", "README.md")))

# Directives for blocks in text this test may not annotate (the README's main-command section belongs
# to the classic-mode owners): {document: {first line of the block: [directive, ...]}}.
EXTERNAL_DIRECTIVES: Dict[str, Dict[str, List[str]]] = {
    "README.md": {
        "./scripts/run.sh    # fresh machine: install, build, run the main job on the embedded default": [
            "skip: the main command and the full test suite: installs packages, builds everything and trains "
            "for ~10 minutes; CI runs scripts/test.sh itself, and this test runs under it"],
        "build/bin/ajet --conf examples/configs/calc.yaml      # the RL stage run.sh runs last (with a seed and time budget)": [
            "skip: the main command's RL stage (minutes of training on the models scripts/run.sh makes)"],
    },
}

DOCUMENT_DEADLINE_S = 900  # per document; a run here takes well under a minute
PORT = 10086  # the documents' port


@dataclass
class Block:
    document: str
    line: int  # of the opening fence, 1-based
    text: str
    skip: Optional[str] = None
    replacements: List[Tuple[str, str]] = field(default_factory=list)
    expects: List[str] = field(default_factory=list)

    @property
    def first_line(self) -> str:
        return next((l for l in self.text.splitlines() if l.strip()), "")

    def runnable_text(self) -> str:
        text = self.text
        for old, new in self.replacements:
            if old not in text:
                raise AssertionError(f"{self.document}:{self.line}: directive 'replace: {old} => {new}': "
                                     f"'{old}' is not in the block (stale directive?)")
            text = text.replace(old, new)
        return text


_DIRECTIVE = re.compile(r"^<!--\s*test:\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^```(sh|bash)\s*$")


def apply_directive(block: Block, directive: str) -> None:
    kind, _, arg = directive.partition(":")
    kind, arg = kind.strip(), arg.strip()
    if kind == "skip" and arg:
        block.skip = arg
    elif kind == "replace" and " => " in arg:
        old, new = arg.split(" => ", 1)
        block.replacements.append((old, new))
    elif kind == "expect" and arg:
        block.expects.append(arg)
    else:
        raise AssertionError(f"{block.document}:{block.line}: unknown or malformed directive 'test: {directive}' "
                             "(skip: REASON | replace: OLD => NEW | expect: REGEX)")


def parse_blocks(document: str, text: str) -> List[Block]:
    """The ```sh / ```bash blocks of a Markdown text with the directives above each."""
    lines = text.splitlines()
    blocks: List[Block] = []
    i = 0
    while i < len(lines):
        if not _FENCE.match(lines[i]):
            i += 1
            continue
        start = i
        directives = []
        j = i - 1
        while j >= 0 and _DIRECTIVE.match(lines[j]):
            directives.insert(0, _DIRECTIVE.match(lines[j]).group(1))
            j -= 1
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{document}:{start + 1}: the block is never closed")
        block = Block(document, start + 1, "\n".join(body) + "\n")
        for d in directives:
            apply_directive(block, d)
        blocks.append(block)
        i += 1
    for first_line, directives in EXTERNAL_DIRECTIVES.get(document, {}).items():
        matches = [b for b in blocks if b.first_line == first_line]
        if len(matches) != 1:
            raise AssertionError(f"{document}: EXTERNAL_DIRECTIVES names a block starting '{first_line}', found "
                                 f"{len(matches)} (the document changed: update tests/docs/docs_test.py)")
        for d in directives:
            apply_directive(matches[0], d)
    return blocks


def session_script(blocks: List[Block]) -> str:
    """One bash session running the blocks in order, announcing each (the output names the failing one)."""
    parts = ["set -e -o pipefail",
             "trap 'echo \"docs_test: FAILED (exit $?): $BASH_COMMAND\" >&2' ERR"]
    for n, b in enumerate(blocks):
        if b.skip:
            continue
        parts.append(f"echo {shlex.quote(_marker(n, b))}")
        parts.append(b.runnable_text())
    parts.append("echo 'docs_test: all blocks ran'")
    return "\n".join(parts) + "\n"


def _marker(n: int, b: Block) -> str:
    return f"docs_test: ==== block {n + 1}, {b.document}:{b.line}"


def block_outputs(output: str, blocks: List[Block]) -> Dict[int, str]:
    """The output of each run block: from its marker to the next one."""
    out: Dict[int, str] = {}
    marks = [(n, output.find(_marker(n, b) + "\n")) for n, b in enumerate(blocks) if not b.skip]
    marks = [(n, at) for n, at in marks if at >= 0]
    for k, (n, at) in enumerate(marks):
        out[n] = output[at:marks[k + 1][1] if k + 1 < len(marks) else len(output)]
    return out


# ---------------------------------------------------------------------------------------------- environment

def namespaces_available() -> bool:
    """Whether unshare can give a document private user, network and PID namespaces here."""
    if not shutil.which("unshare"):
        return False
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "true"],
                       capture_output=True)
    return r.returncode == 0


# Brings the loopback interface up inside a fresh network namespace (SIOCGIFFLAGS / SIOCSIFFLAGS on "lo";
# no iproute2 needed).
_LO_UP = ("import fcntl, socket, struct; s = socket.socket(); "
          "f = struct.unpack('16sH', fcntl.ioctl(s, 0x8913, struct.pack('16sH', b'lo', 0)))[1]; "
          "fcntl.ioctl(s, 0x8914, struct.pack('16sH', b'lo', f | 1))")


def npm_node_modules() -> Tuple[Optional[str], str]:
    """(node_modules of scripts/npm-deps.sh, why not)."""
    if not shutil.which("node"):
        return None, "node is not installed"
    r = subprocess.run(["bash", os.path.join(SOURCE_DIR, "scripts", "npm-deps.sh")], capture_output=True, text=True)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 or not os.path.isdir(last):
        return None, f"scripts/npm-deps.sh failed (exit {r.returncode}): npm or the registry is unavailable"
    return last, ""


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


_NOT_LINKED = {".git", "build", "examples", "clients", "node_modules", "ajet_swarm", "saved_checkpoints",
               "saved_experiments"}


def make_root(path: str, build_dir: str) -> None:
    """A stand-in for the repository root after the README's build (see the module docstring)."""
    os.makedirs(path)
    for name in os.listdir(SOURCE_DIR):
        if name in _NOT_LINKED or name.startswith(("build", "exp")):
            continue
        os.symlink(os.path.join(SOURCE_DIR, name), os.path.join(path, name))
    os.symlink(build_dir, os.path.join(path, "build"))
    ignore = shutil.ignore_patterns("node_modules", "__pycache__", "build", "*.egg-info", ".venv")
    for name in ("examples", "clients"):
        shutil.copytree(os.path.join(SOURCE_DIR, name), os.path.join(path, name), ignore=ignore)


def write_npm_stand_in(bin_dir: str, node_modules: str) -> None:
    """`npm install` (no other arguments) links ./node_modules to the packages of scripts/npm-deps.sh;
    anything else goes to the real npm."""
    real = shutil.which("npm") or "npm"
    script = f"""#!/usr/bin/env bash
# docs_test's stand-in for `npm install` in an example directory (tests/docs/docs_test.py).
if [ "$#" -eq 1 ] && [ "$1" = install ]; then
  ln -sfn {shlex.quote(node_modules)} node_modules
  echo "docs_test: npm install -> node_modules linked to the packages of scripts/npm-deps.sh"
  exit 0
fi
exec {shlex.quote(real)} "$@"
"""
    os.makedirs(bin_dir, exist_ok=True)
    with open(os.path.join(bin_dir, "npm"), "w") as f:
        f.write(script)
    os.chmod(os.path.join(bin_dir, "npm"), 0o755)


@dataclass
class Run:
    status: Optional[int]  # None: past the deadline
    output: str


def run_session(root: str, script: str, env: Dict[str, str], isolated: bool) -> Run:
    script_path = os.path.join(root, ".docs_test_session.sh")
    with open(script_path, "w") as f:
        f.write(script)
    if isolated:
        inner = f"python3 -c {shlex.quote(_LO_UP)} && exec bash {shlex.quote(script_path)}"
        cmd = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "bash", "-c", inner]
    else:
        cmd = ["bash", script_path]
    log_path = os.path.join(root, ".docs_test_output.log")
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            status: Optional[int] = p.wait(timeout=DOCUMENT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            status = None
        finally:
            _stop_group(p)
    with open(log_path, errors="replace") as f:
        return Run(status, f.read())


def _stop_group(p: subprocess.Popen) -> None:
    """Stops what the session left running (a server started with `&`): SIGTERM, then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(p.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
    if p.poll() is None:
        p.wait(5)


# ---------------------------------------------------------------------------------------------- tests

class ConventionTest(unittest.TestCase):
    """The parts that need no build: the directive parser and the `npm install` stand-in's versions."""

    def test_npm_stand_in_has_the_examples_versions(self):
        """The stand-in for `npm install` gives each example the versions its package.json pins."""
        with open(os.path.join(SOURCE_DIR, "tests", "js", "package.json")) as f:
            have = json.load(f)["dependencies"]
        for path in glob.glob(os.path.join(SOURCE_DIR, "examples", "*", "package.json")):
            with open(path) as f:
                want = json.load(f).get("dependencies", {})
            for name, version in want.items():
                self.assertEqual(have.get(name), version,
                                 f"{os.path.relpath(path, SOURCE_DIR)} pins {name} {version}; tests/js/package.json "
                                 f"has {have.get(name)} (the docs test installs the latter for `npm install`)")

    def test_parser_reads_directives_and_fails_stale_ones(self):
        text = ("intro\n<!-- test: skip: slow -->\n```sh\nsleep 600\n```\n"
                "<!-- test: replace: --n 100 => --n 2 -->\n<!-- test: expect: ^ok$ -->\n```bash\nrun --n 100\n```\n"
                "```python\nnot shell\n```\n")
        a, b = parse_blocks("x.md", text)
        self.assertEqual((a.skip, a.line, a.text), ("slow", 3, "sleep 600\n"))
        self.assertEqual((b.runnable_text(), b.expects), ("run --n 2\n", ["^ok$"]))
        b.replacements.append(("--gone", "x"))
        with self.assertRaisesRegex(AssertionError, "stale directive"):
            b.runnable_text()
        with self.assertRaisesRegex(AssertionError, "malformed directive"):
            parse_blocks("x.md", "<!-- test: skipp: x -->\n```sh\ntrue\n```\n")


class DocumentCommandsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.build_dir = os.environ.get("AJET_BINARY_DIR")
        if not cls.build_dir:
            raise unittest.SkipTest("AJET_BINARY_DIR is not set: run through ctest (the documents need a build)")
        missing = [b for b in ("ajet", "ajet-swarm", "ajet-engine")
                   if not os.access(os.path.join(cls.build_dir, "bin", b), os.X_OK)]
        if missing:
            raise AssertionError(f"not built in {cls.build_dir}/bin: {', '.join(missing)}")
        # AJET_DOCS_TEST_NO_NAMESPACES=1: the fallback, as where unshare is not allowed.
        cls.isolated = not os.environ.get("AJET_DOCS_TEST_NO_NAMESPACES") and namespaces_available()
        cls.covered: List[str] = []
        cls.node_modules, cls.npm_why = npm_node_modules()
        cls.scratch = tempfile.mkdtemp(prefix="docs_test-", dir=cls.build_dir)
        cls.skipped: List[str] = []

    @classmethod
    def tearDownClass(cls):
        if os.environ.get("AJET_DOCS_TEST_KEEP"):  # to read each document's .docs_test_output.log
            print(f"\ndocs_test: kept {cls.scratch}", file=sys.stderr)
        else:
            shutil.rmtree(cls.scratch, ignore_errors=True)
        print("\ndocs_test: ran the blocks of " + (", ".join(cls.covered) or "no document"), file=sys.stderr)
        print(f"docs_test: isolation: {'user/network/PID namespaces' if cls.isolated else 'process group'}",
              file=sys.stderr)
        for line in cls.skipped:
            print("docs_test: SKIPPED " + line, file=sys.stderr)

    def test_every_document(self):
        only = [d for d in os.environ.get("AJET_DOCS_TEST_ONLY", "").split(",") if d]  # while editing one
        for document in only or DOCUMENTS:
            with self.subTest(document=document):
                self.run_document(document)

    def run_document(self, document: str) -> None:
        with open(os.path.join(SOURCE_DIR, document)) as f:
            text = f.read()
        blocks = parse_blocks(document, text)
        for b in blocks:
            if b.skip:
                self.skipped.append(f"{document}:{b.line} ({b.first_line.strip()}): {b.skip}")
        runnable = [b for b in blocks if not b.skip]
        if not runnable:
            return
        script = session_script(blocks)
        if "npm install" in script and not self.node_modules:
            self.skipped.append(f"{document}: ALL blocks, SKIPPED LOUDLY: they run `npm install` and "
                                f"{self.npm_why}")
            return
        if not self.isolated and port_in_use(PORT):
            self.fail(f"{document}: port {PORT} is in use and unshare cannot isolate the document here: "
                      "free the port (the documents use it) or run where user namespaces are allowed")
        root = os.path.join(self.scratch, re.sub(r"[^A-Za-z0-9]+", "_", document))
        make_root(root, self.build_dir)
        env = dict(os.environ)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPATH", None)  # as in a user's shell: the documents say what they need
        if self.node_modules:
            stand_ins = os.path.join(root, ".docs_test_bin")
            write_npm_stand_in(stand_ins, self.node_modules)
            env["PATH"] = stand_ins + os.pathsep + env.get("PATH", "")
        started = time.monotonic()
        run = run_session(root, script, env, self.isolated)
        took = time.monotonic() - started
        tail = run.output[-12000:]
        if run.status is None:
            self.fail(f"{document}: still running after {DOCUMENT_DEADLINE_S} s (killed). Output:\n{tail}")
        self.assertEqual(run.status, 0, f"{document}: a command failed (exit {run.status}). Output:\n{tail}")
        self.assertIn("docs_test: all blocks ran", run.output, tail)
        outputs = block_outputs(run.output, blocks)
        for n, b in enumerate(blocks):
            for pattern in b.expects:
                self.assertRegex(outputs.get(n, ""), re.compile(pattern, re.MULTILINE),
                                 f"{document}:{b.line}: the block's output does not match 'expect: {pattern}'")
        self.covered.append(document)
        print(f"docs_test: {document}: {len(runnable)} block(s) ran in {took:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
