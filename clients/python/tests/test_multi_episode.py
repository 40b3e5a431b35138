"""MultiEpisode's protocol steps (docs/protocol.md, "Episode groups across servers") against small fake
servers that share one log, so the order across servers is observable: prepare on every member, then
commit on the coordinator, then on the participants; abort everywhere on any failure before the
coordinator's commit, and never after it. The real servers are exercised in test_multi_server.py."""

from __future__ import annotations

import json
import logging
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ajet_swarm import (EpisodeGroupError, MultiEpisode, RetryPolicy, SwarmClient, SwarmCommandError, SwarmTimeoutError,
                        Task, WeightUpdatedHalfway, WorkflowOutput)

FAST = RetryPolicy(status_poll=0.01, engine_busy=0.01, empty_pool=0.01, throttle=0.01, agree_sync_weight=0.01,
                   cannot_connect_retry=0.01, jitter=0)
CLOSE = "close"  # an answer that closes the connection without a response (a lost answer)


class Log:
    """The requests of every fake server, in arrival order: (server name, path, JSON body, the
    Authorization header or None)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries = []

    def add(self, server, path, body, authorization=None):
        with self.lock:
            self.entries.append((server, path, body, authorization))

    def calls(self, path=None):
        with self.lock:
            return [(s, p) for s, p, _, _ in self.entries if path is None or p == path]

    def bodies(self, path):
        with self.lock:
            return {s: b for s, p, b, _ in self.entries if p == path}

    def authorizations(self, path):
        with self.lock:
            return {s: a for s, p, _, a in self.entries if p == path}


class FakeServer(ThreadingHTTPServer):
    """A swarm server that claims, prepares, commits and aborts whatever it is asked, at `global_step`
    `step`. `script[path]`: answers served before the defaults, in order (the last one repeats), each a
    (status, body), CLOSE, or a function of the request body returning one of those."""

    daemon_threads = True

    def __init__(self, name, log, step=0, script=None):
        self.name, self.log, self.step = name, log, step
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.claims = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, path, body):
        with self.lock:
            queue = self.script.get(path)
            scripted = (queue.pop(0) if len(queue) > 1 else queue[0]) if queue else None
            if path == "/claim_episode" and scripted is None:
                self.claims += 1
        if callable(scripted):
            scripted = scripted(body)
        if scripted is not None:
            return scripted
        if path == "/claim_episode":
            uuid = f"{self.name}-ep{self.claims}"
            return 200, {"success": True, "client_uuid": body["client_uuid"], "episode_uuid": uuid,
                         "openai_base_url": f"http://10.1.1.1:9/v1", "openai_api_key": f"sk-ajet-{uuid}",
                         "fail_cause": "", "global_step": self.step}
        if path == "/prepare_end_episode":
            return 200, {"success": True, "episode_uuid": body["episode_uuid"], "global_step_at_claim": self.step,
                         "global_step": self.step, "weights_changed": False, "oldest_policy_version": None}
        if path == "/resolve_episode_group":
            return 200, {"decision": "aborted"}
        return 200, {"success": True}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        self.server.log.add(self.server.name, self.path, body, self.headers.get("Authorization"))
        answer = self.server.answer(self.path, body)
        if answer == CLOSE:
            self.close_connection = True
            return
        status, payload = answer
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def refused(message, status=400):
    return status, {"detail": message}


class MultiEpisodeTest(unittest.TestCase):
    def servers(self, *names, **scripts):
        """One FakeServer per name (scripts: name=({path: answers}, step)), and a client for each."""
        self.log = Log()
        out = []
        for name in names:
            script, step = scripts.get(name, ({}, 0))
            server = FakeServer(name, self.log, step, script)
            self.addCleanup(server.server_close)
            self.addCleanup(server.shutdown)
            client = SwarmClient(server.url, retry=FAST, verbose=False)
            self.addCleanup(client.close)
            out.append((server, client))
        return out

    def group(self, pairs, **kwargs):
        return MultiEpisode([(client, server.name) for server, client in pairs], prepare_timeout=5, **kwargs)

    def assert_no(self, path):
        self.assertEqual(self.log.calls(path), [])

    def test_prepare_everywhere_then_commit_the_coordinator_then_the_participants(self):
        pairs = self.servers("a", "b", "c")
        # Every prepare waits until all three arrived: sequential prepares would time out here.
        barrier = threading.Barrier(3, timeout=30)

        def in_parallel(body):
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                return refused("the prepares did not arrive in parallel")
            return None

        for server, _ in pairs:
            server.script["/prepare_end_episode"] = [in_parallel]
        group = self.group(pairs).begin(Task(task_id="t1"))
        self.assertEqual(group.endpoint("b").base_url, pairs[1][0].url + "/v1")  # the dialled address
        self.assertEqual(group["c"].api_key, "sk-ajet-c-ep1")
        self.assertEqual(group.endpoint("a").global_step, 0)
        output_b = WorkflowOutput(reward=0.5, is_success=True)
        self.assertTrue(group.end({"a": 1.0, "b": output_b, "c": {"reward": 0.0}}))
        self.assertEqual(group.state, "committed")

        prepares = self.log.bodies("/prepare_end_episode")
        calls = self.log.calls()
        order = [c for c in calls if c[1] in ("/prepare_end_episode", "/commit_episode")]
        self.assertEqual(sorted(order[:3]), [(n, "/prepare_end_episode") for n in "abc"])
        self.assertEqual(order[3], ("a", "/commit_episode"))
        self.assertEqual(sorted(order[4:]), [("b", "/commit_episode"), ("c", "/commit_episode")])
        self.assert_no("/abort_episode")
        # One group id; the participants name the coordinator (its URL and episode), the coordinator nobody.
        self.assertEqual({b["group"]["group_id"] for b in prepares.values()}, {group.group_id})
        self.assertNotIn("coordinator_url", prepares["a"]["group"])
        for name in "bc":
            self.assertEqual(prepares[name]["group"]["coordinator_url"], pairs[0][0].url)
            self.assertEqual(prepares[name]["group"]["coordinator_episode_uuid"], "a-ep1")
            self.assertEqual(prepares[name]["group"]["prepare_timeout"], 5.0)
        self.assertEqual([prepares[n]["workflow_output"]["reward"] for n in "abc"], [1.0, 0.5, 0.0])
        self.assertEqual({prepares[n]["task_id"] for n in "abc"}, {"t1"})
        self.assertEqual(output_b.metadata["task_id"], "t1")  # as end_episode does
        commits = self.log.bodies("/commit_episode")
        self.assertEqual(commits["b"], {"client_uuid": pairs[1][1].client_uuid, "episode_uuid": "b-ep1"})

    def test_every_episode_command_carries_its_episodes_key_and_participants_the_coordinators(self):
        # Before: no command carried a key, and the server ended or aborted any episode for anyone.
        pairs = self.servers("a", "b")
        group = self.group(pairs).begin("t1")
        self.assertTrue(group.end([1.0, 0.0]))
        for path in ("/prepare_end_episode", "/commit_episode"):
            self.assertEqual(self.log.authorizations(path), {"a": "Bearer sk-ajet-a-ep1", "b": "Bearer sk-ajet-b-ep1"},
                             path)
        prepares = self.log.bodies("/prepare_end_episode")
        self.assertEqual(prepares["b"]["group"]["coordinator_episode_key"], "sk-ajet-a-ep1")
        self.assertNotIn("coordinator_episode_key", prepares["a"]["group"])
        aborted = self.group(pairs).begin("t2")
        self.assertTrue(aborted.abort())
        self.assertEqual(self.log.authorizations("/abort_episode"), {"a": "Bearer sk-ajet-a-ep2",
                                                                     "b": "Bearer sk-ajet-b-ep2"})

    def test_a_failed_prepare_aborts_every_member_and_commits_nothing(self):
        pairs = self.servers("a", "b", b=({"/prepare_end_episode": [refused("Episode b-ep1 not found.")]}, 0))
        group = self.group(pairs).begin("t1")
        with self.assertRaises(EpisodeGroupError) as e:
            group.end([1.0, 0.0])
        self.assertIs(e.exception.committed, False)
        self.assertIn("not found", str(e.exception))
        self.assertIn(pairs[1][0].url, str(e.exception))
        self.assertEqual(list(e.exception.errors), ["b"])
        self.assertEqual(sorted(self.log.calls("/abort_episode")), [("a", "/abort_episode"), ("b", "/abort_episode")])
        self.assert_no("/commit_episode")
        self.assertEqual(group.state, "aborted")

    def test_a_weight_update_aborts_every_member_and_says_where(self):
        changed = {"/prepare_end_episode": [lambda body: (200, {
            "success": True, "episode_uuid": body["episode_uuid"], "global_step_at_claim": 3, "global_step": 4,
            "weights_changed": True, "oldest_policy_version": 3})]}
        pairs = self.servers("a", "b", b=(changed, 3))
        group = self.group(pairs).begin("t1")
        self.assertEqual(group["b"].global_step, 3)
        with self.assertRaises(WeightUpdatedHalfway) as e:
            group.end([1.0, 0.0])
        self.assertEqual(e.exception.changed, {"b": {"server_url": pairs[1][0].url, "global_step_at_claim": 3,
                                                     "global_step": 4}})
        self.assertIn("3 -> 4", str(e.exception))
        self.assertEqual(sorted(self.log.calls("/abort_episode")), [("a", "/abort_episode"), ("b", "/abort_episode")])
        self.assert_no("/commit_episode")

    def test_a_prepare_refused_during_a_weight_sync_is_a_weight_update(self):
        syncing = refused("Engine is not in rolling state. Current status: [ENGINE.WEIGHT_SYNCING]. "
                          "Cannot end episode.")
        pairs = self.servers("a", "b", a=({"/prepare_end_episode": [syncing]}, 0))
        group = self.group(pairs).begin("t1")
        with self.assertRaises(WeightUpdatedHalfway) as e:
            group.end([1.0, 0.0])
        self.assertEqual(list(e.exception.changed), ["a"])
        self.assertEqual(len(self.log.calls("/abort_episode")), 2)
        self.assert_no("/commit_episode")

    def test_keep_commits_a_group_whose_weights_changed(self):
        changed = {"/prepare_end_episode": [lambda body: (200, {
            "success": True, "episode_uuid": body["episode_uuid"], "global_step_at_claim": 0, "global_step": 1,
            "weights_changed": True, "oldest_policy_version": 0})]}
        pairs = self.servers("a", "b", a=(changed, 0))
        group = self.group(pairs, on_weight_update="keep").begin("t1")
        self.assertTrue(group.end([1.0, 0.0]))
        self.assertEqual([c for c in self.log.calls() if c[1] == "/commit_episode"],
                         [("a", "/commit_episode"), ("b", "/commit_episode")])
        self.assert_no("/abort_episode")
        self.assertTrue(group.prepared["a"]["weights_changed"])

    def test_a_refused_coordinator_commit_aborts_every_member(self):
        gone = refused("Episode a-ep1 is not in claimed status: aborted by its group's resolution")
        pairs = self.servers("a", "b", a=({"/commit_episode": [gone]}, 0))
        group = self.group(pairs).begin("t1")
        with self.assertRaises(EpisodeGroupError) as e:
            group.end([1.0, 0.0])
        self.assertIs(e.exception.committed, False)
        self.assertEqual(self.log.calls("/commit_episode"), [("a", "/commit_episode")])
        self.assertEqual(sorted(self.log.calls("/abort_episode")), [("a", "/abort_episode"), ("b", "/abort_episode")])

    def test_a_lost_coordinator_answer_is_resolved_by_asking_the_coordinator(self):
        for decision in ("committed", "aborted"):
            with self.subTest(decision=decision):
                script = {"/commit_episode": [CLOSE], "/resolve_episode_group": [(200, {"decision": decision})]}
                pairs = self.servers("a", "b", a=(script, 0))
                group = self.group(pairs).begin("t1")
                if decision == "committed":
                    self.assertTrue(group.end([1.0, 0.0]))
                    self.assertIn(("b", "/commit_episode"), self.log.calls())
                    self.assert_no("/abort_episode")
                else:
                    with self.assertRaises(EpisodeGroupError) as e:
                        group.end([1.0, 0.0])
                    self.assertIs(e.exception.committed, False)
                    self.assertNotIn(("b", "/commit_episode"), self.log.calls())
                    self.assertIn(("b", "/abort_episode"), self.log.calls())
                resolve = self.log.bodies("/resolve_episode_group")["a"]
                self.assertEqual(resolve, {"group_id": group.group_id, "episode_uuid": "a-ep1"})

    def test_an_unreachable_coordinator_leaves_the_group_to_the_servers(self):
        script = {"/commit_episode": [CLOSE], "/resolve_episode_group": [CLOSE]}
        pairs = self.servers("a", "b", a=(script, 0))
        with self.assertRaises(EpisodeGroupError) as e:
            with self.group(pairs).begin("t1") as group:
                group.end([1.0, 0.0])
        self.assertIsNone(e.exception.committed)
        self.assertEqual(group.state, "unknown")
        # Neither committed nor aborted by the client: the participant asks the coordinator itself.
        self.assertEqual([c for c in self.log.calls() if c[0] == "b"],
                         [("b", "/claim_episode"), ("b", "/prepare_end_episode")])

    def test_an_unreachable_participant_commits_by_itself(self):
        pairs = self.servers("a", "b", b=({"/commit_episode": [CLOSE]}, 0))
        group = self.group(pairs).begin("t1")
        with self.assertLogs("ajet_swarm", logging.WARNING) as logs:
            self.assertTrue(group.end([1.0, 0.0]))
        self.assertIn("commits by itself", "\n".join(logs.output))
        self.assertGreater(len(self.log.calls("/commit_episode")), 2)  # retried on connection errors
        self.assert_no("/abort_episode")

    def test_a_refusing_participant_after_the_commit_is_reported_not_aborted(self):
        pairs = self.servers("a", "b", b=({"/commit_episode": [refused("Episode b-ep1 not found.")]}, 0))
        group = self.group(pairs).begin("t1")
        with self.assertRaises(EpisodeGroupError) as e:
            group.end([1.0, 0.0])
        self.assertIs(e.exception.committed, True)
        self.assertEqual(self.log.calls("/commit_episode"), [("a", "/commit_episode"), ("b", "/commit_episode")])
        self.assert_no("/abort_episode")

    def test_a_failed_claim_aborts_the_claimed_ones_and_stops_the_other_waits(self):
        pairs = self.servers("a", "b", "c", b=({"/claim_episode": [refused("Unknown episode_type: x")]}, 0))
        # c waits for an engine that never rolls: only the failure on b can end its wait.
        pairs[2][0].script["/claim_episode"] = [(200, {"success": False,
                                                       "fail_cause": "Engine not ready. Current status: "
                                                                     "[ENGINE.BOOTING]. Wait."})]
        group = self.group(pairs)
        with self.assertRaisesRegex(SwarmCommandError, "Unknown episode_type"):
            group.begin("t1", max_wait=600)
        self.assertEqual(self.log.calls("/abort_episode"), [("a", "/abort_episode")])
        self.assertEqual(self.log.bodies("/abort_episode")["a"]["episode_uuid"], "a-ep1")
        self.assertEqual(group.state, "aborted")

    def test_a_claim_that_waits_too_long_fails_the_group(self):
        empty = (200, {"success": False, "fail_cause": "No available episodes to claim. Try again later."})
        pairs = self.servers("a", "b", b=({"/claim_episode": [empty]}, 0))
        with self.assertRaises(SwarmTimeoutError):
            self.group(pairs).begin("t1", max_wait=0.2)
        self.assertEqual(self.log.calls("/abort_episode"), [("a", "/abort_episode")])

    def test_an_exception_in_the_with_block_aborts_every_member(self):
        pairs = self.servers("a", "b")
        with self.assertRaisesRegex(KeyError, "agent crashed"):
            with self.group(pairs).begin("t1") as group:
                raise KeyError("agent crashed")
        self.assertEqual(sorted(self.log.calls("/abort_episode")), [("a", "/abort_episode"), ("b", "/abort_episode")])
        self.assertEqual(group.state, "aborted")
        self.assertTrue(group.abort())  # idempotent, sends nothing
        self.assertEqual(len(self.log.calls("/abort_episode")), 2)

    def test_nothing_is_aborted_once_the_coordinator_committed(self):
        pairs = self.servers("a", "b")

        def crash(group):
            raise RuntimeError("died after the coordinator's commit")

        with self.assertRaisesRegex(RuntimeError, "died after"):
            with self.group(pairs, after_coordinator_commit=crash).begin("t1") as group:
                group.end([1.0, 0.0])
        self.assert_no("/abort_episode")
        self.assertEqual(self.log.calls("/commit_episode"), [("a", "/commit_episode")])
        self.assertFalse(group.abort())
        self.assert_no("/abort_episode")

    def test_outputs_are_checked_before_anything_is_sent(self):
        pairs = self.servers("a", "b")
        group = self.group(pairs).begin("t1")
        with self.assertRaisesRegex(ValueError, r"missing \['b'\]"):
            group.end({"a": 1.0})
        with self.assertRaisesRegex(ValueError, "1 workflow outputs for 2 members"):
            group.end([1.0])
        with self.assertRaisesRegex(ValueError, "'b'.*reward is required"):
            group.end([1.0, WorkflowOutput()])
        self.assert_no("/prepare_end_episode")
        self.assertEqual(group.state, "open")
        self.assertTrue(group.end([1.0, 2.0]))
        with self.assertRaisesRegex(RuntimeError, "state 'open'"):
            group.end([1.0, 2.0])

    def test_members_on_one_server_are_adapters_settled_by_that_server(self):
        pairs = self.servers("a", "b")
        (a, client_a), (_, client_b) = pairs
        # Two adapters of a's engine, and b's server as a third member.
        group = MultiEpisode([(client_a, "caller", "caller-lora"), (client_a, "answerer", "answerer-lora"),
                              (client_b, "judge")], prepare_timeout=5).begin(Task(task_id="t1"))
        self.assertTrue(group.end({"caller": 1.0, "answerer": 0.0, "judge": 0.5}))
        with self.log.lock:
            entries = list(self.log.entries)
        claims = [(s, b.get("adapter")) for s, p, b, _ in entries if p == "/claim_episode"]
        self.assertEqual(sorted(claims, key=str), sorted([("a", "caller-lora"), ("a", "answerer-lora"), ("b", None)],
                                                         key=str))
        prepares = {b["episode_uuid"]: b for s, p, b, _ in entries if p == "/prepare_end_episode"}
        coordinator = group.endpoint("caller").episode_uuid
        by_name = {n: prepares[group.endpoint(n).episode_uuid] for n in ("caller", "answerer", "judge")}
        self.assertEqual(set(by_name["caller"]["group"]), {"group_id", "prepare_timeout"})
        # The answerer shares the coordinator's server: no URL to dial, only the coordinator's episode.
        self.assertNotIn("coordinator_url", by_name["answerer"]["group"])
        self.assertEqual(by_name["answerer"]["group"]["coordinator_episode_uuid"], coordinator)
        self.assertEqual(by_name["judge"]["group"]["coordinator_url"], a.url)
        # Members sharing a server keep their task ids (and GRPO groups) apart.
        self.assertEqual({n: b["task_id"] for n, b in by_name.items()},
                         {"caller": "t1@caller", "answerer": "t1@answerer", "judge": "t1"})
        with self.assertRaisesRegex(ValueError, "adapter must be a non-empty string"):
            MultiEpisode([(client_a, "x", "")])

    def test_members_are_checked(self):
        pairs = self.servers("a")
        client = pairs[0][1]
        with self.assertRaisesRegex(ValueError, "used twice"):
            MultiEpisode([(client, "x"), (client, "x")])
        with self.assertRaisesRegex(ValueError, "at least one"):
            MultiEpisode([])
        with self.assertRaisesRegex(ValueError, "on_weight_update"):
            MultiEpisode([(client, "x")], on_weight_update="ignore")
        with self.assertRaisesRegex(ValueError, "prepare_timeout"):
            MultiEpisode([(client, "x")], prepare_timeout=0)


if __name__ == "__main__":
    unittest.main()
