#!/usr/bin/env python3
"""Engine replicas on other hosts (an elastic group): step time, failover, join, a 0.5B weight push.

`ajet-swarm start --engine-at tcp:HOST:PORT ...` drives `ajet-engine serve --elastic` replicas: the front
forms them into one c10d (Gloo over TCP) data-parallel group, routes each episode's calls to one of them
and watches them (heartbeat every 250 ms). Here "hosts" are network namespaces on veth pairs to a bridge
in a "switch" namespace; the front, in the root namespace, reaches it through a veth of its own. In one run:

  1. step time, 2 replicas on loopback vs in 2 namespaces, the same workload (backbone torch, the `tiny`
     preset, a 400-id tokenizer, random weights): median trainer step_time_s (rank 0, all-reduce included)
     after a warm-up step, and the step's wall time in the front's log;
  2. failover under 2 client threads making short calls: SIGKILL rank 1, later cut rank 0's link (`ip -n
     NS link set DEV down`): time until GET /engines (polled every 20 ms) shows it not serving, and gone;
     failed calls (503 + Retry-After expected), calls served afterwards and where; does a step still train;
  3. join: a third replica, POST /engines, a step: time until it is a member with the others'
     weights_checksum (it joins at a step boundary), and the re-forming time from the front's log;
  4. weight push (not with --smoke or --no-push): 2 replicas of a Qwen2.5-0.5B shape (float32, 494,032,768
     parameters, full fine-tuning); the first forming broadcasts rank 0's trainer state: forming time vs
     the tiny model's, and rank 1's broadcast as parameter bytes per second. Skipped under 14 GiB free.

What 2 cores can and cannot show: the front and every replica share the same two cores (2 "hosts" are
not faster than one), and namespaces add veth hops through a bridge, not real network latency or a
bandwidth limit: the ratio bounds the cost of those hops only. Failover and join times are the front's
watch and carry over; the push rate is memory to memory through the kernel on shared cores.

Needs root; without it, or when `ip netns add` fails, it says why and exits 77 (ctest: skipped). Its
namespaces and veths (scripts/netns_cluster.sh, named `ajelPID*`) and processes go on exit, Ctrl-C
included, and those of earlier crashed runs at the start.

    bench/swarm/elastic_replicas.py               # 3 steps each, failover, join, link cut, 0.5B push
    bench/swarm/elastic_replicas.py --smoke       # 1 step each, no push, appends nothing (< 2 min)
    AJET_BUILD_DIR=/path/to/build bench/swarm/elastic_replicas.py --no-append --no-push

Prints the table and appends it, dated, to docs/benchmarks.md (not with --no-append or --smoke).
Python 3 standard library only.
"""
import argparse
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("AJET_BUILD_DIR") or os.path.join(REPO, "build"))
SKIP = 77
QWEN05B_PARAMS = 494_032_768
PROCS = []  # every process started; cleanup stops them


def log(msg):
    print(f"[elastic_replicas {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


NETNS = os.path.join(REPO, "scripts", "netns_cluster.sh")


class Net:
    """scripts/netns_cluster.sh: a namespace per host on one bridge in a switch namespace, and the root
    namespace's veth into it. hosts[i] = (namespace, interface, address)."""

    def __init__(self, pid, hosts, prefix="ajel"):
        self.name = f"{prefix}{pid}"
        self.prefix = sh(NETNS, "up", self.name, str(hosts)).strip()
        self.hosts = {i: (f"{self.name}-h{i}", f"{self.name}h{i}", f"{self.prefix}.{11 + i}") for i in range(hosts)}

    def link(self, i, state):
        sh(NETNS, "link", self.name, str(i), state)

    def cleanup(self):
        sh(NETNS, "down", self.name, check=False)


def clean_stale():
    """Clusters of earlier runs of this script whose process is gone."""
    for m in set(re.findall(r"^ajel(\d+)-", sh("ip", "netns", "list", check=False), re.M)):
        try:
            with open(f"/proc/{m}/cmdline", "rb") as f:
                alive = b"elastic_replicas" in f.read() and int(m) != os.getpid()
        except OSError:
            alive = False
        if not alive:
            log(f"removing the stale namespaces of ajel{m}")
            sh(NETNS, "down", f"ajel{m}", check=False)


def stop(p, sig=signal.SIGTERM):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Engine:
    """An `ajet-engine serve --elastic` on host_ip (in namespace ns, if any)."""

    def __init__(self, ctx, model, conf, host_ip, ns=None, name="engine"):
        self.err = os.path.join(ctx.tmp, f"{name}-{len(PROCS)}.err")
        args = [os.path.join(ctx.bin, "ajet-engine"), "serve", "--elastic", "--conf", conf, "--model", model,
                "--listen", f"tcp:{host_ip}:0", "--token-file", ctx.token_file, "--threads", "1"]
        self.proc = subprocess.Popen((["ip", "netns", "exec", ns] if ns else []) + args, stdout=subprocess.PIPE,
                                     stderr=open(self.err, "w"), stdin=subprocess.DEVNULL, start_new_session=True)
        PROCS.append(self.proc)
        for raw in self.proc.stdout:
            if m := re.search(r"ready on (tcp:\S+)", raw.decode()):
                self.address = m.group(1)
                threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
                return
        raise RuntimeError(f"{name} did not become ready; see {self.err}")

    def log_value(self, pattern):
        """The first group of the first stderr line matching pattern, as a number."""
        for line in open(self.err):
            if m := re.search(pattern, line):
                return float(m.group(1))
        raise RuntimeError(f"no line matching {pattern!r} in {self.err}")

    def log_time(self, pattern):
        """Time (the engine's log clock, seconds) of the first stderr line matching pattern."""
        for line in open(self.err):
            if re.search(pattern, line):
                return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
        raise RuntimeError(f"no line matching {pattern!r} in {self.err}")


class Front:
    """`ajet-swarm start --engine-at ...` (or the engine flags `at`: --trainer-at and --engine-at), the config
    synced and the group formed (forming_s)."""

    def __init__(self, ctx, engines, conf_text, name, at=None):
        self.admin, self.log_path = secrets.token_hex(16), os.path.join(ctx.tmp, f"front-{name}.log")
        at = at if at is not None else sum((["--engine-at", e.address] for e in engines), [])
        self.proc = subprocess.Popen(
            [os.path.join(ctx.bin, "ajet-swarm"), "start", "--port", "0", "--exp-dir", os.path.join(ctx.tmp, f"front-{name}"),
             "--engine-token-file", ctx.token_file] + at,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=dict(os.environ, AJET_ADMIN_TOKEN=self.admin))
        PROCS.append(self.proc)
        logf = open(self.log_path, "wb", buffering=0)
        for raw in self.proc.stdout:
            logf.write(raw)
            if m := re.search(rb"ajet-swarm ready:.*\(port (\d+)", raw):
                self.url = f"http://127.0.0.1:{int(m.group(1))}"
                break
        else:
            raise RuntimeError(f"ajet-swarm did not become ready; see {self.log_path}")
        threading.Thread(target=lambda: [logf.write(r) for r in self.proc.stdout], daemon=True).start()
        self.call("/sync_train_config", {"yaml_as_string": conf_text}, admin=True)
        t0 = time.monotonic()
        self.call("/start_engine", {}, admin=True)
        while self.get("/get_engine_status")["engine_status"] != "ENGINE.ROLLING":
            if time.monotonic() - t0 > 900:
                raise RuntimeError(f"the engine group did not form; see {self.log_path}")
            time.sleep(0.05)
        self.forming_s = time.monotonic() - t0

    def call(self, path, body=None, key=None, admin=False, timeout=60):
        """(HTTP status, JSON or text, headers); status 0 when no answer came."""
        h = {"Content-Type": "application/json"}
        if key or admin:
            h["Authorization"] = "Bearer " + (key or self.admin)
        req = urllib.request.Request(self.url + path, headers=h, data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                text = r.read().decode()
                return r.status, json.loads(text) if "json" in r.headers.get("Content-Type", "") else text, r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")[:300], e.headers
        except OSError as e:
            return 0, str(e), {}

    def get(self, path):
        code, body, _ = self.call(path, admin=True)
        if code != 200:
            raise RuntimeError(f"GET {path}: {code} {body}")
        return body

    def entries(self):
        return self.get("/get_verbose_logs")["entries"]

    def calls_per_slot(self):
        return {int(m.group(1)): int(float(m.group(2))) for m in
                re.finditer(r'^ajet_replica_calls_total\{replica="(\d+)"\} (\S+)$', self.get("/metrics"), re.M)}


def tiny_model(ctx):
    """A 400-id tokenizer (ctx.tokenizer) and the `tiny` preset with random weights on it; the model's path."""
    ctx.tokenizer, model = os.path.join(ctx.tmp, "tok"), os.path.join(ctx.tmp, "model")
    sh(os.path.join(ctx.bin, "ajet"), "tokenizer", "train", "--corpus",
       os.path.join(REPO, "tests/text/data/tokenizer_corpus.jsonl"), "--vocab-size", "400", "--out", ctx.tokenizer)
    sh(os.path.join(ctx.bin, "ajet-engine"), "model", "init", "--preset", "tiny", "--tokenizer", ctx.tokenizer,
       "--out", model, "--seed", "1", "--threads", "1")
    return model


def require_netns(program, ctx):
    """Exits when a binary is missing (an error) or network namespaces cannot be made (SKIP: 77)."""
    for b in ("ajet", "ajet-engine", "ajet-swarm"):
        if not os.path.exists(os.path.join(ctx.bin, b)):
            raise SystemExit(f"{program}: {ctx.bin}/{b} is missing: build it first (scripts/build.sh)")
    why = "network namespaces need root" if os.geteuid() != 0 else None
    if not why:
        probe = f"ajelprobe{os.getpid()}"
        try:
            sh("ip", "netns", "add", probe)
            sh("ip", "netns", "del", probe, check=False)
        except (OSError, RuntimeError) as e:
            why = f"`ip netns add` failed: {e}"
    if why:
        print(f"{program}: SKIPPED: {why}")
        sys.exit(SKIP)


def config_yaml(model, batch, repeat, ckpt):
    return ("ajet:\n  backbone: torch\n  model:\n"
            f"    path: {model}\n"
            f"  data:\n    max_prompt_length: 512\n    max_response_length: 512\n    train_batch_size: {batch}\n"
            "  rollout:\n    max_env_worker: 64\n    max_model_len: 1024\n    max_response_length_in_one_turn: 64\n"
            f"    num_repeat: {repeat}\n    temperature: 1.0\n"
            "  engine:\n    threads: 1\n    kv_cache_memory_mb: 64\n"
            f"  trainer_common:\n    checkpoint_base_dir: {ckpt}\n    save_freq: 0\n")


def chat(front, key, text, max_tokens, timeout=60):
    return front.call("/v1/chat/completions", {"model": "m", "max_tokens": max_tokens, "temperature": 1.0,
                                               "messages": [{"role": "user", "content": text}]}, key=key, timeout=timeout)


def run_step(front, a, step, wait_s=600):
    """One step's episodes, then its training: (trainer step_time_s, wall s from the log, replicas), or None
    when it did not train within wait_s."""
    before = front.get("/get_engine_status")["global_step"]

    def episode(i):
        cu, task = f"eb-{step}-{i}", f"s{step}-t{i // a.repeat}"
        code, e, _ = front.call("/claim_episode", {"client_uuid": cu, "episode_type": "train",
                                                   "discard_episode_timeout": 600}, timeout=300)
        if code != 200 or not e.get("success"):
            raise RuntimeError(f"claim_episode: {code} {e}")
        msg = f"Step {step}, episode {i}: tell me about the sea and the mountains."
        for turn in range(a.turns):
            code, r, _ = chat(front, e["openai_api_key"], msg, a.max_tokens, timeout=300)
            if code != 200:
                raise RuntimeError(f"chat: {code} {r}")
            msg += " " + (r["choices"][0]["message"].get("content") or "") + f" And turn {turn + 1}?"
        code, r, _ = front.call("/end_episode", {"client_uuid": cu, "episode_uuid": e["episode_uuid"], "task_id": task,
                                                 "workflow_output": {"reward": float(i % 2), "metadata": {"task_id": task}}},
                                key=e["openai_api_key"])
        if code != 200:
            raise RuntimeError(f"end_episode: {code} {r}")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(episode, range(a.batch * a.repeat)))
    t0 = time.monotonic()
    while (s := front.get("/get_engine_status"))["global_step"] <= before:
        if time.monotonic() - t0 > wait_s:
            return None
        time.sleep(0.1)
    stats = next(b["stats"] for b in s["recent_batches"] if b["global_step"] == before)
    start = done = float("nan")
    for _ in range(50):  # the "step N done" line may come a moment after global_step moved
        for e in front.entries():
            if f"-> ENGINE.WEIGHT_SYNCING: training step {before} " in e["message"]:
                start = e["timestamp"]
            if e["message"].startswith(f"step {before} done"):
                done = e["timestamp"]
        if done == done:
            break
        time.sleep(0.05)
    return stats["step_time_s"], done - start, stats.get("data_parallel", {}).get("world_size", 1)


def fault(front, address, act, what):
    """act() while 2 client threads make 2-token calls (5 per eval episode); times GET /engines (every 20 ms)
    until the replica at address is not serving, and gone; counts the calls that failed and served after."""
    results, stopping = [], threading.Event()

    def client(cu):
        while not stopping.is_set():
            code, e, _ = front.call("/claim_episode", {"client_uuid": cu, "episode_type": "eval",
                                                       "discard_episode_timeout": 60})
            if code != 200:
                results.append((time.monotonic(), code, None))
                time.sleep(0.1)
                continue
            for _ in range(5):
                c, _, h = chat(front, e["openai_api_key"], "hi", 2, timeout=30)
                results.append((time.monotonic(), c, h.get("Retry-After")))
            front.call("/abort_episode", {"client_uuid": cu, "episode_uuid": e["episode_uuid"]}, key=e["openai_api_key"])
    threads = [threading.Thread(target=client, args=(f"load-{i}",), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    t0, not_serving, gone = time.monotonic(), None, None
    act()
    while gone is None and time.monotonic() - t0 < 30:
        e = next(x for x in front.get("/engines")["engines"] if x["address"] == address)
        if not_serving is None and not e["serving"]:
            not_serving = time.monotonic() - t0
        if e["state"] == "gone":
            gone = time.monotonic() - t0
        time.sleep(0.02)
    t_mid, mid = time.monotonic(), front.calls_per_slot()
    time.sleep(1.5)
    stopping.set()
    for t in threads:
        t.join(60)
    after, failed = front.calls_per_slot(), [x for x in results if x[1] != 200]
    f = {"not_serving": not_serving, "gone": gone, "failed": len(failed), "calls": len(results),
         "codes": sorted(set(f"{x[1]}{' + Retry-After' if x[2] else ''}" for x in failed)),
         "ok_after": sum(1 for x in results if x[0] > t_mid and x[1] == 200),
         "served_after": {s: after[s] - mid.get(s, 0) for s in after if after[s] > mid.get(s, 0)}}
    log(f"{what}: {f}")
    return f


def reform_time(front, generation):
    """Front log: the step boundary (training step) -> the line of the generation it formed."""
    es = front.entries()
    end = next(e["timestamp"] for e in es if e["message"].startswith(f"replica group generation {generation}:"))
    return end - max(e["timestamp"] for e in es if "-> ENGINE.WEIGHT_SYNCING: training step" in e["message"]
                     and e["timestamp"] <= end)


def measure(ctx, net, a):
    ctx.token_file = os.path.join(ctx.tmp, "engine.token")
    with open(os.open(ctx.token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    model = tiny_model(ctx)
    text, conf, r = config_yaml(model, a.batch, a.repeat, os.path.join(ctx.tmp, "ckpt")), os.path.join(ctx.tmp, "tiny.yaml"), {}
    open(conf, "w").write(text)
    # 1. The same steps on loopback and across namespaces (a warm-up step first, not with --smoke).
    for place in ("loopback", "namespaces"):
        engines = [Engine(ctx, model, conf, "127.0.0.1", name=f"lo{i}") if place == "loopback" else
                   Engine(ctx, model, conf, net.hosts[i][2], net.hosts[i][0], f"h{i}") for i in (1, 2)]
        front = Front(ctx, engines, text, place)
        steps = [run_step(front, a, s) for s in range(-int(not a.smoke), a.steps)][int(not a.smoke):]
        log(f"{place}: formed in {front.forming_s:.2f} s; steps (trainer s, wall s, replicas) {steps}")
        r[place] = {"forming": front.forming_s, "steps": steps}
        if place == "loopback":
            for p in [e.proc for e in engines] + [front.proc]:
                stop(p, signal.SIGKILL)
    # 2. SIGKILL rank 1 (h2) under load.
    r["kill"] = fault(front, engines[1].address, lambda: engines[1].proc.send_signal(signal.SIGKILL), "SIGKILL")
    # 3. h3 joins at the first step boundary after it connected: a step (in the background) once it has.
    h3 = Engine(ctx, model, conf, net.hosts[3][2], net.hosts[3][0], "h3")
    gen_before, t0 = front.get("/engines")["generation"], time.monotonic()
    code, body, _ = front.call("/engines", {"address": h3.address}, admin=True)
    if code != 200:
        raise RuntimeError(f"POST /engines: {code} {body}")
    connected = member = stepper = None
    while member is None and time.monotonic() - t0 < 120:
        es = front.get("/engines")["engines"]
        me = next(e for e in es if e["address"] == h3.address)
        others = [e["weights_checksum"] for e in es if e["state"] == "member" and e is not me]
        if connected is None and me["state"] in ("standby", "member"):
            connected, stepper = time.monotonic() - t0, ThreadPoolExecutor(1).submit(run_step, front, a, a.steps)
        if me["state"] == "member" and others and all(c == me["weights_checksum"] for c in others):
            member = time.monotonic() - t0
        time.sleep(0.02)
    gen = front.get("/engines")["generation"]
    r["join"] = {"t": member, "connected": connected, "gen": (gen_before, gen), "step": stepper and stepper.result(),
                 "reform": reform_time(front, gen) if member else None}
    log(f"join: {r['join']}")
    # 2b. Cut rank 0's link (h1); then a step on the survivor; without one, the link back up.
    r["cut"] = fault(front, engines[0].address, lambda: net.link(1, "down"), "link cut")
    ac = r["after_cut"] = {"wait": 20 if a.smoke else 60}
    ac["step"] = run_step(front, a, a.steps + 1, wait_s=ac["wait"])
    if ac["step"]:
        ac["reform"] = reform_time(front, front.get("/engines")["generation"])
    else:
        s = front.get("/get_engine_status")
        ac["status"] = f"{s['engine_status']} ({s['engine_status_detail']})"
        log(f"WARNING: no step within {ac['wait']} s after rank 0's link was cut: {ac['status']}; link up again")
        net.link(1, "up")
        deadline = time.monotonic() + 15
        while front.get("/get_engine_status")["global_step"] <= s["global_step"] and time.monotonic() < deadline:
            time.sleep(0.1)
        ac["relinked"] = front.get("/get_engine_status")["global_step"] > s["global_step"]
    log(f"after the cut: {ac}")
    for p in [e.proc for e in engines + [h3]] + [front.proc]:
        stop(p, signal.SIGKILL)
    net.link(1, "up")
    r["push"] = None if a.no_push else push(ctx, net, a, r["namespaces"]["forming"])
    return r


SINK = ("import socket,sys\ns=socket.socket();s.bind((sys.argv[1],0));s.listen(1);print(s.getsockname()[1],flush=True)\n"
        "c,_=s.accept()\nwhile c.recv(1<<22):pass\nc.sendall(b'k')")
SOURCE = ("import socket,sys,time\nc=socket.create_connection((sys.argv[1],int(sys.argv[2])));m=bytes(1<<22)\n"
          "t=time.monotonic()\nfor _ in range(int(sys.argv[3])>>22):c.sendall(m)\n"
          "c.shutdown(socket.SHUT_WR);c.recv(1);print(time.monotonic()-t)")


def tcp_rate(net, nbytes=1 << 30):
    """GB/s of one Python TCP stream from h1 to h2 through the bridge: what the path itself carries."""
    sink = subprocess.Popen(["ip", "netns", "exec", net.hosts[2][0], sys.executable, "-c", SINK, net.hosts[2][2]],
                            stdout=subprocess.PIPE, text=True)
    PROCS.append(sink)
    port = sink.stdout.readline().strip()
    secs = float(sh("ip", "netns", "exec", net.hosts[1][0], sys.executable, "-c", SOURCE, net.hosts[2][2], port,
                    str(nbytes)))
    sink.wait(30)
    return nbytes / secs / 1e9


def push(ctx, net, a, tiny_forming):
    avail = int(re.search(r"MemAvailable:\s+(\d+)", open("/proc/meminfo").read()).group(1)) / 2**20
    if avail < 14:
        log(f"weight push skipped: {avail:.1f} GiB of memory available, it needs 14")
        return {"skipped": f"skipped: {avail:.1f} GiB of memory available, it needs 14"}
    # Two initialisations of the shape (seeds 1 and 2): every parameter differs, so the forming sends
    # them all, and the KL reference's too (members that hold equal tensors send none).
    model, conf = os.path.join(ctx.tmp, "qwen05b"), os.path.join(ctx.tmp, "qwen05b.yaml")
    t0 = time.monotonic()
    for seed in (1, 2):
        sh(os.path.join(ctx.bin, "ajet-engine"), "model", "init", "--preset", "qwen2.5-0.5b", "--dtype", "float32",
           "--tokenizer", ctx.tokenizer, "--out", f"{model}-{seed}", "--seed", str(seed), "--threads", "2")
    init_s = time.monotonic() - t0
    model = f"{model}-1"
    text = config_yaml(model, a.batch, a.repeat, os.path.join(ctx.tmp, "ckpt-push"))
    open(conf, "w").write(text)
    log(f"push: model written in {init_s:.0f} s; starting 2 replicas")
    t0 = time.monotonic()
    engines = [Engine(ctx, f"{model[:-2]}-{i}", conf, net.hosts[i][2], net.hosts[i][0], f"q05-h{i}") for i in (1, 2)]
    load_s = time.monotonic() - t0
    front = Front(ctx, engines, text, "push")
    r0, r1 = engines
    p = {"tcp": tcp_rate(net), "init": init_s, "load": load_s, "forming": front.forming_s, "extra": front.forming_s - tiny_forming,
         "bcast": r1.log_value(r"elastic group: rank 1 of 2 .*rank 0's state taken in ([0-9.]+) s"),
         "trainer": r0.log_time(r"trainer ready") - r0.log_time(r"generation 1 meets at port"),
         "rss": max(int(re.search(r"VmHWM:\s+(\d+)", open(f"/proc/{e.proc.pid}/status").read()).group(1))
                    for e in engines) / 2**20}
    p["rate"], p["rate_forming"] = 2 * QWEN05B_PARAMS * 4 / p["bcast"] / 1e9, QWEN05B_PARAMS * 4 / p["forming"] / 1e9
    log(f"push: {p}")
    for e in engines:
        stop(e.proc, signal.SIGKILL)
    stop(front.proc, signal.SIGINT)
    return p


def report(a, r, load_start, took, prefix):
    med = {p: statistics.median(s[0] for s in r[p]["steps"]) for p in ("loopback", "namespaces")}
    wall = {p: statistics.median(s[1] for s in r[p]["steps"]) for p in ("loopback", "namespaces")}
    k, c, j, ac, p = r["kill"], r["cut"], r["join"], r["after_cut"], r["push"]

    def fault_row(f):
        ms = ["never (30 s)" if v is None else f"{v * 1000:.0f} ms" for v in (f["not_serving"], f["gone"])]
        return (f"**{ms[0]}** / {ms[1]}; {f['failed']} of {f['calls']} calls failed ({', '.join(f['codes']) or 'none'}), "
                f"{f['ok_after']} ok afterwards on slot(s) {', '.join(map(str, f['served_after'])) or 'none'}")
    rows = [
        ("step time, 2 replicas on loopback", f"{med['loopback']:.2f} s (wall {wall['loopback']:.2f} s)",
         f"median of {a.steps}: the trainer's step_time_s (rank 0, all-reduce included); wall: the front's log"),
        ("step time, 2 replicas in 2 namespaces", f"{med['namespaces']:.2f} s (wall {wall['namespaces']:.2f} s)",
         "the same, each replica in its own namespace behind the bridge"),
        ("namespaces / loopback", f"**{med['namespaces'] / med['loopback']:.2f}x** (wall "
         f"{wall['namespaces'] / wall['loopback']:.2f}x)", "the cost of the veth hops (not of a real network)"),
        ("SIGKILL rank 1 → not serving / gone", fault_row(k), "GET /engines every 20 ms, while 2 client threads make "
         "2-token calls (a failed call should be a 503 + Retry-After); the goal: no call to a dead replica after 1 s"),
        ("join: POST /engines → member, same checksum",
         "never" if j["t"] is None else f"**{j['t']:.2f} s** (connected after {j['connected']:.2f} s)",
         "joins at the first step boundary after it connected: includes that step's rollout"),
        (f"re-forming, generation {j['gen'][0]} → {j['gen'][1]}", "n/a" if j["reform"] is None else
         f"{j['reform']:.2f} s; the step trained on {j['step'][2] if j['step'] else '?'} replicas",
         "front log: training step → generation line (the killed replica leaves, the joiner takes the weights)"),
        ("link cut of rank 0 → not serving / gone", fault_row(c),
         "`ip -n NS link set DEV down`: one missed heartbeat (600 ms timeout) / three; the same client threads"),
        ("the next step, on the survivor", f"trained on {ac['step'][2]} replica(s) in {ac['step'][0]:.2f} s; "
         f"re-formed in {ac['reform']:.2f} s" if ac["step"] else f"**did not train** within {ac['wait']} s: "
         f"{ac['status']}; with the link back up {'it did' if ac['relinked'] else 'not within 15 s either'}",
         "the group should re-form without rank 0 at the step boundary"),
        ("forming, tiny model, 2 namespaces", f"{r['namespaces']['forming']:.2f} s", "start_engine → ROLLING")]
    if p and "skipped" not in p:
        rows += [
            ("forming, Qwen2.5-0.5B shape, float32", f"{p['forming']:.1f} s ({p['extra']:+.1f} s over tiny)",
             f"start_engine → ROLLING; rank 0 built its trainer in {p['trainer']:.1f} s of it (model init "
             f"{p['init']:.0f} s and engine start {p['load']:.0f} s come before)"),
            ("weight push: rank 1 takes rank 0's trainer state", f"{p['bcast']:.1f} s for 3.95 GB (the parameters "
             f"and the KL reference's, 1.98 GB each): **{p['rate']:.2f} GB/s**",
             "rank 1's log (rank 0's state taken in); the replicas loaded two initialisations (seeds 1, 2), so every "
             "tensor differs and is sent (equal ones are not: a checksum decides); no optimizer moments before a step; "
             f"one TCP stream h1 → h2 through the bridge: {p['tcp']:.2f} GB/s; peak RSS per engine {p['rss']:.1f} GiB")]
    elif p:
        rows.append(("weight push, Qwen2.5-0.5B shape", p["skipped"], ""))
    text = "\n".join([
        f"## Engine replicas on other hosts: step time, failover, join, weight push "
        f"(bench/swarm/elastic_replicas.py), {datetime.date.today().isoformat()}", "",
        f"`bench/swarm/elastic_replicas.py{' --smoke' if a.smoke else ''}`: `ajet-swarm start --engine-at` driving "
        "`ajet-engine serve --elastic` replicas (1 thread each), backbone torch, the `tiny` preset with a 400-id "
        f"tokenizer, random weights; a step is {a.batch} tasks x {a.repeat} episodes of {a.turns} chat calls (max_tokens "
        f"{a.max_tokens}). Hosts are network namespaces ({prefix}.0/24) on veth pairs to a bridge in a switch "
        f"namespace; the front is in the root namespace. Machine: {os.cpu_count()} cores ({cpu_model()}), load "
        f"average {load_start:.2f} at the start; took {took:.0f} s. What 2 cores can and cannot show: the front and "
        "every replica share the same two cores (2 replicas are not faster than one here), and namespaces add veth "
        "hops through a bridge, not real network latency or a bandwidth limit, so the ratio bounds the cost of those "
        "hops only. The failover and join times are the front's watch (heartbeat 250 ms, timeout 600 ms, gone after "
        "three misses) and carry over; the push rate is memory to memory through the kernel on shared cores.", "",
        "| measure | value | what it is |", "|---|---|---|", *[f"| {m} | {v} | {w} |" for m, v, w in rows]])
    print(text)
    problems = [f"{n}: the replica was never marked gone" for n, f in (("SIGKILL", k), ("link cut", c)) if f["gone"] is None]
    problems += [f"{n}: no call succeeded afterwards" for n, f in (("SIGKILL", k), ("link cut", c)) if not f["ok_after"]]
    problems += ["the joining replica never became a member with the same weights"] if j["t"] is None else []
    problems += [] if ac["step"] else ["after rank 0 was cut off, no step trained on the survivor"]
    if problems:
        raise SystemExit("elastic_replicas: " + "; ".join(problems))
    if not a.no_append and not a.smoke:
        with open(os.path.join(REPO, "docs", "benchmarks.md"), "a") as f:
            f.write("\n" + text + "\n")


def cpu_model():
    return next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                "unknown CPU")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="measured steps per placement, after a warm-up (default 3)")
    ap.add_argument("--batch", type=int, default=4, help="ajet.data.train_batch_size (default 4)")
    ap.add_argument("--repeat", type=int, default=4, help="ajet.rollout.num_repeat (default 4)")
    ap.add_argument("--turns", type=int, default=2, help="chat calls per episode (default 2)")
    ap.add_argument("--max-tokens", type=int, default=48, help="max_tokens of each call (default 48)")
    ap.add_argument("--no-push", action="store_true", help="skip the Qwen2.5-0.5B weight push")
    ap.add_argument("--smoke", action="store_true", help="1 step each, 2x2 episodes, no warm-up, no push; appends nothing")
    ap.add_argument("--no-append", action="store_true", help="print the table only")
    a = ap.parse_args()
    if a.smoke:
        a.steps, a.batch, a.repeat, a.no_push = 1, 2, 2, True
    ctx = argparse.Namespace(bin=os.path.join(BUILD, "bin"))
    require_netns("elastic_replicas", ctx)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # runs the cleanup below
    clean_stale()
    load_start, t_start = os.getloadavg()[0], time.monotonic()
    net, ok, ctx.tmp = None, False, tempfile.mkdtemp(prefix="ajet-elastic-")
    try:
        net = Net(os.getpid(), 4)  # hosts 1-3 (h0 unused)
        r = measure(ctx, net, a)
        ok = True
    finally:
        fronts = [p for p in PROCS if "ajet-swarm" in str(p.args)]
        for p in [p for p in PROCS if p not in fronts] + fronts:  # engines first: a front then saves nothing
            stop(p, signal.SIGINT if p in fronts else signal.SIGKILL)
        if net:
            net.cleanup()
        if ok:
            shutil.rmtree(ctx.tmp, ignore_errors=True)
        else:
            log(f"failed: the logs are kept in {ctx.tmp}")
    report(a, r, load_start, time.monotonic() - t_start, net.prefix)


if __name__ == "__main__":
    main()
