#!/usr/bin/env python3
"""A calculator agent trained through an AgentJet swarm server. Standard library only.

For each task: claim an episode, let the model answer an arithmetic question with a `calculator`
tool, run the tool calls it makes, and report reward 1 for a correct final answer (else 0). Tasks are
its own questions ({task_id, question, answer}: the last number of the reply counts) or built-in
`calc` tasks (docs/tasks.md: their messages and tool, <answer>N</answer>, judged like `ajet tasks judge`).

    python3 examples/python_agent/agent.py --swarm-url http://127.0.0.1:10086 --episodes 16
    python3 examples/python_agent/agent.py ... --ajet build/bin/ajet --generate 16   # calc tasks from ajet
    python3 examples/python_agent/agent.py ... --adapter mine   # train the LoRA adapter "mine" (POST /adapters)
"""

import argparse
import json
import logging
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import ajet_swarm  # noqa: F401 (installed with pip)
except ImportError:  # run from a checkout: use the client in clients/python
    sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))

from ajet_swarm import ChatError, SwarmClient, WorkflowOutput  # noqa: E402
from calculator import (CALC_MAX_TOOL_CALLS, CALC_SYSTEM_PROMPT, CALC_TOOL, calc_tool_result,  # noqa: E402
                        evaluate, judge_calc_episode)

SYSTEM = ("You solve arithmetic questions. Call the calculator tool for any computation, "
          "then answer with the final number only.")
TOOLS = [{"type": "function", "function": {
    "name": "calculator",
    "description": "Evaluates an arithmetic expression such as (3 + 4) * 5",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}}]
DEFAULT_TASKS = [
    {"task_id": "add-1", "question": "What is 17 + 25?", "answer": 42},
    {"task_id": "mul-1", "question": "What is 6 * 7?", "answer": 42},
    {"task_id": "mix-1", "question": "What is (3 + 4) * 5?", "answer": 35},
    {"task_id": "sub-1", "question": "What is 100 - 58?", "answer": 42},
]


def is_calc_task(task):
    """A built-in calc task (docs/tasks.md) rather than one of our own questions."""
    return "question" not in task


def run_tool(call, calc=False):
    """The tool message answering one tool call (errors go back to the model as text)."""
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
        if call["function"]["name"] != "calculator":
            result = "unknown tool"
        else:
            result = calc_tool_result(args["expression"]) if calc else evaluate(str(args["expression"]))
    except (ValueError, KeyError, TypeError, ZeroDivisionError, json.JSONDecodeError) as e:
        result = f"error: {e}"
    return {"role": "tool", "tool_call_id": call.get("id", ""), "content": str(result)}


def ajet_judge(ajet, task, messages):
    """`ajet tasks judge` on one conversation: the reference judge of the built-in task."""
    r = subprocess.run([ajet, "tasks", "judge"], input=json.dumps({"task": task, "messages": messages}) + "\n",
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def final_number(text):
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text or "")
    return float(numbers[-1]) if numbers else None


def opening(task):
    """(messages, tools, max tool calls) a task starts with."""
    if not is_calc_task(task):
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}], TOOLS, None
    messages = task.get("init_messages") or [{"role": "system", "content": CALC_SYSTEM_PROMPT},
                                             {"role": "user", "content": task["main_query"]}]
    metadata = task.get("metadata", {})
    return ([dict(m) for m in messages], metadata.get("tools") or [CALC_TOOL],
            metadata.get("max_tool_calls", CALC_MAX_TOOL_CALLS))


def rollout(client, task, max_turns, ajet=None, adapter=None):
    """One episode: claim, converse with tool calls, report the reward. Returns a summary dict.
    `adapter`: the LoRA adapter of the server's engine the episode's calls run on (and train)."""
    episode = client.begin_episode(discard_episode_timeout=120, **({"adapter": adapter} if adapter else {}))
    chat = episode.chat_client()
    calc = is_calc_task(task)
    messages, tools, max_tool_calls = opening(task)
    tool_calls, answer, limit_hit = 0, None, False
    try:
        for _ in range(max_turns):
            message = chat.chat(messages, tools=tools, max_tokens=128)
            messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
            if not message.get("tool_calls"):
                answer = final_number(message.get("content"))
                break
            for call in message["tool_calls"]:
                tool_calls += 1
                if max_tool_calls is not None and tool_calls > max_tool_calls:  # ends the episode, reward 0
                    messages.append({"role": "tool", "tool_call_id": call.get("id", ""),
                                     "content": f"error: tool call limit reached ({max_tool_calls})"})
                    limit_hit = True
                    break
                messages.append(run_tool(call, calc))
            if limit_hit:
                break
    except ChatError as e:  # e.g. the engine stopped: give the slot back, nothing is learned from it
        client.abort_episode(episode.episode_uuid)
        return {"episode_uuid": episode.episode_uuid, "task_id": task["task_id"], "aborted": str(e)}
    if calc:
        local = judge_calc_episode(task, messages)
        judged = ajet_judge(ajet, task, messages) if ajet else local
        client.end_episode(task["task_id"], episode.episode_uuid,
                           WorkflowOutput(reward=judged["reward"], is_success=judged["is_success"],
                                          metadata={"task_id": task["task_id"], "env_type": "calc",
                                                    "judge_reason": judged["reason"]}))
        return {"episode_uuid": episode.episode_uuid, "task_id": task["task_id"], "reward": judged["reward"],
                "reason": judged["reason"], "judge": "ajet" if ajet else "local", "local_reason": local["reason"],
                "tool_calls": tool_calls}
    reward = 1.0 if answer is not None and abs(answer - float(task["answer"])) < 1e-6 else 0.0
    client.end_episode(task["task_id"], episode.episode_uuid, WorkflowOutput(reward=reward, is_success=reward > 0))
    return {"episode_uuid": episode.episode_uuid, "task_id": task["task_id"], "reward": reward,
            "tool_calls": tool_calls, "answer": answer}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--swarm-url", default=os.environ.get("AJET_SWARM_URL", "http://127.0.0.1:10086"))
    parser.add_argument("--tasks", help="JSONL file of {task_id, question, answer} or of built-in calc tasks "
                        "(default: four questions of our own)")
    parser.add_argument("--ajet", default=os.environ.get("AJET_BIN"),
                        help="the ajet binary: judges calc tasks (`ajet tasks judge`), makes --generate tasks")
    parser.add_argument("--generate", type=int, help="N calc tasks from `ajet tasks generate --task calc`")
    parser.add_argument("--seed", type=int, default=1, help="seed of --generate")
    parser.add_argument("--episodes", type=int, default=8, help="episodes to run in total")
    parser.add_argument("--repeat", type=int, default=2, help="episodes per task (the GRPO group size)")
    parser.add_argument("--parallel", type=int, default=4, help="episodes in flight at once")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--adapter", help="a LoRA adapter of the server's engine (GET /adapters): this agent's "
                        "episodes run on it and train it, not the served model")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    tasks = DEFAULT_TASKS
    if args.generate:
        text = subprocess.run([args.ajet or "ajet", "tasks", "generate", "--task", "calc", "--n", str(args.generate),
                               "--seed", str(args.seed)], capture_output=True, text=True, check=True).stdout
        tasks = [json.loads(line) for line in text.splitlines() if line.strip()]
    elif args.tasks:
        with open(args.tasks) as f:
            tasks = [json.loads(line) for line in f if line.strip()]
    # Each task `repeat` times in a row, so GRPO groups fill up together.
    schedule = [tasks[(i // args.repeat) % len(tasks)] for i in range(args.episodes)]
    client = SwarmClient(args.swarm_url)
    with ThreadPoolExecutor(args.parallel) as pool:
        for summary in pool.map(lambda t: rollout(client, t, args.max_turns, args.ajet, args.adapter), schedule):
            # One write per line: with PYTHONUNBUFFERED print() writes the newline separately, and the
            # workers' log lines (stderr, often the same pipe) could land in between.
            sys.stdout.write(json.dumps(summary) + "\n")
            sys.stdout.flush()
    client.print_rollout_stat()


if __name__ == "__main__":
    main()
