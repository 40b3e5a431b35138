"""Checks the calc task of examples/python_agent/calculator.py against the reference, src/tasks
through the ajet binary: (1) its calculator's values against every successful tool result in
`ajet tasks demos` (error texts are Python's own by design); (2) its judge against `ajet tasks judge`
on generated tasks and answers of every kind. Prints one JSON line: {"ok", counts, mismatches}.

    python3 tests/examples/calc_agreement.py build/bin/ajet
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python_agent"))
from calculator import calc_tool_result, judge_calc_answer, judge_calc_episode  # noqa: E402

AJET = sys.argv[1]


def run(args, stdin=None):
    return subprocess.run([AJET, *args], input=stdin, capture_output=True, text=True, check=True).stdout


def jsonl(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


mismatches = []
tool_results = 0
for demo in jsonl(run(["tasks", "demos", "--task", "calc", "--n", "300", "--correct-ratio", "0.3",
                       "--error-mix", "4,1,1", "--seed", "11"])):
    results = {m["tool_call_id"]: m["content"] for m in demo["messages"] if m["role"] == "tool"}
    for m in demo["messages"]:
        for call in m.get("tool_calls") or []:
            expected = results.get(call["id"])
            if expected is None or expected.startswith("error:"):
                continue
            tool_results += 1
            got = calc_tool_result(json.loads(call["function"]["arguments"])["expression"])
            if got != expected:
                mismatches.append({"what": "calculator", "call": call["function"]["arguments"], "expected": expected,
                                   "got": got})

tasks = jsonl(run(["tasks", "generate", "--task", "calc", "--n", "12", "--seed", "5"]))
tasks += jsonl(run(["tasks", "generate", "--task", "calc", "--n", "4", "--seed", "5", "--split", "val"]))
requests = []
for task in tasks:
    a = int(task["metadata"]["answer"])
    for text in (f"<answer>{a}</answer>", f"<answer> {a}\n</answer>", f"The result is <answer>{a + 1}</answer>.",
                 f"<answer>+{abs(a)}</answer>", f"<answer>{a}.0</answer>", f"<answer>0{abs(a)}</answer>",
                 "<answer>-0</answer>", f"<answer>{a}</answer> or <answer>{a}</answer>", str(a), f"<answer>{a}",
                 "<answer></answer>", "<answer>1,000</answer>", f"<answer>{-a}</answer>"):
        requests.append({"task": task, "answer": text})
    call = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": json.dumps(
        {"expression": task["metadata"]["expression"]})}}
    requests.append({"task": task, "messages": [{"role": "user", "content": task["main_query"]},
                                                {"role": "assistant", "content": "", "tool_calls": [call]}]})
    requests.append({"task": task, "messages": [{"role": "user", "content": task["main_query"]},
                                                {"role": "assistant", "content": f"<answer>{a}</answer>"}]})
verdicts = jsonl(run(["tasks", "judge"], "".join(json.dumps(r) + "\n" for r in requests)))
if len(verdicts) != len(requests):
    mismatches.append({"what": "judge", "detail": f"{len(requests)} requests, {len(verdicts)} verdicts"})
reasons = set()
for r, v in zip(requests, verdicts):
    got = judge_calc_episode(r["task"], r["messages"]) if "messages" in r else judge_calc_answer(r["task"], r["answer"])
    reasons.add(v["reason"])
    if (got["reward"], got["reason"], got["is_success"]) != (v["reward"], v["reason"], v["is_success"]):
        mismatches.append({"what": "judge", "request": r.get("answer", r.get("messages")), "expected": v, "got": got})

print(json.dumps({"ok": not mismatches, "tool_results": tool_results, "verdicts": len(verdicts),
                  "reasons": sorted(reasons), "mismatches": mismatches[:20]}))
sys.exit(0 if not mismatches else 1)
