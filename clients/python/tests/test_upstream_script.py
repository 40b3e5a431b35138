"""Upstream-style swarm script bodies against the real `ajet-swarm` with `ajet-echo-engine` (whose answer is
the last user message): what an upstream AgentJet script does, written as upstream writes it, with only
the imports changed to ajet_swarm (issue 16). Configs come from AgentJetJob (upstream's whole default
tree, debug backbone, the fixture tokenizer as the model). Every script body runs under a deadline, so a
wait that never ends fails the test instead of hanging the suite."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import tempfile
import threading
import unittest
import urllib.request
import zipfile

from ajet_swarm import (AgentJetJob, AjetTaskReader, JsonlDatasetFile, JsonlTrainingFp, OpenaiBaseUrlAndApiKey,
                        PeriodicDrainThreadPoolExecutor, RetryPolicy, RouterTaskReader, SwarmClient,
                        SwarmThrottlePolicy, Task, WorkflowOutput)
from swarm_fixture import SwarmServer, eventually, require_binaries, tokenizer_fixture

FAST = RetryPolicy(status_poll=0.05, engine_busy=0.05, empty_pool=0.05, throttle=0.05, agree_sync_weight=0.05,
                   cannot_connect_retry=0.05, jitter=0)


def _no_config_warnings(record):
    """The server's ~40 warnings about upstream keys it does not use, once per synced AgentJetJob, are
    expected here; other records pass."""
    return "warnings from the server" not in record.getMessage()


def setUpModule():
    logging.getLogger("ajet_swarm").addFilter(_no_config_warnings)


def tearDownModule():
    logging.getLogger("ajet_swarm").removeFilter(_no_config_warnings)


def run_with_deadline(test, body, seconds=120.0):
    """Runs body() in a thread; fails the test (instead of hanging) if it does not finish in time."""
    outcome = {}

    def target():
        try:
            outcome["value"] = body()
        except BaseException as e:  # re-raised below, in the test's thread
            outcome["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        test.fail(f"the script body did not finish within {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def chat(api_baseurl_key: OpenaiBaseUrlAndApiKey, query: str) -> str:
    """The OpenAI-compatible call of upstream's math example, with urllib instead of requests."""
    body = {"model": "fill_whatever_model", "stream": False,
            "messages": [{"role": "system", "content": "Solve it; answer within \\boxed{}."},
                         {"role": "user", "content": query}]}
    req = urllib.request.Request(f"{api_baseurl_key.base_url}/chat/completions", data=json.dumps(body).encode(),
                                 method="POST", headers={"Authorization": f"Bearer {api_baseurl_key.api_key}",
                                                         "Content-Type": "application/json", "Connection": "close"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


class UpstreamScriptTest(unittest.TestCase):
    def setUp(self):
        self.model = tokenizer_fixture()
        self.server = SwarmServer()
        self.addCleanup(self.server.stop)
        self.url = f"http://localhost:{self.server.port}"

    def job(self, method, batch_size, num_repeat):
        job = AgentJetJob(experiment_name="upstream_script", algorithm="grpo", n_gpu=1, model=self.model,
                          batch_size=batch_size, num_repeat=num_repeat, backbone="debug", max_env_worker=8,
                          swarm_mode_sample_collection_method=method)
        job.config.ajet.engine = {"threads": 1, "kv_cache_memory_mb": 16}
        return job

    def client(self, **kwargs):
        c = SwarmClient(self.url, verbose=False, retry=FAST, **kwargs)
        self.addCleanup(c.close)
        return c

    def test_math_style_rollouts_with_throttle_drain_abort_and_stats(self):
        GRPO_N, REMOTE_BATCH_SIZE = 2, 2
        job = self.job("rollout_until_finish_enough_tasks", REMOTE_BATCH_SIZE, GRPO_N)
        tmp = tempfile.mkdtemp(prefix="ajet_upstream_script_")
        self.addCleanup(lambda: __import__("shutil").rmtree(tmp, ignore_errors=True))
        data = os.path.join(tmp, "train.jsonl")
        with open(data, "w") as f:  # the echo engine answers the question itself: \boxed{42} is right, 41 is not
            for tid, query, answer in [("a", "\\boxed{42}", "42"), ("b", "\\boxed{42}", "42"), ("c", "\\boxed{41}", "42")]:
                f.write(json.dumps({"task_id": tid, "main_query": query, "metadata": {"answer": answer}}) + "\n")

        def script():
            # ---- the body of an upstream swarm client (tutorial/example_math_swarm/math.py style) ----
            dataset = RouterTaskReader(
                reader_type="jsonl_dataset_file",
                reader_config=AjetTaskReader(jsonl_dataset_file=JsonlDatasetFile(training=JsonlTrainingFp(file_path=data))))
            swarm_worker = SwarmClient(self.url, verbose=False, retry=FAST)
            boundaries = []
            swarm_worker.add_entering_weight_sync_callback(lambda: boundaries.append(swarm_worker.get_global_step()))
            swarm_worker.auto_sync_train_config_and_start_engine(job)

            def rollout(task: Task):
                episode_uuid, api_baseurl_key = swarm_worker.begin_episode(
                    discard_episode_timeout=60,
                    throttle_policy=SwarmThrottlePolicy(current_task_id=task.task_id, ratio=1.5,
                                                        expected_batch_size=REMOTE_BATCH_SIZE,
                                                        expected_num_repeat=GRPO_N))
                final_answer = chat(api_baseurl_key, task.main_query)
                is_success = final_answer == "\\boxed{" + task.metadata["answer"] + "}"
                swarm_worker.end_episode(task, episode_uuid,
                                         WorkflowOutput(reward=1.0 if is_success else 0.0, metadata={"final_answer": final_answer}),
                                         declare_client_active=True)
                return 1.0 if is_success else 0.0

            executor = PeriodicDrainThreadPoolExecutor(workers=GRPO_N * REMOTE_BATCH_SIZE, max_parallel=4, auto_retry=False)
            drained = []
            for task in dataset.generate_training_tasks():
                for _ in range(GRPO_N):
                    _, results = executor.submit_with_periodic_drain(fn=rollout, task=task)
                    if results:
                        drained.append(sorted(results))
            drained.append(sorted(executor.drain()))
            executor.shutdown()

            # an episode given back: abort_episode with declare_client_active, as upstream's eval rollouts do
            episode_uuid, api_baseurl_key = swarm_worker.begin_episode(episode_type="eval")
            chat(api_baseurl_key, "eval question")
            swarm_worker.abort_episode(episode_uuid, declare_client_active=True)
            return swarm_worker, drained, boundaries, episode_uuid

        swarm_worker, drained, boundaries, aborted = run_with_deadline(self, script)
        self.assertEqual(len(drained), 2)
        self.assertEqual(sorted(sum(drained, [])), [0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
        # 3 tasks x 2 episodes with batches of 2 tasks: one batch recorded (debug backbone), one task of the next
        stat = swarm_worker.get_rollout_stat()
        self.assertEqual(stat.batches_recorded, 1)
        self.assertEqual(stat.completed_tasks, 1)
        self.assertEqual(stat.completed_episodes, 2)
        self.assertEqual(stat["completed_task_target"], REMOTE_BATCH_SIZE)
        self.assertEqual(swarm_worker.get_global_step(), 0)  # the debug backbone trains nothing
        self.assertTrue(eventually(lambda: boundaries == [0], timeout=30), boundaries)  # once, for that batch
        self.assertFalse(swarm_worker.can_continue_episode(aborted))
        self.assertNotIn(aborted, [es.episode_uuid for es in swarm_worker.get_episode_buffer()])
        self.assertTrue(all(es.episode_status == "registered" for es in swarm_worker.get_episode_buffer()))
        exp_dir = swarm_worker.server_experiment_dir()
        self.assertTrue(os.path.isabs(exp_dir) and os.path.isdir(exp_dir), exp_dir)
        swarm_worker.close()

    def test_agree_loop_on_the_debug_backbone_with_all_clients_agreeing(self):
        job = self.job("rollout_until_all_clients_agree_sync_weight", 100, 2)  # batch_size is ignored by this trigger
        driver = self.client(agentjet_job=job)
        driver.auto_sync_train_config_and_start_engine(job)
        other = self.client()
        # abort_episode carries declare_client_active: False leaves the client out of the agreement, True counts it
        uuid, _ = other.begin_episode()
        other.abort_episode(uuid, declare_client_active=False)
        # Read by `other`: a client sees its own id in the pool information (others' are pseudonyms).
        active = lambda: {c.client_uuid for c in other.get_rollout_stat().active_clients}  # noqa: E731
        self.assertEqual(active(), set())
        uuid, _ = other.begin_episode()
        other.abort_episode(uuid, declare_client_active=True)
        self.assertEqual(active(), {other.client_uuid})

        def script():
            # ---- the cocktail runner's loop: drain a local batch, then agree to sync weights ----
            swarm_worker = driver
            steps, agreed = [], []

            def rollout(task):
                episode_uuid, api_baseurl_key = swarm_worker.begin_episode(discard_episode_timeout=60)
                answer = chat(api_baseurl_key, task.main_query)
                swarm_worker.end_episode(task, episode_uuid, WorkflowOutput(reward=float(answer == "yes")))
                return float(answer == "yes")

            tasks = [Task(main_query=q) for q in ("yes", "no")]
            for _ in range(2):  # two local batches, two weight syncs
                executor = PeriodicDrainThreadPoolExecutor(workers=4, max_parallel=4, auto_retry=False)
                for task in tasks:
                    for _ in range(2):
                        executor.submit_with_periodic_drain(fn=rollout, task=task)
                results = executor.drain()
                executor.shutdown()
                self.assertEqual(sorted(results), [0.0, 0.0, 1.0, 1.0])
                # the other active client agrees too (its own loop, here a thread)
                helper = threading.Thread(target=lambda: agreed.append(other.agree_sync_weight()))
                helper.start()
                agreed.append(swarm_worker.agree_sync_weight())  # returns at the batch boundary, never hangs
                helper.join(60)
                steps.append(swarm_worker.get_global_step())
                # the other client must become active again for the next boundary
                uuid, _ = other.begin_episode()
                other.abort_episode(uuid)
            return steps, agreed

        steps, agreed = run_with_deadline(self, script)
        self.assertEqual(agreed, [True] * 4)
        self.assertEqual(steps, [0, 0])
        stat = driver.get_rollout_stat()
        self.assertEqual(stat.batches_recorded, 2)
        self.assertEqual(stat.sample_collection_method, "rollout_until_all_clients_agree_sync_weight")

    def test_async_and_start_multi_engine_boots_two_servers(self):
        second = SwarmServer()
        self.addCleanup(second.stop)
        a, b = self.client(), SwarmClient(second.url, verbose=False, retry=FAST)
        self.addCleanup(b.close)
        job_a = self.job("rollout_until_finish_enough_tasks", 2, 2)
        job_b = self.job("rollout_until_finish_enough_episodes", 3, 1)
        found = run_with_deadline(self, lambda: SwarmClient.async_and_start_multi_engine([(a, job_a), (b, job_b)]))
        self.assertEqual(found, ["ENGINE.OFFLINE", "ENGINE.OFFLINE"])
        self.assertEqual((a.get_engine_status()[0], b.get_engine_status()[0]), ("ENGINE.ROLLING", "ENGINE.ROLLING"))
        self.assertEqual(b.get_rollout_stat().sample_collection_method, "rollout_until_finish_enough_episodes")
        self.assertIs(b.agentjet_job, job_b)

    def test_sync_train_code_uploads_a_zip_file(self):
        client = self.client()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "code.zip")
            with zipfile.ZipFile(path, "w") as zf:
                zf.writestr("tree/CMakeLists.txt", "project(x)\n")
                zf.writestr("tree/src/a.cc", "int a;\n")
            data = client.sync_train_code(path)
        self.assertTrue(data["success"])
        self.assertEqual(data["files"], 2)
        self.assertTrue(os.path.isfile(os.path.join(data["temp_ajet_code_path"], "src", "a.cc")))


class AutoStartTest(unittest.TestCase):
    def test_auto_start_swarm_server_starts_one_and_reuses_it(self):
        bindir = require_binaries("ajet-swarm", "ajet-echo-engine")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        tmp = tempfile.mkdtemp(prefix="ajet_autostart_")
        env = {"AJET_SWARM_BIN": os.path.join(bindir, "ajet-swarm")}
        args = ["--exp-dir", os.path.join(tmp, "exp"), "--engine", os.path.join(bindir, "ajet-echo-engine")]
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            first = SwarmClient(f"http://127.0.0.1:{port}", verbose=False, auto_start_swarm_server=True,
                                swarm_server_args=args)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        proc = first.swarm_server_process
        self.assertIsNotNone(proc)

        def stop():
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            __import__("shutil").rmtree(tmp, ignore_errors=True)

        self.addCleanup(stop)
        self.assertTrue(first.health())
        self.assertEqual(first.get_engine_status()[0], "ENGINE.OFFLINE")
        with open(os.path.join(tmp, "exp", f"ajet-swarm-{port}.log")) as f:
            self.assertIn("Interchange server is running in blocking mode", f.read())
        second = SwarmClient(f"localhost:{port}", verbose=False, auto_start_swarm_server=True)  # one answers already
        self.assertIsNone(second.swarm_server_process)
        self.assertIsNone(proc.poll())


if __name__ == "__main__":
    unittest.main()
