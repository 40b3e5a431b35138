#!/usr/bin/env python3
"""The token viewer's speed in Debian's chromium: an episode page with ~20,000 tokens against ~2,000,
and the page's renderer against a naive one (a DOM element and a listener per token) on the same
20,000-token episode. The episodes are real: ajet-swarm with the real engine on a micro model, made
through its OpenAI endpoint (10 calls with distinct ~2k-token prompts = 10 training samples).

    bench/web/ui_bench.py [--build build] [--runs 5] [--no-append]

Prints a table and appends it with the date to docs/benchmarks.md. Needs chromium and the npm
packages (scripts/setup.sh --tests, scripts/npm-deps.sh).
"""
import argparse
import datetime
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "bench-token"


def call(url, path, body=None, timeout=600):
    req = urllib.request.Request(url + path, method="POST" if body is not None else "GET",
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        sys.exit(f"ui_bench: {path}: HTTP {e.code}: {e.read().decode(errors='replace')[:500]}")


def chat(url, key, messages, max_tokens):
    req = urllib.request.Request(url + "/v1/chat/completions", method="POST",
                                 data=json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        sys.exit(f"ui_bench: chat: HTTP {e.code}: {e.read().decode(errors='replace')[:500]}")


def words(rng, n):
    vocab = ["the", "agent", "calls", "a", "tool", "with", "numbers", "and", "reads", "result", "then", "answers",
             "12", "30", "plus", "minus", "times", "grid", "lake", "moves", "left", "right", "up", "down"]
    return " ".join(rng.choice(vocab) for _ in range(n))


def make_episode(url, rng, calls, prompt_words, max_tokens):
    claimed = call(url, "/claim_episode", {"client_uuid": "ui-bench", "episode_type": "train",
                                           "discard_episode_timeout": 600})
    key = claimed["openai_api_key"]
    for c in range(calls):
        chat(url, key, [{"role": "user", "content": f"call {c}: " + words(rng, prompt_words)}], max_tokens)
    call(url, "/end_episode", {"client_uuid": "ui-bench", "episode_uuid": claimed["episode_uuid"], "task_id": "t",
                               "workflow_output": {"reward": 1.0}})
    doc = call(url, "/episodes/" + claimed["episode_uuid"])
    return claimed["episode_uuid"], sum(s["num_tokens"] for s in doc["samples"]), len(doc["samples"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    bin_dir = os.path.join(os.path.abspath(args.build), "bin")
    for b in ("ajet", "ajet-swarm", "ajet-engine"):
        if not os.path.exists(os.path.join(bin_dir, b)):
            sys.exit(f"ui_bench: {bin_dir}/{b} is missing: build it first")
    node_modules = subprocess.run(["bash", os.path.join(REPO, "scripts/npm-deps.sh")], capture_output=True,
                                  text=True).stdout.strip().splitlines()[-1]
    tmp = tempfile.mkdtemp(prefix="ajet_ui_bench_")
    swarm = None
    try:
        tok, model = os.path.join(tmp, "tok"), os.path.join(tmp, "model")
        subprocess.run([f"{bin_dir}/ajet", "tokenizer", "train", "--corpus",
                        os.path.join(REPO, "tests/text/data/tokenizer_corpus.jsonl"), "--vocab-size", "400", "--out", tok],
                       check=True, capture_output=True)
        subprocess.run([f"{bin_dir}/ajet-engine", "model", "init", "--preset", "micro", "--tokenizer", tok, "--seed", "7",
                        "--out", model], check=True, capture_output=True)
        cfg_path = os.path.join(model, "config.json")
        cfg = json.load(open(cfg_path))
        cfg["max_position_embeddings"] = 8192
        json.dump(cfg, open(cfg_path, "w"))
        swarm = subprocess.Popen([f"{bin_dir}/ajet-swarm", "start", "--port", "0", "--exp-dir", os.path.join(tmp, "server"),
                                  "--admin-token", TOKEN], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        url = None
        for line in swarm.stdout:
            m = re.search(r"ajet-swarm ready:.*\(port (\d+)", line)
            if m:
                url = f"http://127.0.0.1:{m.group(1)}"
                break
        if url is None:
            sys.exit("ui_bench: ajet-swarm did not start")
        threading.Thread(target=lambda: [None for _ in swarm.stdout], daemon=True).start()
        yaml = (f"ajet:\n  backbone: debug\n  model:\n    path: {model}\n  data:\n    max_prompt_length: 4096\n"
                "    max_response_length: 256\n    train_batch_size: 64\n  rollout:\n    max_env_worker: 8\n"
                "    max_model_len: 4608\n    max_response_length_in_one_turn: 32\n    num_repeat: 2\n"
                "  engine:\n    threads: 2\n    kv_cache_memory_mb: 256\n")
        call(url, "/sync_train_config", {"yaml_as_string": yaml})
        call(url, "/start_engine", {})
        while call(url, "/get_engine_status")["engine_status"] != "ENGINE.ROLLING":
            time.sleep(0.5)
        rng = random.Random(1)
        small = make_episode(url, rng, 1, 420, 32)
        large = make_episode(url, rng, 10, 420, 32)
        print(f"episodes: small {small[1]} tokens in {small[2]} samples, large {large[1]} tokens in {large[2]} samples",
              file=sys.stderr)
        proc = subprocess.run(["node", os.path.join(REPO, "bench/web/ui_bench.mjs"), url, TOKEN, small[0], large[0],
                               str(args.runs)], capture_output=True, text=True,
                              env=dict(os.environ, NODE_MODULES=node_modules))
        if proc.returncode != 0:
            sys.exit("ui_bench: the browser part failed:\n" + proc.stdout + proc.stderr)
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        if swarm is not None:
            swarm.terminate()
            try:
                swarm.wait(timeout=30)
            except subprocess.TimeoutExpired:
                swarm.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    med = lambda xs: statistics.median(xs)
    rng_ = lambda xs: f"{min(xs):.0f}–{max(xs):.0f}"
    rows = [("A: page, small episode", small[1], res["small_total"], res["small_render"]),
            ("B: page, large episode", large[1], res["large_total"], res["large_render"]),
            ("C: naive renderer, large episode", large[1], res["naive_total"], res["naive_render"])]
    cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
    chromium = subprocess.run(["chromium", "--version"], capture_output=True, text=True).stdout.strip()
    lines = [f"## Token viewer: episode page render time in chromium (bench/web/ui_bench.py), {datetime.date.today()}", "",
             f"`bench/web/ui_bench.py --runs {args.runs}`: real episodes on a real front (micro model, real engine); "
             "the page opened fresh each run. *Total* = navigation to the page's ready mark (fetch of "
             "`/episodes/{uuid}`, parsing, building the DOM, first layout); *build* = building the DOM from the "
             "parsed answer until the next frame. C draws the same tokens with one element and three listeners per token "
             f"(what the page avoids). Median (range) over {args.runs} runs; {chromium}; {cpu}, 2 cores.", "",
             "| page | tokens | total ms | build ms |", "|---|---:|---:|---:|"]
    for name, n, total, build in rows:
        lines.append(f"| {name} | {n:,} | {med(total):.0f} ({rng_(total)}) | {med(build):.0f} ({rng_(build)}) |")
    lines += ["", f"B / A (10x the tokens): {med(res['large_total']) / med(res['small_total']):.2f}x the total time; "
              f"C / B (naive over ours, build): {med(res['naive_render']) / med(res['large_render']):.2f}x. "
              f"Target: B under 1,000 ms ({'met' if med(res['large_total']) < 1000 else 'NOT met'}).", ""]
    text = "\n".join(lines)
    print(text)
    if not args.no_append:
        with open(os.path.join(REPO, "docs/benchmarks.md"), "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
