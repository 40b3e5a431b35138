"""The Python client against the real `ajet-swarm` (and through it `ajet-echo-engine`, whose answer is
the last user message, or the real `ajet-engine` with the micro model). Each test class starts its
own server on an ephemeral loopback port. No sleeps as synchronisation: waits poll an observable
status with a generous deadline."""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
import threading
import unittest

from ajet_swarm import (ChatClient, RetryPolicy, SwarmClient, SwarmCommandError, SwarmServerOfflineError,
                        SwarmTimeoutError, Task, ThrottlePolicy, WorkflowOutput)
from swarm_fixture import SwarmServer, config_yaml, eventually, micro_model_fixture, tokenizer_fixture

FAST = RetryPolicy(status_poll=0.05, engine_busy=0.05, empty_pool=0.05, throttle=0.05, agree_sync_weight=0.05,
                   cannot_connect_retry=0.05, jitter=0)
TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluates arithmetic",
                                           "parameters": {"type": "object",
                                                          "properties": {"expression": {"type": "string"}},
                                                          "required": ["expression"]}}}]


def user(text):
    return [{"role": "user", "content": text}]


def engine_pid(client):
    detail = client.get_engine_status()[1].get("engine_status_detail") or ""
    return int(detail.split("pid ", 1)[1].split(",")[0].split(")")[0]) if "pid " in detail else 0


class EchoServerTest(unittest.TestCase):
    """One server per test (a test changes the engine's state)."""

    admin_token = ""

    def setUp(self):
        self.model = tokenizer_fixture()
        self.server = SwarmServer(admin_token=self.admin_token)
        self.addCleanup(self.server.stop)
        # Dial "localhost": the base_url the server returns names 127.0.0.1, the client must rewrite it.
        self.url = f"http://localhost:{self.server.port}"
        self.client = self.make_client()

    def make_client(self, **kwargs):
        kwargs.setdefault("admin_token", self.admin_token or None)
        client = SwarmClient(self.url, retry=FAST, verbose=False, **kwargs)
        self.addCleanup(client.close)
        return client

    def boot(self, extra="", **sizes):
        first = self.client.auto_sync_train_config_and_start_engine(config_yaml(self.model, extra, **sizes),
                                                                    max_wait=120)
        self.assertEqual(first, "ENGINE.OFFLINE")
        self.assertEqual(self.client.get_engine_status()[0], "ENGINE.ROLLING")


class EpisodeFlowTest(EchoServerTest):
    def test_claim_chat_with_tools_stream_and_end(self):
        self.boot()
        episode = self.client.begin_episode(discard_episode_timeout=60)
        self.assertTrue(episode.base_url.startswith(self.url + "/v1"), episode.base_url)
        self.assertTrue(episode.api_key.startswith("sk-ajet-"))
        self.assertTrue(self.client.can_continue_episode(episode.episode_uuid))

        chat = episode.chat_client()
        self.addCleanup(chat._http.close)
        reply = chat.chat(user("hello there"))
        self.assertEqual(reply["content"], "hello there")
        call = chat.chat(user(TOOL_CALL), tools=TOOLS)
        self.assertEqual(len(call["tool_calls"]), 1)
        self.assertEqual(call["tool_calls"][0]["function"]["name"], "calculator")
        self.assertEqual(call["tool_calls"][0]["function"]["arguments"], '{"expression": "6*7"}')
        streamed = chat.stream_message(user(TOOL_CALL), tools=TOOLS)
        self.assertEqual(streamed["tool_calls"][0]["function"]["name"], "calculator")
        self.assertEqual(streamed["finish_reason"], "tool_calls")
        chunks = list(chat.stream(user("one two three"), stream_options={"include_usage": True}))
        self.assertEqual("".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]),
                         "one two three")
        self.assertGreater(chunks[-1]["usage"]["completion_tokens"], 0)

        self.assertTrue(self.client.end_episode(Task(task_id="t1"), episode.episode_uuid,
                                                WorkflowOutput(reward=1.0, is_success=True)))
        self.assertFalse(self.client.can_continue_episode(episode.episode_uuid))
        pool = self.client.get_rollout_stat()
        self.assertEqual(pool["completed_episodes"], 1)
        self.assertEqual(pool["completed_tasks_details"]["t1"], [episode.episode_uuid])
        self.assertEqual(pool["completed_tasks_client_uuids"]["t1"], [self.client.client_uuid])
        out = io.StringIO()
        self.client.print_rollout_stat(out)
        self.assertIn("Completed tasks:            0 / 2  (chosen)", out.getvalue())
        self.assertIn("t1 (1)", out.getvalue())

    def test_abort_returns_the_slot_and_errors_name_the_reason(self):
        self.boot()
        episode = self.client.begin_episode()
        buffer = self.client.get_episode_buffer()
        mine = [e for e in buffer if e["episode_uuid"] == episode.episode_uuid]
        self.assertEqual(mine[0]["episode_status"], "claimed")
        self.assertTrue(self.client.abort_episode(episode.episode_uuid))
        self.assertFalse(self.client.can_continue_episode(episode.episode_uuid))
        # Episode commands carry the key of this client's claim; it holds none for these (issue 38).
        with self.assertRaisesRegex(SwarmCommandError, "needs the episode's key") as e:
            self.client.end_episode("t", "no-such-episode", 1.0)
        self.assertEqual(e.exception.status, 401)
        other = self.make_client()
        theirs = other.begin_episode()
        with self.assertRaisesRegex(SwarmCommandError, "needs the episode's key") as e:
            self.client.end_episode("t", theirs.episode_uuid, 1.0)
        self.assertEqual(e.exception.status, 401)
        with self.assertRaisesRegex(SwarmCommandError, "not episode " + theirs.episode_uuid) as e:
            self.client.end_episode("t", theirs.episode_uuid, 1.0, episode_key=episode.api_key)
        self.assertEqual(e.exception.status, 401)
        self.assertTrue(other.end_episode("t", theirs.episode_uuid, 0.0))

    def test_one_client_many_threads(self):
        self.boot(pool=8, batch=100)
        errors, ended = [], []

        def worker(i):
            try:
                ep = self.client.begin_episode()
                chat = ep.chat_client()
                self.assertEqual(chat.chat(user(f"thread {i}"))["content"], f"thread {i}")
                chat._http.close()
                ended.append(self.client.end_episode(f"task-{i % 4}", ep.episode_uuid, float(i)))
            except Exception as e:  # reported below
                errors.append(repr(e))
            finally:
                self.client.close()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        self.assertEqual(ended, [True] * 16)
        self.assertEqual(self.client.get_rollout_stat()["completed_episodes"], 16)

    def test_throttle_policy_reaches_the_server_as_the_episodes_task(self):
        self.boot()
        ep = self.client.begin_episode(throttle_policy=ThrottlePolicy("cocktail-a", ratio=1.5))
        running = self.client.get_rollout_stat()["running_episode_details"]
        self.assertEqual(running[ep.episode_uuid]["optional_task_id"], "cocktail-a")
        self.assertTrue(self.client.end_episode("cocktail-a", ep.episode_uuid, 1.0))


class EngineLifecycleTest(EchoServerTest):
    def test_auto_start_is_idempotent_and_force_restart_restarts(self):
        self.boot()
        pid = engine_pid(self.client)
        self.assertGreater(pid, 0)
        again = self.client.auto_sync_train_config_and_start_engine(config_yaml(self.model), max_wait=120)
        self.assertEqual(again, "ENGINE.ROLLING")
        self.assertEqual(engine_pid(self.client), pid)
        self.client.auto_sync_train_config_and_start_engine(config_yaml(self.model), force_restart=True, max_wait=120)
        self.assertEqual(self.client.get_engine_status()[0], "ENGINE.ROLLING")
        self.assertNotEqual(engine_pid(self.client), pid)

    def test_begin_episode_waits_for_the_engine_and_fails_when_it_stops(self):
        with self.assertRaises(SwarmTimeoutError):
            self.client.begin_episode(max_wait=0.3)  # OFFLINE: nobody started it
        result = {}
        waiter = threading.Thread(target=lambda: result.update(ep=self.client.begin_episode(max_wait=120)))
        waiter.start()
        self.client.sync_train_config(config_yaml(self.model, pool=1))
        self.client.start_engine(max_wait=120)
        waiter.join(120)
        self.assertIn("ep", result)
        # The pool (1 episode) is now empty: a second claim waits until the engine is stopped under it.
        failure, pool_empty = {}, threading.Event()

        def second():
            try:
                self.client.begin_episode(max_wait=120, on_wait=lambda cause: pool_empty.set())
            except Exception as e:
                failure["error"] = e

        t = threading.Thread(target=second)
        t.start()
        self.assertTrue(pool_empty.wait(120))  # the claim was answered "No available episodes"
        self.client.stop_engine(max_wait=60)
        t.join(120)
        self.assertIsInstance(failure.get("error"), SwarmServerOfflineError)

    def test_stop_engine_with_an_engine_run_leaves_another_start_running(self):
        self.client.sync_train_config(config_yaml(self.model))
        first = self.client.start_engine(max_wait=120)["engine_run"]
        self.client.stop_engine(max_wait=60, engine_run=first)
        self.assertEqual(self.client.get_engine_status()[0], "ENGINE.OFFLINE")
        second = self.client.start_engine(max_wait=120)["engine_run"]
        self.assertNotEqual(first, second)
        with self.assertRaisesRegex(SwarmCommandError, "left running") as e:
            self.client.stop_engine(max_wait=60, engine_run=first)
        self.assertEqual(e.exception.status, 400)
        self.assertEqual(self.client.get_engine_status()[0], "ENGINE.ROLLING")
        follower = SwarmClient(self.url, retry=self.client.retry)
        follower.follow_engine_run(first)  # it started the first engine; the second is someone else's
        with self.assertRaisesRegex(SwarmServerOfflineError, "no longer the one this client follows"):
            follower.begin_episode(max_wait=30)
        follower.follow_engine_run(second)
        follower.abort_episode(follower.begin_episode(max_wait=30).episode_uuid)
        self.client.stop_engine(max_wait=60, engine_run=second)
        self.assertEqual(self.client.get_engine_status()[0], "ENGINE.OFFLINE")

    def test_config_errors_name_the_key_and_dict_configs_are_accepted(self):
        with self.assertRaisesRegex(SwarmCommandError, "num_repeat") as e:
            self.client.sync_train_config(config_yaml(self.model).replace("num_repeat: 2", "num_repeat: -3"))
        self.assertEqual(e.exception.status, 400)
        config = {"ajet": {"backbone": "debug", "model": {"path": self.model},
                           "data": {"train_batch_size": 1, "max_prompt_length": 256, "max_response_length": 256},
                           "rollout": {"num_repeat": 1, "max_env_worker": 2, "max_model_len": 512,
                                       "max_response_length_in_one_turn": 16},
                           "engine": {"threads": 1, "kv_cache_memory_mb": 16}}}
        self.client.auto_sync_train_config_and_start_engine(config, max_wait=120)
        self.assertEqual(self.client.get_rollout_stat()["pool_size"], 2)
        with self.assertRaisesRegex(SwarmCommandError, "stop_engine|OFFLINE"):
            self.client.sync_train_config(config)

    def test_agree_sync_weight_needs_a_finished_episode_first(self):
        self.boot("  swarm_mode_sample_collection_method: rollout_until_any_client_agree_sync_weight\n")
        self.assertFalse(self.client.agree_sync_weight(retry=False))
        ep = self.client.begin_episode()
        ChatClient(ep.base_url, ep.api_key).chat(user("x"))
        self.assertTrue(self.client.end_episode("t", ep.episode_uuid, 1.0))
        self.assertTrue(self.client.agree_sync_weight(max_wait=60))
        # The any-client trigger fires: the debug backbone records the batch and rolls on.
        self.assertTrue(eventually(lambda: self.client.get_rollout_stat().get("batches_recorded", 0) >= 1))

    def test_sync_train_code_uploads_the_version_controlled_tree(self):
        with tempfile.TemporaryDirectory() as d:
            for rel, text in {"CMakeLists.txt": "project(x)\n", "src/a.cc": "int a;\n", ".gitignore": "build/\n"}.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)) or d, exist_ok=True)
                with open(os.path.join(d, rel), "w") as f:
                    f.write(text)
            subprocess.run(["git", "-C", d, "init", "-q"], check=True)
            subprocess.run(["git", "-C", d, "add", "."], check=True)
            os.makedirs(os.path.join(d, "build"))
            with open(os.path.join(d, "build", "junk.o"), "w") as f:
                f.write("x")
            data = self.client.sync_train_code_from_dir(d)
            self.assertTrue(data["success"])
            self.assertEqual(data["files"], 3)
            root = data["temp_ajet_code_path"]
            self.assertTrue(os.path.isfile(os.path.join(root, "src", "a.cc")))
            self.assertFalse(os.path.exists(os.path.join(root, "build")))


class AdminTokenTest(EchoServerTest):
    admin_token = "s3cret-admin"

    def test_protected_commands_need_the_token(self):
        anonymous = self.make_client(admin_token="")
        with self.assertRaisesRegex(SwarmCommandError, "admin token") as e:
            anonymous.sync_train_config(config_yaml(self.model))
        self.assertEqual(e.exception.status, 401)
        old = os.environ.get("AJET_ADMIN_TOKEN")
        os.environ["AJET_ADMIN_TOKEN"] = self.admin_token
        try:
            from_env = SwarmClient(self.url, retry=FAST, verbose=False)
            self.addCleanup(from_env.close)
        finally:
            if old is None:
                del os.environ["AJET_ADMIN_TOKEN"]
            else:
                os.environ["AJET_ADMIN_TOKEN"] = old
        from_env.auto_sync_train_config_and_start_engine(config_yaml(self.model), max_wait=120)
        ep = anonymous.begin_episode()  # episodes need no admin token
        self.assertTrue(anonymous.end_episode("t", ep.episode_uuid, 1.0))
        with self.assertRaisesRegex(SwarmCommandError, "admin token"):
            anonymous.stop_engine()
        from_env.stop_engine(max_wait=60)
        self.assertEqual(from_env.get_engine_status()[0], "ENGINE.OFFLINE")


class MetricsTest(EchoServerTest):
    admin_token = "metrics-admin"

    def test_logged_numbers_come_back_per_step_and_bad_ones_are_refused(self):
        self.boot()
        for step in range(3):
            ans = self.client.log_metrics(step, {"val/greedy_success": 0.25 * step, "rollout/reward_mean@calc": step})
            self.assertTrue(ans["success"], ans)
        index = self.client.get_metrics_history()
        points = {n["name"]: (n["points"], n["last_step"]) for n in index["names"]}
        self.assertEqual(points["val/greedy_success"], (3, 2))
        self.assertEqual(points["rollout/reward_mean@calc"], (3, 2))
        series = self.client.get_metrics_history(["val/greedy_success", "rollout/reward_mean@calc"], after_step=0)
        self.assertEqual([row[:2] for row in series["series"]["val/greedy_success"]], [[1, 0.25], [2, 0.5]])
        self.assertEqual([row[:2] for row in series["series"]["rollout/reward_mean@calc"]], [[1, 1], [2, 2]])
        with self.assertRaisesRegex(SwarmCommandError, "name"):
            self.client.log_metrics(3, {"bad name!": 1.0})
        with self.assertRaisesRegex(SwarmCommandError, "admin token"):
            self.make_client(admin_token="").log_metrics(3, {"x": 1.0})


class RealEngineTest(unittest.TestCase):
    """The same client flow through the real ajet-engine serving the random micro model."""

    def test_claim_chat_and_end_against_the_real_engine(self):
        model = micro_model_fixture()
        server = SwarmServer(engine="ajet-engine")
        self.addCleanup(server.stop)
        client = SwarmClient(server.url, retry=FAST, verbose=False)
        self.addCleanup(client.close)
        client.auto_sync_train_config_and_start_engine(config_yaml(model, max_model_len=512), max_wait=180)
        ep = client.begin_episode()
        chat = ep.chat_client()
        reply = chat.create(user("Once upon a time"), max_tokens=4, logprobs=True, top_logprobs=2)
        choice = reply["choices"][0]
        self.assertIn(choice["finish_reason"], ("stop", "length"))
        self.assertGreater(reply["usage"]["completion_tokens"], 0)
        # One logprob per generated token, the stop token included when the model chose one (as vLLM).
        self.assertEqual(len(choice["logprobs"]["content"]), reply["usage"]["completion_tokens"])
        streamed = chat.stream_message(user("Hello"), max_tokens=4)
        self.assertIn(streamed["finish_reason"], ("stop", "length"))
        self.assertTrue(client.end_episode("t", ep.episode_uuid, 0.5))
        self.assertEqual(client.get_rollout_stat()["completed_episodes"], 1)


if __name__ == "__main__":
    unittest.main()
