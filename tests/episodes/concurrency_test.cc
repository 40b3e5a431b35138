// Many threads driving one registry over a real store at once: every end is answered exactly once,
// every acknowledged episode is stored, and nothing deadlocks (the store's writer thread calls back
// into the registry while I/O threads hold its mutex to queue writes).
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <thread>

#include "common/encoding.h"
#include "episodes/janitor.h"
#include "registry_test_util.h"

namespace ajet::episodes {
namespace {

TEST(RegistryConcurrency, ParallelClientsOverARealStore) {
  auto dir = std::filesystem::temp_directory_path() / ("ajet_registry_conc_" + new_uuid_hex());
  std::filesystem::create_directories(dir);
  {
    store::Store store(dir / "s.db", store::Store::Options{.fsync_each_commit = false});
    RegistryOptions options = testing::small_options(Backbone::kDebug, 4, 2, /*pool=*/6);
    Registry registry(options, EpisodeKeySigner(store.load_or_create_secret()), &store);
    std::atomic<int> closed{0};
    registry.set_hooks(RegistryHooks{[&](const EpisodeClosed&) { ++closed; }, nullptr});
    registry.start_booting();
    registry.engine_ready();
    constexpr int kThreads = 4, kEpisodes = 40;
    std::atomic<int> acked{0}, refused{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::string client = "client-" + std::to_string(t);
        for (int done = 0; done < kEpisodes;) {
          ClaimRequest req;
          req.client_uuid = client;
          ClaimResponse r = registry.claim_episode(req);
          if (!r.success) {  // pool momentarily empty: another thread holds the slots
            ++refused;
            std::this_thread::yield();
            continue;
          }
          LlmCallTicket ticket = registry.begin_llm_call(r.episode_uuid);
          store::CallRow call;
          call.episode_uuid = r.episode_uuid;
          call.call_index = ticket.call_index;
          call.completion_ids = {t, done};
          EXPECT_TRUE(registry.record_llm_call(call));
          registry.end_episode_wait(testing::RegistryHarness::end_request(
              client, r.episode_uuid, "task-" + std::to_string(done % 5), t));
          ++acked;
          ++done;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(acked.load(), kThreads * kEpisodes);
    EXPECT_EQ(closed.load(), kThreads * kEpisodes);
    EXPECT_EQ(store.count_episodes(store::kEpisodeFinished), kThreads * kEpisodes);
    EXPECT_EQ(registry.engine_status(), EnginePhase::kRolling);
    EXPECT_GT(registry.pool_info()["batches_recorded"].get<int>(), 0);
  }
  std::filesystem::remove_all(dir);
}

TEST(Janitor, SweepsUntilDestroyed) {
  testing::RegistryHarness h(testing::small_options());
  std::mutex mu;
  std::condition_variable cv;
  int sweeps = 0;
  {
    Janitor janitor(h.registry, std::chrono::milliseconds(1), [&](const SweepResult&) {
      std::lock_guard<std::mutex> lock(mu);
      ++sweeps;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return sweeps >= 3; }));
  }
  std::lock_guard<std::mutex> lock(mu);
  int after = sweeps;
  EXPECT_GE(after, 3);  // and the destructor returned, so the thread is gone
}

}  // namespace
}  // namespace ajet::episodes
