"""The harness's verifier for agent.mjs: reward 1 when answer.txt (in the work dir) holds the task's answer."""
import json

task = json.load(open("/ajet/task.json"))
try:
    got = open("answer.txt").read().strip()
except FileNotFoundError:
    got = ""
ok = got.lstrip("-").isdigit() and int(got) == int(task["answer"])
print(json.dumps({"reward": 1.0 if ok else 0.0, "is_success": ok, "metadata": {"answer": got}}))
