"""Cocktail training on the swarm side (upstream's cocktail v2): two clients contribute different
shares of one batch under rollout_until_all_clients_agree_sync_weight; the pool info shows each
client's share while the batch fills, agree_sync_weight(wait=True) returns only once the boundary
shows, and the trained batch's record keeps the shares (recent_batches[].stats.rollout.client_shares).
Real `ajet-swarm` with the echo engine and the torch backbone; no sleeps as synchronisation."""

from __future__ import annotations

import threading
import unittest

from ajet_swarm import RetryPolicy, SwarmClient
from swarm_fixture import SwarmServer, config_yaml, eventually, tokenizer_fixture

FAST = RetryPolicy(status_poll=0.05, engine_busy=0.05, empty_pool=0.05, throttle=0.05, agree_sync_weight=0.05,
                   cannot_connect_retry=0.05, jitter=0)


class CocktailSharesTest(unittest.TestCase):
    def setUp(self):
        self.server = SwarmServer()
        self.addCleanup(self.server.stop)
        yaml = config_yaml(tokenizer_fixture(), batch=4, repeat=1, pool=8).replace("backbone: debug", "backbone: torch")
        yaml += "  swarm_mode_sample_collection_method: rollout_until_all_clients_agree_sync_weight\n"
        self.clients = []
        for name in ("calc-client", "lake-client"):
            c = SwarmClient(self.server.url, retry=FAST, verbose=False, client_uuid=name)
            self.addCleanup(c.close)
            self.clients.append(c)
        self.clients[0].auto_sync_train_config_and_start_engine(yaml, max_wait=120)

    def run_episodes(self, client, task_prefix, n):
        for i in range(n):
            ep = client.begin_episode(discard_episode_timeout=600)
            ep.chat_client().chat([{"role": "user", "content": f"{task_prefix} {i}"}])  # a token to train on
            client.end_episode({"task_id": f"{task_prefix}-{i}"}, ep.episode_uuid,
                               {"reward": float(i % 2), "metadata": {"task_id": f"{task_prefix}-{i}"}})

    def test_each_clients_share_is_visible_and_kept_with_the_trained_batch(self):
        calc, lake = self.clients
        self.assertEqual(calc.get_global_step(), 0)
        self.run_episodes(calc, "calc", 3)   # client 0's share: 3 of 4
        self.run_episodes(lake, "lake", 1)   # client 1's share: 1 of 4
        # Each client sees its own share under its name and the other's under a pseudonym.
        shares = calc.get_rollout_stat()["completed_client_shares"]
        self.assertEqual(shares["calc-client"]["episodes"], 3)
        self.assertAlmostEqual(shares["calc-client"]["share"], 0.75)
        self.assertNotIn("lake-client", shares)
        self.assertEqual(sorted(s["episodes"] for s in shares.values()), [1, 3])
        self.assertEqual(lake.get_rollout_stat()["completed_client_shares"]["lake-client"]["tasks"], 1)
        # Both agree; the first one's wait ends only when the boundary shows (here: when the second agrees).
        done = threading.Event()
        waiter = threading.Thread(target=lambda: (calc.agree_sync_weight(wait=True, max_wait=120), done.set()))
        waiter.start()
        self.assertTrue(lake.agree_sync_weight(wait=True, max_wait=120))
        waiter.join(120)
        self.assertTrue(done.is_set())
        self.assertTrue(eventually(lambda: calc.get_global_step() == 1, 60))
        # The public status shows a client its own id (?client_uuid=) and the other under a pseudonym.
        batches = self.server.get("/get_engine_status?client_uuid=calc-client")["recent_batches"]
        trained = [b for b in batches if b.get("trained")]
        self.assertEqual(len(trained), 1, batches)
        kept = trained[0]["stats"]["rollout"]["client_shares"]
        self.assertEqual(kept["calc-client"]["episodes"], 3)
        self.assertNotIn("lake-client", kept)
        self.assertEqual(sorted(s["episodes"] for s in kept.values()), [1, 3])
        self.assertAlmostEqual(sum(s["share"] for s in kept.values()), 1.0)


if __name__ == "__main__":
    unittest.main()
