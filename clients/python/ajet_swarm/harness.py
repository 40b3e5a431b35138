"""`python3 -m ajet_swarm harness --conf harness.yaml`: runs a CLI agent (Claude Code, Codex, Qwen Code
or any command) on tasks, one sandbox per episode (ajet_swarm/sandbox.py), and reports what a
verifier says as the episode's reward. Infrastructure failures are not rewards: a sandbox that does
not start, an agent that dies before its first model call, a verifier that crashes or hangs abort the
episode with a cause (docs/agents.md "Harness for CLI agents"); they never enter a GRPO group.
Concurrency is bounded by `concurrency`: a worker claims only when it is free.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import threading
import urllib.parse
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

from .client import SwarmClient
from .config_yaml import load_yaml_file
from .errors import SwarmError
from .harness_agents import TEMPLATES, AgentContext, agent_command, default_npm_bin
from .sandbox import (Cgroups, Limits, Sandbox, SandboxError, SandboxSpec, kill_cgroups, kill_leftover,
                      python_for_sandbox, read_journals, write_journal)
from .types import WorkflowOutput

logger = logging.getLogger("ajet_swarm.harness")



# ---------------------------------------------------------------- config


@dataclass
class HarnessConfig:
    swarm_url: str = "http://127.0.0.1:10086"
    tasks: str = ""                 # JSONL file
    concurrency: int = 1
    repeat: int = 1                 # episodes per task per epoch (num_repeat for a GRPO group)
    epochs: int = 1
    max_episodes: int = 0           # 0: every task x repeat x epochs
    episode_type: str = "train"
    model: str = "agentjet"
    sampling: Dict[str, Any] = field(default_factory=dict)  # AJET_SAMPLING for eval episodes
    agent_template: str = "command"
    agent_command: str = ""
    agent_args: List[str] = field(default_factory=list)
    agent_timeout: float = 600.0
    agent_env: Dict[str, str] = field(default_factory=dict)
    agent_npm_bin: str = ""            # node_modules/.bin with the CLIs (default: scripts/npm-deps.sh's cache)
    verifier_command: str = ""
    verifier_timeout: float = 120.0
    memory_mb: int = 4096
    pids: int = 512
    cpus: float = 2.0
    headroom: float = 30.0
    ro_binds: List[str] = field(default_factory=list)
    state_dir: str = ""
    cgroup_root: str = "/sys/fs/cgroup"
    cgroup_parent: str = ""
    admin_token: Optional[str] = None

    @property
    def lifetime(self) -> float:
        """A sandbox's whole life, in seconds: agent + verifier + headroom."""
        return self.agent_timeout + self.verifier_timeout + self.headroom

    @staticmethod
    def load(path: str) -> "HarnessConfig":
        raw = load_yaml_file(path)
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: the harness config must be a mapping")
        base = os.path.dirname(os.path.abspath(path))
        return HarnessConfig.from_dict(raw, base, path)

    @staticmethod
    def from_dict(raw: Dict[str, Any], base: str = ".", where: str = "harness config") -> "HarnessConfig":
        c = HarnessConfig()
        sections = {"agent": ("template", "command", "args", "timeout", "env", "npm_bin"),
                    "verifier": ("command", "timeout"),
                    "sandbox": ("memory_mb", "pids", "cpus", "headroom", "ro_binds", "state_dir", "cgroup_root",
                                "cgroup_parent")}
        top = ("swarm_url", "tasks", "concurrency", "repeat", "epochs", "max_episodes", "episode_type", "model",
               "sampling", "admin_token")
        for key, value in raw.items():
            if key in sections:
                if not isinstance(value, dict):
                    raise ValueError(f"{where}: '{key}' must be a mapping")
                for sub, v in value.items():
                    if sub not in sections[key]:
                        raise ValueError(f"{where}: unknown key '{key}.{sub}' (known: {', '.join(sections[key])})")
                    name = sub if key == "sandbox" else f"{key}_{sub}"
                    assert name in _FIELDS, name  # every documented key is a field
                    setattr(c, name, v)
            elif key in top:
                setattr(c, key, value)
            else:
                raise ValueError(f"{where}: unknown key '{key}' (known: {', '.join(top + tuple(sections))})")
        c.tasks = _resolve(base, c.tasks)
        c.state_dir = _resolve(base, c.state_dir or ".ajet_harness")
        c.agent_npm_bin = _resolve(base, c.agent_npm_bin) if c.agent_npm_bin else ""
        c.ro_binds = [_resolve(base, p) for p in c.ro_binds]
        c.validate(where)
        return c

    def validate(self, where: str) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(f"{where}: {message}")
        need(bool(self.tasks) and os.path.isfile(self.tasks), f"tasks: no such file '{self.tasks}'")
        need(urllib.parse.urlparse(self.swarm_url).scheme == "http",
             "swarm_url must be http:// (the relay forwards bytes; the agent dials http://127.0.0.1)")
        need(self.agent_template in TEMPLATES, f"agent.template must be one of {', '.join(TEMPLATES)}")
        need(self.agent_template != "command" or bool(self.agent_command), "agent.command is required for "
             "agent.template: command")
        need(bool(self.verifier_command), "verifier.command is required")
        need(isinstance(self.concurrency, int) and 1 <= self.concurrency <= 256, "concurrency must be 1..256")
        need(isinstance(self.repeat, int) and self.repeat >= 1, "repeat must be >= 1")
        need(isinstance(self.epochs, int) and self.epochs >= 1, "epochs must be >= 1")
        need(self.episode_type in ("train", "eval"), "episode_type must be train or eval")
        for name in ("agent_timeout", "verifier_timeout", "headroom", "cpus"):
            need(isinstance(getattr(self, name), (int, float)) and getattr(self, name) > 0,
                 f"{name.replace('_', '.', 1) if name.startswith(('agent', 'verifier')) else 'sandbox.' + name} "
                 "must be a positive number")
        need(isinstance(self.memory_mb, int) and self.memory_mb >= 16, "sandbox.memory_mb must be >= 16")
        need(isinstance(self.pids, int) and self.pids >= 8, "sandbox.pids must be >= 8")
        for p in self.ro_binds:
            need(os.path.exists(p), f"sandbox.ro_binds: no such path '{p}'")


_FIELDS = frozenset(f.name for f in dataclasses.fields(HarnessConfig))


def _resolve(base: str, path: str) -> str:
    return path if not path or os.path.isabs(path) else os.path.normpath(os.path.join(base, path))


def read_tasks(path: str) -> List[Dict[str, Any]]:
    tasks = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                task = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: not JSON: {e}") from e
            if not isinstance(task, dict) or not isinstance(task.get("task_id"), str) or not task["task_id"]:
                raise ValueError(f"{path}:{lineno}: a task is an object with a non-empty string task_id")
            if not isinstance(task.get("prompt"), str):
                raise ValueError(f"{path}:{lineno}: task '{task['task_id']}' needs a string prompt")
            files = task.get("files", {})
            if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
                raise ValueError(f"{path}:{lineno}: files must map relative paths to strings")
            tasks.append(task)
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks


# ---------------------------------------------------------------- verdicts


@dataclass
class Verdict:
    """An episode's outcome: a reward to end it with, or a cause to abort it with."""
    reward: Optional[float] = None
    is_success: Optional[bool] = None
    metadata: Dict[str, Any] = field(default_factory=dict)
    abort_cause: str = ""
    detail: str = ""


def verifier_verdict(status: Optional[int], timed_out: bool, started: bool, stdout: str) -> Verdict:
    """Exit 0 → reward 1, any other exit → 0, unless the last stdout line is a JSON object with a
    "reward"; killed by a signal or exit 126/127/128+n (could not run, crashed), a malformed JSON
    line, or no start → verifier_crashed; past its timeout → verifier_timeout."""
    if timed_out:
        return Verdict(abort_cause="verifier_timeout")
    if not started:
        return Verdict(abort_cause="sandbox_start_failed", detail="the verifier's sandbox did not start")
    if status is None or status >= 126:
        return Verdict(abort_cause="verifier_crashed", detail=f"exit status {status}")
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else ""
    if last.startswith("{"):
        try:
            result = json.loads(last)
            reward = float(result["reward"])
            if not math.isfinite(reward) or isinstance(result["reward"], bool):
                raise ValueError("reward is not a finite number")
        except (ValueError, KeyError, TypeError) as e:
            return Verdict(abort_cause="verifier_crashed", detail=f"malformed result line {last[:200]!r}: {e}")
        metadata = result.get("metadata") if isinstance(result.get("metadata"), dict) else {}
        success = result.get("is_success") if isinstance(result.get("is_success"), bool) else None
        return Verdict(reward=reward, is_success=success, metadata=metadata)
    return Verdict(reward=1.0 if status == 0 else 0.0, is_success=status == 0)


# ---------------------------------------------------------------- the harness


class Summary:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ended = 0
        self.rewards: List[float] = []
        self.aborted: Counter = Counter()

        self.episodes: List[Dict[str, Any]] = []  # one line per episode (summary.json only)

    def end(self, reward: float, line: Dict[str, Any]) -> None:
        with self._lock:
            self.ended += 1
            self.rewards.append(reward)
            self.episodes.append({**line, "reward": reward})

    def abort(self, cause: str, line: Optional[Dict[str, Any]] = None) -> None:
        with self._lock:
            self.aborted[cause] += 1
            self.episodes.append({**(line or {}), "abort_cause": cause})

    def to_json(self, episodes: bool = False) -> Dict[str, Any]:
        with self._lock:
            out = {"ended": self.ended, "aborted": dict(sorted(self.aborted.items())),
                   "mean_reward": sum(self.rewards) / len(self.rewards) if self.rewards else None}
            if episodes:
                out["episodes"] = list(self.episodes)
            return out


class _Stopped(Exception):
    """The harness was stopped while it waited to claim."""


class Harness:
    """Built: config read, tasks read, cgroups probed. run(): reap what a killed harness left, then
    `concurrency` workers claim → sandbox → agent → verifier → end or abort, until the tasks are
    done or stop() is called."""

    def __init__(self, config: HarnessConfig):
        self.c = config
        self.tasks = read_tasks(config.tasks)
        self.summary = Summary()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._queue = self._episodes()
        self._running: List[Sandbox] = []
        os.makedirs(config.state_dir, exist_ok=True)
        self.journal_dir = os.path.join(config.state_dir, "journal")
        self.sandbox_dir = os.path.join(config.state_dir, "sandboxes")
        os.makedirs(self.journal_dir, exist_ok=True)
        os.makedirs(self.sandbox_dir, exist_ok=True)
        # One harness per state dir: a second one would reap the first one's live sandboxes.
        self._lock_file = open(os.path.join(config.state_dir, "lock"), "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise RuntimeError(f"another harness runs with the state dir {config.state_dir}") from None
        tag = hashlib.sha1(os.path.realpath(config.state_dir).encode()).hexdigest()[:12]
        self.cgroups = Cgroups(config.cgroup_root, config.cgroup_parent or f"ajet_harness/{tag}")
        if not self.cgroups.available:
            logger.warning("cgroups unavailable (%s): sandboxes get rlimits instead (address space and process "
                           "count only; no CPU quota)", self.cgroups.why_unavailable)
        self.python, python_binds = python_for_sandbox()
        self.ro_binds = list(config.ro_binds) + python_binds
        self.npm_bin = ""
        if config.agent_template != "command":
            self.npm_bin = config.agent_npm_bin or default_npm_bin()
            if not os.path.isdir(self.npm_bin):
                raise RuntimeError(f"agent.template {config.agent_template}: no CLIs in {self.npm_bin} "
                                   "(run scripts/npm-deps.sh, or set agent.npm_bin)")
            self.ro_binds.append(os.path.dirname(os.path.realpath(self.npm_bin)))
        front = urllib.parse.urlparse(config.swarm_url)
        self.front = (front.hostname or "127.0.0.1", front.port or (443 if front.scheme == "https" else 80))
        self.relay_port = self.front[1] if self.front[1] >= 1024 else 8080
        self.client = SwarmClient(config.swarm_url, verbose=True, admin_token=config.admin_token,
                                  client_uuid=self._client_uuid())

    def _client_uuid(self) -> str:
        """Kept in the state dir: a restarted harness is the same client, so it may abort what it claimed."""
        path = os.path.join(self.c.state_dir, "client_uuid")
        if os.path.exists(path):
            with open(path) as f:
                return f.read().strip()
        value = str(uuid.uuid4())
        with open(path, "w") as f:
            f.write(value)
        return value

    def _episodes(self) -> Iterator[Dict[str, Any]]:
        n = 0
        for _ in range(self.c.epochs):
            for task in self.tasks:
                for _ in range(self.c.repeat):
                    if self.c.max_episodes and n >= self.c.max_episodes:
                        return
                    n += 1
                    yield task

    def _next_task(self) -> Optional[Dict[str, Any]]:
        with self._lock:
            return None if self._stop.is_set() else next(self._queue, None)

    def _raise_if_stopped(self, reason: str) -> None:
        """begin_episode's on_wait: a stopped harness stops waiting for an episode."""
        if self._stop.is_set():
            raise _Stopped()

    def stop(self) -> None:
        """No more claims; running sandboxes are killed and their episodes aborted (harness_stopped)."""
        with self._lock:
            self._stop.set()
            running = list(self._running)
        for sandbox in running:
            sandbox.kill_processes()

    # ------------------------------------------------------------ reaper

    def reap(self) -> int:
        """Kills and removes what a killed harness left in this state dir (processes, cgroups,
        sandbox dirs) and aborts its journaled episodes (cause harness_restart). Returns how many
        sandboxes it reaped."""
        records = read_journals(self.journal_dir)
        for record in records:
            kill_leftover(record, self.cgroups)
            if record.get("episode_uuid"):
                client = SwarmClient(record.get("server_url") or self.c.swarm_url, verbose=True,
                                     client_uuid=record.get("client_uuid") or self.client.client_uuid,
                                     admin_token=self.c.admin_token)
                if client.abort_episode(record["episode_uuid"], episode_key=record.get("episode_key") or None,
                                        cause="harness_restart"):
                    self.summary.abort("harness_restart", {"task_id": record.get("task_id"),
                                                           "episode_uuid": record["episode_uuid"]})
                client.close()
            os.unlink(record["_journal"])
        for path in self.cgroups.leftovers() if self.cgroups.available else []:
            kill_cgroups([path])
        for name in os.listdir(self.sandbox_dir):
            shutil.rmtree(os.path.join(self.sandbox_dir, name), ignore_errors=True)
        if records:
            logger.warning("reaped %d sandbox(es) a previous harness left", len(records))
        return len(records)

    # ------------------------------------------------------------ run

    def run(self) -> Dict[str, Any]:
        self.reap()
        workers = [threading.Thread(target=self._worker, name=f"harness-{i}", daemon=True)
                   for i in range(self.c.concurrency)]
        for w in workers:
            w.start()
        for w in workers:
            while w.is_alive():
                w.join(0.5)
        if self.cgroups.available:
            self.cgroups.remove_parent()
        write_journal(os.path.join(self.c.state_dir, "summary.json"), self.summary.to_json(episodes=True))
        return self.summary.to_json()

    def _worker(self) -> None:
        while True:
            task = self._next_task()
            if task is None:
                return
            try:
                self.run_episode(task)
            except _Stopped:
                return
            except SwarmError as e:
                logger.error("task %s: %s", task["task_id"], e)
                if "OFFLINE" in str(e):
                    self.stop()

    def run_episode(self, task: Dict[str, Any]) -> None:
        """1. journal + lay out the sandbox; 2. claim; 3. agent; 4. verifier; 5. end or abort;
        6. kill and remove everything, then the journal."""
        sid = uuid.uuid4().hex[:16]
        journal = os.path.join(self.journal_dir, f"{sid}.json")
        record: Dict[str, Any] = {"sandbox_id": sid, "root": os.path.join(self.sandbox_dir, sid),
                                  "client_uuid": self.client.client_uuid, "server_url": self.c.swarm_url,
                                  "task_id": task["task_id"], "cgroups": self.cgroups.paths(sid)
                                  if self.cgroups.available else []}
        write_journal(journal, record)  # before anything exists, so a kill at any point is reaped
        sandbox: Optional[Sandbox] = None
        episode = None
        try:
            sandbox_error = ""
            try:
                sandbox = self._lay_out(sid, record["root"], task)
            except (SandboxError, OSError, subprocess.SubprocessError) as e:
                sandbox_error = str(e)
            episode = self.client.begin_episode(discard_episode_timeout=self.c.lifetime,
                                                episode_type=self.c.episode_type, on_wait=self._raise_if_stopped)
            record.update(episode_uuid=episode.episode_uuid, episode_key=episode.api_key)
            write_journal(journal, record)
            with self._lock:  # stop() kills what is in _running: joined under its lock
                stopped = self._stop.is_set()
                if not stopped and sandbox is not None:
                    self._running.append(sandbox)
            if stopped:
                verdict = Verdict(abort_cause="harness_stopped")
            elif sandbox is None:
                verdict = Verdict(abort_cause="sandbox_start_failed", detail=sandbox_error)
            else:
                try:
                    verdict = self._run_in_sandbox(sandbox, task, episode, journal, record)
                except SandboxError as e:
                    verdict = Verdict(abort_cause="sandbox_start_failed", detail=str(e))
                except Exception as e:  # a bug here must not leave the episode claimed
                    logger.exception("task %s: the harness failed", task["task_id"])
                    verdict = Verdict(abort_cause="harness_error", detail=str(e))
                if self._stop.is_set():
                    verdict = Verdict(abort_cause="harness_stopped")
            self._report(task, episode, verdict)
        finally:
            if sandbox is not None:
                with self._lock:
                    if sandbox in self._running:
                        self._running.remove(sandbox)
                if not sandbox.close():
                    logger.error("sandbox %s: processes or cgroups left behind", sid)
            else:
                kill_leftover(record, self.cgroups)
            os.unlink(journal)

    def _lay_out(self, sid: str, root: str, task: Dict[str, Any]) -> Sandbox:
        spec = SandboxSpec(sandbox_id=sid, root=root, limits=Limits(self.c.memory_mb, self.c.pids, self.c.cpus),
                           front=self.front, relay_port=self.relay_port, ro_binds=self.ro_binds, python=self.python)
        sandbox = Sandbox(spec, self.cgroups)
        repo = task.get("repo")
        if repo:
            if not os.path.isdir(repo):
                raise SandboxError(f"task {task['task_id']}: repo '{repo}' is not a directory")
            shutil.rmtree(sandbox.work)
            if os.path.isdir(os.path.join(repo, ".git")):
                subprocess.run(["git", "clone", "-q", "--", repo, sandbox.work], check=True, timeout=300,
                               stdin=subprocess.DEVNULL, capture_output=True)
            else:
                shutil.copytree(repo, sandbox.work, symlinks=True)
        work = os.path.realpath(sandbox.work)
        for rel, content in (task.get("files") or {}).items():
            # realpath: a symlink of the repo ("etc -> /etc") must not carry a write out of the sandbox.
            path = os.path.realpath(os.path.join(work, rel))
            if os.path.isabs(rel) or not path.startswith(work + os.sep):
                raise SandboxError(f"task {task['task_id']}: file '{rel}' is outside the sandbox")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with open(fd, "w") as f:
                f.write(content)
        with open(os.path.join(root, "ajet", "task.json"), "w") as f:
            json.dump(task, f)
        return sandbox

    def _env(self, task: Dict[str, Any], base_url: str, api_key: str, extra: Dict[str, str]) -> Dict[str, str]:
        path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        if self.npm_bin:
            path = os.path.realpath(self.npm_bin) + ":" + path
        root = base_url[:-3] if base_url.endswith("/v1") else base_url
        env = {"PATH": path, "HOME": "/home/agent", "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp",
               "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": api_key, "OPENAI_MODEL": self.c.model,
               "ANTHROPIC_BASE_URL": root, "ANTHROPIC_API_KEY": api_key,
               "AJET_TASK": json.dumps(task), "AJET_TASK_FILE": "/ajet/task.json",
               "AJET_EPISODE_TYPE": self.c.episode_type,
               "AJET_SAMPLING": json.dumps(self.c.sampling if self.c.episode_type == "eval" else {})}
        env.update(extra)
        env.update({k: str(v) for k, v in self.c.agent_env.items()})
        return env

    def _run_in_sandbox(self, sandbox: Sandbox, task: Dict[str, Any], episode: Any, journal: str,
                        record: Dict[str, Any]) -> Verdict:
        path = urllib.parse.urlparse(episode.base_url).path or "/v1"
        base_url = f"http://127.0.0.1:{self.relay_port}{path}"
        ctx = AgentContext(base_url=base_url, api_key=episode.api_key, model=self.c.model, prompt=task["prompt"],
                           task_file="/ajet/task.json", home=sandbox.home)

        def journal_pid(pid: int) -> None:
            record["pid"] = pid
            write_journal(journal, record)

        relay = sandbox.start_relay()
        command, extra = agent_command(self.c.agent_template, self.c.agent_command, self.c.agent_args, ctx)
        agent = sandbox.run("agent", command, self._env(task, base_url, episode.api_key, extra),
                            self.c.agent_timeout, journal_pid)
        relay.close()
        sandbox.relay = None
        facts = {"agent_exit": agent.exit_status, "agent_timed_out": agent.timed_out,
                 "model_requests": relay.model_requests}
        if self._stop.is_set():
            return Verdict(abort_cause="harness_stopped", metadata=facts)
        if not agent.started:
            return Verdict(abort_cause="sandbox_start_failed", detail=agent.stderr(), metadata=facts)
        if relay.model_requests == 0:
            cause = ("agent_timeout_before_first_call" if agent.timed_out else
                     "agent_made_no_call" if agent.exit_status == 0 else "agent_died_before_first_call")
            return Verdict(abort_cause=cause, detail=agent.stderr(), metadata=facts)
        env = self._env(task, "", "", {"AJET_AGENT_EXIT": str(agent.exit_status if agent.exit_status is not None
                                                              else ""),
                                       "AJET_AGENT_TIMED_OUT": "1" if agent.timed_out else "0",
                                       "AJET_AGENT_STDOUT": "/ajet/out/agent.stdout",
                                       "AJET_AGENT_STDERR": "/ajet/out/agent.stderr"})
        for key in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"):
            env.pop(key)
        verifier = sandbox.run("verifier", self.c.verifier_command, env, self.c.verifier_timeout, journal_pid)
        verdict = verifier_verdict(verifier.exit_status, verifier.timed_out, verifier.started, verifier.stdout())
        verdict.metadata = {**facts, **verdict.metadata}
        if verdict.abort_cause:
            verdict.detail = (verdict.detail + " " + verifier.stderr()).strip()
        return verdict

    def _report(self, task: Dict[str, Any], episode: Any, verdict: Verdict) -> None:
        line = {"task_id": task["task_id"], "episode_uuid": episode.episode_uuid,
                "model_requests": verdict.metadata.get("model_requests"),
                "agent_exit": verdict.metadata.get("agent_exit")}
        if verdict.abort_cause:
            logger.warning("task %s episode %s: aborted (%s) %s", task["task_id"], episode.episode_uuid,
                           verdict.abort_cause, verdict.detail[-500:])
            self.client.abort_episode(episode.episode_uuid, cause=verdict.abort_cause)
            self.summary.abort(verdict.abort_cause, line)
            return
        output = WorkflowOutput(reward=verdict.reward, is_success=verdict.is_success, metadata=dict(verdict.metadata))
        if self.client.end_episode(task["task_id"], episode.episode_uuid, output):
            self.summary.end(float(verdict.reward), line)
        else:
            self.summary.abort("end_refused", line)


def main(conf: str) -> int:
    harness = Harness(HarnessConfig.load(conf))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: harness.stop())
    summary = harness.run()
    print(json.dumps({"harness_summary": summary}), flush=True)
    return 0
