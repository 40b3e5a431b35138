#!/usr/bin/env python3
"""A rule judge command for `ajet proxy --judge-command` on calc questions (bench/swarm/proxy_learning.py).

It reads the proxy's JSON document on stdin ({"request", "answers": [text...], ...}), finds the
question's true value in TASKS (a JSONL file of built-in calc tasks, `ajet tasks generate --task calc`),
and prints {"scores": [...]}: 1 for an answer on the way to the right result, else 0. On the way means
a calculator call whose expression evaluates to the true value, or exactly one <answer>N</answer>
with N the true value. The application never sends rewards: this judge knows the answers, as a
grader with a key would. A question it does not know fails the judge (exit 1), which the proxy
counts and drops the group for.

    ajet proxy ... --judge-command "python3 bench/swarm/proxy_calc_judge.py tasks.jsonl [--crash-every K]"

--crash-every K: crash (exit 3, no output) on the groups whose task id hashes to 0 mod K, about one
in K, to show that a judge crash loses no request.
"""

import hashlib
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python_agent"))
from calculator import evaluate  # noqa: E402

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def question_of(request):
    """The first user message's text: the question the application asked."""
    for m in request.get("messages", []):
        if m.get("role") == "user":
            c = m.get("content")
            return c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [])
    return None


def score(answer, truth):
    for block in TOOL_CALL.findall(answer):
        try:
            call = json.loads(block)
            expression = str(call["arguments"]["expression"])
            value = evaluate(expression, exact=True)
            if call.get("name") == "calculator" and value.denominator == 1 and int(value) == truth:
                return 1.0
        except Exception:  # a malformed call or expression scores 0
            pass
    given = ANSWER.findall(answer)
    if len(given) == 1 and re.fullmatch(r"-?(0|[1-9][0-9]{0,17})", given[0].strip()) and int(given[0]) == truth:
        return 1.0
    return 0.0


def main():
    truth_of = {}
    with open(sys.argv[1]) as f:
        for line in f:
            if line.strip():
                t = json.loads(line)
                user = [m["content"] for m in t["init_messages"] if m["role"] == "user"][0]
                truth_of[user] = int(t["metadata"]["answer"])
    doc = json.load(sys.stdin)
    if "--crash-every" in sys.argv:
        k = int(sys.argv[sys.argv.index("--crash-every") + 1])
        if int(hashlib.sha1(doc["task_id"].encode()).hexdigest(), 16) % k == 0:
            os.abort()  # a crash: killed by SIGABRT, nothing printed
    question = question_of(doc["request"])
    if question not in truth_of:
        print(f"proxy_calc_judge: unknown question {question!r}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"scores": [score(a, truth_of[question]) for a in doc["answers"]]}))


if __name__ == "__main__":
    main()
