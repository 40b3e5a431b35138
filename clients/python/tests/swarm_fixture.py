"""Starts the real `ajet-swarm` (from ${AJET_BINARY_DIR}/bin, set by ctest) on an ephemeral loopback
port for the client tests, with `ajet-echo-engine` (the engine test double whose output is the last
user message: deterministic tool calls) or the real `ajet-engine`. The tokenizer / micro model
fixture is shared with the C++ end-to-end tests (<build>/e2e_fixture, created once under a lock).
Waiting is always on an observable event (the ready line, a status) with a generous deadline.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
from typing import Callable, List, Optional

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def binary_dir() -> Optional[str]:
    return os.environ.get("AJET_BINARY_DIR")


def require_binaries(*names: str) -> str:
    """The bin/ directory. Without AJET_BINARY_DIR (a plain `python -m unittest`) the server tests are
    skipped, saying so; under ctest a missing binary is a failure."""
    root = binary_dir()
    if not root:
        raise unittest.SkipTest("AJET_BINARY_DIR is not set: the server tests need a build tree "
                                "(run them through ctest, or export AJET_BINARY_DIR=<build dir>)")
    bindir = os.path.join(root, "bin")
    missing = [n for n in names if not os.access(os.path.join(bindir, n), os.X_OK)]
    if missing:
        raise AssertionError(f"not built in {bindir}: {', '.join(missing)} (build those targets)")
    return bindir


def _make_once(directory: str, create: Callable[[str], None]) -> None:
    if os.path.exists(os.path.join(directory, ".complete")):
        return
    root = os.path.dirname(directory)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, ".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not os.path.exists(os.path.join(directory, ".complete")):
                tmp = f"{directory}.tmp-{os.getpid()}"
                shutil.rmtree(tmp, ignore_errors=True)
                create(tmp)
                with open(os.path.join(tmp, ".complete"), "w") as f:
                    f.write("ok\n")
                shutil.rmtree(directory, ignore_errors=True)
                os.rename(tmp, directory)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(argv: List[str]) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")


def tokenizer_fixture() -> str:
    bindir = require_binaries("ajet")
    path = os.path.join(binary_dir(), "e2e_fixture", "tokenizer")
    _make_once(path, lambda out: _run([os.path.join(bindir, "ajet"), "tokenizer", "train", "--corpus",
                                       os.path.join(SOURCE_DIR, "tests/text/data/tokenizer_corpus.jsonl"),
                                       "--vocab-size", "400", "--out", out]))
    return path


def micro_model_fixture() -> str:
    bindir = require_binaries("ajet-engine")
    tok = tokenizer_fixture()
    path = os.path.join(binary_dir(), "e2e_fixture", "model-micro")
    _make_once(path, lambda out: _run([os.path.join(bindir, "ajet-engine"), "model", "init", "--preset", "micro",
                                       "--tokenizer", tok, "--seed", "7", "--out", out]))
    return path


def config_yaml(model: str, extra: str = "", batch: int = 2, repeat: int = 2, pool: int = 8,
                max_model_len: int = 4096) -> str:
    """A debug-backbone train config for the tiny fixtures; `extra` is appended under `ajet:`. The
    echo engine takes any max_model_len (the fixture tokenizer's 400 ids make tool prompts long); the
    micro model needs 512."""
    return (
        "ajet:\n"
        "  backbone: debug\n"
        f"  model:\n    path: {model}\n"
        "  data:\n    max_prompt_length: 256\n    max_response_length: 256\n"
        f"    train_batch_size: {batch}\n"
        f"  rollout:\n    max_env_worker: {pool}\n    max_model_len: {max_model_len}\n"
        "    max_response_length_in_one_turn: 256\n"
        f"    num_repeat: {repeat}\n    temperature: 1.0\n"
        "  engine:\n    threads: 1\n    kv_cache_memory_mb: 16\n" + extra)


class SwarmServer:
    """`ajet-swarm start --port 0` in a scratch directory; output collected by a thread."""

    def __init__(self, engine: str = "ajet-echo-engine", admin_token: str = "", extra: Optional[List[str]] = None):
        bindir = require_binaries("ajet-swarm", engine)
        self.admin_token = admin_token  # get() sends it: the pool information then shows every id
        self.dir = tempfile.mkdtemp(prefix="ajet_pyclient_")
        argv = [os.path.join(bindir, "ajet-swarm"), "start", "--port", "0", "--exp-dir", os.path.join(self.dir, "server"),
                "--janitor-interval", "0.1", "--engine", os.path.join(bindir, engine)]
        if admin_token:
            argv += ["--admin-token", admin_token]
        argv += extra or []
        env = dict(os.environ)
        env.pop("AJET_ADMIN_TOKEN", None)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: List[str] = []
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        ready = self.wait_for_line("ajet-swarm ready:", 60)
        if not ready:
            self.stop()
            raise AssertionError("ajet-swarm did not become ready:\n" + self.output())
        self.port = int(ready.split("(port ", 1)[1].split(",", 1)[0].split(")", 1)[0])
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def wait_for_line(self, needle: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for line in self.lines:
                    if needle in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return ""
                self._cv.wait(min(left, 0.5))

    def output(self) -> str:
        with self._cv:
            return "\n".join(self.lines)

    def get(self, path: str) -> dict:
        headers = {"Authorization": f"Bearer {self.admin_token}"} if self.admin_token else {}
        with urllib.request.urlopen(urllib.request.Request(self.url + path, headers=headers), timeout=30) as r:
            return json.loads(r.read())

    def post(self, path: str, body: dict, token: str = "") -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def status(self) -> str:
        return self.get("/get_engine_status")["engine_status"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def eventually(predicate: Callable[[], bool], timeout: float = 60.0, interval: float = 0.02) -> bool:
    """Polls `predicate` until it holds or `timeout` passes (for server-side events without a push)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
