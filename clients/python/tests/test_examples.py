"""examples/python_agent end to end against the real ajet-swarm with the echo engine (whose answer is
the last user-role message): a question "42" is answered correctly at once; a question that is a
tool call makes the agent run the calculator, and the echoed tool result (Qwen's template renders it
as a user-role <tool_response>) is the correct final answer. A wrong answer scores 0.

examples/upstream_math_swarm (written against upstream's API; only its imports changed) likewise: its
questions carry their own \\boxed{} answer, so the echoed reply scores 1 or 0 as the dataset says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

from ajet_swarm import RetryPolicy, SwarmClient
from swarm_fixture import SOURCE_DIR, SwarmServer, config_yaml, micro_model_fixture, tokenizer_fixture


class PythonExampleTest(unittest.TestCase):
    def test_agent_claims_calls_tools_and_reports_rewards(self):
        model = tokenizer_fixture()
        server = SwarmServer()
        self.addCleanup(server.stop)
        client = SwarmClient(server.url, retry=RetryPolicy(status_poll=0.05, jitter=0), verbose=False)
        self.addCleanup(client.close)
        client.auto_sync_train_config_and_start_engine(config_yaml(model, batch=100), max_wait=120)
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "(3 + 4) * 5"}}\n</tool_call>'
            f.write(json.dumps({"task_id": "plain", "question": "42", "answer": 42}) + "\n")
            f.write(json.dumps({"task_id": "tool", "question": call, "answer": 35}) + "\n")
            f.write(json.dumps({"task_id": "wrong", "question": "41", "answer": 42}) + "\n")
        self.addCleanup(os.unlink, f.name)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the example finds the client itself
        r = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "examples/python_agent/agent.py"),
                            "--swarm-url", server.url, "--tasks", f.name, "--episodes", "6", "--repeat", "2",
                            "--parallel", "2", "--max-turns", "2"], capture_output=True, text=True, env=env,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        summaries = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        by_task = {}
        for s in summaries:
            by_task.setdefault(s["task_id"], []).append(s)
        self.assertEqual([s["reward"] for s in by_task["plain"]], [1.0, 1.0], r.stdout)
        self.assertEqual([s["reward"] for s in by_task["tool"]], [1.0, 1.0], r.stdout)
        self.assertEqual([s["tool_calls"] for s in by_task["tool"]], [1, 1], r.stdout)
        self.assertEqual([s["reward"] for s in by_task["wrong"]], [0.0, 0.0], r.stdout)
        self.assertIn("Completed tasks", r.stdout)  # print_rollout_stat at the end
        pool = client.get_rollout_stat()
        self.assertEqual(pool["completed_episodes"], 6)
        stats = pool["completed_tasks_reward_stats"]
        self.assertEqual({t: stats[t]["reward_mean"] for t in stats}, {"plain": 1.0, "tool": 1.0, "wrong": 0.0})


class UpstreamMathExampleTest(unittest.TestCase):
    def test_upstream_math_client_syncs_its_job_and_reports_rewards(self):
        model = tokenizer_fixture()
        server = SwarmServer()
        self.addCleanup(server.stop)
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for tid, query in [("right", "\\boxed{42}"), ("wrong", "\\boxed{41}"), ("unboxed", "42")]:
                f.write(json.dumps({"task_id": tid, "main_query": query, "metadata": {"answer": "6 * 7 #### 42"}}) + "\n")
        self.addCleanup(os.unlink, f.name)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the example finds the client itself
        env.update(AJET_SWARM_URL=server.url, REMOTE_MODEL_PATH=model, DATASET=f.name, GRPO_N="2",
                   REMOTE_BATCH_SIZE="1", NUM_EPOCH="1")
        r = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "examples/upstream_math_swarm/math_agent.py")],
                           capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        summary = json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])
        self.assertEqual(summary, {"episodes": 6, "mean_reward": 2 / 6, "global_step": 0}, r.stdout + r.stderr)
        client = SwarmClient(server.url, verbose=False)
        self.addCleanup(client.close)
        stat = client.get_rollout_stat()
        self.assertEqual((stat.batches_recorded, stat.sample_collection_method, stat.task_expected_num_repeat),
                         (3, "rollout_until_finish_enough_tasks", 2))  # one batch per task (REMOTE_BATCH_SIZE=1)


    def test_upstream_math_client_trains_on_the_torch_backbone(self):
        # The same file, unchanged, with REMOTE_BACKBONE=torch against the real engine and a random
        # micro model: every closed batch is a GRPO step, so global_step counts them.
        model = micro_model_fixture()
        server = SwarmServer(engine="ajet-engine")
        self.addCleanup(server.stop)
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for tid in ("a", "b"):
                f.write(json.dumps({"task_id": tid, "main_query": f"What is 6 * 7? ({tid})",
                                    "metadata": {"answer": "#### 42"}}) + "\n")
        self.addCleanup(os.unlink, f.name)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(AJET_SWARM_URL=server.url, REMOTE_MODEL_PATH=model, DATASET=f.name, GRPO_N="2",
                   REMOTE_BATCH_SIZE="1", NUM_EPOCH="1", REMOTE_BACKBONE="torch")
        r = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "examples/upstream_math_swarm/math_agent.py")],
                           capture_output=True, text=True, env=env, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        summary = json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])
        self.assertEqual(summary["episodes"], 4, r.stdout)
        client = SwarmClient(server.url, verbose=False)
        self.addCleanup(client.close)
        # One batch per task: two GRPO steps, the second possibly still training when the script ends.
        deadline = time.monotonic() + 300
        while client.get_global_step() < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(client.get_global_step(), 2, client.get_rollout_stat())


class CalculatorTest(unittest.TestCase):
    def test_arithmetic_only(self):
        sys.path.insert(0, os.path.join(SOURCE_DIR, "examples/python_agent"))
        from calculator import evaluate
        self.assertEqual(evaluate("(3 + 4) * 5"), 35)
        self.assertEqual(evaluate("-2 ** 3 + 10 % 4"), -6)
        for bad in ("__import__('os')", "2 ** 1000", "x + 1", "1 +"):
            with self.assertRaises(ValueError, msg=bad):
                evaluate(bad)


if __name__ == "__main__":
    unittest.main()
