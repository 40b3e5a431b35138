"""Client logic that needs no swarm server: the throttle algorithm, config YAML, base-URL rewriting,
workflow outputs, the code archive, stream assembly; and the retry/drop rules against a scripted
HTTP test double (a stand-in for server answers that are hard to provoke on cue, e.g. the
WEIGHT_SYNCING race at a batch boundary). The real server is exercised in test_real_server.py."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ajet_swarm import (ChatClient, ChatError, RetryPolicy, SwarmClient, SwarmCommandError, SwarmConnectionError,
                        SwarmError, SwarmServerOfflineError, SwarmTimeoutError, Task, ThrottlePolicy, WorkflowOutput,
                        accumulate_stream, format_rollout_stat, to_yaml)
from ajet_swarm.code_sync import zip_tree
from ajet_swarm.throttle import RecentTasks, check_throttle, decide_and_remember

FAST = RetryPolicy(status_poll=0.01, engine_busy=0.01, empty_pool=0.01, throttle=0.01, agree_sync_weight=0.01,
                   cannot_connect_retry=0.01, jitter=0)


def pool(completed=None, running=None, batch=2, repeat=2, method="rollout_until_finish_enough_tasks"):
    """Pool info with completed_tasks_client_uuids {task: [client...]} and running {uuid: (client, task)}."""
    return {
        "sample_collection_method": method,
        "completed_task_target": batch,
        "task_expected_num_repeat": repeat,
        "completed_tasks_client_uuids": completed or {},
        "running_episode_details": {u: {"client_uuid": c, "optional_task_id": t} for u, (c, t) in (running or {}).items()},
    }


class ThrottleTest(unittest.TestCase):
    def test_no_throttle_while_nothing_runs_and_the_batch_is_not_full(self):
        p = pool(completed={"a": ["me"], "b": ["me"], "c": ["me"]})
        self.assertFalse(check_throttle(ThrottlePolicy("new", ratio=1.0), p, "me", RecentTasks()).throttle)

    def test_a_new_task_is_held_back_once_this_client_has_batch_times_ratio_distinct_tasks(self):
        running = {"e1": ("me", "a"), "e2": ("me", "b"), "e3": ("me", "c")}
        policy = ThrottlePolicy("new", ratio=1.5, expected_batch_size=2, expected_num_repeat=2)
        d = check_throttle(policy, pool(running=running), "me", RecentTasks())
        self.assertTrue(d.throttle)
        self.assertIn("3 distinct tasks", d.reason)
        # Two own tasks are under the limit of 3.
        two = {"e1": ("me", "a"), "e2": ("me", "b")}
        self.assertFalse(check_throttle(policy, pool(running=two), "me", RecentTasks()).throttle)

    def test_tasks_already_in_the_batch_or_seen_recently_are_never_held_back(self):
        running = {"e1": ("me", "a"), "e2": ("me", "b"), "e3": ("me", "c"), "e4": ("other", "x")}
        p = pool(running=running)
        for task in ("a", "x"):  # own task (next repeat), another client's task
            self.assertFalse(check_throttle(ThrottlePolicy(task, ratio=1.0), p, "me", RecentTasks()).throttle, task)
        recent = RecentTasks()
        recent.remember("z", 2, 2)
        self.assertFalse(check_throttle(ThrottlePolicy("z", ratio=1.0), p, "me", recent).throttle)
        self.assertTrue(check_throttle(ThrottlePolicy("y", ratio=1.0), p, "me", recent).throttle)

    def test_tasks_shared_with_other_clients_do_not_count_toward_the_limit(self):
        running = {"e1": ("me", "a"), "e2": ("other", "a"), "e3": ("me", "b"), "e4": ("other", "b"), "e5": ("me", "c")}
        self.assertFalse(check_throttle(ThrottlePolicy("new", ratio=1.0), pool(running=running), "me",
                                        RecentTasks()).throttle)

    def test_decide_remembers_admitted_tasks_and_the_buffer_is_bounded(self):
        recent = RecentTasks()
        for i in range(20):
            self.assertIsNone(decide_and_remember(ThrottlePolicy(f"t{i}"), pool(batch=1, repeat=2), "me", recent))
        self.assertIn("t19", recent)
        self.assertNotIn("t0", recent)  # capacity batch x repeat x 3 = 6

    def test_other_collection_methods_and_missing_sizes_are_errors(self):
        with self.assertRaisesRegex(ValueError, "rollout_until_finish_enough_tasks"):
            check_throttle(ThrottlePolicy("a"), pool(method="rollout_until_finish_enough_episodes"), "me", RecentTasks())
        with self.assertRaisesRegex(ValueError, "positive"):
            check_throttle(ThrottlePolicy("a"), {"sample_collection_method": ""}, "me", RecentTasks())
        with self.assertRaisesRegex(ValueError, "current_task_id"):
            check_throttle(ThrottlePolicy(""), pool(), "me", RecentTasks())


class DataTest(unittest.TestCase):
    def test_yaml_of_a_nested_config(self):
        text = to_yaml({"ajet": {"backbone": "debug", "model": {"path": "/m y/model"}, "rollout": {"num_repeat": 4},
                                 "flags": [1, "two", True, None], "empty": {}, "lr": 1e-6, "on": "x: y"}})
        self.assertIn('ajet:\n  backbone: "debug"\n  model:\n    path: "/m y/model"\n', text)
        self.assertIn("  flags:\n    - 1\n    - \"two\"\n    - true\n    - null\n", text)
        self.assertIn("  empty: {}\n  lr: 1e-06\n  \"on\": \"x: y\"\n", text)
        with self.assertRaises(TypeError):
            to_yaml({"a": object()})

    def test_keys_yaml_would_read_as_other_values_are_quoted_and_round_trip(self):
        from ajet_swarm.config_yaml import from_yaml
        config = {"True": 1, "ON": 2, "Null": 3, "n\n": 4, "plain_key": 5}
        text = to_yaml(config)
        self.assertIn('"True": 1', text)
        self.assertEqual(from_yaml(text), config)

    def test_a_config_path_that_does_not_exist_is_an_error_not_the_config(self):
        from ajet_swarm.config_yaml import config_text
        with self.assertRaises(FileNotFoundError):
            config_text("no/such/config.yaml")  # was sent to the server as YAML text
        self.assertEqual(config_text(b"ajet: {}\n"), "ajet: {}\n")
        self.assertEqual(config_text("ajet: {model: {path: x.yaml}}"), "ajet: {model: {path: x.yaml}}")

    def test_a_reward_that_is_not_finite_is_refused_before_it_is_sent(self):
        # json.dumps wrote NaN, which the server could only answer as a JSON syntax error.
        for bad in (float("nan"), float("inf")):
            with self.assertRaisesRegex(ValueError, "finite"):
                WorkflowOutput(reward=bad).to_json("t")

    def test_workflow_output_coercion_and_task_ids(self):
        self.assertEqual(WorkflowOutput.coerce(1).to_json("t"), {"reward": 1.0, "metadata": {"task_id": "t"}})
        out = WorkflowOutput.coerce({"reward": 0.5, "is_success": True, "metadata": {"k": 1}, "log_metrics": {"m": 2}})
        self.assertEqual(out.to_json("t"), {"reward": 0.5, "is_success": True, "metadata": {"k": 1, "task_id": "t"},
                                            "log_metrics": {"m": 2}})
        with self.assertRaises(TypeError):
            WorkflowOutput.coerce(True)
        with self.assertRaises(ValueError):
            WorkflowOutput.coerce({"is_success": True})
        client = SwarmClient("http://127.0.0.1:1", retry=FAST, verbose=False)
        with self.assertRaisesRegex(ValueError, "task_id"):
            client.end_episode(Task(task_id=""), "e", 1.0)

    def test_base_url_is_rewritten_to_the_dialled_address(self):
        c = SwarmClient("http://public.example:8080/", verbose=False)
        self.assertEqual(c.rewrite_base_url("http://10.0.0.5:10086/v1"), "http://public.example:8080/v1")
        c = SwarmClient("127.0.0.1:9", verbose=False)
        self.assertEqual(c.rewrite_base_url("https://x/v1"), "http://127.0.0.1:9/v1")

    def test_stream_assembly_joins_content_and_tool_call_fragments(self):
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "He"}}]},
            {"choices": [{"index": 0, "delta": {"content": "llo"}}, {"index": 1, "delta": {"content": "x"}}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                                                "function": {"name": "calc", "arguments": "{\"a\""}}]}}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        ]
        m = accumulate_stream(iter(chunks))
        self.assertEqual(m["content"], "Hello")
        self.assertEqual(m["tool_calls"], [{"id": "c1", "type": "function",
                                            "function": {"name": "calc", "arguments": "{\"a\": 1}"}}])
        self.assertEqual(m["finish_reason"], "tool_calls")

    def test_rollout_stat_marks_the_chosen_trigger(self):
        text = format_rollout_stat({"sample_collection_method": "rollout_until_finish_enough_tasks",
                                    "completed_tasks": 1, "completed_task_target": 4,
                                    "completed_tasks_details": {"t1": ["e1", "e2"]}, "engine_status": "ENGINE.ROLLING"},
                                   "http://h:1")
        self.assertIn("Completed tasks:            1 / 4  (chosen)", text)
        self.assertIn("t1 (2)", text)
        self.assertIn("unreachable", format_rollout_stat({}, "http://h:1"))


class CodeArchiveTest(unittest.TestCase):
    def test_version_controlled_and_unignored_files_only_with_work_tree_contents(self):
        with tempfile.TemporaryDirectory() as d:
            def git(*args):
                subprocess.run(["git", "-C", d, *args], check=True, capture_output=True)
            git("init", "-q")
            files = {"CMakeLists.txt": "project(x)\n", "src/a.cc": "int a;\n", ".gitignore": "build/\n*.o\n"}
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)) or d, exist_ok=True)
                with open(os.path.join(d, rel), "w") as f:
                    f.write(text)
            git("add", ".")
            git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x")
            os.makedirs(os.path.join(d, "build"))
            for rel, text in {"build/junk": "x", "src/b.o": "x", "src/new.cc": "int n;\n"}.items():
                with open(os.path.join(d, rel), "w") as f:
                    f.write(text)
            with open(os.path.join(d, "src/a.cc"), "w") as f:
                f.write("int a = 2;\n")  # an uncommitted edit is what the server must build
            zf = zipfile.ZipFile(io.BytesIO(zip_tree(d)))
            self.assertEqual(sorted(zf.namelist()), [".gitignore", "CMakeLists.txt", "src/a.cc", "src/new.cc"])
            self.assertEqual(zf.read("src/a.cc"), b"int a = 2;\n")
            self.assertIsNone(zf.testzip())

    def test_a_directory_without_git_or_cmakelists_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(RuntimeError, "CMakeLists.txt"):
                zip_tree(d)
            open(os.path.join(d, "CMakeLists.txt"), "w").close()
            with self.assertRaisesRegex(RuntimeError, "not a git work tree"):
                zip_tree(d)


class Scripted(ThreadingHTTPServer):
    """A scripted HTTP test double: `answers[path]` is a list of (status, body) served in order (the
    last one repeats); every request is recorded as (path, JSON body), and in `raw` as (the target with
    its query, headers, body bytes) (a body that is not JSON is recorded as its bytes). Paths are
    matched and recorded without their query."""

    daemon_threads = True

    def __init__(self, answers):
        self.answers = answers
        self.requests = []
        self.raw = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def paths(self):
        with self.lock:
            return [p for p, _ in self.requests]


class _ScriptedHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = raw
        path = self.path.split("?", 1)[0]
        with self.server.lock:
            self.server.requests.append((path, body))
            self.server.raw.append((self.path, dict(self.headers), raw))
            queue = self.server.answers.get(path, [(404, {"error": {"message": "no such path"}})])
            status, payload = queue.pop(0) if len(queue) > 1 else queue[0]
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 503:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    do_GET = _answer
    do_POST = _answer


def claim_ok(uuid="ep1"):
    return (200, {"success": True, "client_uuid": "c", "episode_uuid": uuid, "openai_base_url": "http://10.9.9.9:1/v1",
                  "openai_api_key": "sk-ajet-x", "fail_cause": ""})


def claim_fail(cause):
    return (200, {"success": False, "client_uuid": "c", "episode_uuid": "", "openai_base_url": "", "openai_api_key": "",
                  "fail_cause": cause})


class RetryRulesTest(unittest.TestCase):
    def serve(self, answers):
        s = Scripted(answers)
        self.addCleanup(s.server_close)
        self.addCleanup(s.shutdown)
        return s

    def test_an_answer_nested_past_the_recursion_limit_is_an_error_of_the_client_not_a_crash(self):
        # json.loads raised RecursionError out of Response.json() for an answer nested 100,000 levels deep
        # (issue 38): it escaped the client's own errors. Now the answer is refused as not JSON.
        deep = b"[" * 100000 + b"]" * 100000
        s = self.serve({"/v1/chat/completions": [(200, deep)], "/claim_episode": [(200, deep)]})
        chat = ChatClient(s.url + "/v1", "sk-x", max_retries=0)
        with self.assertRaisesRegex(ChatError, "not a ChatCompletion"):
            chat.create([{"role": "user", "content": "hi"}])
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        with self.assertRaises(SwarmError):
            c.begin_episode(discard_episode_timeout=5)

    def test_claim_waits_through_not_ready_and_empty_pool_then_rewrites_the_host(self):
        s = self.serve({"/claim_episode": [
            claim_fail("Engine not ready. Current status: [ENGINE.BOOTING]. Wait."),
            claim_fail("No available episodes to claim. Try again (maybe 1 minute) later."),
            claim_fail("No available episodes to claim. Try again (maybe 1 minute) later."),
            claim_ok()]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        episode = c.begin_episode(discard_episode_timeout=5)
        self.assertEqual(episode.base_url, s.url + "/v1")
        uuid, api = episode  # upstream's tuple shape
        self.assertEqual((uuid, api.api_key), ("ep1", "sk-ajet-x"))
        self.assertEqual(s.paths().count("/claim_episode"), 4)
        body = s.requests[-1][1]
        self.assertEqual((body["client_uuid"], body["episode_type"], body["discard_episode_timeout"]),
                         (c.client_uuid, "train", 5.0))

    def test_waits_say_why_even_quiet_and_without_logging_configured(self):
        # A client with verbose=False in an agent that never configured logging (root at WARNING) used to
        # wait for a booting engine or a full pool without a word.
        s = self.serve({"/claim_episode": [
            claim_fail("Engine not ready. Current status: [ENGINE.BOOTING]. Wait."),
            claim_fail("No available episodes to claim. Try again (maybe 1 minute) later."),
            claim_ok()]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        with self.assertLogs("ajet_swarm", "WARNING") as logs:
            c.begin_episode()
        self.assertIn("waiting for the engine: status ENGINE.BOOTING", logs.output[0])
        # A full pool is part of every step: said at INFO, a WARNING only once it stalls (below).
        self.assertEqual(len(logs.output), 1, logs.output)
        s.answers["/claim_episode"] = [
            claim_fail("No available episodes to claim. Try again (maybe 1 minute) later."), claim_ok()]
        stalling = SwarmClient(s.url, retry=dataclasses.replace(FAST, stall_warning=0), verbose=False)
        with self.assertLogs("ajet_swarm", "WARNING") as logs:
            stalling.begin_episode()
        self.assertIn("waiting for a free episode: No available episodes", logs.output[0])
        self.assertIn("(waiting for 0 s)", logs.output[0])
        port = s.server_address[1]
        s.shutdown()
        s.server_close()  # nothing listens on the port any more
        c = SwarmClient(f"http://127.0.0.1:{port}", retry=FAST, verbose=False)
        with self.assertLogs("ajet_swarm", "WARNING") as logs, self.assertRaisesRegex(SwarmConnectionError,
                                                                                     "did not answer within"):
            c.wait_for_server(max_wait=0.2)
        self.assertIn(f"waiting for the swarm server at http://127.0.0.1:{port}", logs.output[0])

    def test_the_node_examples_claims_say_why_they_wait(self):
        # examples/node_agent/swarm.mjs (also the LangGraph example's) used to poll without a word.
        node = shutil.which("node")
        if node is None:
            raise unittest.SkipTest("node is not installed")
        s = self.serve({"/claim_episode": [
            claim_fail("Engine not ready. Current status: [ENGINE.BOOTING]. Wait."),
            claim_fail("No available episodes to claim. Try again (maybe 1 minute) later."),
            claim_ok()]})
        swarm_mjs = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "node_agent", "swarm.mjs")
        script = (f"const {{ Swarm }} = await import({json.dumps(os.path.abspath(swarm_mjs))});"
                  f"const e = await new Swarm({json.dumps(s.url)}, {{ pollMs: 10 }}).claimEpisode();"
                  "console.log(e.episodeUuid);")
        r = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "ep1"), r.stderr)
        self.assertIn("waiting for the engine: status ENGINE.BOOTING", r.stderr)
        self.assertIn("waiting for a free episode: No available episodes", r.stderr)

    def test_begin_episode_sends_the_adapter_it_assigns(self):
        s = self.serve({"/claim_episode": [claim_ok("ep1"), claim_ok("ep2")]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        c.begin_episode(adapter="solver")
        c.begin_episode()
        bodies = [b for p, b in s.requests if p == "/claim_episode"]
        self.assertEqual(bodies[0]["adapter"], "solver")
        self.assertNotIn("adapter", bodies[1])

    def test_a_normal_weight_sync_logs_no_warning(self):
        # Every step used to log two WARNING lines in an agent without logging configured: the claim
        # waiting through ROLLING_POST / WEIGHT_SYNCING, and the episode that ended after the batch closed.
        s = self.serve({"/claim_episode": [
            claim_ok("ep1"),
            claim_fail("Engine not ready. Current status: [ENGINE.ROLLING_POST]. Wait."),
            claim_fail("Engine not ready. Current status: [ENGINE.WEIGHT_SYNCING]. Wait."),
            claim_fail("Engine not ready. Current status: [ENGINE.WEIGHT_EXPORTING]. Wait."),
            claim_fail("No available episodes to claim. Try again (maybe 1 minute) later."),
            claim_ok("ep2")],
            "/end_episode": [(400, {"error": {"message": "Engine is not in rolling state. Current status: "
                                                         "[ENGINE.WEIGHT_SYNCING]. Cannot end episode."}})],
            "/get_engine_status": [(200, {"engine_status": "ENGINE.WEIGHT_SYNCING", "global_step": 3})]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        with self.assertNoLogs("ajet_swarm", "WARNING"):
            c.begin_episode()
            self.assertFalse(c.end_episode("t", "ep1", 1.0))
            self.assertEqual(c.begin_episode().episode_uuid, "ep2")

    def test_claim_gives_up_after_max_wait_and_when_the_engine_goes_offline(self):
        s = self.serve({"/claim_episode": [claim_fail("No available episodes to claim.")]})
        with self.assertRaises(SwarmTimeoutError):
            SwarmClient(s.url, retry=FAST, verbose=False).begin_episode(max_wait=0.2)
        s2 = self.serve({"/claim_episode": [claim_fail("Engine not ready. Current status: [ENGINE.ROLLING_POST]. x"),
                                            claim_fail("Engine not ready. Current status: [ENGINE.OFFLINE]. x")]})
        with self.assertRaises(SwarmServerOfflineError):
            SwarmClient(s2.url, retry=FAST, verbose=False).begin_episode(max_wait=30)

    def test_end_after_weight_syncing_is_dropped_and_other_refusals_raise(self):
        s = self.serve({"/claim_episode": [claim_ok()], "/end_episode": [
            (400, {"error": {"message": "Engine is not in rolling state. Current status: [ENGINE.WEIGHT_SYNCING]. "
                                        "Cannot end episode."}}),
            (404, {"error": {"message": "Episode ep1 is claimed by different client: a, but got b."}})]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        c.begin_episode()
        with self.assertLogs("ajet_swarm", "INFO") as logs:
            self.assertFalse(c.end_episode("t", "ep1", 1.0))
        self.assertIn("weight update", logs.output[0])
        self.assertTrue(logs.output[0].startswith("INFO:"), logs.output)  # expected at a boundary: no warning
        with self.assertRaisesRegex(SwarmCommandError, "different client") as e:
            c.end_episode("t", "ep1", 1.0)
        self.assertEqual(e.exception.status, 404)

    def test_episode_commands_carry_the_claims_key_and_pool_reads_name_the_client(self):
        # Before (issue 38): no episode command carried a key (the server ended anyone's episode for
        # anyone), and the pool information was read anonymously.
        ok = (200, {"success": True})
        s = self.serve({"/claim_episode": [claim_ok("ep1"), claim_ok("ep2")], "/end_episode": [ok],
                        "/abort_episode": [ok], "/prepare_end_episode": [(200, {"success": True})],
                        "/commit_episode": [ok], "/resolve_episode_group": [(200, {"decision": "committed"})],
                        "/get_current_batch_rollout_pool_information": [(200, {"engine_status": "ENGINE.ROLLING"})]})
        c = SwarmClient(s.url, client_uuid="me/1", retry=FAST, verbose=False)
        c.begin_episode()
        self.assertTrue(c.end_episode("t", "ep1", 1.0))
        c.begin_episode()
        c.prepare_end_episode("t", "ep2", 1.0, "g", coordinator_url="http://127.0.0.1:9",
                              coordinator_episode_uuid="coord", coordinator_episode_key="sk-ajet-coord")
        c.commit_episode("ep2")
        self.assertTrue(c.abort_episode("ep2"))
        c.resolve_episode_group("g", "other", episode_key="sk-ajet-other")
        c.get_rollout_stat()
        auth = [(target, headers.get("Authorization")) for target, headers, _ in s.raw]
        self.assertEqual(auth, [("/claim_episode", None), ("/end_episode", "Bearer sk-ajet-x"),
                                ("/claim_episode", None), ("/prepare_end_episode", "Bearer sk-ajet-x"),
                                ("/commit_episode", "Bearer sk-ajet-x"), ("/abort_episode", "Bearer sk-ajet-x"),
                                ("/resolve_episode_group", "Bearer sk-ajet-other"),
                                ("/get_current_batch_rollout_pool_information?client_uuid=me%2F1", None)])
        prepare = dict(s.requests)["/prepare_end_episode"]
        self.assertEqual(prepare["group"]["coordinator_episode_key"], "sk-ajet-coord")
        # An episode this client never claimed: no key to send (the server answers 401 naming it).
        s.answers["/end_episode"] = [(401, {"error": {"message": "end_episode needs the episode's key"}})]
        with self.assertRaisesRegex(SwarmCommandError, "needs the episode's key"):
            c.end_episode("t", "someone-elses", 1.0)
        self.assertIsNone(s.raw[-1][1].get("Authorization"))

    def test_abort_sends_its_cause_and_refuses_a_malformed_one(self):
        s = self.serve({"/claim_episode": [claim_ok()], "/abort_episode": [(200, {"success": True})]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        c.begin_episode()
        with self.assertRaisesRegex(ValueError, "cause must match"):
            c.abort_episode("ep1", cause="Verifier timeout")
        self.assertEqual(s.paths(), ["/claim_episode"], "nothing sent for a malformed cause")
        self.assertTrue(c.abort_episode("ep1", cause="verifier_timeout"))
        self.assertEqual(s.requests[-1][1]["cause"], "verifier_timeout")
        self.assertTrue(c.abort_episode("ep2"))
        self.assertNotIn("cause", s.requests[-1][1], "no cause: the server counts it as unspecified")

    def test_an_episode_past_its_lifetime_is_aborted_instead_of_ended(self):
        s = self.serve({"/claim_episode": [claim_ok()], "/abort_episode": [(200, {"success": True})]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        c.begin_episode(discard_episode_timeout=60)
        c._expire_at["ep1"] = time.monotonic() - 1  # as if 8 x 60 s had passed
        self.assertFalse(c.end_episode("t", "ep1", 1.0))
        self.assertEqual(s.paths(), ["/claim_episode", "/abort_episode"])

    def test_agree_sync_weight_retries_until_accepted_then_waits_for_the_batch_boundary(self):
        def info(step):
            return (200, {"engine_status": "ENGINE.ROLLING", "global_step": step, "batches_recorded": 0,
                          "completed_episodes": 2})
        s = self.serve({"/get_engine_status": [(200, {"engine_status": "ENGINE.ROLLING", "global_step": 3})],
                        "/agree_sync_weight": [(200, {"success": False, "failure_reason": "no episode yet"}),
                                               (200, {"success": True, "failure_reason": ""})],
                        # baselines of the two attempts, one poll without change, then the trained batch
                        "/get_current_batch_rollout_pool_information": [info(3), info(3), info(3), info(4)]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        self.assertTrue(c.agree_sync_weight())
        self.assertEqual(s.paths().count("/agree_sync_weight"), 2)
        self.assertEqual(s.paths().count("/get_current_batch_rollout_pool_information"), 4)
        s.answers["/agree_sync_weight"] = [(200, {"success": False, "failure_reason": "no"})]
        self.assertFalse(c.agree_sync_weight(retry=False))

    def test_throttled_claims_wait_for_the_pool_to_change(self):
        crowded = pool(running={"e1": ("ME", "a"), "e2": ("ME", "b")}, batch=1, repeat=1)
        s = self.serve({"/get_current_batch_rollout_pool_information": [(200, crowded), (200, crowded),
                                                                        (200, pool(batch=1, repeat=1))],
                        "/claim_episode": [claim_ok()]})
        c = SwarmClient(s.url, client_uuid="ME", retry=FAST, verbose=False)
        c.begin_episode(throttle_policy=ThrottlePolicy("new", ratio=1.0))
        self.assertEqual(s.paths(), ["/get_current_batch_rollout_pool_information"] * 3 + ["/claim_episode"])
        self.assertEqual(s.requests[-1][1]["throttle_policy"], {"current_task_id": "new", "ratio": 1.0})

    def test_a_throttled_claim_waits_while_the_pool_info_cannot_be_read(self):
        # The pool read failing (an HTTP error here, a connection error alike) used to end the claim with
        # a ValueError about expected_batch_size, where a wait was promised.
        s = self.serve({"/get_current_batch_rollout_pool_information": [(500, {"error": {"message": "internal"}}),
                                                                        (200, pool(batch=1, repeat=1))],
                        "/claim_episode": [claim_ok()]})
        c = SwarmClient(s.url, client_uuid="ME", retry=FAST, verbose=False)
        with self.assertLogs("ajet_swarm", "WARNING"):
            c.begin_episode(throttle_policy=ThrottlePolicy("new", ratio=1.0))
        self.assertEqual(s.paths(), ["/get_current_batch_rollout_pool_information"] * 2 + ["/claim_episode"])

    def test_a_claim_retries_server_errors_and_raises_for_its_own(self):
        s = self.serve({"/claim_episode": [(500, {"error": {"message": "internal error"}}),
                                           (502, {"error": {"message": "bad gateway"}}), claim_ok()]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        with self.assertLogs("ajet_swarm", "WARNING") as logs:
            self.assertEqual(c.begin_episode().episode_uuid, "ep1")
        self.assertIn("internal error", logs.output[0])
        s.answers["/claim_episode"] = [(400, {"error": {"message": "client_uuid is required"}})]
        with self.assertRaisesRegex(SwarmCommandError, "client_uuid is required") as e:
            c.begin_episode(max_wait=5)
        self.assertEqual(e.exception.status, 400)

    def test_a_claim_held_back_in_rolling_says_why(self):
        cause = ("Engine not ready. Current status: [ENGINE.ROLLING]. The trainer is 2 batches behind "
                 "(ajet.async.max_staleness = 1); claims resume when it catches up.")
        s = self.serve({"/claim_episode": [claim_fail(cause), claim_ok()]})
        with self.assertLogs("ajet_swarm", "INFO") as logs:
            SwarmClient(s.url, retry=FAST, verbose=False).begin_episode()
        self.assertIn("The trainer is 2 batches behind", logs.output[0])
        self.assertNotIn("can be claimed in ENGINE.ROLLING", logs.output[0])

    def test_agree_sync_weight_on_a_trigger_that_never_waits_for_agreements_raises(self):
        # It used to retry the server's refusal forever.
        s = self.serve({"/get_engine_status": [(200, {"engine_status": "ENGINE.ROLLING", "global_step": 0})],
                        "/get_current_batch_rollout_pool_information": [(200, pool())]})
        with self.assertRaisesRegex(ValueError, "rollout_until_finish_enough_tasks"):
            SwarmClient(s.url, retry=FAST, verbose=False).agree_sync_weight()
        self.assertNotIn("/agree_sync_weight", s.paths())

    def test_a_bad_output_keeps_the_lifetime_guard(self):
        s = self.serve({"/claim_episode": [claim_ok()], "/abort_episode": [(200, {"success": True})]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        c.begin_episode(discard_episode_timeout=60)
        c._expire_at["ep1"] = time.monotonic() - 1  # as if 8 x 60 s had passed
        with self.assertRaises(ValueError):
            c.end_episode("t", "ep1", WorkflowOutput(reward=None))
        self.assertFalse(c.end_episode("t", "ep1", 1.0))  # still aborted, not ended
        self.assertEqual(s.paths(), ["/claim_episode", "/abort_episode"])

    def test_a_lost_commit_found_in_progress_is_asked_again(self):
        # The first try's answer is lost while the server still writes it; the retry meets "already in
        # progress", which used to raise (and made MultiEpisode abort the members of a committed group).
        from ajet_swarm._http import Response
        s = self.serve({})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        answers = [SwarmConnectionError("timed out"),
                   Response(400, {}, json.dumps({"error": {"message": "Episode ep1: an end or commit is already in "
                                                                     "progress."}}).encode()),
                   Response(200, {}, b'{"success": true}')]
        sent = []

        def post_json(path, payload, headers=None, timeout=None):
            sent.append(path)
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        c._http.post_json = post_json
        with self.assertLogs("ajet_swarm", "WARNING"):
            self.assertTrue(c.commit_episode("ep1"))
        self.assertEqual(sent, ["/commit_episode"] * 3)
        # Without a lost try first, the same answer is the server's refusal.
        answers[:] = [Response(400, {}, b'{"error": {"message": "Episode ep1: an end or commit is already in progress."}}')]
        with self.assertRaises(SwarmCommandError):
            c.commit_episode("ep1")

    def test_resolve_asks_again_while_the_commit_is_pending(self):
        s = self.serve({"/resolve_episode_group": [(200, {"decision": "pending"}), (200, {"decision": "committed"})]})
        retry = dataclasses.replace(FAST)
        retry.delay = lambda seconds: 0.0  # this client's copy: no second between the questions
        c = SwarmClient(s.url, retry=retry, verbose=False)
        self.assertEqual(c.resolve_episode_group("g", "ep1"), "committed")
        s.answers["/resolve_episode_group"] = [(200, {"decision": "pending"})]
        self.assertEqual(c.resolve_episode_group("g", "ep1"), "pending")

    def test_an_unreachable_spell_only_rereads_the_boundary_baseline(self):
        # A step that grew while the server could not be read (e.g. an engine restarted at a higher
        # policy version) is not a batch boundary; before, the first answer after the outage was
        # compared with the last one before it and fired the callbacks.
        def status(step):
            return (200, {"engine_status": "ENGINE.ROLLING", "global_step": step})
        s = self.serve({"/get_engine_status": [status(3), (500, {"error": {"message": "down"}}), status(5), status(6)]})
        c = SwarmClient(s.url, retry=FAST, verbose=False)
        fired = []
        c._sync_callbacks.append(lambda: fired.append(True))  # no watcher thread: this test observes
        c.get_engine_status()
        with self.assertLogs("ajet_swarm", "WARNING"):
            c.get_engine_status()
        c.get_engine_status()
        self.assertEqual(fired, [])
        c.get_engine_status()  # a step that grows between two answers still fires
        self.assertEqual(fired, [True])

    def test_an_unreachable_server_reads_as_cannot_connect(self):
        s = Scripted({})
        port = s.server_address[1]
        s.server_close()  # nothing listens on the port any more
        c = SwarmClient(f"http://127.0.0.1:{port}", retry=FAST, verbose=False)
        self.assertEqual(c.get_engine_status(), ("ENGINE.CANNOT_CONNECT", {}))
        self.assertEqual(c.get_rollout_stat(), {})
        self.assertFalse(c.can_continue_episode("x"))
        self.assertFalse(c.abort_episode("x"))
        with self.assertRaisesRegex(SwarmConnectionError, "connection refused"):
            c.auto_sync_train_config_and_start_engine("ajet: {}\n")
        with self.assertRaises(SwarmTimeoutError):
            c.begin_episode(max_wait=0.1)

    def test_chat_retries_a_503_with_retry_after_and_raises_openai_errors(self):
        done = {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant",
                                                                                             "content": "hi"}}]}
        s = self.serve({"/v1/chat/completions": [(503, {"error": {"message": "busy"}}), (200, done)]})
        chat = ChatClient(s.url + "/v1", "sk", max_retries=2)
        self.assertEqual(chat.chat([{"role": "user", "content": "x"}])["content"], "hi")
        s.answers["/v1/chat/completions"] = [(401, {"error": {"message": "bad key", "type": "authentication_error",
                                                              "code": "unauthenticated"}})]
        with self.assertRaises(Exception) as e:
            chat.chat([{"role": "user", "content": "x"}])
        self.assertEqual((e.exception.status, e.exception.code), (401, "unauthenticated"))



class TransportTest(unittest.TestCase):
    def test_the_connections_of_ended_threads_are_closed(self):
        # Each thread keeps a keep-alive connection; those of threads that ended used to stay open for
        # the client's life (one socket per thread of a pool made per batch, until EMFILE).
        from ajet_swarm._http import Transport
        s = Scripted({"/x": [(200, {"ok": True})]})
        self.addCleanup(s.server_close)
        self.addCleanup(s.shutdown)
        t = Transport(s.url)
        together = threading.Barrier(20)  # every thread alive until all hold a connection

        def one():
            t.request("GET", "/x")
            together.wait()
        threads = [threading.Thread(target=one) for _ in range(20)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(sum(1 for _, c in t._all if c.sock is not None), 20)
        self.assertEqual(t.request("GET", "/x").status, 200)  # a new connection, this thread's
        self.assertEqual(len(t._all), 1)
        self.assertEqual(sum(1 for _, c in t._all if c.sock is not None), 1)
        t.close_all()
        self.assertEqual(t._all, [])
        self.assertEqual(t.request("GET", "/x").status, 200)  # and works on after


    def test_an_event_stream_dropped_before_its_first_event_closes_its_connection(self):
        # The generator's finally never runs when it is never started: the socket stayed open.
        import gc
        from ajet_swarm._http import Transport

        class Events(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"b\r\ndata: hi\n\n\r\n")
                self.wfile.flush()
        server = ThreadingHTTPServer(("127.0.0.1", 0), Events)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        t = Transport(f"http://127.0.0.1:{server.server_address[1]}")
        _, events = t.stream_sse("/x", {})
        conn = events.gi_frame.f_locals["conn"]
        self.assertIsNotNone(conn.sock)
        del events
        gc.collect()
        self.assertIsNone(conn.sock)

    def test_a_transport_whose_url_was_refused_is_collected_quietly(self):
        import gc
        import sys
        from ajet_swarm._http import Transport
        raised = []
        saved, sys.unraisablehook = sys.unraisablehook, raised.append
        try:
            with self.assertRaises(ValueError):
                Transport("ftp://x")
            gc.collect()
        finally:
            sys.unraisablehook = saved
        self.assertEqual(raised, [])  # __del__ used to raise AttributeError (no _all_lock yet)


class AdminTokensTest(unittest.TestCase):
    """$AJET_ADMIN_TOKENS gives each server its own token; $AJET_ADMIN_TOKEN is the fallback."""

    def setUp(self):
        self.saved = {k: os.environ.pop(k, None) for k in ("AJET_ADMIN_TOKEN", "AJET_ADMIN_TOKENS")}

    def tearDown(self):
        for k, v in self.saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v

    def test_each_url_gets_its_token_and_the_rest_the_fallback(self):
        from ajet_swarm import admin_token_for
        self.assertIsNone(admin_token_for("http://a:1"))
        os.environ["AJET_ADMIN_TOKEN"] = "shared"
        os.environ["AJET_ADMIN_TOKENS"] = "http://a:1=tok-a,\n http://b:2/=tok-b"
        self.assertEqual(admin_token_for("http://a:1/"), "tok-a")
        self.assertEqual(admin_token_for("b:2"), "tok-b")
        self.assertEqual(admin_token_for("http://c:3"), "shared")
        self.assertEqual(SwarmClient("http://b:2", retry=FAST).admin_token, "tok-b")
        self.assertEqual(SwarmClient("http://b:2", admin_token="given", retry=FAST).admin_token, "given")

    def test_https_entries_are_accepted(self):
        # One such entry (a TLS proxy) used to make every SwarmClient constructor raise.
        from ajet_swarm import admin_token_for
        os.environ["AJET_ADMIN_TOKENS"] = "https://proxy.example=tok-p http://a:1=tok-a"
        self.assertEqual(admin_token_for("https://proxy.example/"), "tok-p")
        self.assertEqual(SwarmClient("http://a:1", retry=FAST).admin_token, "tok-a")

    def test_malformed_entries_are_named_without_their_token(self):
        from ajet_swarm import admin_token_for
        for value, message in (("secret-token", "entry 1 does not start with http://"),
                               ("http://a:1=tok-a http://b:2", "entry 2 (http://b:2) has no =TOKEN"),
                               ("http://a:1=", "entry 1 (http://a:1) has no =TOKEN")):
            os.environ["AJET_ADMIN_TOKENS"] = value
            with self.assertRaises(ValueError) as e:
                admin_token_for("http://a:1")
            self.assertIn(message, str(e.exception))
            self.assertNotIn("secret-token", str(e.exception))
            self.assertNotIn("tok-a", str(e.exception))

if __name__ == "__main__":
    unittest.main()
