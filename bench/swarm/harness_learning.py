#!/usr/bin/env python3
"""Does an agent that is a separate process, run by the harness in a sandbox per episode, learn?

Per seed: a fresh swarm front (build/bin/ajet-swarm) with the warmed-up tiny model of the README's
main command (exp/main/models/calc-sft), the agent of examples/harness_agent (the official openai
SDK in Node; its calculator tool is evaluated by the sandbox's shell; verify.py gives the reward),
run by `python3 -m ajet_swarm harness`. It measures held-out success (greedy, one episode per task of
examples/first_agent/val.jsonl, through the same harness) before training and after TRAIN_SECONDS of
training on examples/first_agent/train.jsonl, and prints one row per seed and the median and range.
A vs B in one run: the same model before and after, the same held-out tasks, the same harness.

    python3 bench/swarm/harness_learning.py [--seeds 1,2,3] [--train-seconds 900] [--no-append]

Needs: build/bin/ajet-swarm, the model, bwrap (scripts/setup.sh), node and the npm `openai` package
(scripts/npm-deps.sh puts it in ~/.cache/agentjet/node). Run as root (the sandboxes' cgroups).
Outputs under exp/bench/harness_learning/<time>/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
AGENT_DIR = os.path.join(ROOT, "examples", "harness_agent")
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
from ajet_swarm.config_yaml import to_yaml  # noqa: E402

SERVER_CONFIG = """\
# bench/swarm/harness_learning.py: examples/configs/swarm_calc.yaml with its engine seed
ajet:
  backbone: torch
  model: {{path: {model}}}
  data: {{max_prompt_length: 832, max_response_length: 192, train_batch_size: 8}}
  rollout: {{num_repeat: 4, max_env_worker: 32, temperature: 1.0,
            max_response_length_in_one_turn: 48, max_model_len: 1024}}
  trainer_common:
    use_kl_loss: false
    entropy_coeff: 0.0
    mini_batch_num: 2
    algorithm: {{adv_estimator: grpo}}
    optim: {{lr: 1.0e-4, betas: [0.9, 0.99], weight_decay: 0.0, grad_clip: 1.0}}
  engine: {{threads: 2, kv_cache_memory_mb: 256, seed: {seed}}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def harness_tasks(src: str, dst: str, seed: int) -> int:
    """examples/first_agent's task lines as harness tasks: prompt and answer."""
    tasks = []
    for line in open(src):
        if line.strip():
            t = json.loads(line)
            tasks.append({"task_id": t["task_id"], "prompt": t["main_query"], "answer": t["metadata"]["answer"]})
    random.Random(seed).shuffle(tasks)
    with open(dst, "w") as f:
        for t in tasks:
            f.write(json.dumps(t) + "\n")
    return len(tasks)


def harness_config(path: str, url: str, tasks: str, state_dir: str, *, episode_type: str, repeat: int,
                   epochs: int, concurrency: int, npm_root: str) -> None:
    conf = {
        "swarm_url": url, "tasks": tasks, "concurrency": concurrency, "repeat": repeat, "epochs": epochs,
        "episode_type": episode_type,
        "sampling": {"temperature": 0.0} if episode_type == "eval" else {},
        "agent": {"template": "command", "command": f"node {AGENT_DIR}/agent.mjs", "timeout": 120},
        "verifier": {"command": f"python3 {AGENT_DIR}/verify.py", "timeout": 30},
        "sandbox": {"memory_mb": 1024, "pids": 256, "cpus": 2.0, "headroom": 30,
                    "ro_binds": [AGENT_DIR, npm_root], "state_dir": state_dir},
    }
    with open(path, "w") as f:
        f.write(to_yaml(conf))


def run_harness(conf: str, log: str, env: dict, stop_after: float | None = None) -> tuple[dict, float]:
    t0 = time.monotonic()
    with open(log, "w") as lf:
        p = subprocess.Popen([sys.executable, "-m", "ajet_swarm", "harness", "--conf", conf], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=lf, text=True)
        if stop_after is not None:
            try:
                p.wait(timeout=stop_after)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=3600)
    elapsed = time.monotonic() - t0
    for line in reversed(out.splitlines()):
        if line.startswith('{"harness_summary"'):
            return json.loads(line)["harness_summary"], elapsed
    raise RuntimeError(f"{conf}: no harness summary (exit {p.returncode}); see {log}")


def one_seed(args, seed: int, out: str) -> dict:
    os.makedirs(out, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "clients", "python"))
    server = subprocess.Popen([os.path.join(ROOT, "build", "bin", "ajet-swarm"), "start", "--port", str(port),
                               "--exp-dir", os.path.join(out, "swarm")], cwd=ROOT,
                              stdout=open(os.path.join(out, "swarm.log"), "w"), stderr=subprocess.STDOUT)
    try:
        conf = os.path.join(out, "server.yaml")
        with open(conf, "w") as f:
            f.write(SERVER_CONFIG.format(model=os.path.abspath(args.model), seed=seed))
        subprocess.run([sys.executable, "-m", "ajet_swarm", "--swarm-url", url, "start", "--conf", conf], cwd=ROOT,
                       env=env, check=True, timeout=600, stdout=open(os.path.join(out, "start.log"), "w"),
                       stderr=subprocess.STDOUT)
        train = os.path.join(out, "train.jsonl")
        val = os.path.join(out, "val.jsonl")
        harness_tasks(args.train_tasks, train, seed)
        n_val = harness_tasks(args.val_tasks, val, 0)
        confs = {}
        for name, tasks, etype, repeat, epochs in (("eval", val, "eval", 1, 1), ("train", train, "train", 4, 1000)):
            confs[name] = os.path.join(out, f"harness_{name}.yaml")
            harness_config(confs[name], url, tasks, os.path.join(out, f"state_{name}"), episode_type=etype,
                           repeat=repeat, epochs=epochs, concurrency=args.concurrency, npm_root=args.npm_root)
        before, eval_s = run_harness(confs["eval"], os.path.join(out, "eval_before.log"), env)
        if before["ended"] < n_val:
            raise RuntimeError(f"held-out run: {before['ended']} of {n_val} episodes ended, aborted "
                               f"{before['aborted']}; see {out}/eval_before.log")
        step0 = get_json(url + "/get_engine_status")["global_step"]
        trained, train_s = run_harness(confs["train"], os.path.join(out, "train.log"), env, args.train_seconds)
        steps = get_json(url + "/get_engine_status")["global_step"] - step0
        after, _ = run_harness(confs["eval"], os.path.join(out, "eval_after.log"), env)
        return {"seed": seed, "val_tasks": n_val, "before": before["mean_reward"], "after": after["mean_reward"],
                "eval_ended": [before["ended"], after["ended"]], "steps": steps, "train_s": train_s,
                "eval_s": eval_s, "train_episodes": trained["ended"], "train_aborted": trained["aborted"],
                "train_mean_reward": trained["mean_reward"]}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--train-seconds", type=float, default=900.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--model", default=os.path.join(ROOT, "exp", "main", "models", "calc-sft"))
    ap.add_argument("--train-tasks", default=os.path.join(ROOT, "examples", "first_agent", "train.jsonl"))
    ap.add_argument("--val-tasks", default=os.path.join(ROOT, "examples", "first_agent", "val.jsonl"))
    ap.add_argument("--npm-root", default=os.environ.get("AJET_NPM_CACHE",
                                                         os.path.expanduser("~/.cache/agentjet/node")))
    ap.add_argument("--no-append", action="store_true", help="print the table, leave docs/benchmarks.md alone")
    args = ap.parse_args()
    for need in (os.path.join(args.model, "config.json"), os.path.join(args.npm_root, "node_modules", "openai")):
        if not os.path.exists(need):
            sys.exit(f"harness_learning: {need} is missing (scripts/run.sh makes the model; "
                     "scripts/npm-deps.sh the npm packages)")
    link = os.path.join(AGENT_DIR, "node_modules")
    if not os.path.exists(link):
        os.symlink(os.path.join(args.npm_root, "node_modules"), link)
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    base = os.path.join(ROOT, "exp", "bench", "harness_learning", stamp)
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        row = one_seed(args, seed, os.path.join(base, f"seed{seed}"))
        rows.append(row)
        print(json.dumps(row), flush=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    gains = [100 * (r["after"] - r["before"]) for r in rows]
    table = ["| seed | held-out before | after | points | steps | train s | train episodes | aborted |",
             "|---|---|---|---|---|---|---|---|"]
    for r, g in zip(rows, gains):
        table.append(f"| {r['seed']} | {100 * r['before']:.1f} % | {100 * r['after']:.1f} % | {g:+.1f} | {r['steps']} | "
                     f"{r['train_s']:.0f} | {r['train_episodes']} | {sum(r['train_aborted'].values())} |")
    summary = (f"median {statistics.median(gains):+.1f} points (range {min(gains):+.1f} to {max(gains):+.1f}) over "
               f"{len(rows)} seed(s), {args.train_seconds:.0f} s of training each, {rows[0]['val_tasks']} held-out "
               f"tasks (greedy), concurrency {args.concurrency}")
    print("\n".join(table) + "\n" + summary)
    if not args.no_append:
        with open(os.path.join(ROOT, "docs", "benchmarks.md"), "a") as f:
            f.write(f"\n## {datetime.date.today()}: an agent process in harness sandboxes learns "
                    f"(bench/swarm/harness_learning.py)\n\n{cpu}, {os.cpu_count()} cores. examples/harness_agent "
                    "(openai SDK in Node, its calculator evaluated by the sandbox's shell, verify.py the reward) "
                    "on the warmed-up tiny calc model; held-out success before and after training, the same "
                    "harness for both.\n\n" + "\n".join(table) + f"\n\n{summary}.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
