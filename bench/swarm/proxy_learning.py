#!/usr/bin/env python3
"""Training from live traffic: does the policy behind `ajet proxy` get better while an application
that knows nothing of training uses it?

One run: a fresh swarm front (build/bin/ajet-swarm, torch backbone, num_repeat 4) with the warmed-up
tiny model of the README's main command (exp/main/models/calc-sft); `ajet proxy` in front of it with
N = 4 and the rule judge bench/swarm/proxy_calc_judge.py; and a scripted application: USERS threads
that each ask calc questions (the train split) through the proxy's /v1/chat/completions with the
calculator tool, run the tool calls themselves and ask again, as an application with a tool would. The
application sends no rewards and no task ids, and checks that every answer it gets is a well-formed
chat.completion. Held-out success is measured on the front directly, before the application starts
and after it has sent REQUESTS requests: VAL_TASKS held-out calc tasks (the val split, seed 1, the
main command's) x VAL_SAMPLES samples at temperature 1, through eval episodes (never trained), with
the built-in calc judge's rules. A vs B in one run: the same model before and after, the same tasks.

    python3 bench/swarm/proxy_learning.py [--model exp/main/models/calc-sft] [--requests 480]
        [--users 8] [--val-tasks 100] [--val-samples 4] [--seeds "1 2 3"] [--judge-crash-every K]
        [--no-append]

--judge-crash-every K makes the judge crash on about one group in K: those groups are dropped
(counted), and the application must still get every answer.

Needs build/bin/{ajet,ajet-swarm,ajet-engine} and the model. Outputs under exp/bench/proxy_learning/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "python_agent"))
from ajet_swarm import SwarmClient  # noqa: E402
from calculator import calc_tool_result, judge_calc_episode  # noqa: E402

SERVER_CONFIG = """\
# bench/swarm/proxy_learning.py: examples/configs/swarm_calc.yaml with a group of 4 per request
ajet:
  backbone: torch
  model: {{path: {model}}}
  data: {{max_prompt_length: 832, max_response_length: 192, train_batch_size: {batch}}}
  rollout: {{num_repeat: 4, max_env_worker: 64, temperature: 1.0,
            max_response_length_in_one_turn: 48, max_model_len: 1024}}
  trainer_common:
    use_kl_loss: false
    entropy_coeff: 0.0
    mini_batch_num: 2
    algorithm: {{adv_estimator: grpo}}
    optim: {{lr: 1.0e-4, betas: [0.9, 0.99], weight_decay: 0.0, grad_clip: 1.0}}
  engine: {{threads: 2, kv_cache_memory_mb: 256, seed: {seed}}}
"""
MAX_TURNS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float = 900) -> tuple[int, str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def tasks(ajet: str, split: str, n: int, seed: int) -> list[dict]:
    out = subprocess.run([ajet, "tasks", "generate", "--task", "calc", "--split", split, "--n", str(n),
                          "--seed", str(seed)], check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def well_formed(status: int, text: str) -> str:
    """'' when the answer is a well-formed chat.completion, else what is wrong."""
    if status != 200:
        return f"HTTP {status}: {text[:200]}"
    try:
        body = json.loads(text)
        choice = body["choices"][0]
        message = choice["message"]
        assert body["object"] == "chat.completion", "object"
        assert message["role"] == "assistant", "role"
        assert choice["finish_reason"] in ("stop", "tool_calls", "length"), "finish_reason"
        assert message.get("content") is None or isinstance(message["content"], str), "content"
        for call in message.get("tool_calls") or []:
            assert call["type"] == "function" and isinstance(call["function"]["arguments"], str), "tool_calls"
    except Exception as e:  # noqa: BLE001 (anything malformed counts)
        return f"malformed answer ({e}): {text[:200]}"
    return ""


def converse(send, task: dict, params: dict) -> list[dict]:
    """One calc conversation: the model may call the calculator (at most 3 times), then answers."""
    messages = [dict(m) for m in task["init_messages"]]
    tools = task["metadata"]["tools"]
    calls = 0
    for _ in range(MAX_TURNS):
        message = send({"messages": messages, "tools": tools, **params})
        if message is None:
            break
        messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
        if not message.get("tool_calls"):
            break
        for call in message["tool_calls"]:
            calls += 1
            try:
                expression = json.loads(call["function"]["arguments"] or "{}").get("expression", "")
                result = calc_tool_result(expression) if calls <= 3 else "error: tool call limit reached (3)"
            except (ValueError, AttributeError):
                result = "error: arguments are not a JSON object"
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": result})
        if calls > 3:
            break
    return messages


class Exhausted(Exception):
    """The application has sent all its requests: the conversation in progress is left unfinished."""


class Application:
    """USERS threads asking calc questions through the proxy until REQUESTS requests were sent."""

    def __init__(self, proxy_url: str, questions: list[dict], requests: int):
        self.url = proxy_url + "/v1/chat/completions"
        self.questions = questions
        self.budget = requests
        self.lock = threading.Lock()
        self.sent = 0
        self.next_question = 0
        self.malformed: list[str] = []
        self.successes: list[float] = []  # the application's own conversations, judged offline

    def take_request(self) -> bool:
        with self.lock:
            if self.sent >= self.budget:
                return False
            self.sent += 1
            return True

    def send(self, body: dict):
        if not self.take_request():
            raise Exhausted()
        status, text = post(self.url, {"model": "calc-assistant", **body})
        problem = well_formed(status, text)
        if problem:
            with self.lock:
                self.malformed.append(problem)
            return None
        return json.loads(text)["choices"][0]["message"]

    def user(self):
        while True:
            with self.lock:
                if self.sent >= self.budget:
                    return
                task = self.questions[self.next_question % len(self.questions)]
                self.next_question += 1
            try:
                messages = converse(self.send, task, {})
            except Exhausted:
                return
            with self.lock:
                self.successes.append(judge_calc_episode(task, messages)["reward"])


def held_out(front: str, val: list[dict], samples: int) -> float:
    """Mean success of `samples` T=1 episodes per held-out task, on eval episodes (never trained)."""
    client = SwarmClient(front, verbose=False)

    def one(task):
        episode = client.begin_episode(episode_type="eval", discard_episode_timeout=600)
        chat = episode.chat_client()
        messages = converse(lambda body: chat.chat(body["messages"], body["tools"], temperature=1.0, max_tokens=48),
                            task, {})
        reward = judge_calc_episode(task, messages)["reward"]
        client.end_episode(task["task_id"], episode.episode_uuid, reward)
        return reward

    with ThreadPoolExecutor(16) as pool:
        rewards = list(pool.map(one, [t for t in val for _ in range(samples)]))
    return sum(rewards) / len(rewards)


def run_once(args, seed: int, out: str) -> dict:
    """One fresh front + proxy + application; the row of the table."""
    ajet = os.path.join(ROOT, "build", "bin", "ajet")
    os.makedirs(out)
    train = tasks(ajet, "train", 2000, seed)
    val = tasks(ajet, "val", args.val_tasks, 1)
    train_file = os.path.join(out, "train_tasks.jsonl")
    with open(train_file, "w") as f:
        f.writelines(json.dumps(t) + "\n" for t in train)
    config = os.path.join(out, "config.yaml")
    with open(config, "w") as f:
        f.write(SERVER_CONFIG.format(model=os.path.abspath(args.model), batch=args.batch, seed=seed))

    front_port, proxy_port = free_port(), free_port()
    front = f"http://127.0.0.1:{front_port}"
    procs = []
    try:
        procs.append(subprocess.Popen(
            [os.path.join(ROOT, "build", "bin", "ajet-swarm"), "start", "--port", str(front_port), "--exp-dir",
             os.path.join(out, "swarm"), "--conf", config, "--max-claims-per-client", "-1"],
            stdout=open(os.path.join(out, "swarm.log"), "w"), stderr=subprocess.STDOUT))
        client = SwarmClient(front, verbose=False)
        deadline = time.time() + 120
        while True:
            try:
                get_json(front + "/health")
                break
            except Exception:  # noqa: BLE001 (not up yet)
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        client.start_engine()
        before = held_out(front, val, args.val_samples)
        print(f"proxy_learning: seed {seed}: held-out T=1 success before: {before:.3f}", flush=True)

        judge = f"python3 {os.path.join(ROOT, 'bench', 'swarm', 'proxy_calc_judge.py')} {train_file}"
        if args.judge_crash_every:
            judge += f" --crash-every {args.judge_crash_every}"
        procs.append(subprocess.Popen(
            [os.path.join(ROOT, "build", "bin", "ajet"), "proxy", "--front", front, "--listen",
             f"127.0.0.1:{proxy_port}", "--n", "4", "--judge-command", judge, "--return", "best"],
            stdout=open(os.path.join(out, "proxy.log"), "w"), stderr=subprocess.STDOUT))
        proxy = f"http://127.0.0.1:{proxy_port}"
        deadline = time.time() + 60
        while True:
            try:
                get_json(proxy + "/health")
                break
            except Exception:  # noqa: BLE001 (not up yet)
                if time.time() > deadline:
                    raise
                time.sleep(0.2)

        app = Application(proxy, train, args.requests)
        t1 = time.time()
        threads = [threading.Thread(target=app.user) for _ in range(args.users)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        app_seconds = time.time() - t1
        # The groups the application's last answers started end after those answers: wait for them.
        deadline = time.time() + 300
        while get_json(proxy + "/proxy/stats")["in_flight"] > 0 and time.time() < deadline:
            time.sleep(0.5)
        stats = get_json(proxy + "/proxy/stats")
        step = get_json(front + "/get_engine_status")["global_step"]
        procs[-1].terminate()
        procs[-1].wait(timeout=120)

        after = held_out(front, val, args.val_samples)
        print(f"proxy_learning: seed {seed}: held-out T=1 success after: {after:.3f}", flush=True)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    for problem in app.malformed[:5]:
        print("malformed:", problem)
    q = max(1, len(app.successes) // 4)
    return {"seed": seed, "before": before, "after": after, "sent": app.sent, "malformed": len(app.malformed),
            "answered": app.sent - len(app.malformed), "seconds": app_seconds, "steps": step,
            "conversations": len(app.successes),
            "app_first": sum(app.successes[:q]) / q, "app_last": sum(app.successes[-q:]) / q,
            "trained": stats["groups_trained"], "dropped": stats["groups_dropped_by_reason"],
            "judge_failures": stats["judge_failures_by_kind"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=os.path.join(ROOT, "exp", "main", "models", "calc-sft"))
    p.add_argument("--requests", type=int, default=480, help="application requests through the proxy")
    p.add_argument("--users", type=int, default=8, help="application threads at once")
    p.add_argument("--batch", type=int, default=8, help="train_batch_size: requests (groups) per train step")
    p.add_argument("--val-tasks", type=int, default=100)
    p.add_argument("--val-samples", type=int, default=4)
    p.add_argument("--seeds", default="1", help="engine seeds (and the questions' order), e.g. \"1 2 3\"")
    p.add_argument("--judge-crash-every", type=int, default=0,
                   help="the judge crashes on about one group in K (0: never): no request may be lost")
    p.add_argument("--no-append", action="store_true", help="print the table, leave docs/benchmarks.md alone")
    args = p.parse_args()

    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    rows = [run_once(args, int(seed), os.path.join(ROOT, "exp", "bench", "proxy_learning", f"{stamp}-seed{seed}"))
            for seed in args.seeds.split()]
    lines = ["| seed | held-out T=1 before → after | gain | app requests answered well-formed | "
             "app's own success, first → last quarter | groups trained / dropped | judge failures | "
             "train steps | app time |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {100 * r['before']:.1f}% → {100 * r['after']:.1f}% | "
                     f"{100 * (r['after'] - r['before']):+.1f} | {r['answered']} of {r['sent']} | "
                     f"{100 * r['app_first']:.1f}% → {100 * r['app_last']:.1f}% | "
                     f"{r['trained']} / {sum(r['dropped'].values())} {json.dumps(r['dropped'])} | "
                     f"{json.dumps(r['judge_failures'])} | {r['steps']} | {r['seconds']:.0f} s |")
    gains = [r["after"] - r["before"] for r in rows]
    afters = [r["after"] for r in rows]
    summary = (f"Median held-out T=1 success after {args.requests} requests: {100 * statistics.median(afters):.1f}% "
               f"(range {100 * min(afters):.1f}-{100 * max(afters):.1f}), gain "
               f"{100 * statistics.median(gains):+.1f} points ({100 * min(gains):+.1f} to {100 * max(gains):+.1f}); "
               f"answers not well-formed: {sum(r['malformed'] for r in rows)}; requests lost: "
               f"{sum(r['sent'] - r['answered'] for r in rows)}.")
    table = "\n".join(lines)
    print(table)
    print(summary)
    if not args.no_append:
        with open(os.path.join(ROOT, "docs", "benchmarks.md"), "a") as f:
            f.write(f"\n## {datetime.date.today()}: training from live traffic through `ajet proxy` "
                    f"(bench/swarm/proxy_learning.py)\n\n"
                    f"`python3 bench/swarm/proxy_learning.py --seeds \"{args.seeds}\" --requests {args.requests}"
                    f"{' --judge-crash-every ' + str(args.judge_crash_every) if args.judge_crash_every else ''}`: "
                    f"a scripted application ({args.users} users, Python, no rewards, no task ids) asks calc "
                    f"questions with the calculator tool through `ajet proxy` (N = 4, `--return best`, the rule "
                    f"judge `bench/swarm/proxy_calc_judge.py`) in front of a torch front training "
                    f"{args.model} (train_batch_size {args.batch} requests per step, lr 1e-4). Held-out: "
                    f"{args.val_tasks} val tasks × {args.val_samples} samples at T=1 on eval episodes of the "
                    f"front, before and after. 2-core x86_64 CPU shared with other jobs.\n\n"
                    f"{table}\n\n{summary}\n")
    return 0 if all(r["malformed"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
