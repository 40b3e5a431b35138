// `ajet episode list` and the readable `ajet episode show`, run as the real binary on a real store
// holding a tool-calling episode recorded through the tracker: the table and its paging hint, the
// filters, --json, the text of each call (tool calls and tool results), every sample's tokens
// marked exactly as its loss mask says (checked against the --json document), colours on request,
// control characters escaped, and usage errors (exit 2, "did you mean").
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "common/encoding.h"
#include "common/json.h"
#include "store/store.h"
#include "text/messages.h"
#include "tracking/episode_tracker.h"
#include "tracking_test_util.h"

namespace ajet::tracking::cli_test {
namespace {

namespace fs = std::filesystem;
using testing::serve;

struct CliRun {
  int exit_code = -1;
  std::string out;
};

CliRun run_cli(const std::string& command) {
  CliRun r;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 65536> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

const char* kToolCall =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

// A store with three episodes: "ep-cli" (two calls: a tool call, then an answer after the tool's
// result; batch of step 5), "ep-eval" (an eval episode without calls) and "ep-old" (aborted).
class EpisodeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ajet_ = fs::path(AJET_BINARY_DIR) / "bin" / "ajet";
    if (!fs::exists(ajet_))
      GTEST_SKIP() << "SKIPPED: " << ajet_ << " is not built (build the `ajet` target)";
    dir_ = fs::temp_directory_path() / ("ajet_episode_cli_" + new_uuid_hex());
    fs::create_directories(dir_);
    db_ = dir_ / "store.db";
    tok_dir_ = dir_ / "tokenizer";
    text::BpeTrainerOptions o;
    o.vocab_size = 700;
    text::write_trained_bpe(text::train_bpe(testing::small_corpus(), o), tok_dir_);

    auto tok = testing::trained_tokenizer();
    const ChatFormat f = ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
    EpisodeTracker tracker("ep-cli", f);
    text::ChatRequest first = text::parse_chat_request(
        R"({"messages": [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": "Weather in Paris? \u001b[31mred"}]})",
        "first request");
    std::vector<TokenId> c1 = f.tok().encode(kToolCall);
    c1.push_back(f.end_of_turn);
    auto s1 = serve(tracker, "planner", 0, first, c1, FinishReason::kStop);
    text::ChatRequest second = first;
    second.messages.push_back(s1.answer);
    text::ChatMessage result;
    result.role = text::Role::kTool;
    result.content = "sunny, twenty degrees";
    result.tool_call_id = s1.answer.tool_calls.empty() ? "none" : s1.answer.tool_calls[0].id;
    second.messages.push_back(result);
    std::vector<TokenId> c2 = f.tok().encode("Thank you, the weather in Paris is sunny.");
    c2.push_back(f.end_of_turn);
    serve(tracker, "planner", 1, second, c2, FinishReason::kStop);

    store::Store st(db_);
    store::EpisodeRow row;
    row.uuid = "ep-cli";
    row.client_uuid = "client-1";
    row.status = store::kEpisodeFinished;
    row.task_id = "task-9";
    row.reward = 0.75;
    row.is_success = true;
    row.claimed_at = 1000;
    row.ended_at = 1012.5;
    st.upsert_episode(row);
    for (CallRecord c : tracker.calls()) {
      text::OrderedJson body{{"messages", text::OrderedJson::array()}};
      for (const text::ChatMessage& m : c.request.messages)
        body["messages"].push_back(text::to_openai_json(m));
      c.request_json = body.dump();
      st.put_call(to_call_row(c));
    }
    st.put_batch(store::BatchRow{1, 5, 1020.0, store::kBatchTrained, 1030.0, Json::object()},
                 {"ep-cli"});
    store::EpisodeRow eval = row;
    eval.uuid = "ep-eval";
    eval.episode_type = "eval";
    eval.claimed_at = 2000;
    eval.task_id = "task-3";
    st.upsert_episode(eval);
    store::EpisodeRow old = row;
    old.uuid = "ep-old";
    old.status = store::kEpisodeAborted;
    old.reward = std::nullopt;
    old.is_success = std::nullopt;
    old.claimed_at = 500;
    st.upsert_episode(old).get();
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string ajet(const std::string& args) const { return quoted(ajet_) + " episode " + args; }
  std::string store_flag() const { return " --store " + quoted(db_) + " "; }

  fs::path ajet_, dir_, db_, tok_dir_;
};

std::vector<std::string> table_uuids(const std::string& out) {
  std::vector<std::string> uuids;
  size_t at = out.find('\n');  // below the header
  while (at != std::string::npos && at + 1 < out.size()) {
    const size_t end = out.find('\n', at + 1);
    const std::string line = out.substr(at + 1, end - at - 1);
    if (line.rfind("ep-", 0) == 0) uuids.push_back(line.substr(0, line.find(' ')));
    at = end;
  }
  return uuids;
}

TEST_F(EpisodeCli, ListPrintsATableNewestFirstAndPagesWithTheCursorHint) {
  CliRun all = run_cli(ajet("list" + store_flag() + "2>&1"));
  ASSERT_EQ(all.exit_code, 0) << all.out;
  EXPECT_EQ(all.out.rfind("UUID", 0), 0u) << all.out;
  for (const char* title : {"STEP", "TYPE", "TASK", "STATUS", "REWARD", "CALLS", "TOKENS", "AGE"}) {
    EXPECT_NE(all.out.find(title), std::string::npos) << title;
  }
  EXPECT_EQ(table_uuids(all.out), (std::vector<std::string>{"ep-eval", "ep-cli", "ep-old"}))
      << all.out;
  EXPECT_NE(all.out.find("3 of 3 episodes"), std::string::npos) << all.out;
  EXPECT_EQ(all.out.find("next page"), std::string::npos);
  // ep-cli's row: step 5, train, its task, finished, reward, 2 calls.
  const size_t cli_row = all.out.find("ep-cli");
  const std::string line = all.out.substr(cli_row, all.out.find('\n', cli_row) - cli_row);
  for (const char* cell : {" 5 ", "train", "task-9", "finished", "0.75", " 2 "}) {
    EXPECT_NE(line.find(cell), std::string::npos) << cell << " in: " << line;
  }

  CliRun first = run_cli(ajet("list --limit 2" + store_flag() + "2>&1"));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_EQ(table_uuids(first.out), (std::vector<std::string>{"ep-eval", "ep-cli"}));
  const std::string hint = "next page: add --cursor ";
  const size_t at = first.out.find(hint);
  ASSERT_NE(at, std::string::npos) << first.out;
  const std::string cursor =
      first.out.substr(at + hint.size(), first.out.find('\n', at) - at - hint.size());
  CliRun second = run_cli(ajet("list --limit 2 --cursor " + cursor + store_flag() + "2>&1"));
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_EQ(table_uuids(second.out), (std::vector<std::string>{"ep-old"}));

  CliRun filtered =
      run_cli(ajet("list --status finished --type train --step 5 --success true --reward-min 0.5" +
                   store_flag() + "2>&1"));
  ASSERT_EQ(filtered.exit_code, 0) << filtered.out;
  EXPECT_EQ(table_uuids(filtered.out), (std::vector<std::string>{"ep-cli"}));
  CliRun agent = run_cli(ajet("list --agent planner" + store_flag() + "2>&1"));
  EXPECT_EQ(table_uuids(agent.out), (std::vector<std::string>{"ep-cli"})) << agent.out;

  CliRun json = run_cli(ajet("list --json --task task-3" + store_flag() + "2>/dev/null"));
  ASSERT_EQ(json.exit_code, 0);
  const Json page = parse_json(json.out, "ajet episode list --json");
  ASSERT_EQ(page["episodes"].size(), 1u);
  EXPECT_EQ(page["episodes"][0]["uuid"], "ep-eval");
  EXPECT_EQ(page["total"], 1);
  EXPECT_TRUE(page["next_cursor"].is_null());
}

TEST_F(EpisodeCli, ListUsageErrorsExitTwoAndNameTheFlag) {
  CliRun typo = run_cli(ajet("list --stauts finished" + store_flag() + "2>&1"));
  EXPECT_EQ(typo.exit_code, 2) << typo.out;
  EXPECT_NE(typo.out.find("did you mean --status"), std::string::npos) << typo.out;
  CliRun sub = run_cli(ajet("lsit" + store_flag() + "2>&1"));
  EXPECT_EQ(sub.exit_code, 2) << sub.out;
  EXPECT_NE(sub.out.find("did you mean list"), std::string::npos) << sub.out;
  CliRun none = run_cli(ajet("list 2>&1"));
  EXPECT_EQ(none.exit_code, 2) << none.out;
  EXPECT_NE(none.out.find("--store"), std::string::npos) << none.out;
  CliRun both = run_cli(ajet("list --url http://127.0.0.1:1" + store_flag() + "2>&1"));
  EXPECT_EQ(both.exit_code, 2) << both.out;
  for (const std::string bad :
       {"--limit 0", "--limit 501", "--status done", "--type test", "--success yes", "--step -2"}) {
    CliRun r = run_cli(ajet("list " + bad + store_flag() + "2>&1"));
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find(bad.substr(0, bad.find(' '))), std::string::npos) << bad << ": " << r.out;
  }
  CliRun cursor = run_cli(ajet("list --cursor 0000" + store_flag() + "2>&1"));
  EXPECT_EQ(cursor.exit_code, 2) << cursor.out;
  EXPECT_NE(cursor.out.find("cursor"), std::string::npos) << cursor.out;
  CliRun missing = run_cli(ajet("list --store " + quoted(dir_ / "nope.db") + " 2>&1"));
  EXPECT_EQ(missing.exit_code, 1) << missing.out;
  EXPECT_NE(missing.out.find("no store at"), std::string::npos) << missing.out;
  EXPECT_FALSE(fs::exists(dir_ / "nope.db"));
}

// The runs of equal loss mask in a sample, written the way the plain text marks them (the ESC the
// user message holds escaped as \x1b).
std::string marked(const Json& sample) {
  std::string out;
  int current = -1;
  for (size_t i = 0; i < sample["token_ids"].size(); ++i) {
    const int mask = sample["loss_mask"][i].get<int>();
    if (mask != current) {
      if (current >= 0) out += current == 1 ? "[/trained]" : "[/masked]";
      out += mask == 1 ? "[trained]" : "[masked]";
      current = mask;
    }
    for (char c : sample["text_pieces"][i].get<std::string>()) {
      out += c == '\x1b' ? std::string("\\x1b") : std::string(1, c);
    }
  }
  return out + (current == 1 ? "[/trained]" : "[/masked]");
}

TEST_F(EpisodeCli, ShowPrintsCallsAndMarksEveryTokenAsItsLossMaskSays) {
  const std::string tok = " --tokenizer " + quoted(tok_dir_);
  CliRun json = run_cli(ajet("show --json" + store_flag() + "ep-cli" + tok + " 2>/dev/null"));
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const Json doc = parse_json(json.out, "ajet episode show --json");
  ASSERT_EQ(doc["calls"].size(), 2u);
  ASSERT_GE(doc["samples"].size(), 1u);

  CliRun text =
      run_cli(ajet("show" + store_flag() + "ep-cli" + tok + " 2>/dev/null"));  // piped: plain
  ASSERT_EQ(text.exit_code, 0) << text.out;
  const std::string& out = text.out;
  EXPECT_EQ(out.rfind("episode ep-cli\n", 0), 0u) << out.substr(0, 400);
  for (const char* part :
       {"task task-9", "train", "finished", "reward 0.75", "success yes", "step 5",
        "client client-1", "ended 12.5 s later", "2 LLM calls", "-- call 0 . agent planner . stop",
        "system: You are a helpful assistant.", "-> tool call get_weather(", "\"city\"",
        "tool result", "sunny, twenty degrees", "(2 messages as in call 0)",
        "=> completion: Thank you, the weather in Paris is sunny.",
        "-- sample 0 . agent planner"}) {
    EXPECT_NE(out.find(part), std::string::npos) << "missing '" << part << "' in:\n" << out;
  }
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << "no escape sequence reaches a pipe";
  EXPECT_NE(out.find("Paris? \\x1b[31mred"), std::string::npos)
      << "the ESC the agent sent is shown escaped";
  for (const Json& sample : doc["samples"]) {
    EXPECT_NE(out.find(marked(sample)), std::string::npos)
        << "sample " << sample["index"] << " not marked as:\n"
        << marked(sample) << "\nin:\n"
        << out;
  }
  EXPECT_NE(out.find("[trained]Thank you, the weather in Paris is sunny."), std::string::npos)
      << out;

  CliRun never =
      run_cli(ajet("show --color never" + store_flag() + "ep-cli" + tok + " 2>/dev/null"));
  EXPECT_EQ(never.out, text.out);

  CliRun color =
      run_cli(ajet("show --color always" + store_flag() + "ep-cli" + tok + " 2>/dev/null"));
  ASSERT_EQ(color.exit_code, 0);
  EXPECT_EQ(color.out.find("[trained]"), std::string::npos);
  EXPECT_NE(color.out.find("\x1b[38;5;33m"), std::string::npos) << "trained tokens in blue";
  EXPECT_NE(color.out.find("\x1b[38;5;208m"), std::string::npos) << "masked tokens in orange";
  // The test tracker gives call 1's tokens logprob -1.5 (p = 0.22): dim; call 0's -0.5: not dim.
  EXPECT_NE(color.out.find("\x1b[2;38;5;33mTh"), std::string::npos) << color.out;

  CliRun ids =
      run_cli(ajet("show" + store_flag() + "ep-cli 2>/dev/null"));  // no tokenizer: token ids
  ASSERT_EQ(ids.exit_code, 0) << ids.out;
  EXPECT_NE(ids.out.find("token ids: no tokenizer"), std::string::npos) << ids.out;
  EXPECT_NE(ids.out.find("[trained]"), std::string::npos);
}

// `list` prints 12 characters of a uuid: `show` takes any start of a uuid that only one episode
// has.
TEST_F(EpisodeCli, ShowTakesAUniquePrefixOfTheUuid) {
  CliRun whole = run_cli(ajet("show --json" + store_flag() + "ep-cli 2>/dev/null"));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  CliRun prefix = run_cli(ajet("show --json" + store_flag() + "ep-c 2>/dev/null"));
  ASSERT_EQ(prefix.exit_code, 0) << prefix.out;
  EXPECT_EQ(prefix.out, whole.out);
  CliRun text = run_cli(ajet("show" + store_flag() + "ep-e 2>/dev/null"));
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_EQ(text.out.rfind("episode ep-eval\n", 0), 0u) << text.out;
  EXPECT_NE(text.out.find("task task-3"), std::string::npos)
      << "the summary is read by the whole uuid: " << text.out;
  CliRun ambiguous = run_cli(ajet("show" + store_flag() + "ep- 2>&1"));
  EXPECT_EQ(ambiguous.exit_code, 2) << ambiguous.out;
  EXPECT_NE(ambiguous.out.find("ep- is ambiguous: 3 episodes start with it"), std::string::npos)
      << ambiguous.out;
  CliRun none = run_cli(ajet("show" + store_flag() + "ep-x 2>&1"));
  EXPECT_EQ(none.exit_code, 1) << none.out;
  EXPECT_NE(none.out.find("no episode has the id ep-x"), std::string::npos) << none.out;
}

TEST_F(EpisodeCli, ShowErrors) {
  CliRun missing = run_cli(ajet("show" + store_flag() + "no-such-episode 2>&1"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("no-such-episode"), std::string::npos) << missing.out;
  CliRun typo = run_cli(ajet("show --jsno" + store_flag() + "ep-cli 2>&1"));
  EXPECT_EQ(typo.exit_code, 2) << typo.out;
  EXPECT_NE(typo.out.find("did you mean --json"), std::string::npos) << typo.out;
  CliRun none = run_cli(ajet("show ep-cli 2>&1"));
  EXPECT_EQ(none.exit_code, 2) << none.out;
  CliRun url_tok = run_cli(ajet("show --url http://127.0.0.1:1 --tokenizer x ep-cli 2>&1"));
  EXPECT_EQ(url_tok.exit_code, 2) << url_tok.out;
  EXPECT_NE(url_tok.out.find("--tokenizer"), std::string::npos) << url_tok.out;
  CliRun down =
      run_cli(ajet("show --url http://127.0.0.1:1 ep-cli 2>&1"));  // nothing listens on port 1
  EXPECT_EQ(down.exit_code, 1) << down.out;
}

}  // namespace
}  // namespace ajet::tracking::cli_test
