#!/usr/bin/env python3
"""Engine replicas behind one front: prefix-cache hits with sticky routing vs round-robin.

`ajet-swarm start --engine-ranks 2` starts two engine processes; each serves calls (and trains its
share of each batch). A multi-turn agent resends its whole conversation on every call, so the
replica that served an episode's earlier calls holds most of the next call's prompt in its prefix
cache. This runs the real front and engines (backbone debug, loopback, the `tiny` preset with a
400-id tokenizer trained on the spot, random weights) once per route policy, and sends the same
workload to each: --episodes multi-turn episodes, --concurrency at a time, each --turns chat calls
whose conversation grows by the model's answer and a new user message per turn (max_tokens
--max-tokens, temperature 1). From the front's GET /metrics before and after it reads, summed over
the replicas, the prompt tokens the engines took from their prefix caches, and divides by the prompt
tokens the calls sent (usage.prompt_tokens). Also the calls each replica served and the workload's
wall time. Same seeds for both policies; the model's answers differ between the runs (sampling on
two processes), so the prompt totals differ a little.

What 2 cores can and cannot show: the two replicas share the same two cores, so wall times say
little about throughput on a cluster; the hit rates and the spread of calls are what transfer.

    bench/swarm/replica_routing.py                   # 24 episodes x 6 turns, sticky vs round_robin
    bench/swarm/replica_routing.py --smoke           # 4 episodes x 3 turns; appends nothing
    AJET_BUILD_DIR=/path/to/build bench/swarm/replica_routing.py --no-append

Prints the table and appends it, dated, to docs/benchmarks.md (not with --no-append or --smoke).
Python 3 standard library and clients/python only.
"""
import argparse
import datetime
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("AJET_BUILD_DIR") or os.path.join(REPO, "build"))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from ajet_swarm import ChatClient, SwarmClient  # noqa: E402

TOPICS = ["the sea", "a garden", "the stars", "a market", "a river", "the mountains", "a library", "a train"]


def log(msg):
    print(f"[replica_routing {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def metric_samples(text, name):
    """{labels-string: value} of one family in a Prometheus exposition."""
    out = {}
    for m in re.finditer(r"^" + re.escape(name) + r"(\{[^}]*\})? (\S+)$", text, re.M):
        out[m.group(1) or ""] = float(m.group(2))
    return out


class Front:
    def __init__(self, bin_dir, tmp, model, route, ranks, threads):
        self.token = secrets.token_hex(16)
        self.log_path = os.path.join(tmp, f"front-{route}.log")
        self.logf = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [os.path.join(bin_dir, "ajet-swarm"), "start", "--port", "0", "--exp-dir",
             os.path.join(tmp, f"front-{route}"), "--engine-ranks", str(ranks), "--route", route],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=dict(os.environ, AJET_ADMIN_TOKEN=self.token))
        ready, port = threading.Event(), []

        def drain():
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace")
                self.logf.write(line)
                self.logf.flush()
                m = re.search(r"ajet-swarm ready:.*\(port (\d+)", line)
                if m and not ready.is_set():
                    port.append(int(m.group(1)))
                    ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(60):
            self.stop()
            raise SystemExit(f"replica_routing: ajet-swarm did not become ready; see {self.log_path}")
        self.url = f"http://127.0.0.1:{port[0]}"
        admin = SwarmClient(self.url, verbose=False, admin_token=self.token, client_uuid="routing-bench-admin")
        admin.sync_train_config(config_yaml(model, threads))
        admin.start_engine(wait=True, max_wait=600)
        self.client = SwarmClient(self.url, verbose=False, client_uuid="routing-bench")

    def metrics(self):
        req = urllib.request.Request(self.url + "/metrics", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.read().decode()

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.logf.close()


def config_yaml(model, threads):
    return ("ajet:\n"
            "  backbone: debug\n"
            "  model:\n"
            f"    path: {model}\n"
            "  data:\n"
            "    max_prompt_length: 1536\n"
            "    max_response_length: 512\n"
            "    train_batch_size: 64\n"
            "  rollout:\n"
            "    max_env_worker: 64\n"
            "    max_model_len: 2048\n"
            "    max_response_length_in_one_turn: 64\n"
            "    temperature: 1.0\n"
            "  engine:\n"
            f"    threads: {threads}\n"
            "    kv_cache_memory_mb: 128\n")


def episode(front, index, turns, max_tokens):
    """One multi-turn episode; returns the prompt tokens its calls sent."""
    ep = front.client.begin_episode(discard_episode_timeout=3600, episode_type="eval", max_wait=120)
    chat = ChatClient(ep.base_url, ep.api_key, timeout=600, max_retries=2)
    topic = TOPICS[index % len(TOPICS)]
    messages = [{"role": "system", "content": f"You are agent number {index}. You describe {topic} in short "
                 "sentences, one detail per answer, and you never repeat a detail you already gave."},
                {"role": "user", "content": f"Tell me one thing about {topic}."}]
    prompt_tokens = 0
    for turn in range(turns):
        answer = chat.create(messages, max_tokens=max_tokens, temperature=1.0, seed=index * 100 + turn)
        prompt_tokens += int(answer.get("usage", {}).get("prompt_tokens", 0))
        messages.append({"role": "assistant", "content": answer["choices"][0]["message"].get("content") or ""})
        messages.append({"role": "user", "content": f"Turn {turn + 1}: one more thing about {topic}, please."})
    front.client.abort_episode(ep.episode_uuid)
    return prompt_tokens


def run_policy(a, bin_dir, tmp, model, route):
    front = Front(bin_dir, tmp, model, route, a.ranks, a.threads)
    try:
        before = front.metrics()
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=a.concurrency) as pool:
            prompt = sum(pool.map(lambda i: episode(front, i, a.turns, a.max_tokens), range(a.episodes)))
        wall = time.monotonic() - start
        after = front.metrics()
    finally:
        front.stop()

    def total(name, text):
        return sum(metric_samples(text, name).values())

    hits = (total("ajet_replica_prefix_cache_hit_tokens_total", after) -
            total("ajet_replica_prefix_cache_hit_tokens_total", before))
    calls = metric_samples(after, "ajet_replica_calls_total")
    return {"route": route, "prompt": prompt, "hits": hits, "rate": hits / prompt if prompt else 0.0,
            "calls": [int(calls[k]) for k in sorted(calls)], "wall": wall,
            "sticky": total("ajet_route_sticky_calls_total", after),
            "computed": (total("ajet_replica_computed_tokens_total", after) -
                         total("ajet_replica_computed_tokens_total", before))}


def make_model(bin_dir, tmp, threads):
    tok = os.path.join(tmp, "tok")
    subprocess.run([os.path.join(bin_dir, "ajet"), "tokenizer", "train", "--corpus",
                    os.path.join(REPO, "tests/text/data/tokenizer_corpus.jsonl"), "--vocab-size", "400", "--out",
                    tok], check=True, capture_output=True)
    model = os.path.join(tmp, "model")
    subprocess.run([os.path.join(bin_dir, "ajet"), "model", "init", "--preset", "tiny", "--tokenizer", tok, "--out",
                    model, "--seed", "1", "--threads", str(threads)], check=True, capture_output=True)
    return model


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=8, help="episodes in flight (default 8)")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="ajet.engine.threads, split over the ranks")
    ap.add_argument("--smoke", action="store_true", help="4 episodes x 3 turns; appends nothing")
    ap.add_argument("--no-append", action="store_true", help="print the table only")
    a = ap.parse_args()
    if a.smoke:
        a.episodes, a.turns, a.concurrency = 4, 3, 2
    bin_dir = os.path.join(BUILD, "bin")
    for b in ("ajet", "ajet-engine", "ajet-swarm"):
        if not os.path.exists(os.path.join(bin_dir, b)):
            raise SystemExit(f"replica_routing: {bin_dir}/{b} is missing: build it first (scripts/build.sh)")
    load_start = os.getloadavg()[0]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ajet-routing-") as tmp:
        model = make_model(bin_dir, tmp, a.threads)
        results = []
        for route in ("sticky", "round_robin"):
            log(f"{route}: {a.episodes} episodes x {a.turns} turns, {a.concurrency} at a time, {a.ranks} ranks")
            results.append(run_policy(a, bin_dir, tmp, model, route))
    sticky, rr = results
    rows = [f"| {r['route']} | {r['rate'] * 100:.1f} % ({int(r['hits']):,} of {r['prompt']:,}) | "
            f"{' / '.join(str(c) for c in r['calls'])} | {int(r['sticky'])} | {int(r['computed']):,} | "
            f"{r['wall']:.1f} |" for r in results]
    ratio = sticky["rate"] / rr["rate"] if rr["rate"] > 0 else float("inf")
    title = (f"## Engine replicas: prefix-cache hits, sticky routing vs round-robin "
             f"(bench/swarm/replica_routing.py), {datetime.date.today().isoformat()}")
    text = "\n".join([
        title, "",
        f"`bench/swarm/replica_routing.py{' --smoke' if a.smoke else ''}`: the real `ajet-swarm` front with "
        f"`--engine-ranks {a.ranks}` (each rank serves calls; {a.threads} engine thread(s) split over them), "
        f"backbone debug, the `tiny` preset with a 400-id tokenizer, random weights. Workload per policy: "
        f"{a.episodes} episodes of {a.turns} chat turns, {a.concurrency} episodes at a time, each turn resending "
        f"the conversation plus the model's answer and a new user message (max_tokens {a.max_tokens}, "
        f"temperature 1). Hit rate: prompt tokens the replicas took from their prefix caches over the prompt "
        f"tokens the calls sent (GET /metrics, summed over replicas). Machine: {os.cpu_count()} cores "
        f"({cpu_model()}), load average {load_start:.2f} at the start; took {time.monotonic() - t0:.0f} s. "
        "The replicas share the same cores: wall times are not a throughput result.", "",
        "| route | prefix-cache hit rate | calls per replica | sticky calls | tokens computed | wall s |",
        "|---|---|---|---|---|---|", *rows, "",
        f"Sticky routing's hit rate is {ratio:.2f}x round-robin's "
        f"({sticky['rate'] * 100:.1f} vs {rr['rate'] * 100:.1f} %); it computed "
        f"{int(sticky['computed']):,} tokens against {int(rr['computed']):,}."])
    print(text)
    # What must hold whatever the machine (never a timing): sticky calls stayed sticky, every replica
    # served, and no call was lost.
    problems = []
    if sticky["sticky"] != a.episodes * (a.turns - 1):
        problems.append(f"sticky calls {int(sticky['sticky'])}, expected {a.episodes * (a.turns - 1)}")
    for r in results:
        if len(r["calls"]) != a.ranks or min(r["calls"]) == 0 or sum(r["calls"]) != a.episodes * a.turns:
            problems.append(f"{r['route']}: calls per replica {r['calls']}")
    if problems:
        raise SystemExit("replica_routing: " + "; ".join(problems))
    if not a.no_append and not a.smoke:
        with open(os.path.join(REPO, "docs", "benchmarks.md"), "a") as f:
            f.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
