"""`SwarmClient(url, auto_start_swarm_server=True)`: start a local `ajet-swarm` when none answers.

Upstream AgentJet launches `ajet-swarm start --swarm-port=<port>` in the working directory when the
server URL is local and waits up to 60 s for its line "Interchange server is running in blocking
mode". This does the same with this project's server:

* only for a loopback URL (127.0.0.1, localhost, ::1) with an explicit port;
* nothing is started when `GET /health` already answers there;
* the binary: $AJET_SWARM_BIN, else `ajet-swarm` on PATH, else the build tree next to this package
  (<repo>/build/bin/ajet-swarm when the package runs from a checkout's clients/python);
* the command: `ajet-swarm start --port <port> --fresh <extra args>` in the working directory, so
  its store and logs go to ./ajet_swarm (the server's default `--exp-dir`). `--fresh` makes a new
  server, as upstream's is (a store left by an earlier run is renamed aside, never deleted); pass
  `--resume` in the extra args to continue that run instead;
* its output goes to <exp-dir>/ajet-swarm-<port>.log; the server is started in its own session, so
  it keeps running after the script exits (the next script finds it answering, as upstream's does).
  `SwarmClient.swarm_server_process` holds the `subprocess.Popen` for whoever wants to stop it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.parse
from typing import List, Optional, Sequence

from .errors import SwarmError

READY_LINE = "Interchange server is running in blocking mode"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def local_port(server_url: str) -> int:
    """The port of a loopback server URL; ValueError otherwise (upstream's rule)."""
    parsed = urllib.parse.urlsplit(server_url if "://" in server_url else "http://" + server_url)
    if parsed.hostname not in LOCAL_HOSTS:
        raise ValueError(f"auto_start_swarm_server only starts a server on this machine: the URL must name "
                         f"127.0.0.1, localhost or ::1, got {server_url!r}")
    if parsed.port is None:
        raise ValueError(f"auto_start_swarm_server: the server URL must include an explicit port, got {server_url!r}")
    return parsed.port


def find_binary() -> str:
    """$AJET_SWARM_BIN, `ajet-swarm` on PATH, or <repo>/build/bin/ajet-swarm next to this package."""
    env = os.environ.get("AJET_SWARM_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise SwarmError(f"AJET_SWARM_BIN={env} is not an executable file")
        return env
    on_path = shutil.which("ajet-swarm")
    if on_path:
        return on_path
    here = os.path.dirname(os.path.abspath(__file__))
    candidate = os.path.normpath(os.path.join(here, "..", "..", "..", "build", "bin", "ajet-swarm"))
    if os.access(candidate, os.X_OK):
        return candidate
    raise SwarmError("auto_start_swarm_server: no ajet-swarm binary found: set AJET_SWARM_BIN, put ajet-swarm on "
                     f"PATH, or build the repository (expected {candidate})")


def _exp_dir(args: Sequence[str], cwd: str) -> str:
    exp = "ajet_swarm"
    for i, a in enumerate(args):
        if a == "--exp-dir" and i + 1 < len(args):
            exp = args[i + 1]
        elif a.startswith("--exp-dir="):
            exp = a.split("=", 1)[1]
    return exp if os.path.isabs(exp) else os.path.join(cwd, exp)


def start_local_server(server_url: str, is_up, extra_args: Optional[Sequence[str]] = None,
                       timeout: float = 60.0, cwd: Optional[str] = None, log=None) -> Optional[subprocess.Popen]:
    """Starts `ajet-swarm start` for `server_url` unless `is_up()` (a /health probe) is already true;
    returns the process (None when a server already answered). Raises SwarmError naming the log file
    when the server exits or prints no ready line within `timeout` seconds."""
    port = local_port(server_url)
    if is_up():
        if log:
            log(f"auto_start_swarm_server: a swarm server already answers at {server_url}")
        return None
    binary = find_binary()
    cwd = os.path.abspath(cwd or os.getcwd())
    args: List[str] = list(extra_args or [])
    if "--resume" not in args and "--fresh" not in args:
        args.insert(0, "--fresh")
    argv = [binary, "start", "--port", str(port)] + args
    exp_dir = _exp_dir(args, cwd)
    os.makedirs(exp_dir, exist_ok=True)
    log_path = os.path.join(exp_dir, f"ajet-swarm-{port}.log")
    with open(log_path, "ab") as out:
        start_offset = out.tell()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    if log:
        log(f"auto_start_swarm_server: started {' '.join(argv)} (pid {proc.pid}, log {log_path})")
    deadline = time.monotonic() + timeout
    while True:
        text = _read_from(log_path, start_offset)
        if READY_LINE in text:
            return proc
        if proc.poll() is not None:
            if is_up():  # another client started one on this port at the same moment
                return None
            raise SwarmError(f"auto_start_swarm_server: {' '.join(argv)} exited with code {proc.returncode} "
                             f"before it was ready; its output ({log_path}):\n{text[-3000:]}")
        if time.monotonic() >= deadline:
            raise SwarmError(f"auto_start_swarm_server: {' '.join(argv)} printed no ready line "
                             f"({READY_LINE!r}) within {timeout:g} s; it is still running (pid {proc.pid}); "
                             f"its output ({log_path}):\n{text[-3000:]}")
        time.sleep(0.05)


def _read_from(path: str, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
