#!/usr/bin/env python3
"""A calculator agent trained through an AgentJet swarm server. Standard library only.

For each task: claim an episode, let the model answer an arithmetic question with a `calculator`
tool, run the tool calls it makes, and report reward 1 for a correct final answer (else 0).

    python3 examples/python_agent/agent.py --swarm-url http://127.0.0.1:10086 --episodes 16
"""

import argparse
import json
import logging
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import ajet_swarm  # noqa: F401 (installed with pip)
except ImportError:  # run from a checkout: use the client in clients/python
    sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))

from ajet_swarm import ChatError, SwarmClient, WorkflowOutput  # noqa: E402
from calculator import evaluate  # noqa: E402

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


def run_tool(call):
    """The tool message answering one tool call (errors go back to the model as text)."""
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
        result = evaluate(str(args["expression"])) if call["function"]["name"] == "calculator" else "unknown tool"
    except (ValueError, KeyError, TypeError, ZeroDivisionError, json.JSONDecodeError) as e:
        result = f"error: {e}"
    return {"role": "tool", "tool_call_id": call.get("id", ""), "content": str(result)}


def final_number(text):
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text or "")
    return float(numbers[-1]) if numbers else None


def rollout(client, task, max_turns):
    """One episode: claim, converse with tool calls, report the reward. Returns a summary dict."""
    episode = client.begin_episode(discard_episode_timeout=120)
    chat = episode.chat_client()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]
    tool_calls, answer = 0, None
    try:
        for _ in range(max_turns):
            message = chat.chat(messages, tools=TOOLS, max_tokens=128)
            messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
            if not message.get("tool_calls"):
                answer = final_number(message.get("content"))
                break
            for call in message["tool_calls"]:
                tool_calls += 1
                messages.append(run_tool(call))
    except ChatError as e:  # e.g. the engine stopped: give the slot back, nothing is learned from it
        client.abort_episode(episode.episode_uuid)
        return {"episode_uuid": episode.episode_uuid, "task_id": task["task_id"], "aborted": str(e)}
    reward = 1.0 if answer is not None and abs(answer - float(task["answer"])) < 1e-6 else 0.0
    client.end_episode(task["task_id"], episode.episode_uuid, WorkflowOutput(reward=reward, is_success=reward > 0))
    return {"episode_uuid": episode.episode_uuid, "task_id": task["task_id"], "reward": reward,
            "tool_calls": tool_calls, "answer": answer}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--swarm-url", default=os.environ.get("AJET_SWARM_URL", "http://127.0.0.1:10086"))
    parser.add_argument("--tasks", help="JSONL file of {task_id, question, answer} (default: four built-in ones)")
    parser.add_argument("--episodes", type=int, default=8, help="episodes to run in total")
    parser.add_argument("--repeat", type=int, default=2, help="episodes per task (the GRPO group size)")
    parser.add_argument("--parallel", type=int, default=4, help="episodes in flight at once")
    parser.add_argument("--max-turns", type=int, default=4)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    tasks = DEFAULT_TASKS
    if args.tasks:
        with open(args.tasks) as f:
            tasks = [json.loads(line) for line in f if line.strip()]
    # Each task `repeat` times in a row, so GRPO groups fill up together.
    schedule = [tasks[(i // args.repeat) % len(tasks)] for i in range(args.episodes)]
    client = SwarmClient(args.swarm_url)
    with ThreadPoolExecutor(args.parallel) as pool:
        for summary in pool.map(lambda t: rollout(client, t, args.max_turns), schedule):
            print(json.dumps(summary), flush=True)
    client.print_rollout_stat()


if __name__ == "__main__":
    main()
