"""The upstream-compatible surface without a swarm server (issue 16): every name an upstream swarm script
imports, upstream's signatures and return types, the AgentJetJob builder and its YAML, the task readers,
the pacing executors, the batch-boundary rule of add_entering_weight_sync_callback and agree_sync_weight,
and the wire bodies (against the scripted HTTP test double of test_client_units). The same surface
against the real server: test_upstream_script.py."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
import threading
import time
import unittest
import zipfile
from unittest import mock

import ajet_swarm
from ajet_swarm import (AgentJetJob, AjetTaskReader, EpisodeStatus, JsonlDatasetFile, JsonlTrainingFp,
                        OpenaiBaseUrlAndApiKey, PeriodicDrainThreadPoolExecutor, RetryPolicy, RolloutStat,
                        RouterTaskReader, SwarmClient, SwarmCommandError, SwarmConnectionError, SwarmError,
                        SwarmServerOfflineError, SwarmThrottlePolicy, SwarmTimeoutError, Task, ThrottlePolicy,
                        WorkflowOutput, from_yaml, run_episodes_until_all_complete, to_yaml)
from ajet_swarm.config_yaml import YamlError
from ajet_swarm.types import Episode
from swarm_fixture import SOURCE_DIR
from test_client_units import Scripted, claim_ok

FAST = RetryPolicy(status_poll=0.01, engine_busy=0.01, empty_pool=0.01, throttle=0.01, agree_sync_weight=0.01,
                   cannot_connect_retry=0.01, jitter=0)
ROLLING = "ENGINE.ROLLING"


def status(s, step=0):
    return (200, {"engine_status": s, "engine_status_detail": None, "global_step": step})


def pool_info(s=ROLLING, step=0, batches=0, completed=0, active=None, **extra):
    info = {"engine_status": s, "global_step": step, "batches_recorded": batches, "completed_episodes": completed,
            "sample_collection_method": "rollout_until_all_clients_agree_sync_weight",
            "active_clients": active if active is not None else []}
    info.update(extra)
    return (200, info)


class ServedTest(unittest.TestCase):
    def serve(self, answers):
        s = Scripted(answers)
        self.addCleanup(s.server_close)
        self.addCleanup(s.shutdown)
        return s

    def client(self, url, **kwargs):
        c = SwarmClient(url, retry=FAST, verbose=False, **kwargs)
        self.addCleanup(c.close)
        return c


class ImportSurfaceTest(unittest.TestCase):
    def test_every_name_an_upstream_swarm_script_imports_is_exported(self):
        # ajet.tuner_lib.experimental.swarm_client, ajet.copilot.job, ajet.schema.task, ajet.task_reader,
        # ajet.default_config.ajet_default, ajet.utils.thread_executors, ajet.tuner_lib.as_oai_baseurl_apikey,
        # ajet.tuner_lib.experimental.interchange_utils, ...swarm_overwatch_utils
        for name in ("SwarmClient", "SwarmServerOfflineError", "auto_train_with_dataset", "AgentJetJob", "Task",
                     "WorkflowOutput", "RouterTaskReader", "AjetTaskReader", "HuggingfaceDatRepo", "JsonlDatasetFile",
                     "JsonlTrainingFp", "PeriodicDrainThreadPoolExecutor", "BoundedThreadPoolExecutor",
                     "run_episodes_until_all_complete", "OpenaiBaseUrlAndApiKey", "SwarmThrottlePolicy",
                     "CurrentBatchRolloutPoolInformation", "EpisodeStatus"):
            self.assertTrue(hasattr(ajet_swarm, name), name)
            self.assertIn(name, ajet_swarm.__all__)

    def test_errors_are_runtime_errors(self):
        for cls in (SwarmError, SwarmCommandError, SwarmConnectionError, SwarmServerOfflineError, SwarmTimeoutError,
                    ajet_swarm.ChatError):
            self.assertTrue(issubclass(cls, RuntimeError), cls)
        self.assertTrue(issubclass(SwarmTimeoutError, TimeoutError))
        try:
            raise SwarmCommandError("refused", 400, "x")
        except RuntimeError as e:  # what upstream scripts catch
            self.assertEqual(e.status, 400)


class ConstructorTest(ServedTest):
    def test_upstream_positional_and_keyword_arguments(self):
        job = AgentJetJob(model="/m")
        c = SwarmClient("http://127.0.0.1:9", False, job, False)
        self.assertIs(c.agentjet_job, job)
        self.assertFalse(c.verbose)
        c = SwarmClient("http://127.0.0.1:9", verbose=True, agentjet_job=None, auto_start_swarm_server=False,
                        admin_token="t", client_uuid="me", timeout=5, retry=FAST)
        self.assertEqual((c.client_uuid, c.admin_token, c.swarm_server_process), ("me", "t", None))

    def test_auto_start_only_for_local_urls_with_a_port_and_not_when_one_answers(self):
        with self.assertRaisesRegex(ValueError, "127.0.0.1, localhost"):
            SwarmClient("http://10.1.2.3:10086", auto_start_swarm_server=True)
        with self.assertRaisesRegex(ValueError, "explicit port"):
            SwarmClient("http://localhost", auto_start_swarm_server=True)
        s = self.serve({"/health": [(200, {"status": "ok"})]})
        with mock.patch.dict(os.environ, {"AJET_SWARM_BIN": "/nonexistent/ajet-swarm"}):
            c = self.client(s.url, auto_start_swarm_server=True)  # a server answers: nothing to start
        self.assertIsNone(c.swarm_server_process)
        self.assertEqual(s.paths(), ["/health"])
        port = s.server_address[1]
        s.shutdown()
        s.server_close()
        with mock.patch.dict(os.environ, {"AJET_SWARM_BIN": "/nonexistent/ajet-swarm"}):
            with self.assertRaisesRegex(SwarmError, "AJET_SWARM_BIN=/nonexistent/ajet-swarm is not an executable"):
                SwarmClient(f"http://127.0.0.1:{port}", auto_start_swarm_server=True)

    def test_logger_info_logs_even_when_quiet_and_drops_repeats_within_a_second(self):
        c = SwarmClient("http://127.0.0.1:9", verbose=False)
        with self.assertLogs("ajet_swarm", "INFO") as logs:
            c.logger_info("hello")
            c.logger_info("hello")
            c.logger_info("other")
        self.assertEqual([r.getMessage() for r in logs.records], ["hello", "other"])


class DataTypesTest(unittest.TestCase):
    def test_task_takes_upstream_keywords_and_derives_a_task_id(self):
        t = Task(main_query="What is 6*7?", init_messages=[{"role": "user", "content": "x"}], task_id="q1",
                 env_type="math", metadata={"answer": 42})
        self.assertEqual((t.task_id, t.env_type, t.metadata["answer"]), ("q1", "math", 42))
        a, b = Task(main_query="What is 6*7?"), Task(main_query="What is 6*7?", metadata={"other": 1})
        self.assertRegex(a.task_id, r"^task-[0-9a-f]{16}$")
        self.assertEqual(a.task_id, b.task_id)  # same question, same GRPO group
        self.assertNotEqual(a.task_id, Task(main_query="What is 6*8?").task_id)
        self.assertEqual(Task().task_id, "")
        self.assertEqual(Task("positional").task_id, "positional")
        self.assertEqual(t.model_dump()["main_query"], "What is 6*7?")

    def test_workflow_output_defaults_and_step_rewards(self):
        self.assertIsNone(WorkflowOutput().reward)
        with self.assertRaisesRegex(ValueError, "required"):
            WorkflowOutput().to_json("t")
        with self.assertRaisesRegex(ValueError, "step rewards"):
            WorkflowOutput(reward=[1.0, 0.0]).to_json("t")

    def test_swarm_throttle_policy_has_upstream_fields_and_defaults(self):
        p = SwarmThrottlePolicy(current_task_id="a", expected_batch_size=4, expected_num_repeat=2)
        self.assertIsInstance(p, ThrottlePolicy)
        self.assertEqual(p.ratio, 1.5)
        self.assertEqual(p.model_dump(), {"current_task_id": "a", "ratio": 1.5, "expected_batch_size": 4,
                                          "expected_num_repeat": 2})

        class Pydantic:  # upstream's pydantic object, duck-typed
            ratio, expected_batch_size, expected_num_repeat, current_task_id = 2.0, 3, 4, "b"

        self.assertEqual(ThrottlePolicy.coerce(Pydantic()), ThrottlePolicy("b", 2.0, 3, 4))
        self.assertEqual(ThrottlePolicy.coerce({"current_task_id": "c"}), ThrottlePolicy("c"))
        with self.assertRaises(TypeError):
            ThrottlePolicy.coerce(42)

    def test_openai_base_url_and_api_key(self):
        api = OpenaiBaseUrlAndApiKey(base_url="http://h:1/v1", api_key="sk-ajet-x", episode_uuid="e")
        self.assertEqual(api.model, "reserved_field")
        ep = Episode(base_url="http://h:1/v1", api_key="k", episode_uuid="e1", client_uuid="c")
        self.assertIsInstance(ep, OpenaiBaseUrlAndApiKey)
        uuid, inner = ep
        self.assertEqual((uuid, inner.base_url, inner.model), ("e1", "http://h:1/v1", "reserved_field"))
        with mock.patch.dict(sys.modules, {"agentscope": None, "agentscope.model": None}):
            with self.assertRaisesRegex(ImportError, "as_agentscope_model.*'agentscope'.*pip install agentscope"):
                api.as_agentscope_model()
        with mock.patch.dict(sys.modules, {"openai": None}):
            with self.assertRaisesRegex(ImportError, "as_raw_openai_sdk_client.*'openai'"):
                api.as_raw_openai_sdk_client()

    def test_fake_openai_and_agentscope_modules_receive_the_episode(self):
        made = {}
        openai = type(sys)("openai")
        openai.AsyncOpenAI = lambda **kw: made.setdefault("async", kw)
        openai.OpenAI = lambda **kw: made.setdefault("sync", kw)
        agentscope, model = type(sys)("agentscope"), type(sys)("agentscope.model")
        model.OpenAIChatModel = lambda name, **kw: made.setdefault("agentscope", (name, kw))
        agentscope.model = model
        api = OpenaiBaseUrlAndApiKey(base_url="http://h:1/v1", api_key="k")
        with mock.patch.dict(sys.modules, {"openai": openai, "agentscope": agentscope, "agentscope.model": model}):
            api.as_raw_openai_sdk_client()
            api.as_openai_sdk_client()
            api.as_agentscope_model(stream=False)
        self.assertEqual(made["async"], {"api_key": "k", "base_url": "http://h:1/v1"})
        self.assertEqual(made["sync"], {"api_key": "k", "base_url": "http://h:1/v1"})
        self.assertEqual(made["agentscope"], ("AgentJet-Model", {"api_key": "k", "client_args": {"base_url": "http://h:1/v1"},
                                                                 "stream": False}))

    def test_rollout_stat_and_episode_status_have_attribute_and_item_access(self):
        stat = RolloutStat({"completed_tasks": 3, "completed_tasks_details": {"t": ["e"]},
                            "swarm_client_instruction": {"active_clients": [{"client_uuid": "c"}]}})
        self.assertEqual((stat.completed_tasks, stat["completed_tasks"]), (3, 3))
        self.assertEqual(stat.completed_tasks_details.t, ["e"])
        self.assertEqual(stat.swarm_client_instruction.active_clients[0].client_uuid, "c")
        self.assertEqual(stat.completed_episodes, 0)  # upstream's default for a missing field
        self.assertIsNone(stat.running_episode_details)
        self.assertNotIn("completed_episodes", stat)  # defaults are not stored
        self.assertEqual(RolloutStat(), {})
        self.assertEqual(json.loads(json.dumps(stat))["completed_tasks"], 3)
        self.assertEqual(stat.model_dump()["completed_episodes"], 0)
        with self.assertRaises(AttributeError):
            stat.no_such_field
        es = EpisodeStatus({"episode_uuid": "e", "episode_status": "claimed"})
        self.assertEqual((es.episode_uuid, es["episode_status"], es.openai_api_key, es.llm_call_count), ("e", "claimed", "", 0))


class WireTest(ServedTest):
    def test_begin_end_abort_send_upstreams_fields(self):
        s = self.serve({"/claim_episode": [claim_ok("ep1"), claim_ok("ep2")],
                        "/end_episode": [(200, {"success": True})], "/abort_episode": [(200, {"success": True})],
                        "/get_current_batch_rollout_pool_information": [pool_info(
                            sample_collection_method="rollout_until_finish_enough_tasks", completed_task_target=2,
                            task_expected_num_repeat=2, running_episode_details=None)]})
        c = self.client(s.url)

        class UpstreamPolicy:  # pydantic-like
            current_task_id, ratio, expected_batch_size, expected_num_repeat = "t1", 1.5, 2, 2

        episode_uuid, api_baseurl_key = c.begin_episode(discard_episode_timeout=60, throttle_policy=UpstreamPolicy())
        self.assertIsInstance(api_baseurl_key, OpenaiBaseUrlAndApiKey)
        self.assertEqual(api_baseurl_key.episode_uuid, episode_uuid)
        claim = s.requests[-1][1]
        self.assertEqual(claim["throttle_policy"], {"current_task_id": "t1", "ratio": 1.5, "expected_batch_size": 2,
                                                    "expected_num_repeat": 2})
        out = WorkflowOutput(reward=1.0, metadata={"final_answer": "42"})
        self.assertTrue(c.end_episode(Task(main_query="q", task_id="t1"), episode_uuid, out, declare_client_active=False))
        body = s.requests[-1][1]
        self.assertEqual((body["task_id"], body["declare_client_active"]), ("t1", False))
        self.assertEqual(body["workflow_output"]["metadata"], {"final_answer": "42", "task_id": "t1"})
        self.assertEqual(out.metadata["task_id"], "t1")  # upstream sets it on the caller's object
        e2, _ = c.begin_episode()
        self.assertTrue(c.abort_episode(e2))
        self.assertEqual((s.requests[-1][0], s.requests[-1][1]["declare_client_active"]), ("/abort_episode", True))
        self.assertTrue(c.abort_episode(e2, declare_client_active=False))
        self.assertFalse(s.requests[-1][1]["declare_client_active"])

    def test_a_job_whose_method_does_not_fit_is_refused_before_any_request(self):
        s = self.serve({})
        c = self.client(s.url, agentjet_job=AgentJetJob(swarm_mode_sample_collection_method=
                                                        "rollout_until_finish_enough_episodes"))
        with self.assertRaisesRegex(ValueError, "rollout_until_finish_enough_tasks"):
            c.begin_episode(throttle_policy=SwarmThrottlePolicy(current_task_id="a"))
        with self.assertRaisesRegex(ValueError, "agree_sync_weight"):
            c.agree_sync_weight()
        self.assertEqual(s.paths(), [])

    def test_global_step_experiment_dir_buffer_and_rollout_stat(self):
        s = self.serve({"/get_engine_status": [status(ROLLING, 7)],
                        "/get_server_experiment_dir": [(200, {"server_experiment_dir": "/srv/exp/x"})],
                        "/get_episode_buffer": [(200, {"buffer": [{"episode_uuid": "e1", "episode_status": "registered"}]})],
                        "/get_current_batch_rollout_pool_information": [pool_info(completed=3, completed_tasks=1)]})
        c = self.client(s.url)
        self.assertEqual(c.get_global_step(), 7)
        self.assertEqual(c.server_experiment_dir(), "/srv/exp/x")
        buffer = c.get_episode_buffer()
        self.assertEqual((buffer[0].episode_uuid, buffer[0]["episode_status"]), ("e1", "registered"))
        stat = c.get_rollout_stat()
        self.assertEqual((stat.completed_tasks, stat.completed_episodes, stat.completed_task_target), (1, 3, 0))
        port = s.server_address[1]
        s.shutdown()
        s.server_close()
        gone = self.client(f"http://127.0.0.1:{port}")
        self.assertEqual(gone.get_global_step(), 0)
        self.assertEqual(gone.server_experiment_dir(), "saved_experiments")  # upstream's fallback
        self.assertEqual(gone.get_rollout_stat().completed_tasks, 0)

    def test_sync_train_code_posts_the_zip_file_as_application_zip(self):
        s = self.serve({"/sync_train_code": [(200, {"success": True, "message": "ok", "temp_ajet_code_path": "/x",
                                                    "files": 1, "bytes": 3})]})
        c = self.client(s.url, admin_token="tok")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "code.zip")
            with zipfile.ZipFile(path, "w") as zf:
                zf.writestr("CMakeLists.txt", "x\n")
            self.assertEqual(c.sync_train_code(path)["temp_ajet_code_path"], "/x")
            with open(path, "rb") as f:
                sent = f.read()
            with self.assertRaises(FileNotFoundError):
                c.sync_train_code(os.path.join(d, "missing.zip"))
        p, headers, raw = s.raw[-1]
        self.assertEqual((p, headers["Content-Type"], headers["Authorization"], raw),
                         ("/sync_train_code", "application/zip", "Bearer tok", sent))

    def test_sync_train_config_sends_the_jobs_tree_and_remembers_the_job(self):
        s = self.serve({"/sync_train_config": [(200, {"success": True, "warnings": ["a", "b"]})]})
        c = self.client(s.url)
        job = AgentJetJob(model="/models/m", batch_size=4, num_repeat=2, backbone="debug")
        job.config.ajet.engine = {"threads": 2}
        with self.assertLogs("ajet_swarm", "WARNING") as logs:
            c.sync_train_config(job)
        self.assertIn("2 warnings from the server", logs.output[0])
        self.assertIs(c.agentjet_job, job)
        sent = from_yaml(s.requests[-1][1]["yaml_as_string"])
        self.assertEqual(sent, job.config.to_dict())
        self.assertEqual((sent["ajet"]["model"]["path"], sent["ajet"]["engine"]), ("/models/m", {"threads": 2}))
        self.assertNotIn("source", s.requests[-1][1])  # made here: its line numbers are no file's

    def test_sync_train_config_from_a_file_names_the_file(self):
        # The server's warnings used to name "sync_train_config yaml_as_string:LINE" for the user's own file.
        s = self.serve({"/sync_train_config": [(200, {"success": True, "warnings": []})]})
        c = self.client(s.url)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "job.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write("ajet:\n  model: {path: /models/m}\n")
            for config in (path, pathlib.Path(path)):
                c.sync_train_config(config)
                body = s.requests[-1][1]
                self.assertEqual((body["source"], body["yaml_as_string"]),
                                 (path, "ajet:\n  model: {path: /models/m}\n"))

    def test_wait_until_status_change_to_takes_one_status_or_a_list(self):
        s = self.serve({"/get_engine_status": [status("ENGINE.BOOTING"), status("ENGINE.ROLLING_POST")]})
        c = self.client(s.url)
        self.assertIsNone(c._wait_until_status_change_to(desired_status_list=["ENGINE.ROLLING_POST",
                                                                              "ENGINE.WEIGHT_SYNCING"], verbose=False))
        s.answers["/get_engine_status"] = [status(ROLLING), status("ENGINE.OFFLINE")]
        with self.assertRaises(SwarmServerOfflineError):
            c._wait_until_status_change_to(desired_status="ENGINE.WEIGHT_SYNCING", verbose=False)
        with self.assertRaises(ValueError):
            c._wait_until_status_change_to()
        with self.assertRaises(SwarmTimeoutError):
            c._wait_until_status_change_to(desired_status="ENGINE.WEIGHT_SYNCING", verbose=False, max_wait=0.05)


class BoundaryRuleTest(ServedTest):
    """What counts as a batch boundary (add_entering_weight_sync_callback, agree_sync_weight)."""

    def fires(self, observations):
        c = SwarmClient("http://127.0.0.1:9", verbose=False)
        fired = []
        c._sync_callbacks.append(lambda: fired.append(1))  # the rule without the watcher thread
        counts = []
        for obs in observations:
            c._observe(*obs)
            counts.append(len(fired))
        return counts

    def test_each_backbone_fires_once_per_boundary(self):
        W, X = "ENGINE.WEIGHT_SYNCING", "ENGINE.WEIGHT_EXPORTING"
        # torch: ROLLING -> ROLLING_POST -> WEIGHT_SYNCING (fires) <-> WEIGHT_EXPORTING -> ROLLING with step + 1
        self.assertEqual(self.fires([(ROLLING, 0, 0), ("ENGINE.ROLLING_POST", 0, 0), (W, 0, 0), (X, 0, 0), (W, 0, 0),
                                     (ROLLING, 1, 0), (ROLLING, 1, 0)]), [0, 0, 1, 1, 1, 1, 1])
        # torch with the sync window between two polls, and async (status stays ROLLING): the step grows
        self.assertEqual(self.fires([(ROLLING, 0, None), (ROLLING, 1, None), (ROLLING, 3, None)]), [0, 1, 2])
        # debug: the batch is recorded, nothing trains
        self.assertEqual(self.fires([(ROLLING, 0, 0), ("ENGINE.ROLLING_POST", 0, 0), (ROLLING, 0, 1),
                                     (ROLLING, 0, None), (ROLLING, 0, 1), (ROLLING, 0, 2)]), [0, 0, 1, 1, 1, 2])
        # an engine (re)start that reports its checkpoint's step is not a boundary
        self.assertEqual(self.fires([("ENGINE.OFFLINE", 0, 0), ("ENGINE.BOOTING", 0, 0), (ROLLING, 5, 0),
                                     ("ENGINE.CANNOT_CONNECT", None, None), (ROLLING, 5, 0)]), [0, 0, 0, 0, 0])

    def test_the_watcher_thread_fires_callbacks_from_polled_pool_info(self):
        s = self.serve({"/get_current_batch_rollout_pool_information": [pool_info(batches=0), pool_info(batches=0),
                                                                        pool_info(batches=1)]})
        c = self.client(s.url)
        fired = threading.Event()
        c.add_entering_weight_sync_callback(lambda: 1 / 0)  # a failing callback is logged, the others still run
        with self.assertLogs("ajet_swarm", "ERROR"):
            c.add_entering_weight_sync_callback(fired.set)
            self.assertTrue(fired.wait(10))
        c.close()
        c._watcher.join(5)
        self.assertFalse(c._watcher.is_alive())

    def test_boundary_reasons_after_an_agreement(self):
        c = SwarmClient("http://127.0.0.1:9", client_uuid="me", verbose=False)
        before = {"engine_status": ROLLING, "global_step": 2, "batches_recorded": 1, "completed_episodes": 4,
                  "active_clients": [{"client_uuid": "me", "agreed_sync_weight": True}]}
        self.assertEqual(c._boundary_reason(before, before), "")
        # no longer listed is not a boundary: an idle client also drops out after 600 s
        self.assertEqual(c._boundary_reason(before, {**before, "active_clients": []}), "")
        for change, expect in [({"engine_status": "ENGINE.ROLLING_POST"}, "status ENGINE.ROLLING_POST"),
                               ({"engine_status": "ENGINE.WEIGHT_SYNCING"}, "status ENGINE.WEIGHT_SYNCING"),
                               ({"global_step": 3}, "global_step 2 -> 3"),
                               ({"batches_recorded": 2}, "batches_recorded 1 -> 2"),
                               ({"completed_episodes": 1}, "completed_episodes 4 -> 1"),
                               ({"active_clients": [{"client_uuid": "me", "agreed_sync_weight": False}]}, "cleared"),
                               ({"engine_status": "ENGINE.OFFLINE"}, "ENGINE.OFFLINE")]:
            self.assertIn(expect, c._boundary_reason(before, {**before, **change}), change)
        # upstream's field alone also tells
        upstream = {"engine_status": ROLLING, "swarm_client_instruction": {"active_clients": [
            {"client_uuid": "me", "allowed_sync_weight": True}]}}
        self.assertEqual(c._boundary_reason(upstream, upstream), "")
        self.assertIn("cleared", c._boundary_reason(upstream, {"engine_status": ROLLING, "swarm_client_instruction": {
            "active_clients": [{"client_uuid": "me", "allowed_sync_weight": False}]}}))

    def test_agree_sync_weight_gives_up_when_the_engine_is_not_rolling_and_honours_max_wait(self):
        s = self.serve({"/get_engine_status": [status("ENGINE.WEIGHT_SYNCING")],
                        "/agree_sync_weight": [(200, {"success": True, "failure_reason": ""})],
                        "/get_current_batch_rollout_pool_information": [pool_info(
                            active=[{"client_uuid": "me", "agreed_sync_weight": True}])]})
        c = self.client(s.url, client_uuid="me")
        with self.assertLogs("ajet_swarm", "INFO") as logs:  # the boundary is under way: routine, no warning
            self.assertFalse(c.agree_sync_weight())
        self.assertEqual([line.split(":")[0] for line in logs.output], ["INFO"], logs.output)
        self.assertNotIn("/agree_sync_weight", s.paths())
        s.answers["/get_engine_status"] = [status(ROLLING)]
        with self.assertRaises(SwarmTimeoutError):  # agreed, but the trigger never fires
            c.agree_sync_weight(max_wait=0.2)
        self.assertTrue(c.agree_sync_weight(wait=False))
        s.answers["/get_current_batch_rollout_pool_information"] = [
            pool_info(active=[{"client_uuid": "me", "agreed_sync_weight": True}]), pool_info(s="ENGINE.OFFLINE")]
        with self.assertLogs("ajet_swarm", "WARNING"):
            self.assertFalse(c.agree_sync_weight())


class MultiEngineTest(unittest.TestCase):
    def test_engines_start_concurrently_and_failures_are_collected(self):
        barrier = threading.Barrier(3, timeout=10)

        class FakeClient:
            def __init__(self, url, fail=False):
                self.server_url, self.fail, self.calls = url, fail, []

            def auto_sync_train_config_and_start_engine(self, job, force_restart=False):
                self.calls.append((job, force_restart))
                barrier.wait()  # all three run at the same time, or this times out
                if self.fail:
                    raise SwarmCommandError("boom", 400)
                return "ENGINE.OFFLINE"

        a, b = FakeClient("http://a:1"), FakeClient("http://b:1")
        self.assertEqual(SwarmClient.async_and_start_multi_engine([(a, "job-a"), (b, "job-b"),
                                                                   (FakeClient("http://c:1"), "job-c")],
                                                                  force_restart=True),
                         ["ENGINE.OFFLINE"] * 3)
        self.assertEqual(a.calls, [("job-a", True)])
        barrier.reset()
        with self.assertLogs("ajet_swarm", "ERROR"), \
                self.assertRaisesRegex(SwarmError, r"Failed to start 1 engine\(s\): http://b:1: SwarmCommandError: boom"):
            SwarmClient.async_and_start_multi_engine([(a, 1), (FakeClient("http://b:1", fail=True), 2),
                                                      (FakeClient("http://c:1"), 3)])


class AgentJetJobTest(unittest.TestCase):
    def test_keywords_map_onto_upstreams_yaml_keys_and_attributes(self):
        job = AgentJetJob(experiment_name="math_gsm8k_grpo", algorithm="grpo", n_gpu=8, model="/models/q",
                          batch_size=32, num_repeat=4, max_env_worker=64, backbone="debug", logging="console",
                          swarm_mode_sample_collection_method="rollout_until_all_clients_agree_sync_weight",
                          max_prompt_length=1000, max_response_length=2000, max_model_len=3000,
                          max_response_length_in_one_turn=500, lr=2e-6, total_training_steps=10, max_num_seqs=16)
        ajet = job.config.ajet
        self.assertEqual((ajet.experiment_name, ajet.trainer_common.algorithm.adv_estimator,
                          ajet.trainer_common.n_gpus_per_node, ajet.model.path, ajet.data.train_batch_size,
                          ajet.rollout.num_repeat, ajet.rollout.max_env_worker, ajet.backbone,
                          ajet.trainer_common.logger, ajet.data.max_prompt_length, ajet.rollout.max_model_len,
                          ajet.trainer_common.optim.lr, ajet.trainer_common.total_training_steps,
                          ajet.rollout.max_num_seqs),
                         ("math_gsm8k_grpo", "grpo", 8, "/models/q", 32, 4, 64, "debug", "console", 1000, 3000, 2e-6,
                          10, 16))
        self.assertEqual((job.num_repeat, job.batch_size, job.backbone, job.model), (4, 32, "debug", "/models/q"))
        self.assertEqual(job.swarm_mode_sample_collection_method, "rollout_until_all_clients_agree_sync_weight")
        # not given: the default tree's value, mirrored as an attribute
        plain = AgentJetJob()
        self.assertEqual((plain.num_repeat, plain.batch_size, plain.lr, plain.backbone, plain.max_model_len),
                         (4, 32, 1e-6, "verl", 18000))
        self.assertEqual(plain.config.ajet.task_reader.type, "random_dummy")
        self.assertFalse(plain.ensure_new_experiment)
        tree = plain.config.to_dict()
        self.assertIs(type(tree["ajet"]["rollout"]), dict)
        self.assertEqual(list(tree), ["ajet"])

    def test_upstreams_validation(self):
        with self.assertRaisesRegex(ValueError, "must all be None or all be non-None"):
            AgentJetJob(max_prompt_length=10)
        with self.assertRaisesRegex(ValueError, "illegal token length"):
            AgentJetJob(max_prompt_length=10, max_response_length=20, max_model_len=25, max_response_length_in_one_turn=5)
        with self.assertRaisesRegex(ValueError, "max_response_length_in_one_turn"):
            AgentJetJob(max_prompt_length=10, max_response_length=20, max_model_len=30, max_response_length_in_one_turn=25)
        with self.assertRaisesRegex(ValueError, "safetensors"):
            AgentJetJob(lora_rank=8)
        with self.assertRaisesRegex(ValueError, "greater than 1e-5"):
            AgentJetJob(lora_rank=8, lora_load_format="safetensors", lr=1e-6)
        with self.assertRaises(NotImplementedError):
            AgentJetJob(backbone="trinity")
        with self.assertRaisesRegex(ValueError, "absent"):
            AgentJetJob(base_yaml_config="/nonexistent.yaml")

    def test_dump_and_build_round_trip_and_partial_base_yaml(self):
        job = AgentJetJob(experiment_name="x", model="/m", batch_size=3, num_repeat=2, backbone="debug")
        job.config.ajet.rollout.temperature = 0.5
        job.config.ajet.engine = {"threads": 2, "kv_cache_memory_mb": 64}
        job.config["ajet"]["rollout"]["multi_turn"] = {"max_steps": 3}
        with tempfile.TemporaryDirectory() as d:
            path = job.dump_job_as_yaml(os.path.join(d, "sub", "job.yaml"))
            again = AgentJetJob(base_yaml_config=path)
            self.assertEqual(again.config.to_dict()["ajet"]["engine"], {"threads": 2, "kv_cache_memory_mb": 64})
            self.assertEqual((again.num_repeat, again.batch_size, again.config.ajet.rollout.temperature), (2, 3, 0.5))
            self.assertEqual(AgentJetJob.from_yaml(path, num_repeat=8).config.ajet.rollout.num_repeat, 8)
            self.assertEqual(job.build_job_from_yaml(path), again.config.to_dict())
            partial = os.path.join(d, "partial.yaml")
            with open(partial, "w") as f:
                f.write("defaults: [ajet_default, _self_]\najet:\n  model:\n    path: /p  # the model\n"
                        "  rollout: {num_repeat: 6}\n")
            p = AgentJetJob(base_yaml=partial, batch_size=5)
            self.assertEqual((p.model, p.num_repeat, p.batch_size, p.max_env_worker), ("/p", 6, 5, 128))

    def test_set_data_and_set_workflow(self):
        job = AgentJetJob().set_data("jsonl", "/data/train.jsonl", validation_split="/data/val.jsonl")
        self.assertEqual(job.config.ajet.task_reader.type, "jsonl_dataset_file")
        self.assertEqual(job.config.ajet.task_reader.jsonl_dataset_file.validation.file_path, "/data/val.jsonl")
        job.set_data("hf", "openai/gsm8k")
        self.assertEqual(job.config.ajet.task_reader.huggingface_dat_repo.dataset_path, "openai/gsm8k")
        with self.assertRaises(NotImplementedError):
            job.set_data("env_service", "x")
        job.set_workflow(AgentJetJobTest)
        self.assertEqual(job.config.ajet.rollout.user_workflow, f"{__name__}->AgentJetJobTest")


class YamlReaderTest(unittest.TestCase):
    def test_upstream_swarm_job_tree_reads_and_round_trips(self):
        path = os.path.join(SOURCE_DIR, "tests", "config", "data", "upstream_swarm_job.yaml")
        with open(path) as f:
            tree = from_yaml(f.read())
        self.assertEqual(tree["ajet"]["task_reader"]["env_service"]["env_url"], "http://127.0.0.1:8080")
        self.assertEqual(tree["ajet"]["trainer_common"]["optim"]["betas"], [0.9, 0.999])
        self.assertIsNone(tree["ajet"]["task_judge"]["judge_protocol"])
        self.assertEqual(tree["defaults"], ["verl_default", "ajet_default", "_self_"])
        self.assertEqual(tree["hydra"]["searchpath"][0], "file://ajet/default_config")
        self.assertEqual(from_yaml(to_yaml(tree)), tree)

    def test_scalars_blocks_and_errors(self):
        text = ("---\n# c\na: 1   # x\nb:\n- x\n- 'it''s'\n- \"q # not\"\nc:\n  - k: v\n    k2: [1, 2, {z: 3}]\n"
                "  - - n1\n    - n2\nd: |\n  line1\n   line2\ne: >-\n  folded\n  text\nf: ~\ng: yes\nh: 0x1F\n"
                "i: -.inf\nj: 1e-6\nurl: http://a:80/x\n'k q': 3.5\n")
        self.assertEqual(from_yaml(text), {"a": 1, "b": ["x", "it's", "q # not"],
                                           "c": [{"k": "v", "k2": [1, 2, {"z": 3}]}, ["n1", "n2"]],
                                           "d": "line1\n line2\n", "e": "folded text", "f": None, "g": True, "h": 31,
                                           "i": float("-inf"), "j": 1e-6, "url": "http://a:80/x", "k q": 3.5})
        for bad, msg in [("a: &x 1\n", "anchors"), ("a:\n\t- 1\n", "tabs"), ("a: [1, 2\n", "unterminated"),
                         ("a: 1\n---\nb: 2\n", "several documents"), ("a: 1\n  b: 2\n", "indentation")]:
            with self.assertRaisesRegex(YamlError, msg, msg=bad):
                from_yaml(bad)


class TaskReaderTest(unittest.TestCase):
    def test_jsonl_as_upstream_reads_it(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "train.jsonl")
            with open(path, "w") as f:
                f.write(json.dumps({"main_query": "q1", "task_id": 7, "metadata": {"answer": "42"}}) + "\n\n")
                f.write(json.dumps({"question": "raw"}) + "\n")
                f.write(json.dumps({"main_query": "q3", "task_id": None}) + "\n")  # was the group "None"
            config = AjetTaskReader(jsonl_dataset_file=JsonlDatasetFile(training=JsonlTrainingFp(file_path=path)))
            reader = RouterTaskReader(reader_type="jsonl_dataset_file", reader_config=config, seed=1)
            tasks = sorted(reader.get_training_tasks(), key=lambda t: t.task_id)
            self.assertEqual([(t.task_id, t.main_query, t.env_type) for t in tasks],
                             [("7", "q1", "no_env"), ("task_1", "[not defined]", "no_env"), ("task_2", "q3", "no_env")])
            self.assertEqual(tasks[0].metadata, {"answer": "42"})
            self.assertEqual(tasks[1].metadata, {"question": "raw"})  # no metadata: the whole line
            self.assertEqual(sorted(t.task_id for t in reader.generate_training_tasks()), ["7", "task_1", "task_2"])
            job = AgentJetJob().set_data("jsonl", path)
            self.assertEqual(len(RouterTaskReader.from_job(job).get_validation_tasks()), 3)
            self.assertEqual(len(RouterTaskReader(job.config.ajet.task_reader.type,
                                                  job.config.ajet.task_reader).get_training_tasks()), 3)
            with open(path, "w") as f:
                f.write("{not json\n")
            with self.assertRaisesRegex(ValueError, "line 1"):
                reader.get_training_tasks()

    def test_random_dummy_and_unsupported_types(self):
        tasks = RouterTaskReader.from_job(AgentJetJob(), seed=3).get_training_tasks()
        self.assertEqual(sorted(int(t.task_id) for t in tasks), list(range(1000)))
        self.assertEqual(tasks[0].main_query, f"[dummy task @ {tasks[0].task_id}]")
        with self.assertRaisesRegex(ImportError, "jsonl_dataset_file"):
            RouterTaskReader("huggingface_dat_repo", AjetTaskReader())
        with self.assertRaisesRegex(ValueError, "Unsupported"):
            RouterTaskReader("nope", None)


class ExecutorTest(unittest.TestCase):
    def test_periodic_drain_waits_for_each_lot_and_returns_its_results(self):
        running, peak, lock = [0], [0], threading.Lock()

        def work(x):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.02)
            with lock:
                running[0] -= 1
            return x * 10

        ex = PeriodicDrainThreadPoolExecutor(workers=3, max_parallel=2, auto_retry=False)
        drained, futures = [], []
        for i in range(7):
            future, results = ex.submit_with_periodic_drain(fn=work, x=i)
            drained.append(results)
            if results:  # a drain happened before this submission: the previous lot is finished
                self.assertTrue(all(f.done() for f in futures))
            futures.append(future)
        self.assertEqual(drained, [[], [], [], [0, 10, 20], [], [], [30, 40, 50]])
        self.assertEqual(ex.drain(), [60])
        self.assertLessEqual(peak[0], 2)
        ex.shutdown()

    def test_auto_retry_runs_a_failing_call_again_and_failures_are_left_out_of_results(self):
        attempts = []

        def flaky(x):
            attempts.append(x)
            if len(attempts) < 3:
                raise RuntimeError("not yet")
            return x

        with self.assertLogs("ajet_swarm", "ERROR"):
            with PeriodicDrainThreadPoolExecutor(workers=1, auto_retry=True, retry_delay=0) as ex:
                self.assertEqual(ex.submit(flaky, 5).result(10), 5)
        self.assertEqual(attempts, [5, 5, 5])
        with self.assertLogs("ajet_swarm", "ERROR"):
            ex = PeriodicDrainThreadPoolExecutor(workers=2, auto_retry=False)
            ex.submit_with_periodic_drain(lambda: 1 / 0)
            ex.submit_with_periodic_drain(lambda: 2)
            _, results = ex.submit_with_periodic_drain(lambda: 3)
            self.assertEqual(results, [2])
            ex.shutdown()
        self.assertEqual(run_episodes_until_all_complete([1, 2, 3], lambda t: t * 2), [2, 4, 6])

    def test_block_first_run(self):
        order = []
        ex = PeriodicDrainThreadPoolExecutor(workers=4, block_first_run=True, auto_retry=False)
        f = ex.submit(lambda: (time.sleep(0.05), order.append("first"))[1])
        self.assertTrue(f.done())
        self.assertEqual(order, ["first"])
        ex.shutdown()


if __name__ == "__main__":
    unittest.main()
