#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "common/encoding.h"
#include "common/error.h"
#include "store/blob.h"
#include "store/store.h"
#include "support/scratch_dir.h"

namespace ajet::store {
namespace {

namespace fs = std::filesystem;

using TempDir = ajet::test_support::ScratchDir;

EpisodeRow episode(const std::string& uuid, const std::string& status = kEpisodeClaimed) {
  EpisodeRow row;
  row.uuid = uuid;
  row.client_uuid = "client-a";
  row.status = status;
  row.claimed_at = 100.5;
  row.discard_episode_timeout = 60;
  row.optional_task_id = "t-opt";
  return row;
}

CallRow call(const std::string& uuid, int index) {
  CallRow c;
  c.episode_uuid = uuid;
  c.call_index = index;
  c.agent_name = "agent-" + std::to_string(index);
  c.request_json = R"({"messages":[{"role":"user","content":"hi"}]})";
  c.response_json = R"({"id":"x"})";
  c.prompt_ids = {1, 2, 3, 151643, -7 + index};
  c.message_spans = {{0, 2}, {2, 5}};
  c.completion_ids = {9, 8, index};
  c.logprobs = {-0.5f, -1.25f, -3.0e-8f};
  c.raw_logprobs = {-0.4f, -1.0f, -0.1f};
  c.policy_versions = {3, 3, 4};
  c.finish_reason = "stop";
  c.latency_ms = 12.5;
  c.started_at = 101;
  c.finished_at = 102;
  return c;
}

void expect_same_call(const CallRow& a, const CallRow& b) {
  EXPECT_EQ(a.episode_uuid, b.episode_uuid);
  EXPECT_EQ(a.call_index, b.call_index);
  EXPECT_EQ(a.agent_name, b.agent_name);
  EXPECT_EQ(a.request_json, b.request_json);
  EXPECT_EQ(a.response_json, b.response_json);
  EXPECT_EQ(a.prompt_ids, b.prompt_ids);
  EXPECT_EQ(a.message_spans, b.message_spans);
  EXPECT_EQ(a.completion_ids, b.completion_ids);
  EXPECT_EQ(a.logprobs, b.logprobs);
  EXPECT_EQ(a.raw_logprobs, b.raw_logprobs);
  EXPECT_EQ(a.policy_versions, b.policy_versions);
  EXPECT_EQ(a.finish_reason, b.finish_reason);
  EXPECT_DOUBLE_EQ(a.latency_ms, b.latency_ms);
}

template <class Fn>
Error error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an error";
  return Error(ErrorCode::kInternal, "none");
}

TEST(Blob, LittleEndianFixedLayout) {
  std::vector<int32_t> ids = {1, -2, 0x01020304};
  std::string bytes = encode_i32(ids);
  ASSERT_EQ(bytes.size(), 12u);
  EXPECT_EQ(bytes.substr(0, 4), std::string("\x01\x00\x00\x00", 4));
  EXPECT_EQ(bytes.substr(4, 4), std::string("\xfe\xff\xff\xff", 4));
  EXPECT_EQ(bytes.substr(8, 4), std::string("\x04\x03\x02\x01", 4));
  EXPECT_EQ(decode_i32(bytes, "ids"), ids);
  std::vector<float> lp = {1.0f, -0.0f, -2.5e-30f};
  EXPECT_EQ(encode_f32(lp).substr(0, 4), std::string("\x00\x00\x80\x3f", 4));  // 1.0f = 0x3f800000
  EXPECT_EQ(decode_f32(encode_f32(lp), "lp"), lp);
  Error e = error_of([] { decode_i32(std::string(7, 'x'), "call 3 prompt_ids"); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_NE(std::string(e.what()).find("call 3 prompt_ids"), std::string::npos);
}

TEST(Store, EpisodesCallsAndStateRoundTrip) {
  TempDir dir;
  {
    Store store(dir / "s.db");
    EpisodeRow row = episode("e1");
    row.metadata = Json::parse(R"({"task_id": "t1", "extra": [1, 2]})");
    store.upsert_episode(row);
    store.put_call(call("e1", 0));
    store.put_call(call("e1", 1));
    store.put_state("k", std::string("bin\0ary", 7)).get();
    auto got = store.get_episode("e1");
    ASSERT_TRUE(got);
    EXPECT_EQ(got->metadata, row.metadata);
    EXPECT_EQ(got->optional_task_id, "t-opt");
    EXPECT_FALSE(got->reward.has_value());
    EXPECT_EQ(store.get_state("k"), std::string("bin\0ary", 7));
    EXPECT_FALSE(store.get_state("missing").has_value());
  }
  Store store(dir / "s.db");  // reopen
  auto calls = store.get_calls("e1");
  ASSERT_EQ(calls.size(), 2u);
  expect_same_call(calls[0], call("e1", 0));
  expect_same_call(calls[1], call("e1", 1));
  EXPECT_EQ(store.count_episodes(kEpisodeClaimed), 1);
}

// `ajet episode list` prints 12 characters of each uuid; `show` and GET /episodes/{uuid} take them.
TEST(Store, AnEpisodeIsFoundByAUniquePrefixOfItsUuid) {
  TempDir dir;
  Store store(dir / "s.db");
  for (const char* uuid : {"0a1b2c3d4e5f60718293a4b5c6d7e8f9", "0a1b2c3d4e5f6071ffffffffffffffff",
                           "0a1b2c", "77ee0000000000000000000000000000"}) {
    store.upsert_episode(episode(uuid));
  }
  store.flush().get();
  EXPECT_EQ(store.resolve_episode_uuid("77ee0000000000000000000000000000"),
            "77ee0000000000000000000000000000");
  EXPECT_EQ(store.resolve_episode_uuid("77ee00000000"), "77ee0000000000000000000000000000");
  EXPECT_EQ(store.resolve_episode_uuid("7"), "77ee0000000000000000000000000000");
  EXPECT_EQ(store.resolve_episode_uuid("0a1b2c"),
            "0a1b2c");  // a whole uuid wins over longer ones it starts
  EXPECT_EQ(store.resolve_episode_uuid("0a1b2c3d4e5f6071f"), "0a1b2c3d4e5f6071ffffffffffffffff");
  try {
    store.resolve_episode_uuid("0a1b2c3d");
    ADD_FAILURE() << "an ambiguous prefix resolved";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("0a1b2c3d is ambiguous: 2 episodes start with it"),
              std::string::npos)
        << e.what();
  }
  try {
    store.resolve_episode_uuid("0a1b");
    ADD_FAILURE() << "an ambiguous prefix resolved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 episodes"), std::string::npos) << e.what();
  }
  for (const std::string missing : {"99", "0a1b2c3d4e5f60718293a4b5c6d7e8f9a", "0A1B"}) {
    try {
      store.resolve_episode_uuid(missing);
      ADD_FAILURE() << missing << " resolved";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotFound) << missing;
      EXPECT_NE(std::string(e.what()).find("no episode has the id " + missing), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(store.resolve_episode_uuid(""), Error);
}

TEST(Store, RetireDeletesCallsAndDoneRunsAfterCommitInOrder) {
  TempDir dir;
  Store store(dir / "s.db");
  std::vector<int> order;
  std::mutex mu;
  auto mark = [&](int i) {
    return [&, i](std::exception_ptr e) {
      EXPECT_FALSE(e);
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    };
  };
  store.upsert_episode(episode("e1"), mark(0));
  store.put_call(call("e1", 0), mark(1));
  store.retire_episode("e1", kEpisodeAborted, 200, mark(2));
  store.flush().get();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(store.get_calls("e1").empty());
  EXPECT_EQ(store.get_episode("e1")->status, kEpisodeAborted);
  EXPECT_EQ(store.get_episode("e1")->ended_at, 200);
}

TEST(Store, RecoverReturnsCurrentBatchClaimedEpisodesAndState) {
  TempDir dir;
  {
    Store store(dir / "s.db");
    EXPECT_FALSE(store.recover().has_data);
    auto finished = [&](const std::string& uuid, double reward, const std::string& type = "train") {
      EpisodeRow row = episode(uuid, kEpisodeFinished);
      row.episode_type = type;
      row.reward = reward;
      row.is_success = reward > 0;
      row.task_id = "task-" + uuid;
      row.ended_at = 150 + reward;
      store.upsert_episode(row);
    };
    finished("trained", 1);
    finished("taken", 2);
    finished("fresh", 3);
    finished("eval", 4, "eval");
    store.put_batch({1, 0, 10, kBatchTaken, std::nullopt, Json::object()}, {"trained"});
    store.update_batch(1, kBatchTrained, 20, Json{{"loss", 0.5}});
    store.put_batch({2, 1, 30, kBatchTaken, std::nullopt, Json::object()}, {"taken"});
    store.upsert_episode(episode("running"));
    store.put_call(call("running", 0));
    store.upsert_episode(episode("aborted"));
    store.retire_episode("aborted", kEpisodeAborted, 1);
    store.put_state(kStateGlobalStep, "7");
    store.put_state(kStateTrainConfigYaml, "ajet: {}");
    store.put_state(kStateEngineStatus, "ENGINE.ROLLING");
  }
  Store store(dir / "s.db");
  RecoveredState r = store.recover();
  EXPECT_TRUE(r.has_data);
  EXPECT_EQ(r.global_step, 7);
  EXPECT_EQ(r.train_config_yaml, "ajet: {}");
  EXPECT_EQ(r.engine_status, "ENGINE.ROLLING");
  EXPECT_EQ(r.next_batch_id, 3);
  ASSERT_EQ(r.pending_finished.size(),
            2u);  // the taken-but-untrained batch comes back, oldest first
  EXPECT_EQ(r.pending_finished[0].uuid, "taken");
  EXPECT_EQ(r.pending_finished[1].uuid, "fresh");
  EXPECT_EQ(r.pending_finished[1].reward, 3);
  EXPECT_EQ(r.pending_finished[1].is_success, true);
  ASSERT_EQ(r.claimed.size(), 1u);
  EXPECT_EQ(r.claimed[0].episode.uuid, "running");
  ASSERT_EQ(r.claimed[0].calls.size(), 1u);
  expect_same_call(r.claimed[0].calls[0], call("running", 0));
  EXPECT_EQ(store.get_batches().at(0).stats, Json({{"loss", 0.5}}));

  // On stop, pending episodes are abandoned: a later recovery does not resume them.
  store.abandon_pending(3, 7, 40).get();
  EXPECT_TRUE(store.recover().pending_finished.empty());
  EXPECT_EQ(store.get_batch_episodes(3).size(), 2u);
  EXPECT_EQ(store.get_batches().at(1).status, kBatchAbandoned);
}

TEST(Store, SecretIsCreatedOnceAndKept) {
  TempDir dir;
  std::string secret;
  {
    Store store(dir / "s.db");
    secret = store.load_or_create_secret();
    EXPECT_EQ(secret.size(), 64u);
    EXPECT_EQ(store.load_or_create_secret(), secret);
  }
  Store store(dir / "s.db");
  EXPECT_EQ(store.load_or_create_secret(), secret);
  EXPECT_EQ(store.recover().episode_key_secret, secret);
}

TEST(Store, MetricsAreKeptPerStep) {
  TempDir dir;
  Store store(dir / "s.db");
  store.put_metrics(1, {{"reward_mean", 0.25}, {"loss", 2.0}}, 5);
  store.put_metrics(2, {{"reward_mean", 0.5}}, 6).get();
  auto m = store.get_metrics("reward_mean");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].step, 2);
  EXPECT_DOUBLE_EQ(m[1].value, 0.5);
}

TEST(StoreErrors, GarbageFileIsNotAStore) {
  TempDir dir;
  std::ofstream(dir / "junk.db") << std::string(8192, 'z');
  Error e = error_of([&] { Store store(dir / "junk.db"); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_NE(std::string(e.what()).find("not an AgentJet store"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("junk.db"), std::string::npos) << e.what();
}

TEST(StoreErrors, ForeignSqliteDatabaseIsNotAStore) {
  TempDir dir;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "other.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  Error e = error_of([&] { Store store(dir / "other.db"); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_NE(std::string(e.what()).find("not an AgentJet store"), std::string::npos) << e.what();
}

TEST(StoreErrors, NewerSchemaVersionIsRefusedWithAClearMessage) {
  TempDir dir;
  { Store store(dir / "s.db"); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "s.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  Error e = error_of([&] { Store store(dir / "s.db"); });
  EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  std::string msg = e.what();
  EXPECT_NE(msg.find("newer AgentJet (schema version 99"), std::string::npos) << msg;
}

// The schema before version 2, as AgentJet wrote it: every choice's row held its own bodies.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE episodes (uuid TEXT PRIMARY KEY, client_uuid TEXT NOT NULL, episode_type TEXT NOT NULL,
  status TEXT NOT NULL, task_id TEXT NOT NULL, optional_task_id TEXT NOT NULL, reward REAL, is_success INTEGER,
  metadata TEXT NOT NULL, log_metrics TEXT NOT NULL, discard_episode_timeout REAL NOT NULL, claimed_at REAL NOT NULL,
  ended_at REAL, batch_id INTEGER);
CREATE TABLE calls (episode_uuid TEXT NOT NULL, call_index INTEGER NOT NULL, agent_name TEXT NOT NULL,
  request TEXT NOT NULL, response TEXT NOT NULL, prompt_ids BLOB NOT NULL, message_spans BLOB NOT NULL,
  completion_ids BLOB NOT NULL, logprobs BLOB NOT NULL, raw_logprobs BLOB NOT NULL, policy_versions BLOB NOT NULL,
  finish_reason TEXT NOT NULL, latency_ms REAL NOT NULL, started_at REAL NOT NULL, finished_at REAL NOT NULL,
  UNIQUE (episode_uuid, call_index));
CREATE TABLE batches (id INTEGER PRIMARY KEY, global_step INTEGER NOT NULL, created_at REAL NOT NULL,
  status TEXT NOT NULL, finished_at REAL, stats TEXT NOT NULL);
CREATE TABLE metrics (step INTEGER NOT NULL, name TEXT NOT NULL, value REAL NOT NULL, created_at REAL NOT NULL);
CREATE TABLE state (key TEXT PRIMARY KEY, value BLOB NOT NULL);
INSERT INTO calls VALUES ('e1', 0, 'agent', '{"messages":[{"role":"user","content":"hi"}]}', '{"id":"x"}',
  X'01000000', X'0000000001000000', X'09000000', X'0000803F', X'', X'03000000', 'stop', 1.5, 10, 11);
PRAGMA application_id=1095386452;
PRAGMA user_version=1;
)sql";

// A request's n choices keep its bodies once: the first choice's row holds them, the others name
// it. A store of schema version 1 (each row its own bodies) is still read, and gains the column.
TEST(Store, ChoicesNameTheRowHoldingTheirBodiesAndVersionOneStoresAreRead) {
  TempDir dir;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "s.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, kSchemaV1, nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  {
    Store store(dir / "s.db");
    std::vector<CallRow> old = store.get_calls("e1");
    ASSERT_EQ(old.size(), 1u);
    EXPECT_EQ(old[0].request_json, R"({"messages":[{"role":"user","content":"hi"}]})");
    EXPECT_EQ(old[0].completion_ids, std::vector<int32_t>{9});
    EXPECT_FALSE(old[0].bodies_from.has_value());
    EXPECT_EQ(old[0].adapter, "");  // before schema 3: the base model's
    CallRow second = call("e1", 1);
    second.adapter = "solver";
    second.request_json.clear();
    second.response_json.clear();
    second.bodies_from = 0;
    store.put_call(second).get();
  }
  Store store(dir / "s.db");
  std::vector<CallRow> calls = store.get_calls("e1");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_FALSE(calls[0].bodies_from.has_value());
  EXPECT_EQ(calls[1].bodies_from, 0);
  EXPECT_EQ(calls[1].adapter, "solver");
  EXPECT_EQ(calls[1].request_json, "");
  // What a row keeps: bodies, and 4 bytes per token-array value (spans: two each).
  EXPECT_EQ(calls[1].stored_bytes(), 4 * (5 + 2 * 2 + 3 + 3 + 3 + 3));
  EXPECT_EQ(calls[0].stored_bytes(),
            int64_t(calls[0].request_json.size() + calls[0].response_json.size()) +
                4 * (1 + 2 + 1 + 1 + 1));
}

TEST(StoreErrors, TwoOpenersOfOneStoreAreRefused) {
  TempDir dir;
  Store first(dir / "s.db");
  Error e = error_of([&] { Store second(dir / "s.db"); });
  EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(std::string(e.what()).find("in use by another process"), std::string::npos);
}

TEST(Store, QueuedWritesAreCommittedOnClose) {
  TempDir dir;
  auto store = std::make_unique<Store>(dir / "s.db");
  auto pending = store->put_state("a", "1");
  store.reset();  // the destructor commits what was queued
  Store reopened(dir / "s.db");
  EXPECT_EQ(reopened.get_state("a"), "1");
  EXPECT_NO_THROW(pending.get());
}

}  // namespace
}  // namespace ajet::store
