// The episode registry without HTTP and without a store: claims, ends, aborts, the janitor, the
// engine state machine and the batch life cycle, all on an injected clock.
#include "registry_test_util.h"

namespace ajet::episodes {
namespace {

using testing::contains;
using testing::RegistryHarness;
using testing::small_options;

std::vector<std::string> buffer_uuids(const Registry& r, const std::string& status) {
  std::vector<std::string> out;
  Json buffer = r.episode_buffer();  // keep the temporary alive for the loop
  for (const auto& e : buffer["buffer"]) {
    if (e["episode_status"] == status) out.push_back(e["episode_uuid"]);
  }
  return out;
}

TEST(RegistryPool, ClaimsAreFifoAndSlotsReturnToThePool) {
  RegistryHarness h(small_options(Backbone::kTorch, 8, 4, /*pool=*/3));
  EXPECT_TRUE(buffer_uuids(h.registry, "registered").empty());  // OFFLINE: no pool
  h.start();
  std::vector<std::string> order = buffer_uuids(h.registry, "registered");
  ASSERT_EQ(order.size(), 3u);
  std::string a = h.claim("c1"), b = h.claim("c1"), c = h.claim("c2");
  EXPECT_EQ((std::vector<std::string>{a, b, c}), order);
  ClaimResponse empty = h.try_claim("c3");
  EXPECT_FALSE(empty.success);
  EXPECT_EQ(empty.fail_cause.rfind("No available episodes to claim.", 0), 0u) << empty.fail_cause;

  h.abort("c1", b);  // slot returns (a fresh episode: the aborted key stays dead)
  h.end("c1", a, "t", 1);
  std::vector<std::string> refilled = buffer_uuids(h.registry, "registered");
  ASSERT_EQ(refilled.size(), 2u);
  EXPECT_EQ(h.claim("c3"), refilled[0]);
  EXPECT_EQ(h.claim("c3"), refilled[1]);
  EXPECT_NE(refilled[0], b);
  EXPECT_EQ(h.registry.episode_buffer()["buffer"].size(), 3u);
}

TEST(RegistryClaim, ResponseCarriesAVerifiableKeyAndBaseUrl) {
  RegistryHarness h(small_options());
  h.start();
  ClaimResponse r = h.try_claim("c1");
  ASSERT_TRUE(r.success);
  EXPECT_EQ(r.client_uuid, "c1");
  EXPECT_EQ(r.openai_base_url, "http://127.0.0.1:10086/v1");
  EXPECT_EQ(r.fail_cause, "");
  EpisodeKeyClaims claims = h.registry.signer().verify("Bearer " + r.openai_api_key);
  EXPECT_EQ(claims.episode_uuid, r.episode_uuid);
  EXPECT_EQ(claims.agent_name, "default_agent_name");
}

TEST(RegistryClaim, RefusedOutsideRollingWithAdviceAndBadTypeIs400) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  ClaimResponse r = h.try_claim("c1");
  EXPECT_FALSE(r.success);
  EXPECT_TRUE(contains(r.fail_cause, "[ENGINE.OFFLINE]")) << r.fail_cause;
  h.registry.start_booting();
  EXPECT_TRUE(contains(h.try_claim("c1").fail_cause, "[ENGINE.BOOTING]"));
  h.registry.engine_ready();
  std::string a = h.claim("c1"), b = h.claim("c1");
  h.end("c1", a, "t", 1);  // 1 task x 1 repeat: the batch is full, b is still running
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRollingPost);
  EXPECT_TRUE(contains(h.try_claim("c1").fail_cause, "[ENGINE.ROLLING_POST]"));
  try {
    h.try_claim("c1", "grade");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(http_status_for(e.code()), 400);
    EXPECT_TRUE(contains(e.what(), "Unknown episode_type: 'grade'"));
  }
  (void)b;
}

TEST(RegistryEnd, EveryErrorPathWithItsStatus) {
  RegistryHarness h(small_options(Backbone::kTorch, 8, 4));
  h.start();
  std::string mine = h.claim("c1");

  CommandError e = h.end_error("c1", "nope");
  EXPECT_EQ(e.http_status(), 400);
  EXPECT_EQ(e.message, "Episode nope not found.");

  e = h.end_error("c2", mine);
  EXPECT_EQ(e.http_status(), 404);
  EXPECT_TRUE(contains(e.message, "claimed by different client: c1, but got c2")) << e.message;

  std::string unclaimed = buffer_uuids(h.registry, "registered").front();
  e = h.end_error("c1", unclaimed);
  EXPECT_EQ(e.http_status(), 400);
  EXPECT_TRUE(contains(e.message, "never claimed")) << e.message;

  h.end("c1", mine, "t", 1);
  EXPECT_NO_THROW(h.end("c1", mine, "t", 1));  // a retried end of a finished episode succeeds again
  e = h.end_error("c2", mine);
  EXPECT_EQ(e.http_status(), 404);

  std::string aborted = h.claim("c1");
  h.abort("c1", aborted);
  e = h.end_error("c1", aborted);
  EXPECT_EQ(e.http_status(), 400);
  EXPECT_TRUE(contains(e.message, "aborted")) << e.message;
}

// At a batch boundary the front used to wait for every claimed train episode until the drain timed
// out, so one dead client (whose orphan ends only when reclaimed, 240 s later) stopped every claim.
// Now the drain waits only for live episodes; the others carry into the next batch.
TEST(RegistryBatch, ADeadClientsEpisodeDoesNotHoldTheBatchBoundaryAndCarriesOver) {
  RegistryOptions o = small_options(Backbone::kTorch, 1, 1);
  o.drain_timeout = 600;
  RegistryHarness h(o);
  h.start();
  std::string a = h.claim("c1"), dead = h.claim("c2", "train", 240), busy = h.claim("c3");
  h.registry.begin_llm_call(busy);  // a long generation: alive however long it takes
  h.now += 0.2;
  h.end("c1", a, "t", 1);
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRollingPost);  // `dead` claimed 0.2 s ago
  EXPECT_FALSE(h.registry.batch_ready());
  ASSERT_TRUE(h.registry.next_sweep_due().has_value());
  EXPECT_LE(*h.registry.next_sweep_due(), std::chrono::milliseconds(310));  // its 0.5 s grace ends
  h.now += 1.5;  // `dead` is past the grace; `busy` has a call in flight and is awaited
  EXPECT_FALSE(h.registry.batch_ready());  // until the sweep the janitor schedules then
  h.registry.sweep();
  EXPECT_FALSE(h.registry.batch_ready()) << "a call in flight is awaited";
  h.registry.end_llm_call(busy);
  h.now += 2.5;
  h.registry.sweep();
  ASSERT_TRUE(h.registry.batch_ready());
  Batch batch = h.registry.take_batch();
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kWeightSyncing);
  ASSERT_EQ(batch.episodes.size(), 1u);
  // Nothing was dropped: both still run, and an end during training joins the next batch.
  EXPECT_TRUE(h.can_continue("c2", dead));
  EXPECT_NO_THROW(h.end("c3", busy, "u", 0.5));
  h.registry.begin_weight_export();
  h.registry.end_weight_export();
  h.registry.finish_batch(batch.batch_id, Json{{"loss", 0.1}});
  EXPECT_EQ(h.registry.engine_status(),
            EnginePhase::kRollingPost);  // `busy` fills the next batch at once
  // Re-entering ROLLING restarted the janitor's idle clocks, but not the client's last sign of
  // life: the dead client's episode holds this boundary no second either.
  ASSERT_TRUE(h.registry.batch_ready());
  Batch next = h.registry.take_batch();
  ASSERT_EQ(next.episodes.size(), 1u);
  EXPECT_EQ(next.episodes[0].episode_uuid, busy);
  // The dead client's episode is reclaimed after its own timeout, as any idle one.
  h.registry.begin_weight_export();
  h.registry.end_weight_export();
  h.registry.finish_batch(next.batch_id, Json::object());
  h.now += 241;
  EXPECT_EQ(h.registry.sweep().reclaimed, std::vector<std::string>{dead});
  CommandError e = h.end_error("c2", "never-seen");
  EXPECT_TRUE(contains(e.message, "not found")) << e.message;
}

TEST(RegistryAbort, AlwaysSucceedsAndOnlyTheOwnerCanAbort) {
  RegistryHarness h(small_options(Backbone::kTorch, 8, 4, 2));
  h.abort("c1", "unknown");  // no-op, no throw
  h.start();
  std::string a = h.claim("c1");
  h.abort("intruder", a);
  EXPECT_TRUE(h.can_continue("c1", a));
  EXPECT_TRUE(h.registry.is_live(a));
  h.abort("c1", a);
  EXPECT_FALSE(h.can_continue("c1", a));
  EXPECT_FALSE(h.registry.is_live(a));  // the OpenAI route drops a tracker it made after this
  ASSERT_EQ(h.closed.size(), 1u);
  EXPECT_EQ(h.closed[0].how, EpisodeEnd::kAborted);
  EXPECT_EQ(buffer_uuids(h.registry, "registered").size(), 2u);  // slot back in the pool
  EXPECT_THROW(h.registry.begin_llm_call(a), Error);
}

TEST(RegistryJanitor, ReclaimsOnlyEpisodesIdlePastTheirTimeout) {
  RegistryHarness h(small_options(Backbone::kTorch, 8, 4, 2));
  h.start();
  std::string quick = h.claim("c1", "train", 10);
  std::string patient = h.claim("c2", "train", 100);
  h.now += 8;
  LlmCallTicket t = h.registry.begin_llm_call(quick);  // activity at t+8
  EXPECT_EQ(t.call_index, 0);
  h.registry.end_llm_call(quick);
  h.now += 9;  // quick idle 9 s, patient 17 s
  EXPECT_TRUE(h.registry.sweep().reclaimed.empty());
  h.now += 2;  // quick idle 11 s > 10
  SweepResult r = h.registry.sweep();
  EXPECT_EQ(r.reclaimed, std::vector<std::string>{quick});
  ASSERT_EQ(h.closed.size(), 1u);
  EXPECT_EQ(h.closed[0].how, EpisodeEnd::kReclaimed);
  EXPECT_FALSE(h.can_continue("c1", quick));
  EXPECT_TRUE(h.can_continue("c2", patient));
  CommandError e = h.end_error("c1", quick);
  EXPECT_EQ(e.http_status(), 400);
  EXPECT_TRUE(contains(e.message, "`discard_episode_timeout`")) << e.message;
  EXPECT_TRUE(contains(e.message, "11.0 s without activity")) << e.message;
  try {
    h.registry.begin_llm_call(quick);
    FAIL();
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kNotFound);
  }
  EXPECT_EQ(buffer_uuids(h.registry, "registered").size(), 1u);  // the slot came back
  h.now += 100;
  EXPECT_EQ(h.registry.sweep().reclaimed, std::vector<std::string>{patient});
}

// A generation longer than discard_episode_timeout (a long answer, a queue on a busy engine) lost
// its episode: idle time counted from the start of the call, and the call in flight was not
// activity.
TEST(RegistryJanitor, AnEpisodeWithACallInFlightIsNeverIdle) {
  RegistryHarness h(small_options(Backbone::kTorch, 8, 4, 2));
  h.start();
  std::string slow = h.claim("c1", "train", 10);
  {
    CallInFlight call(h.registry, slow);
    h.registry.begin_llm_call(slow);
    call.add();
    h.now += 60;  // six timeouts into one generation
    EXPECT_TRUE(h.registry.sweep().reclaimed.empty());
    EXPECT_TRUE(h.can_continue("c1", slow));
  }  // the call ends (answered or failed): the idle clock starts now
  h.now += 9;
  EXPECT_TRUE(h.registry.sweep().reclaimed.empty());
  h.now += 2;
  EXPECT_EQ(h.registry.sweep().reclaimed, std::vector<std::string>{slow});
  h.registry.end_llm_call(slow);  // a stray end of a retired episode changes nothing
}

TEST(RegistryLlmCalls, BookkeepingAndRefusals) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  try {
    h.registry.begin_llm_call("x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(http_status_for(e.code()), 503);  // OFFLINE: retryable
  }
  h.start();
  std::string a = h.claim("c1", "eval");
  LlmCallTicket t0 = h.registry.begin_llm_call(a), t1 = h.registry.begin_llm_call(a);
  EXPECT_EQ(t0.episode_type, "eval");
  EXPECT_EQ(t1.call_index, 1);
  store::CallRow call;
  call.episode_uuid = a;
  call.call_index = t1.call_index;
  EXPECT_TRUE(h.registry.record_llm_call(call));
  Json running = h.registry.pool_info()["running_episode_details"][a];
  EXPECT_EQ(running["llm_call_count"], "2");
  h.end("c1", a, "t", 1);
  EXPECT_FALSE(h.registry.record_llm_call(call));  // ended: the late call is discarded
  try {
    h.registry.begin_llm_call(a);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_TRUE(contains(e.what(), "has ended"));
  }
}

// Before: nothing bounded what one episode key could make the front keep (4,146 calls of 1 MB in
// 34 s took it to 4.2 GB). A request's n choices are reserved at once within the limits, counted
// from what is recorded and in flight; the refusal names the limit and its flag.
TEST(RegistryLlmCalls, EpisodeLimitsOnCallsAndStoredBytes) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  h.start();
  std::string a = h.claim("c1", "eval");
  const CallReservation two{.calls = 2, .request_bytes = 100, .max_calls = 3, .max_bytes = 1000};
  std::vector<LlmCallTicket> tickets = h.registry.begin_llm_calls(a, two);
  ASSERT_EQ(tickets.size(), 2u);
  EXPECT_EQ(tickets[0].call_index, 0);
  EXPECT_EQ(tickets[1].call_index, 1);  // consecutive
  try {
    h.registry.begin_llm_calls(a, two);  // 2 in flight + 2 > 3
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_TRUE(contains(e.what(), "limit of 3 calls per episode (ajet-swarm --max-episode-calls)"))
        << e.what();
  }
  store::CallRow row;
  row.episode_uuid = a;
  row.call_index = 0;
  row.request_json = std::string(600, 'x');
  EXPECT_TRUE(h.registry.record_llm_call(row));
  // Call 0 is recorded but still in flight (its answer is out, its object not yet gone): it counts
  // once, so a third call fits (1 recorded + 1 pending + 1).
  std::vector<LlmCallTicket> third = h.registry.begin_llm_calls(
      a,
      CallReservation{
          .calls = 1, .request_bytes = 400, .max_calls = 3, .max_bytes = 1000});  // 600 + 400 fits
  ASSERT_EQ(third.size(), 1u);
  h.registry.end_llm_call(a, 0);
  h.registry.end_llm_call(a, 1);  // the second choice was never recorded: it no longer counts
  h.registry.end_llm_call(a, third[0].call_index);
  try {
    h.registry.begin_llm_calls(
        a, CallReservation{.calls = 1, .request_bytes = 401, .max_calls = 3, .max_bytes = 1000});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_TRUE(contains(e.what(), "has stored 600 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "limit of 1000 bytes per episode (ajet-swarm --max-episode-mb"))
        << e.what();
  }
  std::string b = h.claim("c1", "eval");  // another episode has its own budget
  EXPECT_EQ(h.registry.begin_llm_calls(b, two).size(), 2u);
}

TEST(RegistryBatch, DefaultTriggerDrainThenTrainAdvancesTheStep) {
  RegistryHarness h(small_options(Backbone::kTorch, 2, 2));
  h.start();
  std::string a1 = h.claim("c1"), a2 = h.claim("c1"), b1 = h.claim("c2"), b2 = h.claim("c2"),
              late = h.claim("c2");
  h.end("c1", a1, "A", 1);
  h.end("c1", a2, "A", 0);
  h.end("c2", b1, "B", 1);
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);
  h.end("c2", b2, "B", 1);  // two tasks with two episodes each: full
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRollingPost);
  EXPECT_FALSE(h.registry.batch_ready());            // `late` is still running and will be included
  EXPECT_NO_THROW(h.registry.begin_llm_call(late));  // chat is still served in ROLLING_POST
  EXPECT_FALSE(h.registry.wait_batch_ready(std::chrono::milliseconds(0)));
  h.end("c2", late, "C", 0.5);
  EXPECT_TRUE(h.registry.batch_ready());
  Batch batch = h.registry.take_batch();
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kWeightSyncing);
  EXPECT_EQ(batch.global_step, 0);
  std::vector<std::string> uuids;
  for (const auto& e : batch.episodes) uuids.push_back(e.episode_uuid);
  EXPECT_EQ(uuids, (std::vector<std::string>{a1, a2, b1, b2, late}));
  EXPECT_EQ(batch.episodes[4].task_id, "C");
  EXPECT_TRUE(contains(h.try_claim("c1").fail_cause, "WEIGHT_SYNCING"));
  h.registry.begin_weight_export();
  h.registry.end_weight_export();
  h.registry.finish_batch(batch.batch_id, Json{{"loss", 0.1}});
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);
  EXPECT_EQ(h.registry.global_step(), 1);
  EXPECT_EQ(h.registry.engine_status_json()["global_step"], 1);
  EXPECT_EQ(h.registry.pool_info()["completed_episodes"], 0);
  EXPECT_THROW(h.registry.take_batch(), Error);
  EXPECT_THROW(h.registry.finish_batch(batch.batch_id, {}), Error);
}

TEST(RegistryBatch, EpisodesAndNonDummyTriggers) {
  RegistryOptions o = small_options(Backbone::kTorch, 2, 2);
  o.sample_collection = SampleCollection::kEnoughEpisodes;
  {
    RegistryHarness h(o);
    h.start();
    for (const char* task : {"t0", "t1", "t2"}) h.end("c", h.claim("c"), task, 1);
    EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);
    h.end("c", h.claim("c"), "t9", 1);  // 4 = 2 x 2 episodes, whatever the tasks
    EXPECT_TRUE(h.registry.batch_ready());
  }
  o.sample_collection = SampleCollection::kEnoughNonDummyTasks;
  RegistryHarness h(o);
  h.start();
  for (const char* task : {"A", "A", "B", "B"})
    h.end("c", h.claim("c"), task, 1);  // all equal: dummy
  EXPECT_EQ(h.registry.pool_info()["completed_tasks"], 2);
  EXPECT_EQ(h.registry.pool_info()["completed_non_dummy_tasks"], 0);
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);
  h.end("c", h.claim("c"), "C", 1);
  h.end("c", h.claim("c"), "C", 0);
  h.end("c", h.claim("c"), "A", 0);  // A now varies
  EXPECT_TRUE(h.registry.batch_ready());
  EXPECT_EQ(h.registry.take_batch().episodes.size(), 7u);  // dummy tasks stay in the batch
}

TEST(RegistryBatch, AgreeTriggersUseActiveClients) {
  RegistryOptions o = small_options(Backbone::kTorch, 100, 4);
  o.sample_collection = SampleCollection::kAllClientsAgree;
  RegistryHarness h(o);
  h.start();
  BoolResponse r = h.registry.agree_sync_weight(AgreeRequest{"c1"});
  EXPECT_FALSE(r.success);
  EXPECT_TRUE(contains(r.failure_reason, "at least one rewarded (non-abort) episode"));
  h.end("c1", h.claim("c1"), "t", 1);
  h.end("c2", h.claim("c2"), "t", 0);
  std::string aborted = h.claim("c3");
  h.registry.abort_episode(AbortRequest{"c3", aborted, false});  // declare_client_active: false
  EXPECT_FALSE(h.registry.agree_sync_weight(AgreeRequest{"c3"}).success);
  EXPECT_TRUE(h.registry.agree_sync_weight(AgreeRequest{"c1"}).success);
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);  // c2 has not agreed
  EXPECT_EQ(h.registry.pool_info()["active_clients"].size(), 2u);
  // c2 goes quiet past CLIENT_ACTIVE_TIMEOUT: it no longer blocks the others.
  h.now += 601;
  SweepResult swept = h.registry.sweep();
  EXPECT_EQ(swept.expired_clients,
            (std::vector<std::string>{"c1", "c2"}));  // c1 agreed at t0, also idle
  h.end("c1", h.claim("c1"), "t", 1);
  EXPECT_TRUE(h.registry.agree_sync_weight(AgreeRequest{"c1"}).success);
  EXPECT_EQ(h.registry.engine_status(),
            EnginePhase::kRollingPost);  // shown for agree_boundary_dwell
  h.now += 2;
  h.registry.sweep();
  EXPECT_TRUE(h.registry.batch_ready());
  Batch b = h.registry.take_batch();
  EXPECT_EQ(b.episodes.size(), 3u);
  // Agreements reset at the batch boundary.
  EXPECT_FALSE(h.registry.agree_sync_weight(AgreeRequest{"c1"}).success);

  o.sample_collection = SampleCollection::kEnoughTasks;
  RegistryHarness plain(o);
  plain.start();
  plain.end("c1", plain.claim("c1"), "t", 1);
  EXPECT_TRUE(contains(plain.registry.agree_sync_weight(AgreeRequest{"c1"}).failure_reason,
                       "only applies when ajet.swarm_mode_sample_collection_method"));
}

// As upstream: aborting one of its train episodes makes a client active (declare_client_active
// defaults to true), so agree-based triggers count a client whose episodes all failed.
TEST(RegistryBatch, AnAbortMakesItsClientActiveUnlessItSaysNot) {
  RegistryOptions o = small_options(Backbone::kTorch, 100, 4);
  o.sample_collection = SampleCollection::kAllClientsAgree;
  RegistryHarness h(o);
  h.start();
  h.abort("c1", h.claim("c1"));
  EXPECT_TRUE(h.registry.agree_sync_weight(AgreeRequest{"c1"}).success);
  h.abort("c2", h.claim("c2", "eval"));  // an eval episode never makes a client active
  EXPECT_FALSE(h.registry.agree_sync_weight(AgreeRequest{"c2"}).success);
}

TEST(RegistryBatch, AnyClientAgreeFires) {
  RegistryOptions o = small_options(Backbone::kTorch, 100, 4);
  o.sample_collection = SampleCollection::kAnyClientAgrees;
  RegistryHarness h(o);
  h.start();
  h.end("c1", h.claim("c1"), "t", 1);
  h.end("c2", h.claim("c2"), "t", 1);
  EXPECT_TRUE(h.registry.agree_sync_weight(AgreeRequest{"c2"}).success);
  h.now += 2;
  h.registry.sweep();
  EXPECT_TRUE(h.registry.batch_ready());
}

// Upstream's client, after agree_sync_weight is accepted, polls until the status is ROLLING_POST or
// WEIGHT_SYNCING. The debug backbone passed ROLLING_POST inside one call and async never left
// ROLLING, so such a client waited forever. With an agree-based trigger every backbone shows
// ROLLING_POST for agree_boundary_dwell (2 s), and the janitor wakes when it ends.
TEST(RegistryBatch, AnAgreedBoundaryIsVisibleOnEveryBackbone) {
  for (Backbone backbone : {Backbone::kTorch, Backbone::kDebug, Backbone::kAsync}) {
    RegistryOptions o = small_options(backbone, 100, 4);
    o.sample_collection = SampleCollection::kAnyClientAgrees;
    RegistryHarness h(o);
    h.start();
    h.end("c1", h.claim("c1"), "t", 1);
    ASSERT_TRUE(h.registry.agree_sync_weight(AgreeRequest{"c1"}).success);
    EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRollingPost) << backbone_name(backbone);
    ASSERT_TRUE(h.registry.next_sweep_due().has_value());
    EXPECT_LE(*h.registry.next_sweep_due(), std::chrono::milliseconds(2010));
    h.now += 1;
    h.registry.sweep();
    EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRollingPost) << backbone_name(backbone);
    h.now += 1;
    h.registry.sweep();
    if (backbone == Backbone::kTorch) {
      EXPECT_TRUE(h.registry.batch_ready());
      EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRollingPost);
    } else {
      // debug recorded the batch; async handed it to the trainer and rolls on.
      EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling) << backbone_name(backbone);
      if (backbone == Backbone::kAsync) {
        EXPECT_TRUE(h.registry.batch_ready());
      }
    }
  }
}

// Classic mode's dynamic sampling: the launcher is the only client and waits on global_step, so the
// agreed boundary needs no dwell (ajet.swarm_mode_agree_boundary_dwell: 0) and the batch is ready
// at once, with no sweep and no time passing.
TEST(RegistryBatch, WithoutADwellAnAgreedBatchIsReadyAtOnce) {
  for (Backbone backbone : {Backbone::kTorch, Backbone::kAsync}) {
    RegistryOptions o = small_options(backbone, 100, 4);
    o.sample_collection = SampleCollection::kAnyClientAgrees;
    o.agree_boundary_dwell = 0;
    RegistryHarness h(o);
    h.start();
    h.end("c1", h.claim("c1"), "t", 1);
    ASSERT_TRUE(h.registry.agree_sync_weight(AgreeRequest{"c1"}).success);
    EXPECT_TRUE(h.registry.batch_ready()) << backbone_name(backbone);
    EXPECT_FALSE(h.registry.next_sweep_due().has_value()) << backbone_name(backbone);
  }
}

TEST(RegistryBatch, EvalEpisodesAreRecordedButNeverBatched) {
  RegistryOptions o = small_options(Backbone::kTorch, 1, 1);
  o.sample_collection = SampleCollection::kEnoughEpisodes;
  RegistryHarness h(o);
  h.start();
  std::string ev = h.claim("c1", "eval");
  LlmCallTicket t = h.registry.begin_llm_call(ev);
  EXPECT_EQ(t.episode_type, "eval");
  h.end("c1", ev, "e1", 0.25);
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);
  Json info = h.registry.pool_info();
  EXPECT_EQ(info["completed_episodes"], 0);
  EXPECT_EQ(info["eval_episodes"]["completed"], 1);
  EXPECT_DOUBLE_EQ(info["eval_episodes"]["reward_mean"].get<double>(), 0.25);
  // An eval episode in flight neither blocks the drain nor enters the batch.
  std::string ev2 = h.claim("c1", "eval");
  std::string tr = h.claim("c1");
  h.end("c1", tr, "t1", 1);
  ASSERT_TRUE(h.registry.batch_ready());
  Batch b = h.registry.take_batch();
  ASSERT_EQ(b.episodes.size(), 1u);
  EXPECT_EQ(b.episodes[0].episode_uuid, tr);
  // It survives the weight sync and can still be ended (metrics only).
  EXPECT_TRUE(h.can_continue("c1", ev2));
  h.registry.finish_batch(b.batch_id, {});
  EXPECT_NO_THROW(h.registry.begin_llm_call(ev2));
  h.end("c1", ev2, "e2", 0.75);
  EXPECT_EQ(h.registry.pool_info()["eval_episodes"]["completed"], 2);
}

TEST(RegistryBatch, ThrottlePolicyFieldsShowInPoolInfoAndBuffer) {
  RegistryHarness h(small_options(Backbone::kTorch, 2, 2));
  h.start();
  std::string a = h.claim("c1", "train", 60, "math-7");
  h.now += 2.5;
  Json info = h.registry.pool_info();
  Json d = info["running_episode_details"][a];
  EXPECT_EQ(d, Json::parse(R"({"episode_status": "claimed", "time_since_last_activity": "2.5s",
      "discard_episode_timeout": "60.0s", "llm_call_count": "0", "client_uuid": "c1", "optional_task_id": "math-7"})"));
  Json buffer = h.registry.episode_buffer();
  for (const auto& e : buffer["buffer"]) {
    if (e["episode_uuid"] == a) {
      EXPECT_EQ(e["optional_task_id"], "math-7");
      EXPECT_EQ(e["episode_type"], "train");
      EXPECT_DOUBLE_EQ(e["latest_activity_timestamp"].get<double>(), 1000.0);
      // Upstream's EpisodeStatus fields, all present; the key is never handed out here.
      EXPECT_EQ(e["openai_base_url"], "http://127.0.0.1:10086/v1");
      EXPECT_EQ(e["openai_api_key"], "");
      EXPECT_EQ(e["zmq_listen_result_addr"], "");
      // Before (issue 39): "", where upstream's EpisodeStatus has a list of strings.
      EXPECT_EQ(e["debug_log"], Json::array());
    }
  }
  h.end("c1", a, "math-7", 1);
  h.end("c2", h.claim("c2"), "math-7", 0);
  info = h.registry.pool_info();
  EXPECT_EQ(info["completed_tasks_client_uuids"]["math-7"], Json::parse(R"(["c1", "c2"])"));
  EXPECT_EQ(info["completed_tasks_details"]["math-7"].size(), 2u);
  EXPECT_DOUBLE_EQ(info["completed_tasks_reward_stats"]["math-7"]["reward_mean"].get<double>(),
                   0.5);
  EXPECT_DOUBLE_EQ(info["completed_tasks_reward_stats"]["math-7"]["reward_std"].get<double>(), 0.5);
}

TEST(RegistryPoolInfo, CarriesEveryProtocolField) {
  RegistryHarness h(small_options(Backbone::kTorch, 3, 5));
  h.registry.start_booting();
  Json info = h.registry.pool_info();
  for (const char* f :
       {"sample_collection_method", "completed_episodes", "completed_episode_target",
        "completed_tasks", "completed_task_target", "completed_non_dummy_tasks",
        "completed_non_dummy_task_target", "task_expected_num_repeat", "completed_tasks_details",
        "completed_tasks_client_uuids", "completed_tasks_rewards", "running_episode_details",
        "engine_status", "global_step", "booting_start_time", "training_model_path",
        "swarm_client_instruction"}) {
    EXPECT_TRUE(info.contains(f)) << f;
  }
  // Nothing claimed: null, as upstream sends (its client's never-throttle guard tests for None).
  EXPECT_TRUE(info["running_episode_details"].is_null());
  EXPECT_EQ(info["swarm_client_instruction"], Json({{"active_clients", Json::array()}}));
  EXPECT_EQ(info["sample_collection_method"], "rollout_until_finish_enough_tasks");
  EXPECT_EQ(info["completed_episode_target"], 15);
  EXPECT_EQ(info["completed_task_target"], 3);
  EXPECT_EQ(info["task_expected_num_repeat"], 5);
  EXPECT_EQ(info["engine_status"], "ENGINE.BOOTING");
  EXPECT_DOUBLE_EQ(info["booting_start_time"].get<double>(), 1000.0);
  EXPECT_EQ(info["training_model_path"], "/models/tiny");
  h.registry.engine_ready();
  EXPECT_TRUE(h.registry.pool_info()["booting_start_time"].is_null());
  // Per-task rewards and the active clients, as upstream's overwatch and throttle read them.
  std::string a = h.claim("c"), b = h.claim("c");
  h.end("c", a, "t", 1);
  h.end("c", b, "t", 0.25);
  info = h.registry.pool_info();
  EXPECT_EQ(info["completed_tasks_rewards"], Json::parse(R"({"t": [1.0, 0.25]})"));
  const Json& clients = info["swarm_client_instruction"]["active_clients"];
  ASSERT_EQ(clients.size(), 1u);
  EXPECT_EQ(clients[0]["client_uuid"], "c");
  EXPECT_EQ(clients[0]["allowed_sync_weight"], false);
  EXPECT_TRUE(clients[0]["last_activity_at"].is_number());
}

// GET /metrics reads these: live episodes by state, ended ones by outcome and type, batch progress.
TEST(RegistryFigures, CountStatesOutcomesAndBatchProgress) {
  RegistryHarness h(small_options(Backbone::kTorch, 2, 2, /*pool=*/5));
  RegistryFigures f = h.registry.figures();
  EXPECT_EQ(f.engine_status, EnginePhase::kOffline);
  EXPECT_EQ(f.registered + f.claimed + f.ending + f.prepared, 0);
  EXPECT_TRUE(f.ended.empty());
  EXPECT_EQ(f.batch_episode_target, 4);
  EXPECT_EQ(f.batch_task_target, 2);
  h.start();
  std::string a = h.claim("c1"), b = h.claim("c1"), c = h.claim("c2", "eval"),
              d = h.claim("c2", "train", 10);
  {
    CallInFlight call(h.registry, a);
    h.registry.begin_llm_call(a);
    call.add();
    f = h.registry.figures();
    EXPECT_EQ(f.llm_calls_in_flight, 1);
  }
  f = h.registry.figures();
  EXPECT_EQ(f.engine_status, EnginePhase::kRolling);
  EXPECT_EQ(f.registered, 1);
  EXPECT_EQ(f.claimed, 4);
  EXPECT_EQ(f.llm_calls_in_flight, 0);

  h.end("c1", a, "t1", 1);
  h.end("c2", c, "t9", 0.5);  // eval: ended, never in the batch
  h.abort("c1", b);
  h.now += 11;
  EXPECT_EQ(h.registry.sweep().reclaimed, std::vector<std::string>{d});
  f = h.registry.figures();
  using Key = std::pair<std::string, std::string>;
  EXPECT_EQ(f.ended, (std::map<Key, int64_t>{{{"finished", "train"}, 1},
                                             {{"finished", "eval"}, 1},
                                             {{"aborted", "train"}, 1},
                                             {{"reclaimed", "train"}, 1}}));
  EXPECT_EQ(f.claimed, 0);
  EXPECT_EQ(f.registered, 5);  // every slot back in the pool
  EXPECT_EQ(f.batch_episodes, 1);
  EXPECT_EQ(f.batch_tasks, 0);     // t1 has 1 of its 2 episodes
  EXPECT_EQ(f.active_clients, 1);  // c1 ended a train episode; c2 only an eval one

  std::string e = h.claim("c1");
  h.end("c1", e, "t1", 0);
  f = h.registry.figures();
  EXPECT_EQ(f.batch_episodes, 2);
  EXPECT_EQ(f.batch_tasks, 1);
  EXPECT_EQ(f.batch_non_dummy_tasks, 1);  // rewards 1 and 0 differ
  std::string g = h.claim("c1");
  h.registry.stop("test");
  f = h.registry.figures();
  EXPECT_EQ(f.engine_status, EnginePhase::kOffline);
  EXPECT_EQ(f.registered + f.claimed, 0);
  EXPECT_EQ((f.ended[{"dropped", "train"}]), 1);  // g; the unclaimed pool is not counted
  (void)g;
}

TEST(RegistryBackbones, DebugRecordsTheBatchAndNeverAdvancesTheStep) {
  RegistryHarness h(small_options(Backbone::kDebug, 1, 2));
  h.start();
  std::string a = h.claim("c"), b = h.claim("c");
  h.end("c", a, "t", 1);
  h.end("c", b, "t", 0);
  // Recorded at once: no trainer, no WEIGHT_SYNCING, global_step unchanged.
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);
  EXPECT_EQ(h.registry.global_step(), 0);
  EXPECT_FALSE(h.registry.batch_ready());
  auto recorded = h.registry.last_recorded_batch();
  ASSERT_TRUE(recorded);
  EXPECT_EQ(recorded->episodes.size(), 2u);
  EXPECT_EQ(h.registry.pool_info()["batches_recorded"], 1);
  ClaimResponse next = h.try_claim("c");  // claims go on at once
  ASSERT_TRUE(next.success);
  h.end("c", next.episode_uuid, "u", 1);
  h.end("c", h.claim("c"), "u", 1);
  EXPECT_EQ(h.registry.last_recorded_batch()->batch_id, recorded->batch_id + 1);
  EXPECT_EQ(h.registry.global_step(), 0);
}

TEST(RegistryBackbones, AsyncKeepsRollingAndBoundsStaleness) {
  RegistryOptions o = small_options(Backbone::kAsync, 1, 1);
  o.max_staleness = 0;
  RegistryHarness h(o);
  h.start();
  std::string running = h.claim("c");
  h.end("c", h.claim("c"), "t", 1);
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);  // no ROLLING_POST
  EXPECT_TRUE(h.registry.batch_ready());
  EXPECT_TRUE(h.can_continue("c", running));  // in-flight episodes go on into the next batch
  ClaimResponse paused = h.try_claim("c");
  EXPECT_FALSE(paused.success);
  EXPECT_TRUE(contains(paused.fail_cause, "max_staleness")) << paused.fail_cause;
  Batch b = h.registry.take_batch();
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);
  h.end("c", running, "t2", 0);
  EXPECT_TRUE(h.registry.batch_ready());  // the next batch fills while the trainer works
  EXPECT_FALSE(h.try_claim("c").success);
  h.registry.finish_batch(b.batch_id, {});
  EXPECT_EQ(h.registry.global_step(), 1);
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);
  EXPECT_EQ(h.registry.take_batch().episodes.at(0).episode_uuid, running);
}

TEST(RegistryLifecycle, StopDropsInFlightEpisodes) {
  RegistryHarness h(small_options(Backbone::kTorch, 8, 4));
  h.start();
  std::string done = h.claim("c1"), running = h.claim("c2");
  h.end("c1", done, "t", 1);
  std::vector<std::string> dropped = h.registry.stop();
  EXPECT_EQ(dropped, std::vector<std::string>{running});
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kOffline);
  EXPECT_TRUE(h.registry.episode_buffer()["buffer"].empty());
  EXPECT_EQ(h.registry.pool_info()["completed_episodes"], 0);
  CommandError e = h.end_error("c2", running);
  EXPECT_EQ(e.http_status(), 400);
  EXPECT_TRUE(contains(e.message, "engine stopped")) << e.message;
  EXPECT_FALSE(h.registry.wait_batch_ready(std::chrono::milliseconds(0)));
  // Restart works, with a fresh pool.
  h.start();
  EXPECT_TRUE(h.try_claim("c1").success);
  EXPECT_THROW(h.registry.start_booting(), Error);  // already started
}

TEST(RegistryLifecycle, EngineRestartReturnsTheUntrainedBatch) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  h.start();
  std::string keep = h.claim("c2", "eval");
  std::string a = h.claim("c1");
  h.end("c1", a, "t", 1);
  Batch first = h.registry.take_batch();
  h.registry.engine_restarting("engine died; restarting from the last checkpoint");
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kBooting);
  EXPECT_TRUE(h.can_continue("c2", keep));  // live episodes survive an engine restart
  h.registry.engine_ready();
  ASSERT_TRUE(h.registry.batch_ready());  // the same episodes, collected again
  Batch again = h.registry.take_batch();
  ASSERT_EQ(again.episodes.size(), 1u);
  EXPECT_EQ(again.episodes[0].episode_uuid, a);
  EXPECT_NE(again.batch_id, first.batch_id);
  EXPECT_EQ(again.global_step, 0);
}

TEST(RegistryLifecycle, ConfigureOnlyWhenOffline) {
  RegistryHarness h(small_options());
  h.registry.configure(small_options(Backbone::kDebug));
  EXPECT_EQ(h.registry.options().backbone, Backbone::kDebug);
  h.start();
  EXPECT_THROW(h.registry.configure(small_options()), Error);
  EXPECT_THROW(h.registry.engine_ready(), Error);
}

TEST(RegistryBackbones, AsyncStalenessBoundCountsVersionsBehindTheTrainer) {
  // max_staleness 1: while one batch trains (policy v -> v+1), episodes claimed now are trained at
  // v+1 (1 version behind: allowed). Once the next batch is full too, a new episode would be
  // trained at v+2 on tokens of v (2 behind): claims wait until the trainer finishes a step.
  RegistryOptions o = small_options(Backbone::kAsync, 1, 1);
  o.max_staleness = 1;
  RegistryHarness h(o);
  h.start();
  h.end("c", h.claim("c"), "t1", 1);
  EXPECT_EQ(h.registry.batches_behind(), 1);
  Batch first = h.registry.take_batch();
  ASSERT_TRUE(h.try_claim("c").success) << "1 version behind is within max_staleness 1";
  std::string second = h.claim("c");
  h.end("c", second, "t2", 1);
  EXPECT_EQ(h.registry.batches_behind(), 2);
  ClaimResponse paused = h.try_claim("c");
  EXPECT_FALSE(paused.success);
  EXPECT_TRUE(contains(paused.fail_cause, "max_staleness")) << paused.fail_cause;
  h.registry.finish_batch(first.batch_id, Json{{"policy_version", 1}});
  EXPECT_EQ(h.registry.global_step(), 1);
  EXPECT_EQ(h.registry.batches_behind(), 1);
  EXPECT_TRUE(h.try_claim("c").success);
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);
}

TEST(RegistryBackbones, FailedBatchKeepsTheStepAndResumesRolling) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  h.start();
  h.end("c", h.claim("c"), "t", 1);
  Batch b = h.registry.take_batch();
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kWeightSyncing);
  h.registry.fail_batch(b.batch_id, ErrorCode::kInvalidArgument, "engine said: invalid_argument");
  EXPECT_EQ(h.registry.engine_status(), EnginePhase::kRolling);
  EXPECT_EQ(h.registry.global_step(), 0);
  EXPECT_THROW(h.registry.finish_batch(b.batch_id, {}), Error);
  EXPECT_THROW(h.registry.fail_batch(b.batch_id, ErrorCode::kInvalidArgument, "twice"), Error);
  EXPECT_TRUE(h.try_claim("c").success);
}

// What became of each batch is served as fields (GET /get_engine_status `recent_batches`): a
// refusal with its error code, a trained batch with the trainer's stats; the newest last, at most
// kRecentBatches.
TEST(RegistryBackbones, RecentBatchesSayWhatBecameOfEachBatchAsFields) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  h.start();
  EXPECT_EQ(h.registry.engine_status_json()["recent_batches"], Json::array());
  h.end("c", h.claim("c"), "t", 1);
  Batch refused = h.registry.take_batch();
  h.registry.fail_batch(refused.batch_id, ErrorCode::kNotFound,
                        "unknown engine method 'train_step'");
  h.end("c", h.claim("c"), "t", 1);
  Batch trained = h.registry.take_batch();
  h.registry.finish_batch(trained.batch_id, Json{{"loss", 0.25}});
  const Json recent = h.registry.engine_status_json()["recent_batches"];
  ASSERT_EQ(recent.size(), 2u);
  EXPECT_EQ(recent[0]["batch_id"], refused.batch_id);
  EXPECT_EQ(recent[0]["global_step"], 0);
  EXPECT_EQ(recent[0]["trained"], false);
  EXPECT_EQ(recent[0]["error"]["code"], "not_found");
  EXPECT_EQ(recent[0]["error"]["message"], "unknown engine method 'train_step'");
  EXPECT_EQ(recent[1]["batch_id"], trained.batch_id);
  EXPECT_EQ(recent[1]["global_step"], 0);  // the step that trained on it; global_step is now 1
  EXPECT_EQ(recent[1]["trained"], true);
  EXPECT_EQ(recent[1]["stats"]["loss"], 0.25);
  EXPECT_EQ(recent[1]["stats"]["rollout"]["episodes"], 1);
  for (size_t i = 0; i < Registry::kRecentBatches; ++i) {
    h.end("c", h.claim("c"), "t", 1);
    h.registry.finish_batch(h.registry.take_batch().batch_id, Json::object());
  }
  const Json later = h.registry.engine_status_json()["recent_batches"];
  ASSERT_EQ(later.size(), Registry::kRecentBatches);
  EXPECT_EQ(later.back()["global_step"], h.registry.global_step() - 1);
}

// abort_episode's cause (issue 39): counted per cause for /metrics; an abort that changes nothing
// (another client's episode, an unknown one) counts nothing; past kMaxAbortCauses causes, "other".
TEST(RegistryFigures, AbortsCountByCauseWithABoundOnDistinctCauses) {
  RegistryHarness h(small_options(Backbone::kTorch, 100, 1, /*pool=*/4));
  h.start();
  h.abort("c1", h.claim("c1"));  // no cause: unspecified
  AbortRequest timeout{"c1", h.claim("c1")};
  timeout.cause = "verifier_timeout";
  h.registry.abort_episode(timeout);
  AbortRequest stranger{"c2", h.claim("c1")};  // another client's episode: left alone
  stranger.cause = "verifier_timeout";
  h.registry.abort_episode(stranger);
  EXPECT_EQ(h.registry.figures().aborted_by_cause,
            (std::map<std::string, int64_t>{{"unspecified", 1}, {"verifier_timeout", 1}}));
  for (size_t i = 0; i < kMaxAbortCauses + 3; ++i) {
    AbortRequest r{"c1", h.claim("c1")};
    r.cause = "cause_" + std::to_string(i);
    h.registry.abort_episode(r);
  }
  const auto counted = h.registry.figures().aborted_by_cause;
  EXPECT_EQ(counted.size(), kMaxAbortCauses + 1);  // 32 named ones and "other"
  EXPECT_EQ(counted.at("other"), 5);               // 2 + 35 causes: 32 named, the last 5 are other
  EXPECT_EQ(counted.at("verifier_timeout"), 1);
}

// The train aborts of a batch, by cause, go with it (its summary's "aborted":
// rollout/aborted/<cause>).
TEST(RegistryFigures, ABatchCarriesItsTrainAbortsByCause) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  h.start();
  AbortRequest r{"c1", h.claim("c1")};
  r.cause = "agent_died_before_first_call";
  h.registry.abort_episode(r);
  AbortRequest eval{"c1", h.claim("c1", "eval")};  // eval episodes are never in a batch
  eval.cause = "verifier_crashed";
  h.registry.abort_episode(eval);
  h.end("c1", h.claim("c1"), "t", 1);
  ASSERT_TRUE(h.registry.batch_ready());
  Batch b = h.registry.take_batch();
  EXPECT_EQ(b.aborted_by_cause,
            (std::map<std::string, int64_t>{{"agent_died_before_first_call", 1}}));
  EXPECT_EQ(b.summary()["aborted"], Json::parse(R"({"agent_died_before_first_call": 1})"));
}

}  // namespace
}  // namespace ajet::episodes
