"""One sandbox per harness episode (ajet_swarm/harness.py): a bubblewrap jail with its own mount, PID,
IPC, UTS and network namespaces, a writable work dir and HOME, read-only system dirs, and a cgroup v1
(memory, pids, cpu) per sandbox that every process of it is put in before exec. The network
namespace has loopback only: the front is relayed in through a per-sandbox Unix socket that forwards
to the configured front address and nowhere else (sandbox_entry.py listens on 127.0.0.1 inside).
A journal per sandbox in the harness's state dir lets a restarted harness kill and remove whatever
a killed one left (reap_leftovers). Linux only; standard library only; never talks to the front
itself except through the relay.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .sandbox_entry import pump

logger = logging.getLogger("ajet_swarm.sandbox")

ENTRY_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_entry.py")
STARTED = "ajet-sandbox: started"
CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
# Read-only inside every sandbox; a host path that is a symlink (/bin -> usr/bin) stays a symlink.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")
KILL_WAIT = 10.0  # seconds to wait for a killed sandbox's processes to be gone


@dataclass
class Limits:
    memory_mb: int = 4096
    pids: int = 512
    cpus: float = 2.0  # CPU time per wall second (cfs quota / period)


class SandboxError(RuntimeError):
    """The sandbox could not be laid out or started (harness cause sandbox_start_failed)."""


# ---------------------------------------------------------------- cgroups


class Cgroups:
    """cgroup v1 dirs of one harness: <root>/<controller>/<parent>/<sandbox>. `available` is False
    (said once, by the harness) when a controller is missing or not writable; sandboxes then get
    rlimits instead (RLIMIT_AS, RLIMIT_NPROC, RLIMIT_CPU: weaker, and NPROC binds no root process)."""

    def __init__(self, root: str, parent: str):
        self.root = root
        self.parent = parent.strip("/")
        self.why_unavailable = ""
        for ctrl in CONTROLLERS:
            base = os.path.join(root, ctrl)
            if not os.path.isfile(os.path.join(base, "cgroup.procs")):
                self.why_unavailable = f"no cgroup v1 '{ctrl}' controller at {base}"
                break
            try:
                os.makedirs(os.path.join(base, self.parent), exist_ok=True)
            except OSError as e:
                self.why_unavailable = f"cannot create {os.path.join(base, self.parent)}: {e}"
                break
        self.available = not self.why_unavailable

    def paths(self, name: str) -> List[str]:
        return [os.path.join(self.root, ctrl, self.parent, name) for ctrl in CONTROLLERS]

    def create(self, name: str, limits: Limits) -> List[str]:
        paths = self.paths(name)
        for p in paths:
            os.makedirs(p, exist_ok=True)
        memory, pids, cpu = paths
        _write(os.path.join(memory, "memory.limit_in_bytes"), str(limits.memory_mb * 1024 * 1024))
        # No swap beyond the limit where the kernel accounts swap (memsw is absent without it).
        memsw = os.path.join(memory, "memory.memsw.limit_in_bytes")
        if os.path.exists(memsw):
            try:
                _write(memsw, str(limits.memory_mb * 1024 * 1024))
            except OSError:
                pass
        _write(os.path.join(pids, "pids.max"), str(limits.pids))
        _write(os.path.join(cpu, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
        _write(os.path.join(cpu, "cpu.cfs_quota_us"), str(max(1000, int(limits.cpus * CPU_PERIOD_US))))
        return paths

    def remove_parent(self) -> None:
        """This harness's parent dirs, once its sandboxes are gone (a live sandbox keeps them)."""
        for ctrl in CONTROLLERS:
            try:
                os.rmdir(os.path.join(self.root, ctrl, self.parent))
            except OSError:
                pass

    def leftovers(self) -> List[str]:
        """Every sandbox cgroup under this harness's parent (what a killed harness left)."""
        out = []
        for ctrl in CONTROLLERS:
            base = os.path.join(self.root, ctrl, self.parent)
            if os.path.isdir(base):
                out += [os.path.join(base, d) for d in sorted(os.listdir(base)) if os.path.isdir(os.path.join(base, d))]
        return out


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def cgroup_pids(paths: List[str]) -> List[int]:
    pids = set()
    for p in paths:
        try:
            with open(os.path.join(p, "cgroup.procs")) as f:
                pids.update(int(x) for x in f.read().split())
        except OSError:
            pass
    return sorted(pids)


def kill_cgroups(paths: List[str], wait: float = KILL_WAIT) -> bool:
    """SIGKILLs every process in the cgroups until none is left (pids.max bounds the forks), then
    removes the dirs. True when all are gone."""
    deadline = time.monotonic() + wait
    while True:
        pids = cgroup_pids(paths)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not pids:
            break
        if time.monotonic() > deadline:
            logger.error("sandbox cgroup still holds processes %s after %.0f s", pids, wait)
            return False
        time.sleep(0.02)
    ok = True
    for p in paths:
        while os.path.isdir(p):
            try:
                os.rmdir(p)
            except OSError as e:
                if time.monotonic() > deadline:  # a process still exiting
                    logger.error("cannot remove cgroup %s: %s", p, e)
                    ok = False
                    break
                time.sleep(0.02)
    return ok


# ---------------------------------------------------------------- the relay (host side)


class FrontRelay:
    """Listens on a Unix socket (bind-mounted into the sandbox) and forwards each connection to
    the front's host:port, and nowhere else. Counts the model calls that went through (a connection
    whose request line is `POST /v1/...`, the OpenAI and Anthropic routes) and their answers."""

    def __init__(self, socket_path: str, front: Tuple[str, int]):
        self.socket_path = socket_path
        self.front = front
        self.model_requests = 0
        self.answered_bytes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conns: List[socket.socket] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # A socket path holds at most 107 bytes and a state dir can be deeper than that: bind through
        # /proc/self/fd of the socket's directory, a path of ~30 bytes whatever the directory's.
        dir_fd = os.open(os.path.dirname(socket_path) or ".", os.O_PATH | os.O_DIRECTORY)
        try:
            self._listener.bind(f"/proc/self/fd/{dir_fd}/{os.path.basename(socket_path)}")
        finally:
            os.close(dir_fd)
        self._listener.listen(64)
        self._listener.settimeout(0.5)
        self._thread = threading.Thread(target=self._accept, name="front-relay", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.front, timeout=10)
        except OSError as e:
            logger.warning("relay: cannot reach the front at %s:%d: %s", *self.front, e)
            conn.close()
            return
        with self._lock:
            self._conns += [conn, upstream]
        pump(conn, upstream, on_data=self._count, stopped=self._stop.is_set, poll=0.5)

    def _count(self, from_sandbox: bool, data: bytes) -> None:
        with self._lock:
            if not from_sandbox:
                self.answered_bytes += len(data)
            elif data.startswith(b"POST /v1/"):
                self.model_requests += 1

    def close(self) -> None:
        self._stop.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() at once (Linux)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(5)


# ---------------------------------------------------------------- journal


def write_journal(path: str, record: Dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_journals(journal_dir: str) -> List[Dict]:
    out = []
    for name in sorted(os.listdir(journal_dir)) if os.path.isdir(journal_dir) else []:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(journal_dir, name)) as f:
                record = json.load(f)
            record["_journal"] = os.path.join(journal_dir, name)
            out.append(record)
        except (OSError, ValueError) as e:
            logger.warning("unreadable journal %s: %s (removed)", name, e)
            os.unlink(os.path.join(journal_dir, name))
    return out


# ---------------------------------------------------------------- the sandbox


@dataclass
class PhaseResult:
    started: bool          # the sandbox started (the entry script said so)
    exit_status: Optional[int]  # None when timed out
    timed_out: bool
    stdout_path: str
    stderr_path: str

    def stdout(self, limit: int = 1 << 20) -> str:
        return _tail(self.stdout_path, limit)

    def stderr(self, limit: int = 4096) -> str:
        return _tail(self.stderr_path, limit)


def _tail(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


@dataclass
class SandboxSpec:
    sandbox_id: str
    root: str                      # host dir: work/, home/, ajet/, relay/, out/
    limits: Limits
    front: Tuple[str, int]
    relay_port: int
    ro_binds: List[str] = field(default_factory=list)
    python: str = "/usr/bin/python3"


class Sandbox:
    """Laid out and relay listening once constructed; run() one phase at a time (agent, verifier);
    close() kills everything in it and removes its cgroups and its dir. `on_pid(pid)` journals the
    bwrap process of each phase."""

    def __init__(self, spec: SandboxSpec, cgroups: Optional[Cgroups]):
        self.spec = spec
        self.cgroups = cgroups if cgroups is not None and cgroups.available else None
        self.cgroup_paths: List[str] = []
        self.relay: Optional[FrontRelay] = None
        self._proc: Optional[subprocess.Popen] = None
        for d in ("work", "home", "ajet", "relay", "out"):
            os.makedirs(os.path.join(spec.root, d), exist_ok=True)
        os.makedirs(os.path.join(spec.root, "ajet", "out"), exist_ok=True)  # mount point (/ajet is read-only)
        shutil.copy(ENTRY_SCRIPT, os.path.join(spec.root, "ajet", "sandbox_entry.py"))
        if self.cgroups is not None:
            self.cgroup_paths = self.cgroups.create(spec.sandbox_id, spec.limits)

    @property
    def work(self) -> str:
        return os.path.join(self.spec.root, "work")

    @property
    def home(self) -> str:
        return os.path.join(self.spec.root, "home")

    def start_relay(self) -> FrontRelay:
        self.relay = FrontRelay(os.path.join(self.spec.root, "relay", "front.sock"), self.spec.front)
        return self.relay

    def _bwrap_argv(self, phase: str, command: str, with_relay: bool) -> List[str]:
        argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        for d in SYSTEM_DIRS:
            if os.path.islink(d):
                argv += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                argv += ["--ro-bind", d, d]
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                 "--bind", self.work, "/work", "--bind", self.home, "/home/agent",
                 "--ro-bind", os.path.join(self.spec.root, "ajet"), "/ajet"]
        # Last, so that no mount above hides them: /tmp's tmpfs, or the work dir's bind at /work when
        # the host path is under /work (its mount point is then made inside the sandbox's work dir).
        for extra in self.spec.ro_binds:
            argv += ["--ro-bind", extra, extra]
        argv += ["--hostname", "ajet-sandbox", "--chdir", "/work"]
        entry = [self.spec.python, "/ajet/sandbox_entry.py"]
        if with_relay:
            argv += ["--bind", os.path.join(self.spec.root, "relay"), "/ajet-relay"]
            entry += ["--relay-port", str(self.spec.relay_port), "--relay-socket", "/ajet-relay/front.sock"]
        if phase != "agent":  # the verifier reads what the agent printed
            argv += ["--ro-bind", os.path.join(self.spec.root, "out"), "/ajet/out"]
        return argv + ["--"] + entry + ["--", "/bin/sh", "-c", command]

    def _preexec(self) -> None:
        """In the child between fork and exec: join the sandbox's cgroups (nothing it starts can
        escape them), or set rlimits. Only raw syscalls: the parent has threads."""
        if self.cgroup_paths:
            pid = str(os.getpid()).encode()
            for p in self.cgroup_paths:
                fd = os.open(os.path.join(p, "cgroup.procs"), os.O_WRONLY)
                try:
                    os.write(fd, pid)
                finally:
                    os.close(fd)
        else:
            limits = self.spec.limits
            mem = limits.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.pids, limits.pids))

    def run(self, phase: str, command: str, env: Dict[str, str], timeout: float,
            on_pid=None) -> PhaseResult:
        """Runs `command` (sh -c) in the sandbox and waits at most `timeout` seconds; then every
        process of the sandbox is killed, whatever the command left running."""
        out_dir = os.path.join(self.spec.root, "out")
        stdout_path = os.path.join(out_dir, f"{phase}.stdout")
        stderr_path = os.path.join(out_dir, f"{phase}.stderr")
        argv = self._bwrap_argv(phase, command, with_relay=self.relay is not None and phase == "agent")
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            try:
                self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                              cwd=self.spec.root, preexec_fn=self._preexec, start_new_session=True)
            except (OSError, subprocess.SubprocessError) as e:
                raise SandboxError(f"bwrap could not start: {e}") from e
        if on_pid is not None:
            on_pid(self._proc.pid)
        timed_out = False
        try:
            status: Optional[int] = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out, status = True, None
        self.kill_processes()
        with open(stderr_path, "rb") as f:
            started = f.readline().decode("utf-8", "replace").strip() == STARTED
        if status is not None and status < 0:
            status = 128 - status
        return PhaseResult(started, status, timed_out, stdout_path, stderr_path)

    def kill_processes(self) -> None:
        """Kills bwrap (its --die-with-parent child, the PID namespace's init, takes every process
        of the namespace with it) and then whatever is still in the cgroups."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                proc.wait(KILL_WAIT)
            except subprocess.TimeoutExpired:
                logger.error("bwrap %d did not exit after SIGKILL", proc.pid)
        deadline = time.monotonic() + KILL_WAIT
        while self.cgroup_paths and cgroup_pids(self.cgroup_paths) and time.monotonic() < deadline:
            for pid in cgroup_pids(self.cgroup_paths):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)

    def close(self) -> bool:
        """Kills everything, stops the relay, removes the cgroups and the dir. True when nothing is left."""
        self.kill_processes()
        if self.relay is not None:
            self.relay.close()
        ok = kill_cgroups(self.cgroup_paths) if self.cgroup_paths else True
        shutil.rmtree(self.spec.root, ignore_errors=True)
        return ok and not os.path.exists(self.spec.root)


def python_for_sandbox() -> Tuple[str, List[str]]:
    """The interpreter the in-sandbox relay runs with, and what must be bound for it."""
    for candidate in ("/usr/bin/python3", "/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate, []
    exe = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    return exe, [prefix]


def kill_leftover(record: Dict, cgroups: Optional[Cgroups]) -> None:
    """A journaled sandbox of a harness that died: its processes, cgroups and dir."""
    paths = [p for p in record.get("cgroups") or [] if os.path.isdir(p)]
    if paths:
        kill_cgroups(paths)
    pid = record.get("pid")
    if pid and not paths:  # no cgroups (rlimit fallback): the bwrap process group, if it is still ours
        try:
            with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
                if b"bwrap" in f.read().split(b"\0")[0]:
                    os.killpg(int(pid), signal.SIGKILL)
        except OSError:
            pass
    root = record.get("root")
    if root:
        shutil.rmtree(root, ignore_errors=True)
