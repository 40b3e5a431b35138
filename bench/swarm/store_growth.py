#!/usr/bin/env python3
"""How the front's store and log grow over RL steps: `ajet-swarm` with `ajet-echo-engine` (torch
backbone: the echo engine "trains" each batch and bumps the policy version) driven like the main
command's calc stage (issue 38: its 2-minute RL stage left a 210 MB store and a log whose every step
listed each episode's staleness). Each step is batch_size x num_repeat episodes of `turns` chat calls
with a growing history. One run compares the default ajet.store_retention with every call kept
(`-1,0`), and with --baseline another build's front on the same load.

    bench/swarm/store_growth.py --steps 40                                 # default vs keep-all
    bench/swarm/store_growth.py --steps 40 --baseline OTHER/ajet-swarm     # and an older front

Prints a table (episodes, calls, the store's bytes: file + WAL after the front stopped, the front's
log bytes and the bytes of its per-step "trains from policy_version" lines) and appends it to
docs/benchmarks.md (not with --no-append). A benchmark, not a test. Python 3.11 standard library and
clients/python only.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("AJET_BUILD_DIR") or os.path.join(REPO, "build"))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from ajet_swarm import ChatClient, SwarmClient, SwarmError, WorkflowOutput  # noqa: E402


def config_yaml(tokenizer, a, retention_setting):
    retention = ""
    if retention_setting:
        full, sample = retention_setting.split(",")
        retention = f"  store_retention:\n    full_steps: {full}\n    sample_episodes: {sample}\n"
    return ("ajet:\n"
            "  backbone: torch\n"
            "  model:\n"
            f"    path: {tokenizer}\n"
            "  data:\n"
            "    max_prompt_length: 448\n"
            "    max_response_length: 192\n"
            f"    train_batch_size: {a.batch_size}\n"
            "  rollout:\n"
            "    max_env_worker: 64\n"
            "    max_model_len: 2048\n"
            "    max_response_length_in_one_turn: 48\n"
            f"    num_repeat: {a.num_repeat}\n"
            "    temperature: 1.0\n"
            "  swarm_mode_sample_collection_method: rollout_until_finish_enough_episodes\n"
            "  engine:\n"
            "    threads: 1\n"
            "    kv_cache_memory_mb: 16\n" + retention)


def start_front(a, swarm, exp_dir, log_path, token):
    argv = [swarm, "start", "--port", "0", "--exp-dir", exp_dir, "--engine", a.engine]
    logf = open(log_path, "w")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=dict(os.environ, AJET_ADMIN_TOKEN=token))
    ready = threading.Event()
    port = []

    def drain():
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            logf.write(line)
            logf.flush()
            m = re.search(r"ajet-swarm ready:.*\(port (\d+)", line)
            if m and not ready.is_set():
                port.append(int(m.group(1)))
                ready.set()
        logf.close()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(60):
        raise RuntimeError(f"ajet-swarm did not become ready; see {log_path}")
    return proc, port[0]


def episode(client, rng, turns, words):
    ep = client.begin_episode(discard_episode_timeout=600)
    chat = ChatClient(ep.base_url, ep.api_key, max_retries=5)
    vocab = ["add", "seven", "to", "the", "sum", "of", "three", "and", "nine", "then", "multiply", "by", "two"]
    messages = [{"role": "system", "content": "You are a calculator agent. Use the tool."},
                {"role": "user", "content": " ".join(rng.choice(vocab) for _ in range(words))}]
    for _ in range(turns):
        answer = chat.chat(messages, max_tokens=48)
        messages.append({"role": "assistant", "content": answer.get("content") or ""})
        messages.append({"role": "user", "content": "result: " + str(rng.randint(0, 999))})
    client.end_episode(f"task-{rng.randint(0, 3999)}", ep.episode_uuid, WorkflowOutput(reward=rng.random()))
    return turns


def run_once(a, swarm, retention):
    """One front (`swarm`) through a.steps steps with `retention` ("" = the config's default): the sizes."""
    tmp = tempfile.mkdtemp(prefix="store-growth-")
    token = secrets.token_hex(16)
    log_path = os.path.join(tmp, "front.log")
    proc, port = start_front(a, swarm, os.path.join(tmp, "exp"), log_path, token)
    url = f"http://127.0.0.1:{port}"
    try:
        admin = SwarmClient(url, verbose=False, admin_token=token)
        admin.sync_train_config(config_yaml(a.tokenizer, a, retention))
        admin.start_engine()
        rng = random.Random(0)
        client = SwarmClient(url, verbose=False)  # one client, as classic mode's launcher
        calls = episodes = 0
        per_step = a.batch_size * a.num_repeat
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(a.workers) as pool:
            for step in range(a.steps):
                seeds = [rng.random() for _ in range(per_step)]
                futures = [pool.submit(episode, client, random.Random(s), a.turns, a.words) for s in seeds]
                for f in futures:
                    try:
                        calls += f.result()
                        episodes += 1
                    except SwarmError as e:
                        print(f"episode failed: {e}", file=sys.stderr)
                deadline = time.monotonic() + 120
                while admin.get_global_step() < step + 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
        elapsed = time.monotonic() - t0
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    store = [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(tmp, "exp")) for f in fs
             if re.search(r"\.(db|sqlite)(-wal)?$", f)]
    with open(log_path, "rb") as f:
        log = f.read().decode("utf-8", "replace").splitlines(keepends=True)
    staleness = sum(len(line.encode()) for line in log if "trains from policy_version" in line)
    result = {"steps": a.steps, "episodes": episodes, "calls": calls, "seconds": round(elapsed, 1),
              "retention": retention or "default", "swarm": swarm,
              "store_bytes": sum(os.path.getsize(p) for p in store),
              "log_bytes": sum(len(line.encode()) for line in log), "staleness_line_bytes": staleness}
    if a.keep:
        shutil.copytree(tmp, os.path.join(a.keep, f"{len(os.listdir(a.keep)) if os.path.isdir(a.keep) else 0}"),
                        dirs_exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result), file=sys.stderr)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--num-repeat", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3, help="chat calls per episode")
    ap.add_argument("--words", type=int, default=60, help="words of the first user message")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--swarm", default=os.path.join(BUILD, "bin", "ajet-swarm"))
    ap.add_argument("--engine", default=os.path.join(BUILD, "bin", "ajet-echo-engine"))
    ap.add_argument("--baseline", help="another build's ajet-swarm, run with the default config as a third column")
    ap.add_argument("--tokenizer", default=os.path.join(BUILD, "e2e_fixture", "tokenizer"))
    ap.add_argument("--keep", help="copy the experiment directories here at the end")
    ap.add_argument("--no-append", action="store_true", help="do not append to docs/benchmarks.md")
    a = ap.parse_args()
    runs = [("this build, default retention", a.swarm, ""), ("this build, every call kept (-1,0)", a.swarm, "-1,0")]
    if a.baseline:
        runs.append(("baseline", a.baseline, ""))
    results = [(name, run_once(a, swarm, retention)) for name, swarm, retention in runs]
    kept_all = results[1][1]["store_bytes"] or 1
    lines = [f"## Store and log growth over RL steps (bench/swarm/store_growth.py), {datetime.date.today().isoformat()}",
             "",
             f"`ajet-swarm` with `ajet-echo-engine` (torch backbone), {a.steps} steps of {a.batch_size} tasks x "
             f"{a.num_repeat} episodes x {a.turns} chat calls, one client with {a.workers} threads; the store is "
             "the SQLite file and its WAL after the front stopped. One run, each column a fresh front.", "",
             "| front | episodes | calls | store (MB) | store / every call kept | log (KB) | per-step staleness lines (KB) |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results:
        lines.append(f"| {name} | {r['episodes']} | {r['calls']} | {r['store_bytes'] / 1e6:.1f} | "
                     f"{r['store_bytes'] / kept_all:.2f} | {r['log_bytes'] / 1e3:.0f} | "
                     f"{r['staleness_line_bytes'] / 1e3:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.no_append:
        with open(os.path.join(REPO, "docs", "benchmarks.md"), "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
