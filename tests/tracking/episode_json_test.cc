// The episode JSON, from calls recorded with a real tokenizer, persisted in a real SQLite store and
// read back: the documented fields exist, text pieces spell the tokens, and `ajet episode show
// --json` prints the same document from the store file.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "common/encoding.h"
#include "common/json.h"
#include "store/store.h"
#include "support/run_command.h"
#include "support/scratch_dir.h"
#include "tracking/episode_json.h"
#include "tracking/merge.h"
#include "tracking_test_util.h"

namespace ajet::tracking {
namespace {

namespace fs = std::filesystem;
using testing::message;
using testing::serve;
using text::Role;

using TempDir = ajet::test_support::ScratchDir;

struct Recorded {
  std::vector<CallRecord> calls;
  store::EpisodeRow row;
};

// A two-turn conversation plus a retry of the second turn, recorded through the tracker.
Recorded record_episode(const ChatFormat& f) {
  EpisodeTracker tracker("ep-json", f);
  text::ChatRequest req;
  req.messages = {message(Role::kSystem, "You are a helpful assistant."),
                  message(Role::kUser, "Hello agent")};
  std::vector<TokenId> c1 = f.tok().encode("Hello world, the weather is sunny.");
  c1.push_back(f.end_of_turn);
  auto s1 = serve(tracker, "agent", 0, req, c1, FinishReason::kStop);
  req.messages.push_back(s1.answer);
  req.messages.push_back(message(Role::kUser, "And London?"));
  std::vector<TokenId> c2 = f.tok().encode("Sunny too.");
  c2.push_back(f.end_of_turn);
  serve(tracker, "agent", 1, req, c2, FinishReason::kStop);
  serve(tracker, "agent", 2, req, f.tok().encode("Thank you, the weather in London is"),
        FinishReason::kLength);
  Recorded r;
  r.calls = tracker.calls();
  for (CallRecord& c : r.calls) {
    text::OrderedJson body{{"messages", text::OrderedJson::array()}};
    for (const text::ChatMessage& m : c.request.messages)
      body["messages"].push_back(text::to_openai_json(m));
    c.request_json = body.dump();
  }
  r.row.uuid = "ep-json";
  r.row.client_uuid = "client-1";
  r.row.status = store::kEpisodeFinished;
  r.row.task_id = "task-7";
  r.row.reward = 0.25;
  return r;
}

void check_shape(const Json& j, const text::Tokenizer* tok) {
  ASSERT_TRUE(j["calls"].is_array());
  ASSERT_TRUE(j["samples"].is_array());
  EXPECT_EQ(j["episode_uuid"], "ep-json");
  EXPECT_EQ(j["task_id"], "task-7");
  EXPECT_EQ(j["reward"], 0.25);
  EXPECT_EQ(j["calls"].size(), 3u);
  for (const Json& c : j["calls"]) {
    for (const char* k : {"call_index", "agent_name", "finish_reason", "prompt_ids",
                          "completion_ids", "logprobs", "policy_versions", "message_spans",
                          "generation_prompt_begin", "request", "render_notes"}) {
      EXPECT_TRUE(c.contains(k)) << k;
    }
  }
  ASSERT_EQ(j["samples"].size(), 2u) << "the retry of the second turn is a branch";
  double weights = 0;
  for (const Json& s : j["samples"]) {
    for (const char* k : {"token_ids", "loss_mask", "logprobs", "policy_versions", "reward",
                          "weight", "source_calls", "calls", "agent_name", "trainable"}) {
      EXPECT_TRUE(s.contains(k)) << k;
    }
    const size_t n = s["token_ids"].size();
    EXPECT_EQ(s["loss_mask"].size(), n);
    EXPECT_EQ(s["logprobs"].size(), n);
    EXPECT_EQ(s["policy_versions"].size(), n);
    EXPECT_EQ(s["reward"], 0.25);
    weights += s["weight"].get<double>();
    if (tok != nullptr) {
      ASSERT_EQ(s["text_pieces"].size(), n);
      std::string joined;
      for (const Json& p : s["text_pieces"]) joined += p.get<std::string>();
      EXPECT_EQ(joined, tok->decode(s["token_ids"].get<std::vector<TokenId>>()));
    } else {
      EXPECT_FALSE(s.contains("text_pieces"));
    }
  }
  EXPECT_DOUBLE_EQ(weights, 1.0);
  const Json& d = j["diagnostics"];
  EXPECT_EQ(d["calls"], 3);
  EXPECT_EQ(d["samples"], 2);
  EXPECT_GT(d["compression_ratio"].get<double>(), 1.0);
  ASSERT_EQ(d["agents"].size(), 1u);
  ASSERT_EQ(d["agents"][0]["branches"].size(), 1u);
  EXPECT_EQ(d["agents"][0]["branches"][0]["kind"], "retry");
}

TEST(EpisodeJson, FromTheTrackerAndFromTheStoreHaveTheDocumentedShape) {
  auto tok = testing::trained_tokenizer();
  const ChatFormat f = ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
  Recorded r = record_episode(f);
  const EpisodeView view = EpisodeView::from_row(r.row);
  MergedEpisode live = merge_episode({"ep-json", "task-7", 0.25}, r.calls, {});
  const Json live_json = episode_json(view, r.calls, live, tok.get());
  check_shape(live_json, tok.get());
  EXPECT_EQ(live_json["calls"][1]["message_spans"][2]["spliced_from_call"], 0);
  EXPECT_EQ(live_json["calls"][1]["render_notes"][0]["kind"], "spliced");
  check_shape(episode_json(view, r.calls, live, nullptr), nullptr);

  TempDir dir;
  const fs::path db = dir.path() / "store.db";
  {
    store::Store st(db);
    st.upsert_episode(r.row).get();
    for (const CallRecord& c : r.calls) st.put_call(to_call_row(c)).get();
  }
  store::Store st(db);
  std::vector<CallRecord> stored = calls_from_rows(st.get_calls("ep-json"), &f);
  ASSERT_EQ(stored.size(), r.calls.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i].prompt_ids, r.calls[i].prompt_ids);
    EXPECT_EQ(stored[i].completion_ids, r.calls[i].completion_ids);
    EXPECT_EQ(stored[i].generation_prompt_begin, r.calls[i].generation_prompt_begin);
    EXPECT_EQ(stored[i].ended_with_end_token, r.calls[i].ended_with_end_token);
    EXPECT_EQ(stored[i].request.messages.size(), r.calls[i].request.messages.size());
  }
  MergedEpisode again = merge_episode({"ep-json", "task-7", 0.25}, stored, {});
  const Json from_store = episode_json(view, stored, again, tok.get());
  check_shape(from_store, tok.get());
  EXPECT_EQ(from_store["samples"], live_json["samples"]);
  EXPECT_EQ(from_store["diagnostics"]["agents"][0]["branches"][0]["position"],
            live_json["diagnostics"]["agents"][0]["branches"][0]["position"]);
}

// A request's n choices are stored with their bodies once (store::CallRow::bodies_from): reading
// them back gives every choice the request and its own choice's text, as when each row held a copy.
// The tracker keeps no bodies at all.
TEST(EpisodeJson, ChoicesStoredWithTheirBodiesOnceReadBackWhole) {
  store::CallRow first;
  first.episode_uuid = "ep-n";
  first.call_index = 4;
  first.request_json = R"({"messages": [{"role": "user", "content": "pick"}], "n": 2})";
  first.response_json =
      R"({"choices": [{"index": 0, "message": {"role": "assistant", "content": "one"}},
                                         {"index": 1, "message": {"role": "assistant", "content": "two"}}]})";
  first.prompt_ids = {1, 2};
  first.completion_ids = {7};
  first.logprobs = {-0.5f};
  first.policy_versions = {0};
  first.finish_reason = "stop";
  store::CallRow second = first;
  second.call_index = 5;
  second.request_json.clear();
  second.response_json.clear();
  second.bodies_from = 4;
  store::CallRow orphan =
      second;  // names a row that is not there: read without bodies, not an error
  orphan.call_index = 9;
  orphan.bodies_from = 8;
  const std::vector<store::CallRow> rows = {orphan, second, first};  // any order
  std::vector<CallRecord> calls = calls_from_rows(rows, nullptr);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].call_index, 4);
  EXPECT_EQ(calls[1].call_index, 5);
  ASSERT_EQ(calls[1].request.messages.size(), 1u);
  EXPECT_EQ(calls[1].request.messages[0].content, "pick");
  EXPECT_EQ(calls[0].completion_text, "one");
  EXPECT_EQ(calls[1].completion_text, "two");  // its own choice, not the first
  EXPECT_TRUE(calls[2].request.messages.empty());
  EXPECT_EQ(calls[2].completion_text, "");
  EXPECT_EQ(call_from_row(second, nullptr, &first).completion_text, "two");

  auto tok = testing::trained_tokenizer();
  const ChatFormat f = ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
  EpisodeTracker tracker("ep-n", f);
  CallRecord kept = calls[0];
  ASSERT_FALSE(kept.request_json.empty());
  tracker.record(kept);
  EXPECT_TRUE(tracker.calls()[0].request_json.empty());
  EXPECT_TRUE(tracker.calls()[0].response_json.empty());
  EXPECT_EQ(tracker.calls()[0].request.messages.size(), 1u);  // merging reads the parsed request
  EXPECT_GT(tracker.memory_bytes(), 0u);
}

using ajet::test_support::run_command;

TEST(EpisodeJson, AjetEpisodeShowPrintsTheEpisodeFromTheStore) {
  const fs::path ajet = fs::path(AJET_BINARY_DIR) / "bin" / "ajet";
  if (!fs::exists(ajet))
    GTEST_SKIP() << "SKIPPED: " << ajet << " is not built (build the `ajet` target)";
  auto tok = testing::trained_tokenizer();
  const ChatFormat f = ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
  Recorded r = record_episode(f);
  TempDir dir;
  const fs::path db = dir.path() / "store.db";
  const fs::path tok_dir = dir.path() / "tokenizer";
  {
    text::BpeTrainerOptions o;
    o.vocab_size = 700;
    text::write_trained_bpe(text::train_bpe(testing::small_corpus(), o), tok_dir);
    store::Store st(db);
    st.upsert_episode(r.row).get();
    for (const CallRecord& c : r.calls) st.put_call(to_call_row(c)).get();
  }
  const std::string base =
      "'" + ajet.string() + "' episode show --json --store '" + db.string() + "' ";
  auto ok =
      run_command(base + "ep-json --indent -1 --tokenizer '" + tok_dir.string() + "' 2>/dev/null");
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  const Json j = parse_json(ok.out, "ajet episode show output");
  check_shape(j, tok.get());
  auto plain = run_command(base + "ep-json --indent -1 2>/dev/null");
  ASSERT_EQ(plain.exit_code, 0);
  check_shape(parse_json(plain.out, "ajet episode show output"), nullptr);

  auto missing = run_command(base + "no-such-episode 2>&1");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("no-such-episode"), std::string::npos) << missing.out;
  auto no_store = run_command("'" + ajet.string() + "' episode show --store '" +
                              (dir.path() / "nope.db").string() + "' x 2>&1");
  EXPECT_EQ(no_store.exit_code, 1);
  EXPECT_NE(no_store.out.find("no store at"), std::string::npos) << no_store.out;
  EXPECT_FALSE(fs::exists(dir.path() / "nope.db")) << "showing must not create a store";
}

}  // namespace
}  // namespace ajet::tracking
