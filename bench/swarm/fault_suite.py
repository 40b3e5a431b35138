#!/usr/bin/env python3
"""The front's fault suite: the real `ajet-swarm` (with the `ajet-echo-engine` test double) on loopback
under client churn, SIGKILLed clients, a SIGKILLed front, a SIGKILLed engine and hostile inputs,
with the goals the front must meet (docs/operations.md):

  1. churn: K client processes loop claim -> 1-2 chat calls -> end_episode for D s; run A kills
     nobody, run B SIGKILLs a share of the K clients (20 %) over the run, one at a time at even
     intervals, each mid-episode and replaced by a fresh process (issue 15's 200 clients with 20 %
     SIGKILLed). Goals: acknowledged episodes/s B/A >= 0.70, no gap between two successful
     claims anywhere in the swarm above 5 s during B, every acknowledged episode stored finished.
  2. front SIGKILL under load, restart with --resume on the same port and exp dir: seconds until
     ENGINE.ROLLING again; every acknowledged episode (before and after) stored finished.
  3. engine SIGKILL under load: seconds until ENGINE.ROLLING again, the HTTP statuses the clients
     saw meanwhile (chat: only 503 expected).
  4. hostile inputs: each a 4xx whose message names the problem, /health 200 after each; and /health
     answered within 0.5 s while eight 15 MB prompts are tokenized.
  5. issue 38's attacks: tool-call arguments nested 70,000 deep (chat, responses), a stranger's
     end/abort of another client's episode, CR/LF and unlisted hosts in coordinator_url, a claim that
     would hold its slot forever, n and n x max_tokens x top_logprobs over their bounds, field names
     of /v1/messages, orphan tool results, 8 MiB of metadata: each a 4xx naming the problem; then
     hung-up calls leave no engine work, uploads without a key cost no memory, a tarpit coordinator
     holds no work-pool route, the front at its connection cap answers /health, and SIGTERM stops
     the front while its janitor asks the tarpit.
  6. front memory (VmRSS) and open fds at the start and the end.

Prints a markdown table and (not with --short) appends it with the date and the machine to
docs/benchmarks.md. Exit status 1 when a goal is not met. Python 3.11 standard library only.

    bench/swarm/fault_suite.py                 # K=40, D=30 s; appends to docs/benchmarks.md
    bench/swarm/fault_suite.py --short         # the CI version (ctest -L e2e -R front_fault_suite)

The binaries come from <build>/bin (AJET_BUILD_DIR overrides <repo>/build).
"""
import argparse
import atexit
import collections
import concurrent.futures
import datetime
import http.client
import io
import json
import mmap
import multiprocessing
import os
import random
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("AJET_BUILD_DIR") or os.path.join(REPO, "build"))
BIN = os.path.join(BUILD, "bin")
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from ajet_swarm import (ChatClient, ChatError, SwarmClient, SwarmCommandError, SwarmConnectionError,  # noqa: E402
                        SwarmError, SwarmServerOfflineError, SwarmTimeoutError, WorkflowOutput)

DISCARD_EPISODE_TIMEOUT = 240.0  # upstream's Python client; a small one would hide orphaned claims
ROLLING = "ENGINE.ROLLING"
OFFLINE = "ENGINE.OFFLINE"


def log(msg):
    print(f"[fault_suite {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- cleanup

_FRONTS = []  # every Front started
_FLEETS = []  # every Fleet started
_EXTRA_PIDS = set()  # processes we saw start under us (engines) and kill at exit if still there
_TMPDIRS = []
_KEEP_TMP = False


def _cleanup():
    for fleet in list(_FLEETS):
        try:
            fleet.kill_all()
        except Exception:
            pass
    for front in list(_FRONTS):
        try:
            front.kill_group()
        except Exception:
            pass
    for pid in list(_EXTRA_PIDS):
        if not process_gone(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    for d in list(_TMPDIRS):
        if _KEEP_TMP:
            log(f"kept {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    _TMPDIRS.clear()


def _on_signal(signum, _frame):
    raise SystemExit(128 + signum)


# ----------------------------------------------------------------------------- processes, HTTP

def process_gone(pid):
    """True when `pid` no longer runs (gone, or a zombie nobody reaped yet)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    close = stat.rfind(")")
    return close != -1 and stat[close + 2:close + 3] == "Z"


def usage(pid):
    """(VmRSS in KiB, open fds) of `pid`, or (None, None)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), None)
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError):
        return None, None


def engine_pids(front_pid):
    """Pids of the ajet-echo-engine processes whose parent is `front_pid` (engine_status_detail names the
    engine pid only until the next transition, e.g. a recorded batch)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0]
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        if ppid == front_pid and argv0.endswith(b"ajet-echo-engine") and not process_gone(int(entry)):
            out.append(int(entry))
    return out


class Http:
    """Keep-alive requests to 127.0.0.1:port, one connection per thread; (status, headers, body)."""

    def __init__(self, port, token=""):
        self.port = port
        self.token = token
        self._local = threading.local()

    def request(self, method, path, body=None, headers=None, timeout=30.0, admin=False):
        h = dict(headers or {})
        if admin and self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            fresh = conn is None
            if fresh:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
                self._local.conn = conn
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                conn.request(method, path, body=body, headers=h)
                r = conn.getresponse()
                data = r.read()
                if r.will_close:
                    conn.close()
                    self._local.conn = None
                return r.status, {k.lower(): v for k, v in r.getheaders()}, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                self._local.conn = None
                if fresh or attempt:
                    raise ConnectionError(str(e)) from e
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                raise

    def json(self, method, path, body=None, **kw):
        status, _, data = self.request(method, path, body, **kw)
        try:
            return status, json.loads(data.decode()) if data else None
        except (UnicodeDecodeError, ValueError):
            return status, None

    def engine_status(self):
        """(status, detail) or (None, error) when the front does not answer."""
        try:
            status, data = self.json("GET", "/get_engine_status", timeout=5)
        except (OSError, http.client.HTTPException) as e:
            return None, str(e)
        if status != 200 or not isinstance(data, dict):
            return None, f"HTTP {status}"
        return data.get("engine_status"), data.get("engine_status_detail") or ""

    def health(self):
        try:
            return self.request("GET", "/health", timeout=10)[0] == 200
        except (OSError, http.client.HTTPException):
            return False


def wait_status(api, want, timeout, poll=0.05):
    """Seconds until the engine status is `want`, or None after `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if api.engine_status()[0] == want:
            return time.monotonic() - t0
        time.sleep(poll)
    return None


class Front:
    """One `ajet-swarm start` in its own process group; its output goes to a log file."""

    def __init__(self, name, exp_dir, log_path, token, extra=()):
        self.name, self.exp_dir, self.log_path, self.token = name, exp_dir, log_path, token
        self.extra = list(extra)  # more `ajet-swarm start` flags
        self.proc = None
        self.port = 0
        self.lines = []
        self._cv = threading.Condition()
        self.engine_pids = set()
        _FRONTS.append(self)

    def start(self, resume=False, port=0, timeout=60.0):
        argv = [os.path.join(BIN, "ajet-swarm"), "start", "--port", str(port), "--exp-dir", self.exp_dir,
                "--engine", os.path.join(BIN, "ajet-echo-engine"), "--janitor-interval", "0.5"] + self.extra
        if resume:
            argv.append("--resume")
        env = dict(os.environ, AJET_ADMIN_TOKEN=self.token)
        deadline = time.monotonic() + timeout
        while True:
            with self._cv:
                self.lines = []
            logf = open(self.log_path, "a")
            logf.write(f"==== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n")
            logf.flush()
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env=env)
            threading.Thread(target=self._drain, args=(self.proc, logf), daemon=True).start()
            ready = self._wait_line("ajet-swarm ready:", deadline)
            if ready:
                self.port = int(re.search(r"\(port (\d+)", ready).group(1))
                return self
            out = self.output()
            self.proc.wait()
            if port and "in use" in out and time.monotonic() < deadline:
                time.sleep(0.5)  # the killed front's port not free yet: counts in the restart time
                continue
            raise RuntimeError(f"{self.name}: ajet-swarm did not become ready:\n{out[-3000:]}")

    def _drain(self, proc, logf):
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            logf.write(line + "\n")
            logf.flush()
            with self._cv:
                self.lines.append(line)
                self._cv.notify_all()
        logf.close()
        with self._cv:
            self._cv.notify_all()

    def _wait_line(self, needle, deadline):
        with self._cv:
            while True:
                for line in self.lines:
                    if needle in line:
                        return line
                if self.proc.poll() is not None or time.monotonic() >= deadline:
                    return ""
                self._cv.wait(0.1)

    def output(self):
        with self._cv:
            return "\n".join(self.lines)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def usage(self):
        return usage(self.proc.pid) if self.alive() else (None, None)

    def api(self):
        return Http(self.port, self.token)

    def note_engine(self):
        """The current engine's pid (0: none), remembered so that it is killed at exit if it outlives us."""
        pids = engine_pids(self.proc.pid) if self.alive() else []
        for pid in pids:
            self.engine_pids.add(pid)
            _EXTRA_PIDS.add(pid)
        return pids[0] if len(pids) == 1 else 0

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        self.kill_group()

    def kill_group(self):
        if self.proc is None:
            return
        if self.proc.poll() is not None and all(process_gone(p) for p in self.engine_pids):
            return  # nothing of this front is left (and its pid may be reused)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass


# ----------------------------------------------------------------------------- the client processes

def client_worker(url, log_path, state_path, slot, tasks, seed):
    """One swarm client: claim (train) -> 1 or 2 chat calls -> end_episode, until SIGTERM. Every event
    is appended (one write per line) to `log_path` with a wall-clock time: C claimed, A acknowledged
    (end_episode answered 200), H an HTTP status seen (what, status), E a connection error, W a claim
    refusal (fail_cause), X an episode given up, R an end refused. Byte `slot` of `state_path` is 1
    between a successful claim and the end of that episode (the killer picks such clients)."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    err = os.open(log_path + ".stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(err, 1)
    os.dup2(err, 2)
    sys.stdout = sys.stderr = open(err, "w", buffering=1, closefd=False)
    out = open(log_path, "a", buffering=1)
    with open(state_path, "r+b") as f:
        state = mmap.mmap(f.fileno(), 0)

    def note(*fields):
        out.write(" ".join([f"{time.time():.6f}", *[str(x) for x in fields]]) + "\n")

    rng = random.Random(seed)
    client = SwarmClient(url, verbose=False, client_uuid=f"fault-{slot}-{os.getpid()}")
    task = rng.randrange(tasks)
    while not stop:
        try:
            episode = client.begin_episode(discard_episode_timeout=DISCARD_EPISODE_TIMEOUT, episode_type="train",
                                           max_wait=1.0, on_wait=lambda cause: note("W", cause[:60].replace(" ", "_")))
        except SwarmTimeoutError:
            continue
        except SwarmServerOfflineError:
            time.sleep(0.5)
            continue
        except SwarmError as e:
            note("E", "claim", type(e).__name__)
            time.sleep(0.5)
            continue
        note("C", episode.episode_uuid)
        state[slot] = 1
        task = (task + 1) % tasks
        task_id = f"task-{task}"
        chat = ChatClient(episode.base_url, episode.api_key, max_retries=0, timeout=60)
        ok = True
        for turn in range(rng.choice((1, 2))):
            ok = _chat_call(chat, note, f"fault suite {task_id} turn {turn} {rng.randrange(10 ** 6)}")
            if not ok:
                break
            time.sleep(rng.uniform(0.0, 0.03))  # the agent "thinks" between calls
        if ok:
            reward = round(rng.random(), 3)
            if _end(client, note, task_id, episode.episode_uuid, reward):
                note("A", episode.episode_uuid, reward)
        else:
            note("X", episode.episode_uuid)
            client.abort_episode(episode.episode_uuid)
        state[slot] = 0
    out.close()


def _chat_call(chat, note, text, patience=180.0):
    """One chat call, retried on 503 (and 409/429/5xx) and connection errors; False when the episode is
    gone (404) or refused otherwise."""
    deadline = time.monotonic() + patience
    while True:
        try:
            chat.create([{"role": "user", "content": text}], max_tokens=16)
            note("H", "chat", 200)
            return True
        except ChatError as e:
            note("H", "chat", e.status)
            if e.status not in (409, 429, 503) and e.status < 500:
                return False
        except SwarmConnectionError as e:
            note("E", "chat", str(e).split(":")[-1].strip().replace(" ", "_")[:40])
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _end(client, note, task_id, episode_uuid, reward, patience=180.0):
    deadline = time.monotonic() + patience
    while True:
        try:
            if client.end_episode(task_id, episode_uuid, WorkflowOutput(reward=reward)):
                note("H", "end", 200)
                return True
            note("R", episode_uuid, "dropped")
            return False
        except SwarmConnectionError:
            note("E", "end", "connection")
        except SwarmCommandError as e:
            note("H", "end", e.status)
            if e.status is None or e.status < 500:
                note("R", episode_uuid, (e.server_message or str(e))[:80].replace(" ", "_"))
                return False
        if time.monotonic() > deadline:
            note("R", episode_uuid, "gave_up")
            return False
        time.sleep(0.5)


class Fleet:
    """K client processes (forked from a forkserver that has the client imported), one slot each."""

    def __init__(self, mp, url, k, log_dir, tasks):
        self.mp, self.url, self.k, self.log_dir, self.tasks = mp, url, k, log_dir, tasks
        os.makedirs(log_dir, exist_ok=True)
        self.state_path = os.path.join(log_dir, "state")
        with open(self.state_path, "wb") as f:
            f.write(b"\0" * max(1, k))
        self._state_file = open(self.state_path, "r+b")
        self.state = mmap.mmap(self._state_file.fileno(), 0)
        self.procs = [None] * k
        self.generation = [0] * k
        self.spawned = 0
        _FLEETS.append(self)

    def spawn(self, slot):
        self.state[slot] = 0
        gen = self.generation[slot]
        self.generation[slot] += 1
        path = os.path.join(self.log_dir, f"c{slot:03d}-{gen:04d}.log")
        p = self.mp.Process(target=client_worker, daemon=True,
                            args=(self.url, path, self.state_path, slot, self.tasks, random.randrange(2 ** 32)))
        p.start()
        self.procs[slot] = p
        self.spawned += 1

    def start(self):
        for slot in range(self.k):
            self.spawn(slot)

    def mid_episode(self):
        return [s for s in range(self.k) if self.state[s] == 1 and self.procs[s] is not None]

    def kill_and_replace(self, slot):
        """SIGKILLs the client in `slot` (if it is still mid-episode) and starts a fresh one; True when killed
        mid-episode."""
        p = self.procs[slot]
        mid = self.state[slot] == 1
        p.kill()
        p.join(10)
        self.spawn(slot)
        return mid

    def stop(self, grace=30.0):
        """SIGTERM: each client finishes its episode and exits; SIGKILL after `grace` seconds."""
        live = [p for p in self.procs if p is not None and p.is_alive()]
        for p in live:
            p.terminate()
        deadline = time.monotonic() + grace
        for p in live:
            p.join(max(0.1, deadline - time.monotonic()))
        stuck = [p for p in live if p.is_alive()]
        for p in stuck:
            p.kill()
            p.join(5)
        return len(stuck)

    def kill_all(self):
        for p in self.procs:
            if p is not None and p.is_alive():
                p.kill()
                p.join(5)

    def events(self):
        """Every client's log lines as (time, kind, fields...) tuples, sorted by time."""
        out = []
        for name in sorted(os.listdir(self.log_dir)):
            if not name.endswith(".log"):
                continue
            with open(os.path.join(self.log_dir, name), errors="replace") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) < 2 or not line.endswith("\n"):
                        continue  # a line cut by SIGKILL
                    try:
                        out.append((float(parts[0]), parts[1], *parts[2:]))
                    except ValueError:
                        pass
        out.sort()
        return out


def acked(events):
    """{uuid: reward} of every acknowledged episode."""
    return {e[2]: float(e[3]) for e in events if e[1] == "A" and len(e) >= 4}


def claim_gap(events, t0, t1):
    """The longest time without a successful claim anywhere in [t0, t1] (edges included)."""
    times = [t0] + [e[0] for e in events if e[1] == "C" and t0 <= e[0] <= t1] + [t1]
    gaps = [(b - a, a) for a, b in zip(times, times[1:])]
    return max(gaps) if gaps else (t1 - t0, t0)


def verify_stored(api, acks):
    """(lost, wrong_reward, examples): acknowledged episodes GET /episodes/<uuid> does not show finished
    (with the reward sent)."""
    def one(item):
        uuid, reward = item
        for attempt in range(3):
            try:
                status, doc = api.json("GET", f"/episodes/{uuid}", admin=True, timeout=60)
                break
            except (OSError, http.client.HTTPException) as e:
                if attempt == 2:
                    return uuid, f"no answer: {e}"
                time.sleep(1)
        if status != 200 or not isinstance(doc, dict):
            return uuid, f"HTTP {status}"
        if doc.get("status") != "finished":
            return uuid, f"status {doc.get('status')!r}"
        stored = doc.get("reward")
        if not isinstance(stored, (int, float)) or abs(stored - reward) > 1e-6:
            return uuid, f"reward {stored!r}, sent {reward}"
        return uuid, None

    lost, wrong, examples = 0, 0, []
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for uuid, problem in pool.map(one, sorted(acks.items())):
            if problem is None:
                continue
            if problem.startswith("reward"):
                wrong += 1
            else:
                lost += 1
            if len(examples) < 5:
                examples.append(f"{uuid}: {problem}")
    return lost, wrong, examples


def _noop():
    pass


# ----------------------------------------------------------------------------- the suite

def config_yaml(tokenizer, args):
    """A train config for the echo engine (a tokenizer directory is its model), like e2e_util.h's."""
    return ("ajet:\n"
            "  backbone: debug\n"
            "  model:\n"
            f"    path: {tokenizer}\n"
            "  data:\n"
            "    max_prompt_length: 256\n"
            "    max_response_length: 256\n"
            f"    train_batch_size: {args.batch_size}\n"
            "  rollout:\n"
            f"    max_env_worker: {args.pool}\n"
            "    max_model_len: 512\n"
            "    max_response_length_in_one_turn: 48\n"
            f"    num_repeat: {args.num_repeat}\n"
            "    temperature: 1.0\n"
            "  engine:\n"
            "    threads: 1\n"
            "    kv_cache_memory_mb: 16\n")


class Suite:
    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.token = secrets.token_hex(16)
        self.rows = []  # (scenario, measure, value, goal, met: True/False/None)
        self.hostile = []  # (input, status, names, alive, ok)
        self.memory = []  # (point, rss KiB, fds)
        self.failures = []
        self.notes = []
        self.all_acks = {}
        self.tarpit = Tarpit()  # the coordinator of issue 38's tarpit groups (a --peer of the suite's front)
        self.mp = multiprocessing.get_context("forkserver")
        self.mp.set_forkserver_preload(["__main__"])
        warm = self.mp.Process(target=_noop)  # starts the forkserver (imports the client) before any timing
        warm.start()
        warm.join(60)

    # -- helpers
    def row(self, scenario, measure, value, goal="", met=None, timing=False):
        # --short (CI) reports the timing goals but does not fail on them: a loaded CI machine must not
        # turn a throughput ratio into a red test. The full run enforces them.
        if timing and self.args.short and met is not None:
            goal = f"{goal} (not enforced with --short)"
            met = None
        self.rows.append((scenario, measure, value, goal, met))
        if met is False:
            self.failures.append(f"{scenario}: {measure} = {value} (goal {goal})")

    def mem(self, point, front):
        rss, fds = front.usage()
        self.memory.append((point, rss, fds))
        return rss, fds

    def fixture(self):
        tok = os.path.join(self.tmp, "tokenizer")
        subprocess.run([os.path.join(BIN, "ajet"), "tokenizer", "train", "--corpus",
                        os.path.join(REPO, "tests", "text", "data", "tokenizer_corpus.jsonl"), "--vocab-size", "400",
                        "--out", tok], check=True, stdout=subprocess.DEVNULL)
        return tok

    def boot(self, front, yaml):
        api = front.api()
        status, body = api.json("POST", "/sync_train_config", {"yaml_as_string": yaml}, admin=True)
        if status != 200:
            raise RuntimeError(f"sync_train_config: HTTP {status}: {body}")
        self.start_engine(front)

    def start_engine(self, front):
        api = front.api()
        status, body = api.json("POST", "/start_engine", {}, admin=True, timeout=120)
        if status != 200:
            raise RuntimeError(f"start_engine: HTTP {status}: {body}")
        if wait_status(api, ROLLING, 120) is None:
            raise RuntimeError(f"the engine did not reach ENGINE.ROLLING: {api.engine_status()}")
        front.note_engine()

    def restart_engine(self, front):
        """stop_engine + start_engine: drops the live episodes (orphaned claims of killed clients), so each
        scenario starts from a full pool."""
        api = front.api()
        status, body = api.json("POST", "/stop_engine", {}, admin=True, timeout=120)
        if status != 200 or wait_status(api, OFFLINE, 60) is None:
            raise RuntimeError(f"stop_engine: HTTP {status}: {body}; status {api.engine_status()}")
        self.start_engine(front)

    def pool_snapshot(self, front):
        try:
            status, info = front.api().json("GET", "/get_current_batch_rollout_pool_information", timeout=10)
        except (OSError, http.client.HTTPException) as e:
            return f"no answer ({e})"
        if status != 200 or not isinstance(info, dict):
            return f"HTTP {status}"
        return (f"{info.get('engine_status')}, pool {info.get('pool_size')}: {info.get('registered_episodes')} registered, "
                f"{info.get('claimed_episodes')} claimed; batches recorded {info.get('batches_recorded')}")

    def fleet(self, front, name):
        return Fleet(self.mp, f"http://127.0.0.1:{front.port}", self.args.clients, os.path.join(self.tmp, name),
                     self.args.tasks)

    def check_front(self, front, scenario):
        alive = front.alive() and front.api().health()
        if not alive:
            self.row(scenario, "front alive afterwards", "no", "yes", False)
            raise RuntimeError(f"{scenario}: the front died; its log:\n{front.output()[-4000:]}")
        return alive

    def collect(self, fleet, front, scenario):
        """Stops `fleet` and checks its work: (clients that needed SIGKILL to stop, events, the
        acknowledged episodes, which join the suite's, and verify_stored's (lost, wrong, examples))."""
        stuck = fleet.stop()
        events = fleet.events()
        acks = acked(events)
        self.all_acks.update(acks)
        self.check_front(front, scenario)
        return stuck, events, acks, verify_stored(front.api(), acks)

    # -- 1. churn
    def churn(self, front, label, kill):
        a = self.args
        scenario = f"1{label} churn, " + (f"kill {a.kill_share:.0%} of the clients" if kill else "no kills")
        log(f"{scenario}: {a.clients} clients, {a.seconds:g} s")
        rss0, fds0 = self.mem(f"before 1{label}", front)
        fleet = self.fleet(front, f"churn-{label}")
        t0 = time.time()
        fleet.start()
        t1 = t0 + a.seconds
        # kill_share of the K clients over the run: one kill per tick, ticks evenly spaced.
        ticks = max(1, round(a.kill_share * a.clients))
        every = a.seconds / (ticks + 1)
        next_kill = t0 + every
        kills = kills_mid = 0
        short_of_victims = quota = 0
        want = 1
        while time.time() < t1 and front.alive():
            now = time.time()
            if kill and now >= next_kill:
                # Each tick sets a quota of clients to kill; it is filled with clients caught mid-episode
                # (after their claim, before their end) until the next tick.
                next_kill += every
                short_of_victims += quota
                quota = want
            if quota:
                candidates = fleet.mid_episode()
                for slot in random.sample(candidates, min(quota, len(candidates))):
                    kills_mid += fleet.kill_and_replace(slot)
                    kills += 1
                    quota -= 1
            time.sleep(0.02)
        t1 = time.time()
        short_of_victims += quota
        snapshot = self.pool_snapshot(front)
        stuck, events, acks, (lost, wrong, examples) = self.collect(fleet, front, scenario)
        rate = sum(1 for e in events if e[1] == "A" and t0 <= e[0] <= t1) / (t1 - t0)
        gap, gap_at = claim_gap(events, t0, t1)
        rss1, fds1 = self.mem(f"after 1{label}", front)
        waits = collections.Counter(e[2] for e in events if e[1] == "W" and t0 <= e[0] <= t1)
        self.row(scenario, "acknowledged episodes/s", f"{rate:.1f}")
        if kill:
            self.row(scenario, "clients SIGKILLed (mid-episode)", f"{kills} ({kills_mid})")
        self.row(scenario, "longest claim gap (s)", f"{gap:.2f} at +{gap_at - t0:.1f} s",
                 "<= 5" if kill else "", (gap <= 5.0) if kill else None, timing=True)
        self.row(scenario, "acknowledged / lost in the store", f"{len(acks)} / {lost}", "0 lost", lost == 0)
        if wrong:
            self.row(scenario, "stored with another reward", str(wrong), "0", False)
        self.row(scenario, "front RSS MiB / fds before -> after",
                 f"{rss0 / 1024:.1f} / {fds0} -> {rss1 / 1024:.1f} / {fds1}")
        self.notes.append(f"1{label}: pool at the end of the run: {snapshot}; claim refusals seen by clients: "
                          + (", ".join(f"{c} x {n}" for c, n in waits.most_common(3)) or "none")
                          + (f"; {stuck} clients needed SIGKILL to stop" if stuck else "")
                          + (f"; {short_of_victims} kills skipped (no client mid-episode)" if short_of_victims else "")
                          + (f"; examples: {examples}" if examples else ""))
        return rate, gap

    # -- 3. engine SIGKILL
    def engine_kill(self, front):
        a = self.args
        scenario = "3 engine SIGKILL"
        log(f"{scenario}: {a.clients} clients")
        self.restart_engine(front)
        api = front.api()
        fleet = self.fleet(front, "engine-kill")
        fleet.start()
        time.sleep(a.warm)
        old = front.note_engine()
        if not old:
            raise RuntimeError(f"{scenario}: no single ajet-echo-engine child of the front: {engine_pids(front.proc.pid)}")
        t_kill = time.time()
        os.kill(old, signal.SIGKILL)
        seen_other = False
        t_roll = None
        new = 0
        while time.time() - t_kill < 120:
            status, _ = api.engine_status()
            if status != ROLLING:
                seen_other = True
            elif seen_other or front.note_engine() not in (0, old):
                t_roll = time.time()
                break
            time.sleep(0.02)
        new = front.note_engine()
        self.notes.append(f"3: engine pid {old} -> {new}")
        time.sleep(a.after)
        t_end = time.time()
        _, events, acks, (lost, wrong, examples) = self.collect(fleet, front, scenario)
        window_end = (t_roll or t_end) + 1.0
        seen = collections.Counter()
        for e in events:
            if t_kill <= e[0] <= window_end and e[1] in ("H", "E"):
                seen[(e[2], e[3] if e[1] == "H" else "conn-error")] += 1
        restart = f"{t_roll - t_kill:.2f}" if t_roll else "never (120 s)"
        self.row(scenario, "seconds to ENGINE.ROLLING again", restart, "", t_roll is not None)
        shown = ", ".join(f"{what} {st} x {n}" for (what, st), n in sorted(seen.items())) or "none"
        others = {k: n for k, n in seen.items() if k[0] == "chat" and k[1] not in ("200", "503")}
        self.row(scenario, "statuses clients saw until ROLLING + 1 s", shown, "chat: only 200/503",
                 None if not others else False)
        self.row(scenario, "acknowledged / lost in the store", f"{len(acks)} / {lost}", "0 lost", lost == 0)
        if wrong:
            self.row(scenario, "stored with another reward", str(wrong), "0", False)
        if examples:
            self.notes.append(f"3: examples of lost episodes: {examples}")
        if not process_gone(old):
            self.notes.append(f"3: the killed engine {old} still exists")

    # -- 2. front SIGKILL
    def front_kill(self, front):
        a = self.args
        scenario = "2 front SIGKILL + --resume"
        log(f"{scenario}: {a.clients} clients")
        self.restart_engine(front)
        fleet = self.fleet(front, "front-kill")
        fleet.start()
        time.sleep(a.warm)
        old_engine = front.note_engine()
        port = front.port
        t_kill = time.time()
        front.proc.kill()
        front.proc.wait()
        # The front's engine must not outlive it (nor keep the port); wait a little for it to go.
        engine_gone = None
        while time.time() - t_kill < 10:
            if not old_engine or process_gone(old_engine):
                engine_gone = time.time() - t_kill
                break
            time.sleep(0.05)
        t_start = time.time()
        front.start(resume=True, port=port)
        api = front.api()
        t_ready = time.time()
        waited = wait_status(api, ROLLING, 120, poll=0.02)
        t_roll = time.time() if waited is not None else None
        new_engine = front.note_engine()
        time.sleep(a.after)
        t_end = time.time()
        _, events, acks, (lost, wrong, examples) = self.collect(fleet, front, scenario)
        before = sum(1 for e in events if e[1] == "A" and e[0] < t_kill)
        after = sum(1 for e in events if e[1] == "A" and e[0] >= t_kill)
        claims_after = sum(1 for e in events if e[1] == "C" and t_roll and e[0] >= t_roll)
        restart = f"{t_roll - t_kill:.2f} (ready line after {t_ready - t_start:.2f})" if t_roll else "never (120 s)"
        self.row(scenario, "seconds from SIGKILL to ENGINE.ROLLING", restart, "", t_roll is not None)
        self.row(scenario, "acknowledged before / after the kill, lost", f"{before} / {after}, {lost}", "0 lost", lost == 0)
        if wrong:
            self.row(scenario, "stored with another reward", str(wrong), "0", False)
        self.row(scenario, "claims after ROLLING again", str(claims_after), "> 0", claims_after > 0)
        self.row(scenario, "the killed front's engine exited", f"after {engine_gone:.2f} s" if engine_gone is not None
                 else "no (still running after 10 s)", "yes", engine_gone is not None)
        conn = sum(1 for e in events if e[1] == "E" and t_kill <= e[0] <= (t_roll or t_end))
        self.notes.append(f"2: engine pid {old_engine} -> {new_engine}; {conn} connection errors seen by clients "
                          f"while the front was down" + (f"; examples of lost: {examples}" if examples else ""))

    # -- 4. hostile inputs
    def hostile_rolling(self, front):
        """The inputs a ROLLING front gets from clients: each must be a 4xx naming the problem."""
        log("4 hostile inputs (ROLLING front)")
        api = front.api()
        self.mem("before the hostile inputs", front)
        client_uuid = "fault-hostile"
        status, claim = api.json("POST", "/claim_episode", {"client_uuid": client_uuid, "episode_type": "train",
                                                            "discard_episode_timeout": DISCARD_EPISODE_TIMEOUT})
        if status != 200 or not claim.get("success"):
            raise RuntimeError(f"claim_episode for the hostile inputs: {status} {claim}")
        uuid, key = claim["episode_uuid"], claim["openai_api_key"]
        auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        msgs = '"messages": [{"role": "user", "content": "hi"}]'

        def nested(key_, depth, leaf="1"):
            return ('{"' + key_ + '": ') * depth + leaf + "}" * depth

        def post(path, body, headers):
            def go():
                status_, _, data = api.request("POST", path, body, headers, timeout=120)
                return status_, data.decode("utf-8", "replace"), True
            return go

        head = f'{{"client_uuid": "{client_uuid}", "episode_uuid": "{uuid}", "task_id": "t", '
        chat_tools = ('{' + msgs + ', "tools": [{"type": "function", "function": {"name": "f", "parameters": '
                      + nested("properties", 20000) + '}}]}')
        cases = [
            ("chat: tools[0].function.parameters nested 20,000 deep",
             post("/v1/chat/completions", chat_tools.encode(), auth),
             (400,), ["tools[0].function.parameters", "nested deeper than"]),
            ("end_episode: workflow_output.metadata nested 100,000 deep",
             post("/end_episode", (head + '"workflow_output": {"reward": 1, "metadata": ' + nested("m", 100000)
                                   + "}}").encode(), auth),
             (400,), ["workflow_output.metadata"]),
            ("end_episode: workflow_output.log_metrics arrays nested 1,000,000 deep",
             post("/end_episode", (head + '"workflow_output": {"reward": 1, "log_metrics": ' + "[" * 1000000
                                   + "]" * 1000000 + "}}").encode(), auth),
             (400,), ["workflow_output.log_metrics"]),
            ("chat: temperature 1e400",
             post("/v1/chat/completions", ("{" + msgs + ', "temperature": 1e400}').encode(), auth),
             (400,), ["temperature", "overflow"]),
            ("chat: invalid UTF-8 in messages[0].content",
             post("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "caf\xe9"}]}', auth),
             (400,), ["messages[0].content"]),
            ("chat: lone surrogate \\udc00 in messages[0].content",
             post("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\udc00"}]}', auth),
             (400,), ["messages[0].content"]),
            ("raw: Transfer-Encoding: chunked, identity (+ a pipelined request)",
             lambda: raw_transfer_encoding(front.port, "chunked, identity"), (400, 501), ["Transfer-Encoding"]),
            ("raw: Transfer-Encoding: xchunked (+ a pipelined request)",
             lambda: raw_transfer_encoding(front.port, "xchunked"), (400, 501), ["Transfer-Encoding", "xchunked"]),
            ("chat: JSON body of 17 MiB (over --max-json-mb 16)",
             post("/v1/chat/completions", ('{"messages": [{"role": "user", "content": "' + "a" * (17 << 20)
                                           + '"}]}').encode(), auth),
             (413,), ["exceeds", "limit", "--max-json-mb"]),
            ("raw: claim_episode body of 64 MiB + 1 (over the command API's 64 KiB, refused from its header)",
             lambda: raw_oversized(front.port, (64 << 20) + 1), (413,), ["exceeds", "limit of 65536 bytes"]),
        ]
        self.run_hostile(front, cases)
        # The episode was not harmed: it still ends, with its reward stored.
        status, _, data = api.request("POST", "/end_episode", {
            "client_uuid": client_uuid, "episode_uuid": uuid, "task_id": "t",
            "workflow_output": {"reward": 0.5, "metadata": {"task_id": "t"}}}, auth)  # with the episode's key
        alive = front.alive() and api.health()
        rss = front.usage()[0]
        self.hostile.append(("end_episode of the episode used above, afterwards", str(status), "-",
                             "yes" if alive else "NO", "-" if rss is None else f"{rss / 1024:.1f}", status == 200))
        if status != 200:
            self.failures.append(f"4: the episode used for the hostile inputs did not end: {status} {data[:300]!r}")
        else:
            self.all_acks[uuid] = 0.5

    # -- 5. what one caller can take (issue 38)
    def attacks(self, front):
        """Issue 38's attacks on a ROLLING front: a crash through JSON inside strings, requests a stranger
        makes on someone else's episode, SSRF through coordinator_url, and what one caller can hold
        (calls, bodies, connections, engine time). Each refusal a 4xx naming the problem; the rows check
        the bounds."""
        log("5 issue 38's attacks")
        api = front.api()
        self.mem("before issue 38's attacks", front)

        def claim(client):
            status_, c = api.json("POST", "/claim_episode", {"client_uuid": client, "episode_type": "train",
                                                             "discard_episode_timeout": DISCARD_EPISODE_TIMEOUT})
            if status_ != 200 or not c.get("success"):
                raise RuntimeError(f"claim_episode for the attacks: {status_} {c}")
            return c["episode_uuid"], {"Authorization": f"Bearer {c['openai_api_key']}",
                                       "Content-Type": "application/json"}

        victim, victim_auth = claim("fault-victim")
        attacker, attacker_auth = claim("fault-attacker")
        jsonh = {"Content-Type": "application/json"}

        def post(path, body, headers):
            def go():
                if not isinstance(body, bytes):
                    data = json.dumps(body).encode()
                else:
                    data = body
                status_, _, answer = api.request("POST", path, data, headers, timeout=120)
                return status_, answer.decode("utf-8", "replace"), True
            return go

        deep = "[" * 70000 + "]" * 70000  # 140 KB of arguments nested 70,000 levels deep
        chat_deep = {"messages": [{"role": "user", "content": "hi"},
                                  {"role": "assistant", "content": None, "tool_calls": [
                                      {"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep}}]},
                                  {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}
        responses_deep = {"input": [{"role": "user", "content": "hi"},
                                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": deep},
                                    {"type": "function_call_output", "call_id": "c1", "output": "ok"}]}

        def end_body(uuid, client, reward, metadata=None):
            return {"client_uuid": client, "episode_uuid": uuid, "task_id": "t",
                    "workflow_output": {"reward": reward, "metadata": metadata or {"task_id": "t"}}}

        def prepare(url):
            body = end_body(attacker, "fault-attacker", 0.0)
            body["group"] = {"group_id": "g-attack", "coordinator_url": url, "coordinator_episode_uuid": "x" * 32,
                             "coordinator_episode_key": "k", "prepare_timeout": 60}
            return post("/prepare_end_episode", body, attacker_auth)

        cases = [
            ("chat: an assistant tool call's arguments nested 70,000 deep (140 KB)",
             post("/v1/chat/completions", chat_deep, attacker_auth), (400,),
             ["tool_calls[0].function.arguments", "nested deeper than 128"]),
            ("responses: a function_call's arguments nested 70,000 deep",
             post("/v1/responses", responses_deep, attacker_auth), (400,), ["input[1].arguments", "nested deeper"]),
            ("end_episode of another client's episode, without a key, reward 1e300",
             post("/end_episode", end_body(victim, "fault-victim", 1e300), jsonh), (401,), ["episode's key"]),
            ("end_episode of another client's episode with the attacker's own key",
             post("/end_episode", end_body(victim, "fault-victim", 1.0), attacker_auth), (401,), ["not episode"]),
            ("abort_episode of another client's episode with the attacker's own key",
             post("/abort_episode", {"client_uuid": "fault-victim", "episode_uuid": victim}, attacker_auth), (401,),
             ["not episode"]),
            ("prepare_end_episode: CR/LF in group.coordinator_url (request splitting)",
             prepare("http://127.0.0.1:1/x HTTP/1.1\r\nHost: a\r\n\r\nPOST /stop_engine"), (400,),
             ["coordinator_url"]),
            ("prepare_end_episode: a coordinator that is not one of the front's --peer",
             prepare("http://127.0.0.1:9"), (403,), ["--peer"]),
            ("claim_episode: discard_episode_timeout 1e12 (holding a slot forever)",
             post("/claim_episode", {"client_uuid": "fault-greedy", "discard_episode_timeout": 1e12}, jsonh), (400,),
             ["discard_episode_timeout", "--max-discard-episode-timeout"]),
            ("chat: n=65 (over the engine's 64)",
             post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 65},
                  attacker_auth), (400,), ["'n'"]),
            ("messages: stop_sequences[0] of 300 bytes",
             post("/v1/messages", {"model": "m", "max_tokens": 8, "stop_sequences": ["s" * 300],
                                   "messages": [{"role": "user", "content": "hi"}]},
                  {**attacker_auth, "anthropic-version": "2023-06-01"}), (400,), ["stop_sequences[0]"]),
            ("messages: a tool_result answering no tool_use",
             post("/v1/messages", {"model": "m", "max_tokens": 8, "messages": [
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}]},
                  {**attacker_auth, "anthropic-version": "2023-06-01"}), (400,), ["tool_use_id"]),
            ("end_episode with 8 MiB of metadata",
             post("/end_episode", end_body(attacker, "fault-attacker", 0.0, {"task_id": "t", "blob": "m" * (8 << 20)}),
                  attacker_auth), (413,), ["--max-episode-metadata-mb"]),
        ]
        self.run_hostile(front, cases)

        # The victim's episode was not harmed: its own end is a 200, and a repeat that differs a 409.
        status, _, data = api.request("POST", "/end_episode", end_body(victim, "fault-victim", 0.25), victim_auth)
        ok = status == 200
        status2, _, data2 = api.request("POST", "/end_episode", end_body(victim, "fault-victim", 1e300), victim_auth)
        self.row("5 attacks", "the victim's own end_episode, then a repeat with another reward",
                 f"{status}, {status2}", "200, 409", ok and status2 == 409)
        if ok:
            self.all_acks[victim] = 0.25
        else:
            self.failures.append(f"5: the victim's end_episode: {status} {data[:300]!r}")
        self.attack_bounds(front, attacker, attacker_auth)

    def attack_bounds(self, front, attacker, auth):
        """What one caller can hold: engine time after hanging up, memory of unauthenticated uploads,
        descriptors, a tarpit coordinator."""
        api = front.api()
        # Hang-ups: non-streamed calls that never end (the echo engine's HOLD), clients gone at once.
        body = json.dumps({"messages": [{"role": "user", "content": "HOLD\nforever"}]}).encode()
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {auth['Authorization']}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        for _ in range(8):
            with socket.create_connection(("127.0.0.1", front.port), timeout=10) as s:
                s.sendall(head + body)
                time.sleep(0.3)
        running = None
        for _ in range(100):
            status, _, data = api.request("GET", "/metrics", admin=True, timeout=30)
            m = re.search(r'ajet_engine_sequences\{state="running"\} ([0-9.e+]+)', data.decode())
            running = float(m.group(1)) if m else None
            if running == 0:
                break
            time.sleep(0.1)
        self.row("5 attacks", "engine sequences left running after 8 hung-up HOLD calls", str(running), "0",
                 running == 0)
        # Uploads without credentials: refused from their header, their bodies never held.
        count = 8 if self.args.short else 48
        rss0 = front.usage()[0] or 0
        peak = [rss0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], front.usage()[0] or 0)
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            answers = list(pool.map(lambda _: raw_upload(front.port, "/v1/chat/completions", 60 * 1000 * 1000),
                                    range(count)))
        done.set()
        sampler.join()
        grew = (peak[0] - rss0) / 1024
        self.row("5 attacks", f"{count} concurrent 60 MB uploads without a key: answers, largest RSS growth (MiB)",
                 f"{sorted(set(map(str, answers)))}, {grew:.1f}", "401, < 64", set(answers) == {401} and grew < 64)
        # A tarpit coordinator (accepts, never answers) named by 4 prepared episodes of a peer group.
        tarpit = f"http://127.0.0.1:{self.tarpit.port}"
        for i in range(4):
            status_, c = api.json("POST", "/claim_episode", {"client_uuid": f"fault-tarpit-{i}", "episode_type": "train",
                                                             "discard_episode_timeout": DISCARD_EPISODE_TIMEOUT})
            if status_ != 200 or not c.get("success"):
                raise RuntimeError(f"claim for the tarpit: {status_} {c}")
            prep = {"client_uuid": f"fault-tarpit-{i}", "episode_uuid": c["episode_uuid"], "task_id": "t",
                    "workflow_output": {"reward": 0.0, "metadata": {"task_id": "t"}},
                    "group": {"group_id": f"g-tarpit-{i}", "coordinator_url": tarpit,
                              "coordinator_episode_uuid": "y" * 32, "coordinator_episode_key": "k",
                              "prepare_timeout": 0.5}}
            status_, _, data = api.request("POST", "/prepare_end_episode", prep,
                                           {"Authorization": f"Bearer {c['openai_api_key']}"})
            if status_ != 200:
                raise RuntimeError(f"prepare_end_episode naming the tarpit: {status_} {data[:300]!r}")
        time.sleep(3)  # the janitor asks the tarpit (every 0.5 s), its questions hang there
        t0 = time.monotonic()
        statuses = [api.request("GET", f"/episodes/{attacker}", admin=True, timeout=60)[0],
                    api.request("POST", "/resolve_episode_group", {"group_id": "none", "episode_uuid": attacker},
                                auth, timeout=60)[0],
                    api.request("GET", "/get_current_batch_rollout_pool_information", timeout=60)[0]]
        took = time.monotonic() - t0
        _, logs = api.json("GET", "/get_verbose_logs")
        echoed = any("127.0.0.1:" + str(self.tarpit.port) in str(e.get("message")) and "unreachable" in
                     str(e.get("message")) for e in (logs or {}).get("entries", []))
        self.row("5 attacks", "work-pool routes answered while 4 prepared episodes ask a tarpit coordinator",
                 f"{statuses} in {took:.2f} s", "all 200", statuses == [200, 200, 200])
        self.row("5 attacks", "the public verbose log says whether the coordinator answered", "yes" if echoed else "no",
                 "no", not echoed)
        # Descriptors: a front at its connection cap still answers /health on a new connection.
        socks = []
        try:
            for _ in range(self.args.conn_flood):
                try:
                    socks.append(socket.create_connection(("127.0.0.1", front.port), timeout=5))
                except OSError:
                    break
            time.sleep(0.5)
            healthy = front.api().health()
        finally:
            for s in socks:
                s.close()
        self.row("5 attacks", f"/health with {len(socks)} idle connections open (cap {self.args.max_connections})",
                 "200" if healthy else "no answer", "200", healthy)
        self.check_front(front, "5 attacks")

    def big_prompts(self, front):
        """Large prompts (parsed, rendered and tokenized by the front) sent at once while /health is probed
        every 50 ms: a handler that blocked an HTTP I/O thread showed as /health stalling for 2-4.7 s
        under eight 15 MB prompts (issue 15, item 8)."""
        count, mib = (4, 4) if self.args.short else (8, 15)
        scenario = f"4 {count} concurrent {mib} MiB prompts"
        log(scenario)
        api = front.api()
        status, claim = api.json("POST", "/claim_episode", {"client_uuid": "fault-big", "episode_type": "train",
                                                            "discard_episode_timeout": DISCARD_EPISODE_TIMEOUT})
        if status != 200 or not claim.get("success"):
            raise RuntimeError(f"claim_episode for the big prompts: {status} {claim}")
        auth = {"Authorization": f"Bearer {claim['openai_api_key']}", "Content-Type": "application/json"}
        # Random 8-letter words, so the tokenizer's caches do not make the work trivial.
        digits = os.urandom((mib << 20) * 4 // 9).hex()
        words = " ".join(digits[i:i + 8] for i in range(0, len(digits), 8))
        body = ('{"messages": [{"role": "user", "content": "' + words + '"}]}').encode()
        statuses = []

        def send():
            try:
                statuses.append(front.api().request("POST", "/v1/chat/completions", body, auth, timeout=300)[0])
            except (OSError, http.client.HTTPException) as e:
                statuses.append(f"error {e}")

        threads = [threading.Thread(target=send) for _ in range(count)]
        t0 = time.time()
        for t in threads:
            t.start()
        worst = 0.0
        probes = 0
        while any(t.is_alive() for t in threads):
            start = time.time()
            ok = api.health()
            worst = max(worst, time.time() - start)
            probes += 1
            if not ok:
                self.row(scenario, "/health while they are tokenized", "no answer", "200", False)
                break
            time.sleep(0.05)
        for t in threads:
            t.join()
        took = time.time() - t0
        api.request("POST", "/abort_episode", {"client_uuid": "fault-big", "episode_uuid": claim["episode_uuid"]}, auth)
        self.row(scenario, "longest /health answer while they were handled (s)",
                 f"{worst:.3f} ({probes} probes over {took:.1f} s; prompts answered {sorted(map(str, statuses))})",
                 "<= 0.5", worst <= 0.5, timing=True)
        self.check_front(front, scenario)

    def hostile_offline(self, tokenizer):
        """The admin inputs only an OFFLINE front takes, on a front of their own (no engine started)."""
        log("4 hostile inputs (OFFLINE front)")
        front = Front("offline front", os.path.join(self.tmp, "offline-exp"), os.path.join(self.tmp, "offline.log"),
                      self.token)
        front.start()
        try:
            api = front.api()
            bomb = 'unused:\n  a0: &a0 "lol"\n'  # 9 levels of 9 aliases: "lol" ~387 million times, in ~500 bytes
            for i in range(1, 10):
                bomb += f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n"
            base = bomb + config_yaml(tokenizer, self.args)
            # Under a key the front reads (a list of strings): refused when checked, never expanded.
            read_key = base + "  context_tracker:\n    trainable_agents: *a9\n"
            # Under a free-form map (task params): refused by the expansion limit, or, where the front
            # does not read ajet.task_reader at all (the clients' section: they bring their own tasks),
            # skipped without a warning and never expanded.
            free_form = base + "  task_reader:\n    builtin:\n      params: {bomb: *a9}\n"
            zip_bytes, member = zip_bomb()
            admin = {"Authorization": f"Bearer {self.token}"}
            self.mem("OFFLINE front (a front of its own) before its hostile inputs", front)

            def post(path, body, headers):
                def go():
                    status_, _, data = api.request("POST", path, body, headers, timeout=120)
                    return status_, data.decode("utf-8", "replace"), True
                return go

            def sync(yaml_text):
                return post("/sync_train_config", json.dumps({"yaml_as_string": yaml_text}).encode(),
                            {**admin, "Content-Type": "application/json"})

            def sync_free_form():
                rss0 = front.usage()[0] or 0
                status_, body_, _ = sync(free_form)()
                grew = ((front.usage()[0] or 0) - rss0) / 1024
                if status_ == 200:
                    # A 200 is no refusal: it passes only as "skipped and never expanded".
                    ignored = grew < 16
                    return status_, body_, ignored, f"200: skipped, RSS +{grew:.1f} MiB"
                return status_, body_, True

            cases = [
                ("sync_train_config: YAML alias bomb (9 levels x 9 aliases) as ajet.context_tracker.trainable_agents",
                 sync(read_key), (400, 413), ["ajet.context_tracker.trainable_agents", "must be"]),
                ("sync_train_config: the same bomb as ajet.task_reader.builtin.params (free-form; 200 only when the "
                 "front skips ajet.task_reader, the clients' section, RSS + < 16 MiB)",
                 sync_free_form, (400, 413, 200),
                 lambda st, body: st == 200 or ("ajet.task_reader" in body and "expands to more than" in body)),
                (f"sync_train_code: zip member declaring 1,000 bytes, inflating to 60 MiB ({len(zip_bytes)} bytes)",
                 post("/sync_train_code", zip_bytes, {**admin, "Content-Type": "application/zip"}),
                 (400, 413), [member, "unpacks to more than"]),
            ]
            self.run_hostile(front, cases)
            status, _ = api.engine_status()
            if status != OFFLINE:
                self.failures.append(f"4: the OFFLINE front is {status} after the hostile inputs")
            self.mem("OFFLINE front after its hostile inputs", front)
        finally:
            front.stop()

    def run_hostile(self, front, cases):
        for name, go, statuses, needles in cases:
            annotation = ""
            try:
                status, body, extra_ok, *more = go()
                annotation = more[0] if more else ""
            except (OSError, http.client.HTTPException) as e:
                status, body, extra_ok = None, f"no answer: {e}", False
            names = needles(status, body) if callable(needles) else all(n in body for n in needles)
            alive = front.alive() and front.api().health()
            ok = status in statuses and names and alive and extra_ok
            shown = "no answer" if status is None else str(status)
            if annotation:
                shown = annotation
            elif not extra_ok and status is not None:
                shown += f" ({body.splitlines()[-1] if body else ''})"
            rss = front.usage()[0]
            self.hostile.append((name, shown, "yes" if names else "no", "yes" if alive else "NO",
                                 "-" if rss is None else f"{rss / 1024:.1f}", ok))
            if not ok:
                self.failures.append(f"4 {name}: status {shown}, names the problem: {names}, front alive: {alive}; "
                                     f"answer: {body[:300]!r}")
            if not front.alive():
                raise RuntimeError(f"the front died on hostile input {name!r}; its log:\n{front.output()[-4000:]}")

    # -- the whole suite
    def run(self):
        a = self.args
        tokenizer = self.fixture()
        yaml = config_yaml(tokenizer, a)
        front = Front("front", os.path.join(self.tmp, "exp"), os.path.join(self.tmp, "front.log"), self.token,
                      ["--peer", f"http://127.0.0.1:{self.tarpit.port}", "--max-connections", str(a.max_connections)])
        front.start()
        self.boot(front, yaml)
        self.mem("suite start (ENGINE.ROLLING)", front)
        self.first_pid = front.proc.pid
        try:
            rate_a, _ = self.churn(front, "A", kill=False)
            self.restart_engine(front)
            rate_b, _ = self.churn(front, "B", kill=True)
            ratio = rate_b / rate_a if rate_a else 0.0
            self.row("1 churn", "B/A acknowledged episodes/s", f"{ratio:.2f}", ">= 0.70", ratio >= 0.70, timing=True)
            self.engine_kill(front)
            self.restart_engine(front)
            self.hostile_rolling(front)
            self.big_prompts(front)
            self.attacks(front)
            self.hostile_offline(tokenizer)
            self.check_front(front, "4 hostile inputs")
            self.mem(f"before the front SIGKILL (pid {front.proc.pid}, since the start)", front)
            self.front_kill(front)
            log(f"verifying all {len(self.all_acks)} acknowledged episodes of the suite")
            lost, wrong, examples = verify_stored(front.api(), self.all_acks)
            self.row("all", "acknowledged in the whole suite / lost (checked at the end)",
                     f"{len(self.all_acks)} / {lost}", "0 lost", lost == 0 and wrong == 0)
            if examples:
                self.notes.append(f"all: examples of lost: {examples}")
            self.mem(f"suite end (restarted front, pid {front.proc.pid})", front)
            self.check_front(front, "suite end")
            self.row("all", "front died other than by our SIGKILL", "never", "never", True)
            some = next(iter(self.all_acks), "0" * 32)
            status, _, _ = front.api().request("GET", f"/episodes/{some}")
            self.row("all", "GET /episodes/<uuid> without the admin token", str(status), "401", status == 401)
        except Exception:
            self.save_diagnosis(front)
            raise
        if self.failures:
            self.save_diagnosis(front)
        # Its janitor still asks the tarpit about the prepared episodes the restart restored: SIGTERM must
        # abandon those questions, not wait for them.
        t0 = time.monotonic()
        front.stop()
        took = time.monotonic() - t0
        self.row("5 attacks", "SIGTERM stops the front while its janitor asks a tarpit coordinator (s)",
                 f"{took:.1f}", "< 20", took < 20)

    def save_diagnosis(self, front):
        try:
            status, data = front.api().json("GET", "/get_verbose_logs", timeout=10)
            entries = data.get("entries", []) if isinstance(data, dict) else []
            path = os.path.join(self.tmp, "verbose_logs.txt")
            with open(path, "w") as f:
                for e in entries:
                    f.write(f"{e.get('timestamp')} [{e.get('tag')}] {e.get('message')}\n")
            log(f"front log: {front.log_path}; verbose logs: {path} (kept with --keep)")
        except Exception as e:  # the front may be gone
            log(f"no verbose logs: {e}")


def raw_upload(port, path, size):
    """Sends `size` body bytes without credentials; the answer's status, or 'closed' without one."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=120)
    except OSError as e:
        return f"connect failed ({e.errno})"
    answer = bytearray()

    def read():
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer.extend(chunk)
        except OSError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        s.sendall(head)
        block = b"[" + b" " * ((1 << 20) - 1)
        left = size
        while left > 0 and not answer:
            n = min(left, len(block))
            s.sendall(block[:n])
            left -= n
    except OSError:
        pass
    reader.join(30)
    s.close()
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", bytes(answer))
    return int(m.group(1)) if m else "closed"


class Tarpit:
    """A listening socket that accepts every connection, reads what comes, and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)


def raw_transfer_encoding(port, coding):
    """Sends a request with `Transfer-Encoding: <coding>` followed by a pipelined GET /health over one
    socket. Returns (status, body, ok): ok when exactly one answer came and the server closed."""
    body = b'{"client_uuid": "x"}'
    request = (f"POST /claim_episode HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Transfer-Encoding: {coding}\r\n\r\n").encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    request += b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    data, closed = b"", False
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        s.settimeout(5)
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    closed = True
                    break
                data += chunk
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed = True
    answers = len(re.findall(rb"(?:^|\r\n)HTTP/1\.[01] \d{3} ", data))
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", data)
    status = int(m.group(1)) if m else None
    text = data.decode("utf-8", "replace")
    ok = answers == 1 and closed
    return status, text + f"\n[{answers} answer(s), connection {'closed' if closed else 'left open'}]", ok


def raw_oversized(port, size):
    """Declares and sends a `size`-byte body (a sender thread) and reads the answer meanwhile."""
    head = (f"POST /claim_episode HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)

    def send():
        try:
            s.sendall(head)
            block = b" " * (1 << 20)
            left = size
            while left > 0:
                n = min(left, len(block))
                s.sendall(block[:n])
                left -= n
        except OSError:
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    data = b""
    try:
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + _content_length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    finally:
        s.close()
    sender.join(10)
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", data)
    return (int(m.group(1)) if m else None), data.decode("utf-8", "replace"), True


def _content_length(data):
    m = re.search(rb"\r\ncontent-length: *(\d+)", data, re.I)
    return int(m.group(1)) if m else 0


def zip_bomb():
    """A zip (CMakeLists.txt + one member of 60 MiB of zeros, deflated to ~60 KiB) whose member declares
    1,000 bytes in both its local header and its central directory entry."""
    member = "tree/bomb.bin"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("tree/CMakeLists.txt", "cmake_minimum_required(VERSION 3.20)\nproject(bomb)\n")
        z.writestr(member, b"\0" * (60 << 20))
    data = bytearray(buf.getvalue())
    info = next(i for i in zipfile.ZipFile(io.BytesIO(bytes(data))).infolist() if i.filename == member)
    local = info.header_offset
    assert data[local:local + 4] == b"PK\x03\x04"
    struct.pack_into("<I", data, local + 22, 1000)  # uncompressed size, local header
    at = data.find(b"PK\x01\x02")
    patched = 0
    while at != -1:
        name_len = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46:at + 46 + name_len] == member.encode():
            struct.pack_into("<I", data, at + 24, 1000)  # uncompressed size, central directory
            patched += 1
        at = data.find(b"PK\x01\x02", at + 46)
    assert patched == 1
    return bytes(data), member


# ----------------------------------------------------------------------------- report

def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
    except OSError:
        load = "?"
    return f"{os.cpu_count()} cores ({model}), load average {load} at the start"


def report(suite, args, seconds):
    mark = {True: "yes", False: "**NO**", None: ""}
    lines = [f"## Front fault suite (bench/swarm/fault_suite.py), {datetime.date.today().isoformat()}", "",
             f"`bench/swarm/fault_suite.py{' --short' if args.short else ''}` (K={args.clients} clients, "
             f"D={args.seconds:g} s per churn run): `ajet-swarm` with `ajet-echo-engine` on loopback, "
             f"machine: {args.machine}. Client processes use the Python client (claim train -> 1-2 chat calls -> "
             f"end_episode, discard_episode_timeout {DISCARD_EPISODE_TIMEOUT:g} s, task ids cycling over "
             f"{args.tasks}); config: backbone debug, max_env_worker {args.pool}, train_batch_size "
             f"{args.batch_size}, num_repeat {args.num_repeat}; janitor every 0.5 s. Run B SIGKILLs "
             f"{args.kill_share:.0%} of the clients over the run, one at a time at even intervals (mid-episode, "
             "each replaced); "
             "stop_engine + start_engine between scenarios drops the orphaned claims. Suite took "
             f"{seconds:.0f} s.", "",
             "| scenario | measure | value | goal | met |", "|---|---|---|---|---|"]
    lines += [f"| {s} | {m} | {v} | {g} | {mark[ok]} |" for s, m, v, g, ok in suite.rows]
    lines += ["", "| hostile input | status | names the problem | front alive (/health) | front RSS after (MiB) | ok |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {n} | {st} | {nm} | {al} | {rss} | {mark[bool(ok)]} |" for n, st, nm, al, rss, ok in suite.hostile]
    lines += ["", "| front | RSS MiB | open fds |", "|---|---|---|"]
    lines += [f"| {p} | {'-' if r is None else f'{r / 1024:.1f}'} | {'-' if f is None else f} |"
              for p, r, f in suite.memory]
    if suite.notes:
        lines += [""] + [f"* {n}" for n in suite.notes]
    lines += [""]
    if suite.failures:
        lines += ["Goals NOT met:", ""] + [f"* {f}" for f in suite.failures]
    else:
        lines += ["Goals (0 acknowledged lost, the front never dies, every hostile input a 4xx naming the problem, "
                  "B/A >= 0.70, no claim gap > 5 s, /health within 0.5 s under large prompts, issue 38's bounds): "
                  "all met."]
    return "\n".join(lines) + "\n"


def main():
    global _KEEP_TMP
    ap = argparse.ArgumentParser(description="The front's fault suite: ajet-swarm with ajet-echo-engine under client "
                                             "churn, SIGKILLs (clients, front, engine) and hostile inputs; goals checked.")
    ap.add_argument("--clients", type=int, default=40, help="client processes K (default 40)")
    ap.add_argument("--seconds", type=float, default=30.0, help="seconds per churn run D (default 30)")
    ap.add_argument("--short", action="store_true",
                    help="the CI version: 8 clients, 8 s runs, one front and one engine kill; no docs/benchmarks.md")
    ap.add_argument("--kill-share", type=float, default=0.2,
                    help="share of the K clients SIGKILLed over run B, one at a time, mid-episode (default 0.2)")
    ap.add_argument("--pool", type=int, default=64, help="ajet.rollout.max_env_worker (default 64, the project's)")
    ap.add_argument("--batch-size", type=int, default=8, help="ajet.data.train_batch_size (tasks per batch)")
    ap.add_argument("--num-repeat", type=int, default=4, help="ajet.rollout.num_repeat")
    ap.add_argument("--tasks", type=int, default=8, help="task ids each client cycles over")
    ap.add_argument("--max-connections", type=int, default=256, help="the suite front's --max-connections")
    ap.add_argument("--conn-flood", type=int, default=300,
                    help="idle connections opened against the front's connection cap (default 300)")
    ap.add_argument("--no-append", action="store_true", help="do not append to docs/benchmarks.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs) for a diagnosis")
    args = ap.parse_args()
    if args.short:
        if "--clients" not in sys.argv:
            args.clients = 8
        if "--seconds" not in sys.argv:
            args.seconds = 8.0
    args.warm = min(10.0, max(3.0, args.seconds / 3))  # load before a front/engine kill
    args.after = args.warm  # load after ROLLING again
    _KEEP_TMP = args.keep
    for name in ("ajet", "ajet-swarm", "ajet-echo-engine"):
        if not os.access(os.path.join(BIN, name), os.X_OK):
            raise SystemExit(f"fault_suite: {os.path.join(BIN, name)} is missing (build it, or set AJET_BUILD_DIR)")

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    atexit.register(_cleanup)
    tmp = tempfile.mkdtemp(prefix="ajet-fault-suite-")
    _TMPDIRS.append(tmp)
    t0 = time.monotonic()
    args.machine = machine()
    suite = Suite(args, tmp)
    crashed = None
    try:
        suite.run()
    except Exception as e:  # report what was measured, then fail
        crashed = e
        suite.failures.append(f"the suite stopped: {type(e).__name__}: {e}")
    finally:
        for fleet in list(_FLEETS):
            fleet.kill_all()
    text = report(suite, args, time.monotonic() - t0)
    print(text)
    if not args.short and not args.no_append:
        with open(os.path.join(REPO, "docs", "benchmarks.md"), "a") as f:
            f.write("\n" + text)
        log("appended to docs/benchmarks.md")
    if crashed is not None:
        import traceback
        traceback.print_exception(crashed)
    return 1 if suite.failures else 0


if __name__ == "__main__":
    sys.exit(main())
