// Episode groups across servers (docs/protocol.md): prepare, commit, the coordinator's resolution,
// the janitor's settling, weight changes between claim and prepare, and a prepared episode across a
// restart of the front. The two-server protocol over HTTP is tested in tests/client_e2e.
#include <filesystem>
#include <set>

#include "common/encoding.h"
#include "registry_test_util.h"

namespace ajet::episodes {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::RegistryHarness;
using testing::small_options;

EpisodeGroup coordinator_group(const std::string& id, double timeout = 30) {
  EpisodeGroup g;
  g.group_id = id;
  g.prepare_timeout = timeout;
  return g;
}

EpisodeGroup participant_group(const std::string& id, const std::string& coordinator_episode,
                               double timeout = 30) {
  EpisodeGroup g = coordinator_group(id, timeout);
  g.coordinator_url = "http://127.0.0.1:1";
  g.coordinator_episode_uuid = coordinator_episode;
  g.coordinator_episode_key = "sk-ajet-key-of-" + coordinator_episode;
  return g;
}

struct Prepared {
  std::optional<CommandError> error;
  PrepareResponse answer;
};

Prepared prepare(Registry& r, const std::string& client, const std::string& uuid,
                 const EpisodeGroup& group, double reward = 1, const std::string& task = "t") {
  PrepareRequest req{RegistryHarness::end_request(client, uuid, task, reward), group};
  Prepared out;
  bool called = false;
  r.prepare_end_episode(req, [&](std::optional<CommandError> e, PrepareResponse a) {
    called = true;
    out = Prepared{e, a};
  });
  EXPECT_TRUE(called);
  return out;
}

std::optional<CommandError> commit(Registry& r, const std::string& client,
                                   const std::string& uuid) {
  std::optional<CommandError> out;
  bool called = false;
  r.commit_episode(EpisodeRef{client, uuid}, [&](std::optional<CommandError> e) {
    called = true;
    out = e;
  });
  EXPECT_TRUE(called);
  return out;
}

int64_t completed(const Registry& r) { return r.pool_info()["completed_episodes"].get<int64_t>(); }

TEST(EpisodeGroups, APreparedEpisodeCountsOnlyOnceCommitted) {
  RegistryHarness h(small_options(Backbone::kTorch, 2, 2));
  h.start();
  std::string a = h.claim("c1");
  Prepared p = prepare(h.registry, "c1", a, coordinator_group("g1"));
  ASSERT_FALSE(p.error) << p.error->message;
  EXPECT_EQ(p.answer.global_step_at_claim, 0);
  EXPECT_FALSE(p.answer.weights_changed());
  EXPECT_EQ(completed(h.registry), 0);
  Json info = h.registry.pool_info();
  EXPECT_EQ(info["prepared_episodes"], 1);
  EXPECT_EQ(info["running_episode_details"][a]["episode_status"], "prepared");
  // No more calls, no plain end, no continuing; a repeat of the same prepare answers the same.
  EXPECT_THROW(h.registry.begin_llm_call(a), Error);
  EXPECT_TRUE(contains(h.end_error("c1", a).message, "is prepared in episode group 'g1'"));
  EXPECT_FALSE(h.can_continue("c1", a));
  EXPECT_FALSE(prepare(h.registry, "c1", a, coordinator_group("g1")).error);
  Prepared other = prepare(h.registry, "c1", a, coordinator_group("g2"));
  ASSERT_TRUE(other.error);
  EXPECT_TRUE(contains(other.error->message, "already prepared in episode group 'g1', not 'g2'"));
  // Another client cannot commit it; its client can, once; a repeat is a success again.
  ASSERT_TRUE(commit(h.registry, "c2", a));
  EXPECT_EQ(commit(h.registry, "c2", a)->http_status(), 404);
  EXPECT_FALSE(commit(h.registry, "c1", a));
  EXPECT_EQ(completed(h.registry), 1);
  EXPECT_FALSE(commit(h.registry, "c1", a));
  EXPECT_EQ(completed(h.registry), 1);
  EXPECT_EQ(h.registry.pool_info()["prepared_episodes"], 0);
}

TEST(EpisodeGroups, CommitNeedsAPrepareAndAnAbortedPrepareCannotCommit) {
  RegistryHarness h(small_options(Backbone::kTorch, 2, 2));
  h.start();
  std::string a = h.claim("c1"), b = h.claim("c1");
  std::optional<CommandError> early = commit(h.registry, "c1", a);
  ASSERT_TRUE(early);
  EXPECT_TRUE(contains(early->message, "is not prepared; call prepare_end_episode first"));
  EXPECT_TRUE(contains(commit(h.registry, "c1", "nope")->message, "not found"));
  ASSERT_FALSE(prepare(h.registry, "c1", b, coordinator_group("g")).error);
  h.abort("c1", b);
  std::optional<CommandError> late = commit(h.registry, "c1", b);
  ASSERT_TRUE(late);
  EXPECT_TRUE(contains(late->message, "not in claimed status: it was aborted by its client"))
      << late->message;
  EXPECT_EQ(completed(h.registry), 0);
  // A finished episode cannot be prepared.
  h.end("c1", a, "t", 1);
  Prepared again = prepare(h.registry, "c1", a, coordinator_group("g"));
  ASSERT_TRUE(again.error);
  EXPECT_TRUE(contains(again.error->message, "has already ended"));
}

TEST(EpisodeGroups, ACoordinatorPrepareThatTimesOutIsAborted) {
  RegistryHarness h(small_options(Backbone::kTorch, 2, 2));
  h.start();
  std::string a = h.claim("c1");
  ASSERT_FALSE(prepare(h.registry, "c1", a, coordinator_group("g", 10)).error);
  h.now += 9;
  EXPECT_TRUE(h.registry.sweep().group_aborted.empty());
  h.now += 2;
  SweepResult swept = h.registry.sweep();
  ASSERT_EQ(swept.group_aborted, std::vector<std::string>{a});
  EXPECT_TRUE(swept.to_resolve.empty());
  std::optional<CommandError> late = commit(h.registry, "c1", a);
  ASSERT_TRUE(late);
  EXPECT_TRUE(contains(late->message, "prepare_timeout")) << late->message;
  EXPECT_EQ(h.registry.resolve_group(ResolveRequest{"g", a}), "aborted");
  EXPECT_EQ(completed(h.registry), 0);
}

TEST(EpisodeGroups, AParticipantAsksItsCoordinatorAndFollowsTheDecision) {
  RegistryHarness h(small_options(Backbone::kTorch, 2, 2));
  h.start();
  std::string a = h.claim("c1"), b = h.claim("c1"), c = h.claim("c1");
  for (const auto& uuid : {a, b, c}) {
    ASSERT_FALSE(
        prepare(h.registry, "c1", uuid, participant_group("g-" + uuid, "coord-" + uuid, 5)).error);
  }
  h.now += 6;
  SweepResult swept = h.registry.sweep();
  ASSERT_EQ(swept.to_resolve.size(), 3u);
  EXPECT_EQ(swept.to_resolve[0].group.coordinator_url, "http://127.0.0.1:1");
  EXPECT_TRUE(h.registry.sweep().to_resolve.empty());  // questions in flight are not asked twice
  h.registry.settle_prepared(a, "committed");
  h.registry.settle_prepared(b, "aborted");
  h.registry.settle_prepared(c, "unreachable: connection refused");
  EXPECT_EQ(completed(h.registry), 1);
  EXPECT_FALSE(commit(h.registry, "c1", a));  // the client's own commit afterwards: success
  EXPECT_TRUE(commit(h.registry, "c1", b).has_value());
  Json info = h.registry.pool_info();
  EXPECT_EQ(info["prepared_episodes"], 1);             // c waits for an answer
  EXPECT_TRUE(h.registry.sweep().to_resolve.empty());  // asked again only after the backoff
  h.now += RegistryOptions{}.resolve_backoff_min;
  SweepResult again = h.registry.sweep();
  ASSERT_EQ(again.to_resolve.size(), 1u);
  EXPECT_EQ(again.to_resolve[0].episode_uuid, c);
  EXPECT_EQ(again.to_resolve[0].group.coordinator_episode_uuid, "coord-" + c);
}

TEST(EpisodeGroups, TheCoordinatorAbortsWhatIsNotCommittedWhenAParticipantAsks) {
  RegistryHarness h(small_options(Backbone::kTorch, 4, 1));
  h.start();
  std::string prepared = h.claim("c1"), claimed = h.claim("c1"), done = h.claim("c1"),
              other = h.claim("c1");
  ASSERT_FALSE(prepare(h.registry, "c1", prepared, coordinator_group("g1")).error);
  ASSERT_FALSE(prepare(h.registry, "c1", other, coordinator_group("g-other")).error);
  ASSERT_FALSE(prepare(h.registry, "c1", done, coordinator_group("g3")).error);
  ASSERT_FALSE(commit(h.registry, "c1", done));

  EXPECT_EQ(h.registry.resolve_group(ResolveRequest{"g1", prepared}), "aborted");
  EXPECT_EQ(h.registry.resolve_group(ResolveRequest{"g2", claimed}), "aborted");
  EXPECT_EQ(h.registry.resolve_group(ResolveRequest{"g3", done}), "committed");
  EXPECT_EQ(h.registry.resolve_group(ResolveRequest{"g-wrong", done}),
            "aborted");  // not this group's commit
  EXPECT_EQ(h.registry.resolve_group(ResolveRequest{"g4", "never-seen"}), "aborted");
  EXPECT_EQ(h.registry.resolve_group(ResolveRequest{"g1", other}),
            "aborted");  // another group's: untouched
  // The late client finds its commits refused, so it aborts the rest of its group.
  EXPECT_TRUE(contains(commit(h.registry, "c1", prepared)->message, "group 'g1' was aborted"));
  EXPECT_THROW(h.registry.begin_llm_call(claimed), Error);
  EXPECT_FALSE(commit(h.registry, "c1", other));
  EXPECT_EQ(completed(h.registry), 2);  // done and other
}

EpisodeGroup local_participant_group(const std::string& id, const std::string& coordinator_episode,
                                     double timeout = 30) {
  EpisodeGroup g = coordinator_group(id, timeout);
  g.coordinator_episode_uuid = coordinator_episode;  // no URL: the coordinator is on this front
  return g;
}

// Two episodes of one group on the same front (two adapters of one engine): the participant names
// only the coordinator's episode, and the front settles it from its own registry.
TEST(EpisodeGroups, AParticipantOnTheCoordinatorsFrontIsSettledWithoutDialingAnyone) {
  RegistryHarness h(small_options(Backbone::kTorch, 8, 2));
  h.start();
  std::string a = h.claim("c1"), b = h.claim("c1"), c = h.claim("c1"), d = h.claim("c1");
  std::string other = h.claim("c2");
  EXPECT_TRUE(local_participant_group("g", a).is_local_participant());
  EXPECT_FALSE(local_participant_group("g", a).is_coordinator());
  // The coordinator must be another running episode of the same client (or one whose key the
  // front verified: then another client's may coordinate).
  for (const std::string& bad : {other, b, std::string("nope")}) {
    Prepared refused = prepare(h.registry, "c1", b, local_participant_group("g", bad));
    ASSERT_TRUE(refused.error) << bad;
    EXPECT_TRUE(contains(refused.error->message, "is not another running episode of this client"))
        << refused.error->message;
  }
  {
    std::string e = h.claim("c3");
    PrepareRequest keyed{RegistryHarness::end_request("c3", e, "t", 1),
                         local_participant_group("g0", other, 10)};
    keyed.coordinator_key_verified = true;
    std::optional<CommandError> error;
    h.registry.prepare_end_episode(
        keyed, [&](std::optional<CommandError> x, PrepareResponse) { error = x; });
    EXPECT_FALSE(error) << error->message;
    h.abort("c3", e);
  }
  // Group g1 (a coordinates b): the client commits a and vanishes before committing b.
  ASSERT_FALSE(prepare(h.registry, "c1", a, coordinator_group("g1", 10)).error);
  ASSERT_FALSE(prepare(h.registry, "c1", b, local_participant_group("g1", a, 10)).error);
  ASSERT_FALSE(commit(h.registry, "c1", a));
  // Group g2 (c coordinates d): the client vanishes after both prepares.
  ASSERT_FALSE(prepare(h.registry, "c1", c, coordinator_group("g2", 10)).error);
  ASSERT_FALSE(prepare(h.registry, "c1", d, local_participant_group("g2", c, 10)).error);
  h.now += 11;
  SweepResult swept = h.registry.sweep();
  EXPECT_TRUE(swept.to_resolve.empty());  // nothing to ask another front
  const Json info = h.registry.pool_info();
  EXPECT_EQ(info["prepared_episodes"], 0);
  EXPECT_EQ(completed(h.registry), 2);  // a and b: all of g1, none of g2
  EXPECT_EQ(h.registry.resolve_group(ResolveRequest{"g1", a}), "committed");
  EXPECT_EQ(h.registry.resolve_group(ResolveRequest{"g2", c}), "aborted");
  std::optional<CommandError> late = commit(h.registry, "c1", d);
  ASSERT_TRUE(late);
  EXPECT_EQ(info["running_episode_details"][other]["episode_status"], "claimed");
}

TEST(EpisodeGroups, APrepareReportsWeightsThatChangedSinceTheClaim) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  h.start();
  std::string a = h.claim("c1"), b = h.claim("c2");
  h.end("c2", b, "t", 1);  // one task, one repeat: a full batch, trained into step 1
  h.now += 1;              // `a` is idle past the drain's grace: it carries over the boundary
  h.registry.sweep();
  ASSERT_TRUE(h.registry.batch_ready());
  Batch batch = h.registry.take_batch();
  h.registry.finish_batch(batch.batch_id, Json::object());
  ASSERT_EQ(h.registry.global_step(), 1);
  Prepared p = prepare(h.registry, "c1", a, coordinator_group("g"));
  ASSERT_FALSE(p.error);
  EXPECT_EQ(p.answer.global_step_at_claim, 0);
  EXPECT_EQ(p.answer.global_step, 1);
  EXPECT_TRUE(p.answer.weights_changed());
  EXPECT_EQ(p.answer.to_json()["weights_changed"], true);
  ClaimResponse fresh = h.try_claim("c1");
  EXPECT_EQ(fresh.global_step, 1);
  EXPECT_EQ(fresh.to_json()["global_step"], 1);
}

TEST(EpisodeGroups, BodiesAreCheckedFieldByField) {
  Json end{{"client_uuid", "c"},
           {"episode_uuid", "e"},
           {"task_id", "t"},
           {"workflow_output", {{"reward", 1}}}};
  auto error_of = [](const Json& body) -> std::string {
    try {
      PrepareRequest::from_json(body);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_TRUE(contains(error_of(end), "missing required field 'group'"));
  Json bad = end;
  bad["group"] = {{"group_id", ""}};
  EXPECT_TRUE(contains(error_of(bad), "'group_id' must not be empty"));
  bad["group"] = {{"group_id", std::string(300, 'g')}};
  EXPECT_TRUE(contains(error_of(bad), "'group_id' is 300 bytes long; at most 256 are accepted"));
  bad["group"] = {{"group_id", "g"}, {"coordinator_url", "ftp://x"}};
  EXPECT_TRUE(contains(error_of(bad), "'coordinator_url' must be http://host:port"));
  bad["group"] = {{"group_id", "g"}, {"coordinator_url", "http://h:1"}};
  EXPECT_TRUE(contains(error_of(bad), "'coordinator_episode_uuid' is required"));
  bad["group"] = {
      {"group_id", "g"}, {"coordinator_url", "http://h:1"}, {"coordinator_episode_uuid", "x"}};
  EXPECT_TRUE(contains(error_of(bad), "'coordinator_episode_key' is required"));
  bad["group"] = {{"group_id", "g"}, {"prepare_timeout", -1}};
  EXPECT_TRUE(contains(error_of(bad), "'prepare_timeout' must be a number of seconds"));
  bad["group"] = {{"group_id", "g"}};
  bad.erase("task_id");
  EXPECT_TRUE(contains(error_of(bad), "prepare_end_episode body: task_id is required"));
  Json good = end;
  good["group"] = {{"group_id", "g"},
                   {"coordinator_url", "http://h:1"},
                   {"coordinator_episode_uuid", "x"},
                   {"coordinator_episode_key", "sk-ajet-k"}};
  PrepareRequest req = PrepareRequest::from_json(good);
  EXPECT_FALSE(req.group.is_coordinator());
  EXPECT_EQ(req.group.prepare_timeout, 60.0);
  EXPECT_THROW(EpisodeRef::from_json(Json{{"episode_uuid", "e"}}, "commit_episode", true), Error);
}

TEST(EpisodeGroups, APreparedEpisodeSurvivesARestartOfTheFront) {
  fs::path dir = fs::temp_directory_path() / ("ajet_group_store_" + new_uuid_hex());
  fs::create_directories(dir);
  std::string a;
  {
    store::Store store(dir / "front.db");
    RegistryHarness h(small_options(Backbone::kTorch, 1, 1), &store);
    h.start();
    a = h.claim("c1");
    std::promise<void> stored;
    PrepareRequest req{RegistryHarness::end_request("c1", a, "t", 0.5),
                       participant_group("g", "coord", 30)};
    h.registry.prepare_end_episode(req, [&](std::optional<CommandError> e, PrepareResponse) {
      EXPECT_FALSE(e);
      stored.set_value();
    });
    stored.get_future().get();
    store.flush().get();
  }
  {
    store::Store store(dir / "front.db");
    store::RecoveredState recovered = store.recover();
    RegistryHarness h(small_options(Backbone::kTorch, 1, 1), &store);
    h.registry.restore(recovered);
    h.start();
    EXPECT_EQ(h.registry.pool_info()["prepared_episodes"], 1);
    h.now += 31;
    SweepResult swept = h.registry.sweep();
    ASSERT_EQ(swept.to_resolve.size(), 1u);  // its group and timeout came back from the store
    EXPECT_EQ(swept.to_resolve[0].group.coordinator_episode_uuid, "coord");
    h.registry.settle_prepared(a, "committed");
    store.flush().get();
    ASSERT_TRUE(h.registry.batch_ready());
    Batch batch = h.registry.take_batch();
    ASSERT_EQ(batch.episodes.size(), 1u);
    EXPECT_EQ(batch.episodes[0].reward, 0.5);
    std::optional<store::EpisodeRow> row = store.get_episode(a);
    ASSERT_TRUE(row);
    EXPECT_EQ(row->status, store::kEpisodeFinished);
    EXPECT_EQ(row->metadata["ajet_group"]["group_id"], "g");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ajet::episodes
