#!/usr/bin/env python3
"""Training from live traffic: does the policy behind `ajet proxy` get better while an application
that knows nothing of training uses it?

One run: a fresh swarm front (build/bin/ajet-swarm, torch backbone, num_repeat 4) with the warmed-up
tiny model of the README's main command (exp/main/models/calc-sft); `ajet proxy` in front of it with
N = 4 and the rule judge bench/swarm/proxy_calc_judge.py; and a scripted application: USERS users
that each ask calc questions (the train split) through the proxy's /v1/chat/completions with the
calculator tool, run the tool calls themselves and ask again, as an application with a tool would. The
application sends no rewards and no task ids, and checks that every answer it gets is a well-formed
chat.completion. --app picks it: `node`, bench/swarm/proxy_calc_app.mjs with the official OpenAI SDK
(the default where node and the SDK of scripts/npm-deps.sh are there), or `python`, threads with
urllib in this file (the fallback, announced loudly). Held-out success is measured on the front
directly, before the application starts and after it has sent REQUESTS requests: VAL_TASKS held-out
calc tasks (the val split, seed 1, the main command's) x VAL_SAMPLES samples at temperature 1, through
eval episodes (never trained), with the built-in calc judge's rules. A vs B in one run: the same model
before and after, the same tasks.

    python3 bench/swarm/proxy_learning.py [--model exp/main/models/calc-sft] [--requests 480]
        [--users 8] [--val-tasks 100] [--val-samples 4] [--seeds "1 2 3"] [--judge-crash-every K]
        [--app node|python] [--no-append]

--judge-crash-every K makes the judge crash on about one group in K: those groups are dropped
(counted), and the application must still get every answer.

Needs $AJET_BUILD_DIR/bin/{ajet,ajet-swarm,ajet-engine} (default build/) and the model. Outputs under
exp/bench/proxy_learning/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "python_agent"))
from ajet_swarm import SwarmClient  # noqa: E402
from calculator import calc_tool_result, judge_calc_episode  # noqa: E402

BIN = os.path.join(os.path.abspath(os.environ.get("AJET_BUILD_DIR") or os.path.join(ROOT, "build")), "bin")
NODE_APP = os.path.join(ROOT, "bench", "swarm", "proxy_calc_app.mjs")

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


@dataclass
class AppRun:
    """What one application run did, whichever application ran."""
    sent: int  # requests sent to the proxy
    answers: int  # HTTP 200 answers received
    well_formed: int  # of those, well-formed chat.completions
    problems: list[str]  # failed or malformed answers, as text (Node: the first 20)
    successes: list[float]  # the application's finished conversations, judged offline, in order
    seconds: float
    tool_mismatches: int = 0  # tool results that differ from calc_tool_result's (the Node calculator)
    tool_results: int = 0


class Exhausted(Exception):
    """The application has sent all its requests: the conversation in progress is left unfinished."""


class PythonApplication:
    """USERS threads asking calc questions through the proxy until REQUESTS requests were sent."""

    def __init__(self, proxy_url: str, questions: list[dict], requests: int):
        self.url = proxy_url + "/v1/chat/completions"
        self.questions = questions
        self.budget = requests
        self.lock = threading.Lock()
        self.sent = 0
        self.failed = 0  # no HTTP 200 answer
        self.next_question = 0
        self.problems: list[str] = []
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
        try:
            status, text = post(self.url, {"model": "calc-assistant", **body})
        except OSError as e:  # connection refused or reset, timeout
            status, text = 0, repr(e)
        problem = well_formed(status, text)
        if problem:
            with self.lock:
                self.problems.append(problem)
                self.failed += status != 200
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

    def run(self, users: int) -> AppRun:
        t0 = time.time()
        threads = [threading.Thread(target=self.user) for _ in range(users)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        answers = self.sent - self.failed
        return AppRun(sent=self.sent, answers=answers, well_formed=self.sent - len(self.problems),
                      problems=self.problems, successes=self.successes, seconds=time.time() - t0)


def run_python_app(proxy: str, questions: list[dict], args, out: str) -> AppRun:
    return PythonApplication(proxy, questions, args.requests).run(args.users)


def run_node_app(proxy: str, questions: list[dict], args, out: str) -> AppRun:
    """bench/swarm/proxy_calc_app.mjs: the questions without their answers in, its summary out."""
    job, summary_file = os.path.join(out, "app_job.json"), os.path.join(out, "app_summary.json")
    with open(job, "w") as f:
        json.dump({"base_url": proxy + "/v1", "requests": args.requests, "users": args.users,
                   "questions": [{"messages": t["init_messages"], "tools": t["metadata"]["tools"]}
                                 for t in questions]}, f)
    with open(os.path.join(out, "app.log"), "w") as log:
        rc = subprocess.run(["node", NODE_APP, args.node_modules, job, summary_file], stderr=log).returncode
    if not os.path.exists(summary_file):
        raise RuntimeError(f"proxy_calc_app.mjs exited {rc} without a summary: see {out}/app.log")
    with open(summary_file) as f:
        s = json.load(f)
    successes = [judge_calc_episode(questions[c["question"]], c["messages"])["reward"] for c in s["conversations"]]
    mismatches = 0
    for expression, result in s["tool_results"]:
        try:
            mismatches += calc_tool_result(expression) != result
        except Exception:  # noqa: BLE001 (Python's calculator fails where Node's answers: a mismatch)
            mismatches += 1
    return AppRun(sent=s["sent"], answers=s["answers"], well_formed=s["well_formed"], problems=s["problems"],
                  successes=successes, seconds=s["seconds"], tool_mismatches=mismatches,
                  tool_results=len(s["tool_results"]))


def node_modules_with_sdk() -> tuple[str, str]:
    """(node_modules, '') when node and the OpenAI SDK of scripts/npm-deps.sh are there, else ('', why)."""
    if not shutil.which("node"):
        return "", "node is not installed"
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "npm-deps.sh")], capture_output=True, text=True)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        return "", f"scripts/npm-deps.sh exited {r.returncode}: {r.stderr.strip()[-300:]}"
    if not os.path.isfile(os.path.join(lines[-1], "openai", "package.json")):
        return "", f"no openai package under {lines[-1]}"
    return lines[-1], ""


def choose_app(args) -> str:
    """The application's description for the table; sets args.run_app (and args.node_modules)."""
    if args.app in (None, "node"):
        args.node_modules, why = node_modules_with_sdk()
        if not why:
            args.run_app = run_node_app
            sdk = json.load(open(os.path.join(args.node_modules, "openai", "package.json")))["version"]
            node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
            return f"Node {node} with the official `openai` {sdk} SDK, bench/swarm/proxy_calc_app.mjs"
        if args.app == "node":
            sys.exit(f"proxy_learning: --app node: {why}")
        print(f"\n*** proxy_learning: the Node application cannot run ({why}): FALLING BACK to the Python "
              f"application (threads, urllib). Pass --app python to choose it. ***\n", file=sys.stderr, flush=True)
    args.run_app = run_python_app
    return "Python threads with urllib, bench/swarm/proxy_learning.py"


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
    ajet = os.path.join(BIN, "ajet")
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
            [os.path.join(BIN, "ajet-swarm"), "start", "--port", str(front_port), "--exp-dir",
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
            [ajet, "proxy", "--front", front, "--listen",
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

        app = args.run_app(proxy, train, args, out)
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
    for problem in app.problems[:5]:
        print("not answered well-formed:", problem)
    if app.tool_mismatches:
        print(f"proxy_learning: seed {seed}: {app.tool_mismatches} of {app.tool_results} tool results differ from "
              f"calc_tool_result's", flush=True)
    q = max(1, len(app.successes) // 4)
    return {"seed": seed, "before": before, "after": after, "sent": app.sent, "answers": app.answers,
            "malformed": app.answers - app.well_formed, "answered": app.well_formed, "seconds": app.seconds,
            "steps": step, "tool_mismatches": app.tool_mismatches, "tool_results": app.tool_results,
            "conversations": len(app.successes),
            "app_first": sum(app.successes[:q]) / q, "app_last": sum(app.successes[-q:]) / q,
            "trained": stats["groups_trained"], "dropped": stats["groups_dropped_by_reason"],
            "judge_failures": stats["judge_failures_by_kind"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=os.path.join(ROOT, "exp", "main", "models", "calc-sft"))
    p.add_argument("--requests", type=int, default=480, help="application requests through the proxy")
    p.add_argument("--users", type=int, default=8, help="application users at once")
    p.add_argument("--batch", type=int, default=8, help="train_batch_size: requests (groups) per train step")
    p.add_argument("--val-tasks", type=int, default=100)
    p.add_argument("--val-samples", type=int, default=4)
    p.add_argument("--seeds", default="1", help="engine seeds (and the questions' order), e.g. \"1 2 3\"")
    p.add_argument("--judge-crash-every", type=int, default=0,
                   help="the judge crashes on about one group in K (0: never): no request may be lost")
    p.add_argument("--app", choices=("node", "python"),
                   help="the application: node (the default where node and the OpenAI SDK are there) or python")
    p.add_argument("--no-append", action="store_true", help="print the table, leave docs/benchmarks.md alone")
    args = p.parse_args()
    application = choose_app(args)
    args.app = "node" if args.run_app is run_node_app else "python"
    print(f"proxy_learning: the application: {application}", flush=True)

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
               f"{sum(r['sent'] - r['answered'] for r in rows)} (no answer at all: "
               f"{sum(r['sent'] - r['answers'] for r in rows)}). The application: {application}")
    if args.app == "node":
        summary += (f"; its calculator's results differed from calc_tool_result's (the Python application's) on "
                    f"{sum(r['tool_mismatches'] for r in rows)} of {sum(r['tool_results'] for r in rows)} calls")
    summary += "."
    table = "\n".join(lines)
    print(table)
    print(summary)
    if not args.no_append:
        with open(os.path.join(ROOT, "docs", "benchmarks.md"), "a") as f:
            f.write(f"\n## {datetime.date.today()}: training from live traffic through `ajet proxy` "
                    f"(bench/swarm/proxy_learning.py)\n\n"
                    f"`python3 bench/swarm/proxy_learning.py --app {args.app} --seeds \"{args.seeds}\" "
                    f"--requests {args.requests}"
                    f"{' --judge-crash-every ' + str(args.judge_crash_every) if args.judge_crash_every else ''}`: "
                    f"a scripted application ({args.users} users, {application}; no rewards, no task ids) asks calc "
                    f"questions with the calculator tool through `ajet proxy` (N = 4, `--return best`, the rule "
                    f"judge `bench/swarm/proxy_calc_judge.py`) in front of a torch front training "
                    f"{args.model} (train_batch_size {args.batch} requests per step, lr 1e-4). Held-out: "
                    f"{args.val_tasks} val tasks × {args.val_samples} samples at T=1 on eval episodes of the "
                    f"front, before and after. 2-core x86_64 CPU shared with other jobs.\n\n"
                    f"{table}\n\n{summary}\n")
    return 0 if all(r["answered"] == r["sent"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
