#!/usr/bin/env python3
"""What one caller can take from the front: memory, disk, engine time and connections, under the loads
of issue 38, measured on the real `ajet-swarm` (with the `ajet-echo-engine` test double) on loopback.

Each load runs on a fresh front. With --baseline DIR (a directory holding an older build's
`ajet-swarm` and `ajet-echo-engine`), every load also runs on that front, so the table compares the two
builds on the same machine in the same run (the ratio column: this build / baseline).

  1. one chat call with n=16, logprobs, top_logprobs 20 and max_tokens 1,500 (echoing a long message:
     each choice is cut at 1,500 tokens; n x max_tokens x 21 stays under the default
     --max-request-token-entries), and the same call with n=1: front RSS and store growth, and the
     n=16 / n=1 ratio of the store's growth;
  2. one call with n=64 and max_tokens 4,096 (the same message): the answer (or the refusal) and the
     largest RSS growth during the call;
  3. one episode key sending 1 MiB chat bodies back to back for --seconds: calls accepted, RSS and store
     growth, and RSS after end_episode; the bound is --max-episode-mb where the front has it;
  4. end_episode with 8 MiB of metadata: status and RSS growth;
  5. 48 concurrent uploads of 60 MB bodies without credentials (/v1/chat/completions): the largest RSS
     growth seen while they are sent (sampled every 20 ms) and after;
  6. 8 non-streamed chat calls whose generation never ends (the echo engine's HOLD) from clients that hang
     up after 0.5 s: sequences still running in the engine 5 s later (GET /metrics), and whether a
     small chat is answered meanwhile;
  7. a front started with 256 file descriptors and 300 idle keep-alive connections opened to it: whether
     /health answers on a new connection;
  8. a loop of 6 quick front restarts (--resume, every ~3 s), each cycle claiming 8 episodes with
     discard_episode_timeout 5 s from a client that then disappears: registered (claimable) episodes after
     the last cycle, out of the pool of 16.

On a build from before these bounds, load 2 takes the baseline front past 20 GB of memory until the
kernel's OOM killer ends it (as issue 38 reported): run --baseline on a machine with nothing else to
lose, or leave load 2 out (--only 1 3 4 5 6 7 8).

Prints a markdown table and (without --no-append) appends it, dated, to docs/benchmarks.md. The figures
are what one run gives on this machine: RSS depends on the allocator and the machine, so compare the
two columns, not runs of different days.

    bench/swarm/front_limits_bench.py --baseline /tmp/ajet-before/bin     # A vs B in one run
    bench/swarm/front_limits_bench.py --no-append                          # this build only
"""
import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import re
import resource
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fault_suite as fs  # noqa: E402  (Front, Http, usage, machine: the fault suite's process handling)

POOL = 16
LONG_WORDS = 900  # words of the echoed message in loads 1-2 (the echo engine answers with them)


def log(msg):
    print(f"[front_limits {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def config_yaml(tokenizer):
    """The echo engine's config with room for long answers (the loads need max_tokens in the thousands)."""
    return ("ajet:\n"
            "  backbone: debug\n"
            "  model:\n"
            f"    path: {tokenizer}\n"
            "  data:\n"
            "    max_prompt_length: 65536\n"
            "    max_response_length: 8192\n"
            "    train_batch_size: 64\n"
            "  rollout:\n"
            f"    max_env_worker: {POOL}\n"
            "    max_model_len: 1048576\n"
            "    max_response_length_in_one_turn: 8192\n"
            "    num_repeat: 4\n"
            "    temperature: 1.0\n"
            "  engine:\n"
            "    threads: 1\n"
            "    kv_cache_memory_mb: 16\n")


class Build:
    """One build's binaries: the front, the echo engine, and the flags it understands."""

    def __init__(self, name, bin_dir):
        self.name, self.bin = name, bin_dir
        help_text = subprocess.run([os.path.join(bin_dir, "ajet-swarm"), "start", "--help"], capture_output=True,
                                   text=True).stdout
        self.flags = set(re.findall(r"--[a-z][a-z0-9-]+", help_text))

    def front(self, tmp, label, token, extra=(), nofile=None):
        front = fs.Front(f"{self.name}: {label}", os.path.join(tmp, label), os.path.join(tmp, label + ".log"), token)
        front.bin = self.bin
        front.extra_argv = [a for a in extra]
        front.nofile = nofile
        return front


def start_front(front, resume=False, port=0):
    """fault_suite.Front.start with extra flags and an optional descriptor limit for the front."""
    argv = [os.path.join(front.bin, "ajet-swarm"), "start", "--port", str(port), "--exp-dir", front.exp_dir,
            "--engine", os.path.join(front.bin, "ajet-echo-engine"), "--janitor-interval", "0.5"] + front.extra_argv
    if resume:
        argv.append("--resume")
    env = dict(os.environ, AJET_ADMIN_TOKEN=front.token)

    def limit():
        if front.nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (front.nofile, front.nofile))

    with front._cv:
        front.lines = []
    logf = open(front.log_path, "a")
    front.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True, env=env, preexec_fn=limit)
    threading.Thread(target=front._drain, args=(front.proc, logf), daemon=True).start()
    ready = front._wait_line("ajet-swarm ready:", time.monotonic() + 60)
    if not ready:
        raise RuntimeError(f"{front.name}: ajet-swarm did not become ready:\n{front.output()[-3000:]}")
    front.port = int(re.search(r"\(port (\d+)", ready).group(1))
    return front


def boot(front, yaml):
    api = front.api()
    status, body = api.json("POST", "/sync_train_config", {"yaml_as_string": yaml}, admin=True)
    if status != 200:
        raise RuntimeError(f"sync_train_config: HTTP {status}: {body}")
    status, body = api.json("POST", "/start_engine", {}, admin=True, timeout=120)
    if status != 200 or fs.wait_status(api, fs.ROLLING, 120) is None:
        raise RuntimeError(f"start_engine: HTTP {status}: {body}; {api.engine_status()}")
    front.note_engine()


def claim(api, client="bench", timeout=240.0):
    status, data = api.json("POST", "/claim_episode", {"client_uuid": client, "episode_type": "eval",
                                                       "discard_episode_timeout": timeout})
    if status != 200 or not data.get("success"):
        raise RuntimeError(f"claim_episode: {status} {data}")
    return data["episode_uuid"], data["openai_api_key"]


def end_episode(api, client, uuid, key, reward=0.0, metadata=None):
    body = {"client_uuid": client, "episode_uuid": uuid, "task_id": "t",
            "workflow_output": {"reward": reward, "metadata": metadata or {"task_id": "t"}}}
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    data = json.dumps(body).encode()
    status, _, answer = api.request("POST", "/end_episode", data, headers, timeout=120)
    return status, answer


def rss_mib(front):
    rss = front.usage()[0]
    return None if rss is None else rss / 1024


def store_mib(front):
    total = 0
    for root, _, files in os.walk(front.exp_dir):
        for f in files:
            if ".sqlite" in f:
                try:
                    total += os.path.getsize(os.path.join(root, f))
                except OSError:
                    pass
    return total / (1 << 20)


class PeakRss:
    """The largest VmRSS of `front` (MiB) seen every 20 ms from construction to stop()."""

    def __init__(self, front):
        self.front = front
        self.peak = rss_mib(front) or 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            r = rss_mib(self.front)
            if r is not None:
                self.peak = max(self.peak, r)
            time.sleep(0.02)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.peak


def chat(api, key, body, timeout=300):
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    status, _, data = api.request("POST", "/v1/chat/completions", json.dumps(body).encode(), headers, timeout=timeout)
    return status, data


def long_message():
    words = [secrets.token_hex(3) for _ in range(LONG_WORDS)]
    return " ".join(words)


def settle(api):
    """Waits until queued store writes are visible (the store flushes before GET /episodes answers)."""
    api.request("GET", "/episodes?limit=1", admin=True, timeout=60)
    time.sleep(0.5)


class Bench:
    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.token = secrets.token_hex(16)
        self.rows = []  # (load, measure, {build name: value text}, numbers {build: float or None})
        self.tokenizer = None

    def fixture(self, build):
        tok = os.path.join(self.tmp, "tokenizer")
        if not os.path.isdir(tok):
            subprocess.run([os.path.join(build.bin, "ajet"), "tokenizer", "train", "--corpus",
                            os.path.join(fs.REPO, "tests", "text", "data", "tokenizer_corpus.jsonl"), "--vocab-size",
                            "400", "--out", tok], check=True, stdout=subprocess.DEVNULL)
        self.tokenizer = tok

    def record(self, load, measure, build, text, number=None):
        for row in self.rows:
            if row[0] == load and row[1] == measure:
                row[2][build.name] = text
                row[3][build.name] = number
                return
        self.rows.append((load, measure, {build.name: text}, {build.name: number}))

    def fresh(self, build, label, extra=(), nofile=None):
        front = build.front(self.tmp, f"{build.name}-{label}", self.token, extra, nofile)
        start_front(front)
        boot(front, config_yaml(self.tokenizer))
        return front

    # -- 1, 2: n choices with logprobs
    def many_choices(self, build):
        load = "1 one chat call, n=16, logprobs, top_logprobs 20, max_tokens 1,500"
        front = self.fresh(build, "choices")
        try:
            api = front.api()
            message = long_message()
            only = set(self.args.only or [])
            growth = {}
            for n in ((1, 16) if not only or "1" in only else ()):
                uuid, key = claim(api)
                settle(api)
                rss0, store0 = rss_mib(front), store_mib(front)
                status, data = chat(api, key, {"messages": [{"role": "user", "content": message}], "n": n,
                                               "logprobs": True, "top_logprobs": 20, "max_tokens": 1500})
                settle(api)
                rss1, store1 = rss_mib(front), store_mib(front)
                growth[n] = (status, rss1 - rss0, store1 - store0)
                end_episode(api, "bench", uuid, key)
            if growth:
                self.record_choices(load, build, growth)
            if only and "2" not in only:
                return
            load = "2 one chat call, n=64, logprobs, top_logprobs 20, max_tokens 4,096"
            uuid, key = claim(api)
            rss0 = rss_mib(front)
            peak = PeakRss(front)
            try:
                status, data = chat(api, key, {"messages": [{"role": "user", "content": message}], "n": 64,
                                               "logprobs": True, "top_logprobs": 20, "max_tokens": 4096})
            except (OSError, http.client.HTTPException) as e:
                status, data = f"no answer ({type(e).__name__}; front exit status {front.proc.poll()})", b""
            top = peak.stop()
            text = data.decode("utf-8", "replace")
            why = ""
            if status != 200 and text:
                try:
                    why = ": " + json.loads(text)["error"]["message"][:90]
                except (ValueError, KeyError, TypeError):
                    why = ""
            self.record(load, "status", build, f"{status}{why}")
            self.record(load, "largest front RSS growth during the call (MiB)", build, f"{top - rss0:.1f}", top - rss0)
        finally:
            front.stop()

    def record_choices(self, load, build, growth):
        st, rss16, store16 = growth[16]
        self.record(load, "status (n=16)", build, str(st))
        self.record(load, "front RSS growth, n=16 (MiB)", build, f"{rss16:.1f}", rss16)
        self.record(load, "store growth, n=16 (MiB)", build, f"{store16:.1f}", store16)
        ratio = store16 / growth[1][2] if growth[1][2] > 0 else None
        self.record(load, "store growth n=16 / n=1", build, "-" if ratio is None else f"{ratio:.1f}", ratio)

    # -- 3: one key, many 1 MiB calls
    def one_key(self, build):
        load = f"3 one episode key, 1 MiB chat bodies back to back for {self.args.seconds:g} s"
        front = self.fresh(build, "onekey")
        try:
            api = front.api()
            uuid, key = claim(api, timeout=3600)
            settle(api)
            rss0, store0 = rss_mib(front), store_mib(front)
            filler = "x" * (1 << 20)
            body = {"messages": [{"role": "system", "content": filler}, {"role": "user", "content": "hi"}],
                    "max_tokens": 4}
            accepted, refused, last_refusal = 0, 0, ""
            t_end = time.monotonic() + self.args.seconds
            while time.monotonic() < t_end:
                status, data = chat(api, key, body)
                if status == 200:
                    accepted += 1
                else:
                    refused += 1
                    last_refusal = f"{status}: {data.decode('utf-8', 'replace')[:120]}"
                    if refused >= 3:
                        break
            settle(api)
            rss1, store1 = rss_mib(front), store_mib(front)
            status, _ = end_episode(api, "bench", uuid, key)
            settle(api)
            time.sleep(2)
            rss2 = rss_mib(front)
            self.record(load, "calls accepted (refused)", build, f"{accepted} ({refused})", accepted)
            if last_refusal:
                self.record(load, "the refusal", build, json_message(last_refusal))
            self.record(load, "front RSS growth (MiB)", build, f"{rss1 - rss0:.1f}", rss1 - rss0)
            self.record(load, "store growth (MiB)", build, f"{store1 - store0:.1f}", store1 - store0)
            self.record(load, f"front RSS growth after end_episode ({status}) (MiB)", build, f"{rss2 - rss0:.1f}",
                        rss2 - rss0)
        finally:
            front.stop()

    # -- 4: 8 MiB of metadata
    def metadata(self, build):
        load = "4 end_episode with 8 MiB of workflow_output.metadata"
        front = self.fresh(build, "metadata")
        try:
            api = front.api()
            uuid, key = claim(api)
            rss0 = rss_mib(front)
            status, answer = end_episode(api, "bench", uuid, key,
                                         metadata={"task_id": "t", "blob": ["y" * 1024] * (8 << 10)})
            time.sleep(1)
            rss1 = rss_mib(front)
            self.record(load, "status", build, f"{status}{': ' + json_message(answer) if status != 200 else ''}")
            self.record(load, "front RSS growth (MiB)", build, f"{rss1 - rss0:.1f}", rss1 - rss0)
        finally:
            front.stop()

    # -- 5: uploads without credentials
    def uploads(self, build):
        count, size = self.args.uploads, self.args.upload_mb * 1000 * 1000
        load = f"5 {count} concurrent {self.args.upload_mb} MB uploads without credentials (/v1/chat/completions)"
        front = self.fresh(build, "uploads")
        try:
            rss0 = rss_mib(front)
            peak = PeakRss(front)
            with concurrent.futures.ThreadPoolExecutor(count) as pool:
                statuses = list(pool.map(lambda _: fs.raw_upload(front.port, "/v1/chat/completions", size),
                                         range(count)))
            top = peak.stop()
            time.sleep(1)
            rss1 = rss_mib(front)
            seen = ", ".join(f"{s} x{statuses.count(s)}" for s in sorted(set(statuses), key=str))
            self.record(load, "answers", build, seen)
            self.record(load, "largest front RSS growth while sent (MiB)", build, f"{top - rss0:.1f}", top - rss0)
            self.record(load, "front RSS growth afterwards (MiB)", build, f"{rss1 - rss0:.1f}", rss1 - rss0)
        finally:
            front.stop()

    # -- 6: hang-ups
    def hangups(self, build):
        load = "6 8 non-streamed chat calls that never end (HOLD), clients gone after 0.5 s"
        front = self.fresh(build, "hangups")
        try:
            api = front.api()
            uuid, key = claim(api)
            body = json.dumps({"messages": [{"role": "user", "content": "HOLD\nhello there"}], "n": 4}).encode()

            def hang_up():
                s = socket.create_connection(("127.0.0.1", front.port), timeout=10)
                s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                          f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
                time.sleep(0.5)
                s.close()

            threads = [threading.Thread(target=hang_up) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            time.sleep(5)
            running = engine_running(api)
            status, _ = chat(api, key, {"messages": [{"role": "user", "content": "small"}], "max_tokens": 8}, timeout=60)
            self.record(load, "sequences still running in the engine 5 s later", build,
                        "-" if running is None else f"{running:g}", running)
            self.record(load, "an 8-token chat afterwards", build, str(status))
        finally:
            front.stop()

    # -- 7: connections past the descriptor limit
    def connections(self, build):
        load = "7 front with 256 descriptors, 300 idle keep-alive connections opened"
        front = self.fresh(build, "conns", nofile=256)
        socks = []
        try:
            for _ in range(300):
                try:
                    s = socket.create_connection(("127.0.0.1", front.port), timeout=5)
                    socks.append(s)
                except OSError:
                    break
            time.sleep(1)
            ok = 0
            for _ in range(5):
                try:
                    status, _, _ = fs.Http(front.port).request("GET", "/health", timeout=5)
                    ok += status == 200
                except (OSError, http.client.HTTPException):
                    pass
            self.record(load, "/health on a new connection (of 5 tries)", build, f"{ok} answered", ok)
        finally:
            for s in socks:
                s.close()
            front.stop()

    # -- 8: restarts
    def restarts(self, build):
        load = f"8 6 quick restarts (--resume), 8 claims a cycle from clients that vanish (pool {POOL})"
        front = self.fresh(build, "restarts")
        try:
            for cycle in range(6):
                api = front.api()
                for i in range(8):
                    api.json("POST", "/claim_episode", {"client_uuid": f"gone-{cycle}-{i}", "episode_type": "train",
                                                        "discard_episode_timeout": 5})
                settle(api)
                time.sleep(3)
                front.proc.kill()
                front.proc.wait()
                start_front(front, resume=True, port=front.port)
                fs.wait_status(front.api(), fs.ROLLING, 60)
            time.sleep(2)
            status, info = front.api().json("GET", "/get_current_batch_rollout_pool_information", admin=True)
            registered = info.get("registered_episodes") if isinstance(info, dict) else None
            self.record(load, "claimable episodes after the last cycle", build,
                        "-" if registered is None else f"{registered} of {POOL}", registered)
        finally:
            front.stop()

    def run(self, builds):
        self.fixture(builds[0])
        loads = [("1", self.many_choices), ("3", self.one_key), ("4", self.metadata), ("5", self.uploads),
                 ("6", self.hangups), ("7", self.connections), ("8", self.restarts)]
        only = set(self.args.only or [])
        for i, load in loads:
            if only and i not in only and not (i == "1" and "2" in only):
                continue
            for build in builds:
                log(f"load {i} on {build.name}")
                try:
                    load(build)
                except Exception as e:  # a load that breaks a build is a result too
                    self.record_failure(i, build, e)

    def record_failure(self, i, build, e):
        self.rows.append((f"{i} (failed)", f"{type(e).__name__}", {build.name: str(e)[:200]}, {build.name: None}))


def engine_running(api):
    status, _, data = api.request("GET", "/metrics", admin=True, timeout=30)
    if status != 200:
        return None
    m = re.search(r'ajet_engine_sequences\{state="running"\} ([0-9.e+]+)', data.decode())
    return float(m.group(1)) if m else None


def json_message(text):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    m = re.search(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"', text)
    return (m.group(1) if m else text)[:140].replace("|", "/")


def report(bench, builds, args, seconds):
    names = [b.name for b in builds]
    lines = [f"## Front limits (bench/swarm/front_limits_bench.py), {datetime.date.today().isoformat()}", "",
             f"`bench/swarm/front_limits_bench.py{' --baseline ' + args.baseline if args.baseline else ''}`: the loads "
             "of issue 38 on `ajet-swarm` with `ajet-echo-engine` on loopback, each on a fresh front, "
             f"machine: {fs.machine()}. One run; RSS is VmRSS of the front process. Suite took {seconds:.0f} s.", "",
             "| load | measure | " + " | ".join(names) + (" | ratio |" if len(names) == 2 else " |"),
             "|---|---|" + "---|" * len(names) + ("---|" if len(names) == 2 else "")]
    for load, measure, texts, numbers in bench.rows:
        cells = [texts.get(n, "-") for n in names]
        ratio = ""
        if len(names) == 2:
            a, b = numbers.get(names[0]), numbers.get(names[1])
            ratio = f" {a / b:.2f} |" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else " - |"
        lines.append(f"| {load} | {measure} | " + " | ".join(cells) + " |" + ratio)
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description="What one caller can take from the front (issue 38's loads).")
    ap.add_argument("--baseline", help="a directory with an older build's ajet-swarm and ajet-echo-engine")
    ap.add_argument("--seconds", type=float, default=34.0, help="load 3's duration (default 34 s, the issue's)")
    ap.add_argument("--uploads", type=int, default=48, help="load 5's concurrent uploads (default 48)")
    ap.add_argument("--upload-mb", type=int, default=60, help="load 5's body size in MB (default 60)")
    ap.add_argument("--only", nargs="*", help="run only these loads (numbers)")
    ap.add_argument("--no-append", action="store_true", help="do not append to docs/benchmarks.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    builds = [Build("this build", fs.BIN)]
    if args.baseline:
        builds.append(Build("baseline", os.path.abspath(args.baseline)))
    for b in builds:
        for name in ("ajet-swarm", "ajet-echo-engine"):
            if not os.access(os.path.join(b.bin, name), os.X_OK):
                raise SystemExit(f"front_limits_bench: {os.path.join(b.bin, name)} is missing")
    tmp = tempfile.mkdtemp(prefix="ajet-front-limits-")
    t0 = time.monotonic()
    bench = Bench(args, tmp)
    try:
        bench.run(builds)
    finally:
        for front in list(fs._FRONTS):
            try:
                front.kill_group()
            except Exception:
                pass
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    text = report(bench, builds, args, time.monotonic() - t0)
    print(text)
    if not args.no_append:
        with open(os.path.join(fs.REPO, "docs", "benchmarks.md"), "a") as f:
            f.write("\n" + text)
        log("appended to docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
