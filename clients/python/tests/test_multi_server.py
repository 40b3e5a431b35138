"""Episode groups across two real `ajet-swarm` servers (each with `ajet-echo-engine`), driven by
MultiEpisode: a group joins both batches; a client SIGKILLed right after the coordinator's commit still
has its group counted on both servers (the participant's janitor asks the coordinator); one killed
before that commit has it counted on neither; a weight update between claim and end raises
WeightUpdatedHalfway and leaves nothing counted (or, with on_weight_update="keep", commits on both).
No sleeps as synchronisation: the tests wait on what the servers report, with generous deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import unittest

import ajet_swarm
from ajet_swarm import ChatClient, MultiEpisode, RetryPolicy, SwarmClient, SwarmCommandError, WeightUpdatedHalfway
from swarm_fixture import SwarmServer, config_yaml, eventually, tokenizer_fixture

# The servers' admin token: the tests read every episode id of the pool information with it (others see
# only their own) and check aborted episodes of the killed client with it.
TOKEN = "multi-server-admin"
FAST = RetryPolicy(status_poll=0.05, engine_busy=0.05, empty_pool=0.05, throttle=0.05, agree_sync_weight=0.05,
                   cannot_connect_retry=0.05, jitter=0)
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(ajet_swarm.__file__)))

# A client that runs one group on two servers and SIGKILLs itself in the hook named by argv[3]
# (after_prepare or after_coordinator_commit), after printing the group's episodes.
KILLED_CLIENT = r"""
import json, os, signal, sys
from ajet_swarm import MultiEpisode, SwarmClient

url_a, url_b, where, prepare_timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

def die(group):
    episodes = {name: group[name].episode_uuid for name in group.names}
    clients = {name: client.client_uuid for name, client in group.members}
    print(json.dumps({"episodes": episodes, "clients": clients, "group_id": group.group_id}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

group = MultiEpisode([(SwarmClient(url_a, verbose=False), "a"), (SwarmClient(url_b, verbose=False), "b")],
                     prepare_timeout=prepare_timeout, **{where: die})
group.begin("t-killed", discard_episode_timeout=600)
for name in group.names:
    group[name].chat_client().chat([{"role": "user", "content": "hello " + name}])
group.end({"a": 1.0, "b": 0.5})
print("the hook did not kill this process", flush=True)
sys.exit(3)
"""


def pool(server):
    return server.get("/get_current_batch_rollout_pool_information")


def counted(server, task, episode_uuid):
    return episode_uuid in (pool(server).get("completed_tasks_details") or {}).get(task, [])


def settled(server, episode_uuid):
    """Neither claimed nor prepared any more (committed, aborted or reclaimed)."""
    info = pool(server)
    return episode_uuid not in (info.get("running_episode_details") or {}) and not info.get("prepared_episodes")


class TwoServersTest(unittest.TestCase):
    def setUp(self):
        self.model = tokenizer_fixture()
        self.a = SwarmServer(admin_token=TOKEN)
        self.addCleanup(self.a.stop)
        # The participant may dial the coordinator: it is its peer (the only coordinators it accepts).
        self.b = SwarmServer(admin_token=TOKEN, extra=["--peer", self.a.url])
        self.addCleanup(self.b.stop)

    def client(self, server):
        client = SwarmClient(server.url, retry=FAST, verbose=False, admin_token=TOKEN)
        self.addCleanup(client.close)
        return client

    def boot(self, server, yaml):
        self.client(server).auto_sync_train_config_and_start_engine(yaml, max_wait=120)
        self.assertEqual(server.status(), "ENGINE.ROLLING")

    def boot_both(self):
        for server in (self.a, self.b):
            self.boot(server, config_yaml(self.model, batch=100, pool=4))

    def assert_aborted(self, server, client_uuid, episode_uuid):
        """A commit of the episode by its own client is refused: it is aborted (not merely unlisted)."""
        client = SwarmClient(server.url, client_uuid=client_uuid, retry=FAST, verbose=False, admin_token=TOKEN)
        self.addCleanup(client.close)
        with self.assertRaises(SwarmCommandError) as e:
            client.commit_episode(episode_uuid)
        self.assertEqual(e.exception.status, 400, str(e.exception))

    def run_killed_client(self, where, prepare_timeout):
        env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT)
        r = subprocess.run([sys.executable, "-c", KILLED_CLIENT, self.a.url, self.b.url, where, str(prepare_timeout)],
                           capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(r.returncode, -signal.SIGKILL, r.stdout + r.stderr)
        return json.loads(r.stdout.strip().splitlines()[-1])

    def test_a_group_joins_the_batch_on_both_servers(self):
        self.boot_both()
        a, b = self.client(self.a), self.client(self.b)
        with MultiEpisode([(a, "proposer"), (b, "solver")]).begin("t-group") as group:
            for name in ("proposer", "solver"):
                endpoint = group.endpoint(name)
                self.assertEqual(endpoint.global_step, 0)
                reply = ChatClient(endpoint.base_url, endpoint.api_key).chat([{"role": "user", "content": name}])
                self.assertEqual(reply["content"], name)
            self.assertTrue(group.end({"proposer": 1.0, "solver": 0.25}))
        for server, name, reward in ((self.a, "proposer", 1.0), (self.b, "solver", 0.25)):
            info = pool(server)
            self.assertEqual(info["completed_tasks_details"]["t-group"], [group[name].episode_uuid], server.url)
            self.assertEqual(info["completed_tasks_rewards"]["t-group"], [reward])
            self.assertEqual(info["completed_episodes"], 1)
            self.assertFalse(info.get("prepared_episodes"))
        self.assertFalse(group.prepared["solver"]["weights_changed"])

    def test_a_client_killed_after_the_coordinators_commit_is_counted_on_both(self):
        self.boot_both()
        killed = self.run_killed_client("after_coordinator_commit", prepare_timeout=5)
        ep_a, ep_b = killed["episodes"]["a"], killed["episodes"]["b"]
        self.assertTrue(counted(self.a, "t-killed", ep_a))
        # The participant still holds it prepared until its janitor asks the coordinator: committed.
        self.assertTrue(eventually(lambda: counted(self.b, "t-killed", ep_b), timeout=120), pool(self.b))
        self.assertEqual(pool(self.b)["completed_tasks_rewards"]["t-killed"], [0.5])
        self.assertTrue(settled(self.b, ep_b), pool(self.b))
        self.assertTrue(counted(self.a, "t-killed", ep_a))

    def test_a_client_killed_before_the_coordinators_commit_is_counted_on_neither(self):
        self.boot_both()
        killed = self.run_killed_client("after_prepare", prepare_timeout=0.5)
        ep_a, ep_b = killed["episodes"]["a"], killed["episodes"]["b"]
        for server, episode in ((self.a, ep_a), (self.b, ep_b)):
            self.assertTrue(eventually(lambda: settled(server, episode), timeout=120), pool(server))
            self.assertFalse(counted(server, "t-killed", episode), pool(server))
            self.assertEqual(pool(server)["completed_episodes"], 0)
        self.assert_aborted(self.a, killed["clients"]["a"], ep_a)
        self.assert_aborted(self.b, killed["clients"]["b"], ep_b)

    def test_a_weight_update_between_claim_and_end(self):
        # a trains (torch backbone; the echo engine's train_step bumps the step) every batch of one
        # task x 2 episodes; b only records.
        self.boot(self.a, config_yaml(self.model, batch=1, repeat=2, pool=4).replace("backbone: debug",
                                                                                     "backbone: torch"))
        self.boot(self.b, config_yaml(self.model, batch=100, pool=4))
        a, b, other = self.client(self.a), self.client(self.b), self.client(self.a)

        def train_a_step_on(server_client, step):
            for reward in (1.0, 0.0):
                ep = server_client.begin_episode()
                ep.chat_client().chat([{"role": "user", "content": f"other {reward}"}])
                self.assertTrue(server_client.end_episode(f"other-{step}", ep.episode_uuid, reward))
            self.assertTrue(eventually(lambda: server_client.get_engine_status()[1].get("global_step") == step + 1
                                       and server_client.get_engine_status()[0] == "ENGINE.ROLLING", timeout=120),
                            server_client.get_engine_status())

        group = MultiEpisode([(a, "a"), (b, "b")]).begin("t-stale")
        for name in ("a", "b"):
            group[name].chat_client().chat([{"role": "user", "content": "before the update"}])
        train_a_step_on(other, 0)
        with self.assertRaises(WeightUpdatedHalfway) as e:
            group.end([1.0, 1.0])
        self.assertEqual(e.exception.changed, {"a": {"server_url": self.a.url, "global_step_at_claim": 0,
                                                     "global_step": 1}})
        for server, name in ((self.a, "a"), (self.b, "b")):
            self.assertTrue(eventually(lambda: settled(server, group[name].episode_uuid)), pool(server))
            self.assertNotIn("t-stale", pool(server)["completed_tasks_details"], server.url)
        self.assert_aborted(self.a, a.client_uuid, group["a"].episode_uuid)
        self.assert_aborted(self.b, b.client_uuid, group["b"].episode_uuid)

        # The same with on_weight_update="keep": committed on both.
        kept = MultiEpisode([(a, "a"), (b, "b")], on_weight_update="keep").begin("t-kept")
        self.assertEqual(kept["a"].global_step, 1)
        for name in ("a", "b"):
            kept[name].chat_client().chat([{"role": "user", "content": "before the update"}])
        train_a_step_on(other, 1)
        self.assertTrue(kept.end([1.0, 1.0]))
        self.assertTrue(kept.prepared["a"]["weights_changed"])
        self.assertTrue(counted(self.a, "t-kept", kept["a"].episode_uuid))
        self.assertTrue(counted(self.b, "t-kept", kept["b"].episode_uuid))


if __name__ == "__main__":
    unittest.main()
