// The registry's bounds from issue 38: a client's share of the pool, the bound on
// discard_episode_timeout, claims restored after a restart keeping their idle deadline, a repeated
// end that differs from the stored one (409), the public views hiding other clients' ids, a
// participant re-asking its coordinator with backoff and giving up, and the episode commands' key
// check and coordinator URL rules. Each test says what main did before.
#include <filesystem>
#include <future>

#include "common/encoding.h"
#include "registry_test_util.h"

namespace ajet::episodes {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::RegistryHarness;
using testing::small_options;

// Before: a client could claim the whole pool (issue 38, item 10: one client held every slot).
TEST(RegistryLimits, AClientsShareOfThePoolIsBounded) {
  RegistryOptions o = small_options(Backbone::kTorch, 2, 2, 8);
  o.max_claims_per_client = 0;  // half of the pool of 8
  RegistryHarness h(o);
  h.start();
  std::vector<std::string> mine;
  for (int i = 0; i < 4; ++i) mine.push_back(h.claim("greedy"));
  ClaimResponse refused = h.try_claim("greedy");
  EXPECT_FALSE(refused.success);
  EXPECT_TRUE(contains(refused.fail_cause, "No available episodes for this client"))
      << refused.fail_cause;
  EXPECT_TRUE(contains(refused.fail_cause, "--max-claims-per-client")) << refused.fail_cause;
  EXPECT_TRUE(h.try_claim("other").success);  // the rest of the pool is still there for others
  h.end("greedy", mine[0], "t", 1);           // an end frees a place of the share
  EXPECT_TRUE(h.try_claim("greedy").success);

  o.max_claims_per_client = 3;
  RegistryHarness fixed(o);
  fixed.start();
  for (int i = 0; i < 3; ++i) fixed.claim("c");
  EXPECT_FALSE(fixed.try_claim("c").success);
  o.max_claims_per_client = -1;
  RegistryHarness unbounded(o);
  unbounded.start();
  for (int i = 0; i < 8; ++i) unbounded.claim("c");
}

// The KV-pressure admission cap (engine_control/admission.h) bounds claimed episodes below the
// pool; a lowered cap leaves claimed episodes running and a raised one admits again.
TEST(RegistryLimits, TheAdmissionCapBoundsClaimedEpisodes) {
  RegistryHarness h(small_options(Backbone::kTorch, 2, 2, 8));
  h.start();
  std::vector<std::string> held;
  for (int i = 0; i < 3; ++i) held.push_back(h.claim("c" + std::to_string(i)));
  h.registry.set_admission_cap(2);  // below the 3 already claimed: nobody loses an episode
  ClaimResponse refused = h.try_claim("c9");
  EXPECT_FALSE(refused.success);
  EXPECT_TRUE(
      contains(refused.fail_cause, "No available episodes to claim: 3 episodes are claimed"))
      << refused.fail_cause;
  EXPECT_TRUE(contains(refused.fail_cause, "admission cap is 2 of the pool's 8"))
      << refused.fail_cause;
  h.end("c0", held[0], "t", 1);
  EXPECT_FALSE(h.try_claim("c9").success);  // 2 claimed, the cap is 2
  h.registry.set_admission_cap(4);
  EXPECT_TRUE(h.try_claim("c9").success);
  EXPECT_TRUE(h.try_claim("c8").success);
  EXPECT_FALSE(h.try_claim("c7").success);
  h.registry.set_admission_cap(0);  // no cap: the pool of 8 bounds
  EXPECT_TRUE(h.try_claim("c7").success);
}

// Before: discard_episode_timeout had no upper bound (1e12 held a slot for ever).
TEST(RegistryLimits, DiscardEpisodeTimeoutHasAnUpperBound) {
  RegistryOptions o = small_options();
  o.max_discard_episode_timeout = 3600;
  RegistryHarness h(o);
  h.start();
  try {
    h.try_claim("c", "train", 1e12);
    ADD_FAILURE() << "a claim with discard_episode_timeout 1e12 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(contains(e.what(), "discard_episode_timeout")) << e.what();
    EXPECT_TRUE(contains(e.what(), "3600")) << e.what();
    EXPECT_TRUE(contains(e.what(), "--max-discard-episode-timeout")) << e.what();
  }
  EXPECT_TRUE(h.try_claim("c", "train", 3600).success);
}

// Before: a repeated end with another reward answered 200 as an idempotent repeat (item 8, 11).
TEST(RegistryLimits, ARepeatedEndThatDiffersIs409AndAnIdenticalOneStays200) {
  RegistryHarness h(small_options(Backbone::kTorch, 4, 2));
  h.start();
  std::string a = h.claim("c1");
  h.end("c1", a, "t", 0.5);
  h.end("c1", a, "t", 0.5);  // identical: success again
  CommandError other_reward = h.end_error("c1", a, "t", 1e300);
  EXPECT_EQ(other_reward.http_status(), 409);
  EXPECT_TRUE(contains(other_reward.message, "workflow_output.reward")) << other_reward.message;
  CommandError other_task = h.end_error("c1", a, "u", 0.5);
  EXPECT_EQ(other_task.http_status(), 409);
  EXPECT_TRUE(contains(other_task.message, "task_id 'u'")) << other_task.message;
  EndRequest success = RegistryHarness::end_request("c1", a, "t", 0.5);
  success.workflow_output.is_success = true;
  std::optional<CommandError> answer;
  h.registry.end_episode(success, [&](std::optional<CommandError> e) { answer = e; });
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->http_status(), 409);
  EXPECT_TRUE(contains(answer->message, "is_success true (ended with unset)")) << answer->message;
  EXPECT_EQ(h.end_error("c2", a).http_status(), 404);  // another client's: still 404
}

class TempDir {
 public:
  TempDir() : dir_(fs::temp_directory_path() / ("ajet_registry_limits_" + new_uuid_hex())) {
    fs::create_directories(dir_);
  }
  ~TempDir() { fs::remove_all(dir_); }
  fs::path db() const { return dir_ / "front.db"; }

 private:
  fs::path dir_;
};

// The same after a restart: the store row decides (before: 200 for any repeat).
TEST(RegistryLimits, ARepeatedEndAfterARestartIsComparedWithTheStoreRow) {
  TempDir tmp;
  std::string a;
  {
    store::Store store(tmp.db());
    RegistryHarness h(small_options(Backbone::kTorch, 4, 2), &store);
    h.start();
    a = h.claim("c1");
    h.end("c1", a, "t", 0.25);
    store.flush().get();
  }
  store::Store store(tmp.db());
  RegistryHarness h(small_options(Backbone::kTorch, 4, 2), &store);
  h.registry.restore(store.recover());
  h.start();
  h.end("c1", a, "t", 0.25);
  CommandError differs = h.end_error("c1", a, "t", 1);
  EXPECT_EQ(differs.http_status(), 409);
  EXPECT_TRUE(contains(differs.message, "reward 1 (ended with 0.25)")) << differs.message;
}

// The store read for an episode only the store knows goes through RegistryHooks::run_blocking (the
// front's work pool), not the caller's thread (before: an I/O thread read SQLite).
TEST(RegistryLimits, AnEndOfAnEpisodeOnlyTheStoreKnowsReadsItWhereBlockingIsFine) {
  TempDir tmp;
  std::string a;
  {
    store::Store store(tmp.db());
    RegistryHarness h(small_options(Backbone::kTorch, 4, 2), &store);
    h.start();
    a = h.claim("c1");
    h.end("c1", a, "t", 1);
    store.flush().get();
  }
  store::Store store(tmp.db());
  RegistryHarness h(small_options(Backbone::kTorch, 4, 2), &store);
  std::vector<std::function<void()>> deferred;
  h.registry.set_hooks(RegistryHooks{nullptr, nullptr, nullptr, [&](std::function<void()> task) {
                                       deferred.push_back(std::move(task));
                                     }});
  h.registry.restore(store.recover());
  h.start();
  bool answered = false;
  std::optional<CommandError> answer;
  h.registry.end_episode(RegistryHarness::end_request("c1", a, "t", 1),
                         [&](std::optional<CommandError> e) {
                           answered = true;
                           answer = e;
                         });
  EXPECT_FALSE(answered);  // nothing was read on this thread
  ASSERT_EQ(deferred.size(), 1u);
  deferred[0]();
  EXPECT_TRUE(answered);
  EXPECT_FALSE(answer) << answer->message;  // the stored end: an idempotent repeat
  answered = false;
  h.registry.commit_episode(EpisodeRef{"c1", a},
                            [&](std::optional<CommandError>) { answered = true; });
  EXPECT_FALSE(answered);
  ASSERT_EQ(deferred.size(), 2u);
  deferred[1]();
  EXPECT_TRUE(answered);
}

// Before: restore() gave restored claims a fresh idle clock, so a loop of quick restarts kept a
// dead client's claims alive for ever and filled the pool (item 10).
TEST(RegistryLimits, ClaimsRestoredAfterARestartKeepTheirIdleDeadline) {
  TempDir tmp;
  std::string dead, active;
  {
    store::Store store(tmp.db());
    RegistryHarness h(small_options(Backbone::kTorch, 4, 2), &store);
    h.now = 1000;
    h.start();
    dead = h.claim("gone", "train", 60);
    active = h.claim("alive", "train", 60);
    store.flush().get();
  }
  for (double restart_at : {1020.0, 1040.0}) {  // two quick restarts, the client never returns
    store::Store store(tmp.db());
    RegistryHarness h(small_options(Backbone::kTorch, 4, 2), &store);
    h.now = restart_at;
    h.registry.restore(store.recover());
    h.start();  // entering ROLLING must not restart a restored claim's clock
    h.now = restart_at + 5;
    EXPECT_TRUE(h.registry.sweep().reclaimed.empty());
    store.flush().get();
  }
  store::Store store(tmp.db());
  RegistryHarness h(small_options(Backbone::kTorch, 4, 2), &store);
  h.now = 1050;
  h.registry.restore(store.recover());
  h.registry.start_booting();
  // Its client is back while the engine boots: a refused call is a sign of life, its clock starts
  // again.
  EXPECT_THROW(h.registry.begin_llm_call(active), Error);
  h.registry.engine_ready();
  h.now = 1061;  // 61 s after the claim: past its 60 s deadline
  SweepResult swept = h.registry.sweep();
  EXPECT_EQ(swept.reclaimed, std::vector<std::string>{dead});
  EXPECT_TRUE(h.can_continue("alive", active));
}

// Before: the public pool info and buffer listed every claimed episode's episode_uuid and
// client_uuid.
TEST(RegistryLimits, PublicViewsShowOnlyTheCallersOwnIds) {
  RegistryHarness h(small_options(Backbone::kTorch, 4, 2));
  h.start();
  std::string mine = h.claim("me", "train", 240, "task-a");
  std::string theirs = h.claim("victim", "train", 240, "task-b");
  std::string done = h.claim("victim");
  h.end("victim", done, "task-b", 1);

  Json stranger = h.registry.pool_info(ViewScope{false, ""});
  const std::string text = stranger.dump() + h.registry.episode_buffer(ViewScope{false, ""}).dump();
  for (const std::string& id : {mine, theirs, done, std::string("victim"), std::string("me")}) {
    EXPECT_FALSE(contains(text, "\"" + id + "\"")) << id << " shown to a stranger: " << text;
  }
  EXPECT_EQ(stranger["claimed_episodes"], 2);  // counts stay
  EXPECT_EQ(stranger["running_episode_details"].size(), 2u);
  EXPECT_EQ(stranger["completed_tasks_client_uuids"]["task-b"].size(), 1u);
  // The same pseudonym everywhere for one client, so the throttle still counts "other" tasks right.
  const std::string victim = stranger["completed_tasks_client_uuids"]["task-b"][0];
  EXPECT_TRUE(contains(victim, "client-")) << victim;
  EXPECT_TRUE(stranger["completed_client_shares"].contains(victim));

  Json own = h.registry.pool_info(ViewScope{false, "me"});
  EXPECT_EQ(own["running_episode_details"][mine]["client_uuid"], "me");
  EXPECT_FALSE(own["running_episode_details"].contains(theirs));
  EXPECT_FALSE(contains(own.dump(), "\"victim\""));
  Json buffer = h.registry.episode_buffer(ViewScope{false, "me"})["buffer"];
  int own_items = 0;
  for (const auto& item : buffer)
    own_items += item["episode_uuid"] == mine && item["client_uuid"] == "me";
  EXPECT_EQ(own_items, 1);

  Json admin = h.registry.pool_info(ViewScope{true, ""});
  EXPECT_TRUE(admin["running_episode_details"].contains(theirs));
  EXPECT_EQ(admin["completed_tasks_details"]["task-b"][0], done);
}

EpisodeGroup participant(const std::string& coordinator_episode, double timeout = 30) {
  EpisodeGroup g;
  g.group_id = "g";
  g.prepare_timeout = timeout;
  g.coordinator_url = "http://127.0.0.1:1";
  g.coordinator_episode_uuid = coordinator_episode;
  g.coordinator_episode_key = "sk-ajet-coordinator";
  return g;
}

void prepare(RegistryHarness& h, const std::string& client, const std::string& uuid,
             const EpisodeGroup& group) {
  bool answered = false;
  h.registry.prepare_end_episode(
      PrepareRequest{RegistryHarness::end_request(client, uuid, "t", 1), group},
      [&](std::optional<CommandError> e, PrepareResponse) {
        EXPECT_FALSE(e) << e->message;
        answered = true;
      });
  EXPECT_TRUE(answered);
}

// Before: a coordinator that never decided was asked again at every sweep, for ever (item 2, 6).
TEST(RegistryLimits, AParticipantReasksWithBackoffAndGivesUpAfterTheBound) {
  RegistryOptions o = small_options(Backbone::kTorch, 4, 2);
  o.resolve_backoff_min = 5;
  o.resolve_backoff_max = 20;
  o.resolve_give_up = 100;
  RegistryHarness h(o);
  h.start();
  std::string a = h.claim("c1");
  prepare(h, "c1", a, participant("coord", 30));
  const double deadline = h.now + 30;
  h.now = deadline;
  std::vector<double> asked_at;
  for (; h.now < deadline + 100; h.now += 1) {
    SweepResult swept = h.registry.sweep();
    if (swept.to_resolve.empty()) continue;
    ASSERT_EQ(swept.to_resolve.size(), 1u);
    EXPECT_EQ(swept.to_resolve[0].group.coordinator_episode_key, "sk-ajet-coordinator");
    EXPECT_TRUE(h.registry.sweep().to_resolve.empty());  // one question in flight per episode
    asked_at.push_back(h.now - deadline);
    h.registry.settle_prepared(a, "unreachable");
  }
  // Asked at the deadline, then 5, 10, 20, 20 … seconds apart.
  ASSERT_GE(asked_at.size(), 5u);
  EXPECT_EQ(asked_at[0], 0);
  EXPECT_EQ(asked_at[1], 5);
  EXPECT_EQ(asked_at[2], 15);
  EXPECT_EQ(asked_at[3], 35);
  EXPECT_EQ(asked_at[4], 55);
  EXPECT_EQ(h.registry.pool_info()["prepared_episodes"], 1);
  h.now = deadline + 100;
  SweepResult last = h.registry.sweep();
  EXPECT_EQ(last.group_aborted, std::vector<std::string>{a});
  EXPECT_EQ(h.registry.pool_info()["prepared_episodes"], 0);
}

// Before: a restart gave a prepared episode a fresh prepare_timeout.
TEST(RegistryLimits, APreparedEpisodeKeepsItsDeadlineAcrossARestart) {
  TempDir tmp;
  std::string a;
  {
    store::Store store(tmp.db());
    RegistryHarness h(small_options(Backbone::kTorch, 4, 2), &store);
    h.now = 1000;
    h.start();
    a = h.claim("c1");
    std::promise<void> stored;
    h.registry.prepare_end_episode(
        PrepareRequest{RegistryHarness::end_request("c1", a, "t", 1), participant("x", 30)},
        [&](std::optional<CommandError> e, PrepareResponse) {
          EXPECT_FALSE(e);
          stored.set_value();
        });
    stored.get_future().get();
    store.flush().get();
  }
  store::Store store(tmp.db());
  RegistryHarness h(small_options(Backbone::kTorch, 4, 2), &store);
  h.now = 1020;
  h.registry.restore(store.recover());
  h.start();
  h.now = 1030;  // the original deadline (prepared at 1000 with 30 s), not 1020 + 30
  SweepResult swept = h.registry.sweep();
  ASSERT_EQ(swept.to_resolve.size(), 1u);
  EXPECT_EQ(swept.to_resolve[0].group.coordinator_episode_key, "sk-ajet-coordinator");
  // Once the prepare is settled (committed), the stored row no longer keeps the coordinator's key.
  h.registry.settle_prepared(a, "committed");
  store.flush().get();
  std::optional<store::EpisodeRow> row = store.get_episode(a);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->status, store::kEpisodeFinished);
  EXPECT_FALSE(row->metadata["ajet_group"].contains("coordinator_episode_key"));
}

// Before: episode commands needed nothing (item 8).
TEST(RegistryLimits, EpisodeCommandsNeedTheEpisodesOwnKey) {
  EpisodeKeySigner signer(testing::kTestSecret);
  EpisodeKeyClaims claims;
  claims.episode_uuid = "e1";
  const std::string key = signer.make_key(claims);
  EXPECT_NO_THROW(check_episode_command_key(signer, "Bearer " + key, "e1", "end_episode", false));
  auto refusal = [&](std::optional<std::string_view> auth, std::string_view uuid,
                     bool keyless) -> std::string {
    try {
      check_episode_command_key(signer, auth, uuid, "end_episode", keyless);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnauthenticated);
      return e.what();
    }
    return "";
  };
  EXPECT_TRUE(
      contains(refusal(std::nullopt, "e1", false), "Authorization: Bearer <openai_api_key"));
  EXPECT_TRUE(contains(refusal(std::nullopt, "e1", false), "--allow-keyless-episode-commands"));
  EXPECT_EQ(refusal(std::nullopt, "e1", true), "");  // the compatibility switch
  EXPECT_TRUE(
      contains(refusal("Bearer " + key, "e2", false), "the key is episode e1's, not episode e2's"));
  EXPECT_TRUE(contains(refusal("Bearer " + key, "e2", true),
                       "not episode e2's"));  // a wrong key is never let in
  EXPECT_TRUE(contains(refusal("Bearer sk-ajet-forged", "e1", false), "invalid episode key"));
}

// Before: CR/LF, paths and any port went to the wire (item 2).
TEST(RegistryLimits, CoordinatorUrlsAreHostAndPortOnly) {
  EXPECT_EQ(normalized_coordinator_url("http://127.0.0.1:10086", "f"), "http://127.0.0.1:10086");
  EXPECT_EQ(normalized_coordinator_url("HTTP://Front-B.local:80/", "f"), "http://front-b.local:80");
  EXPECT_EQ(normalized_coordinator_url("http://[::1]:9", "f"), "http://[::1]:9");
  auto refusal = [](const std::string& url) -> std::string {
    try {
      normalized_coordinator_url(url, "group: field 'coordinator_url'");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string what = e.what();
      EXPECT_EQ(what.find('\r'), std::string::npos);
      EXPECT_EQ(what.find('\n'), std::string::npos);
      return what;
    }
    return "";
  };
  EXPECT_TRUE(contains(refusal("http://127.0.0.1:1\r\nX-Evil: 1"), "control character"));
  EXPECT_TRUE(contains(refusal("http://127.0.0.1:1/stop_engine"), "no path"));
  EXPECT_TRUE(contains(refusal("http://user:pw@127.0.0.1:1"), "user information"));
  EXPECT_TRUE(contains(refusal("https://127.0.0.1:1"), "https is not supported"));
  EXPECT_TRUE(contains(refusal("http://127.0.0.1"), "a port is required"));
  EXPECT_TRUE(contains(refusal("http://127.0.0.1:70000"), "1..65535"));
  EXPECT_TRUE(contains(refusal("http://127.0.0.1:0"), "1..65535"));
  EXPECT_TRUE(contains(refusal("http://a b:1"), "space"));
  EXPECT_TRUE(contains(refusal("ftp://x:1"), "the scheme must be http://"));
  EXPECT_TRUE(contains(refusal("http://x"),
                       "group: field 'coordinator_url' must be http://host:port, got 'http://x'"));
}

// Before: an 8 MB metadata array was kept per episode until its batch trained (item 4).
TEST(RegistryLimits, EndMetadataAndLogMetricsAreBounded) {
  Json body{{"client_uuid", "c"},
            {"episode_uuid", "e"},
            {"task_id", "t"},
            {"workflow_output", {{"reward", 1}, {"metadata", {{"blob", std::string(2000, 'x')}}}}}};
  EXPECT_NO_THROW(EndRequest::from_json(body, "end_episode", 4096));
  try {
    EndRequest::from_json(body, "end_episode", 1024);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(http_status_for(e.code()), 413);
    EXPECT_TRUE(contains(e.what(), "workflow_output.metadata")) << e.what();
    EXPECT_TRUE(contains(e.what(), "1 KiB")) << e.what();
    EXPECT_TRUE(contains(e.what(), "--max-episode-metadata-mb")) << e.what();
  }
  body["workflow_output"] = {{"reward", 1},
                             {"log_metrics", {{"m", std::vector<double>(500, 1.5)}}}};
  try {
    EndRequest::from_json(body, "end_episode", 1024);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "workflow_output.log_metrics")) << e.what();
  }
}

}  // namespace
}  // namespace ajet::episodes
