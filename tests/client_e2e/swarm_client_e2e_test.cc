// The C++ client library (src/client) against the real ajet-swarm: ajet-echo-engine (whose answer
// is the last user message) for exact contents, the real ajet-engine for one full pass. Every wait
// polls an observable status with a generous deadline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "client/openai_chat.h"
#include "client/swarm_client.h"
#include "client_e2e/client_e2e_util.h"

namespace ajet::clients_test {
namespace {

using client::ChatClient;
using client::ClaimOptions;
using client::EndResult;
using client::SwarmClient;
using client::SwarmClientOptions;
using client::SwarmError;
using client::SwarmErrorKind;
using client::WorkflowOutput;
using ::testing::HasSubstr;

const char* kToolCall =
    "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
    "\"6*7\"}}\n</tool_call>";

SwarmClientOptions fast(const std::string& admin_token = "") {
  SwarmClientOptions o;
  o.admin_token = admin_token;
  o.retry.status_poll = 0.05;
  o.retry.engine_busy = 0.05;
  o.retry.empty_pool = 0.05;
  o.retry.throttle = 0.05;
  o.retry.agree_sync_weight = 0.05;
  o.retry.cannot_connect_retry = 0.05;
  o.retry.jitter = 0;
  return o;
}

Json calculator_tools() {
  return Json::array({client::function_tool("calculator", "Evaluates arithmetic",
                                            {{"type", "object"},
                                             {"properties", {{"expression", {{"type", "string"}}}}},
                                             {"required", {"expression"}}})});
}

WorkflowOutput reward(double r) {
  WorkflowOutput o;
  o.reward = r;
  return o;
}

// config_yaml() with one `key: value` line replaced (appending would duplicate a YAML mapping).
std::string edited(std::string yaml, const std::string& from, const std::string& to) {
  size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) yaml.replace(at, from.size(), to);
  return yaml;
}

// The fixture config for the echo engine: it takes any length, and the 400-id fixture tokenizer
// makes tool prompts and tool-call answers long.
std::string echo_yaml(const fs::path& model, const std::string& extra = "") {
  return edited(edited(config_yaml(model, extra), "max_model_len: 512", "max_model_len: 4096"),
                "max_response_length_in_one_turn: 48", "max_response_length_in_one_turn: 256");
}

int64_t engine_pid(SwarmClient& c) { return pid_in(c.get_engine_status().detail); }

// An unbooted server with the echo engine.
class ClientE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = fixture(false).tokenizer;
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), "", {}});
    // Dial "localhost": the server's base_url names 127.0.0.1; the client must rewrite it.
    url_ = "http://localhost:" + std::to_string(swarm_->port());
  }
  // The fixture config; the echo engine takes any length (the 400-id tokenizer makes tool prompts
  // long).
  std::string yaml() const { return echo_yaml(model_); }
  ScratchDir dir_;
  fs::path model_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::string url_;
};

TEST_F(ClientE2eTest, AutoStartClaimChatWithToolsStreamEnd) {
  SwarmClient c(url_, fast());
  EXPECT_EQ(c.get_engine_status().status, client::kOffline);
  EXPECT_EQ(c.auto_sync_train_config_and_start_engine(yaml(), false, 120.0), client::kOffline);
  const int64_t pid = engine_pid(c);
  EXPECT_GT(pid, 0);
  EXPECT_EQ(c.auto_sync_train_config_and_start_engine(yaml(), false, 120.0), client::kRolling);
  EXPECT_EQ(engine_pid(c), pid);  // idempotent: the running engine was left alone

  client::Episode ep = c.begin_episode();
  EXPECT_THAT(ep.base_url, ::testing::StartsWith(url_ + "/v1"));
  EXPECT_THAT(ep.api_key, ::testing::StartsWith("sk-ajet-"));
  EXPECT_TRUE(c.can_continue_episode(ep.episode_uuid));

  ChatClient chat(ep.base_url, ep.api_key);
  EXPECT_EQ(chat.chat(Json::array({client::user_message("plain words")})).content.value_or(""),
            "plain words");
  client::ChatMessage call =
      chat.chat(Json::array({client::user_message(kToolCall)}), calculator_tools());
  ASSERT_EQ(call.tool_calls.size(), 1u);
  EXPECT_EQ(call.tool_calls[0].name, "calculator");
  EXPECT_EQ(Json::parse(call.tool_calls[0].arguments), (Json{{"expression", "6*7"}}));
  EXPECT_EQ(call.finish_reason, "tool_calls");

  size_t chunks = 0;
  client::ChatMessage streamed =
      chat.stream(Json::array({client::user_message(kToolCall)}), calculator_tools(),
                  Json::object(), [&](const Json&) { return ++chunks > 0; });
  EXPECT_GT(chunks, 2u);
  ASSERT_EQ(streamed.tool_calls.size(), 1u);
  EXPECT_EQ(streamed.tool_calls[0].arguments, call.tool_calls[0].arguments);
  // The tool result turn: history with the assistant's tool call and the tool message.
  Json history = Json::array({client::user_message(kToolCall), call.to_json(),
                              client::tool_message(call.tool_calls[0].id, "42"),
                              client::user_message("it is 42")});
  EXPECT_EQ(chat.chat(history, calculator_tools()).content.value_or(""), "it is 42");
  // Stopping a stream early leaves the client usable.
  std::string first;
  chat.stream(Json::array({client::user_message("a b c d e f")}), nullptr, Json::object(),
              [&](const Json& chunk) {
                first = chunk.dump();
                return false;
              });
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(chat.chat(Json::array({client::user_message("again")})).content.value_or(""), "again");

  WorkflowOutput out = reward(1.0);
  out.is_success = true;
  EXPECT_EQ(c.end_episode("t1", ep.episode_uuid, out), EndResult::kEnded);
  EXPECT_FALSE(c.can_continue_episode(ep.episode_uuid));
  Json pool = c.get_rollout_stat();
  EXPECT_EQ(pool["completed_episodes"], 1);
  EXPECT_EQ(pool["completed_tasks_details"]["t1"], Json::array({ep.episode_uuid}));
  EXPECT_EQ(pool["completed_tasks_client_uuids"]["t1"], Json::array({c.client_uuid()}));
  EXPECT_FALSE(c.get_verbose_logs().empty());
}

TEST_F(ClientE2eTest, ErrorsCarryTheServersStatusAndReason) {
  SwarmClient c(url_, fast());
  try {
    c.sync_train_config(edited(yaml(), "num_repeat: 2", "num_repeat: -1"));
    ADD_FAILURE() << "a bad config was accepted";
  } catch (const SwarmError& e) {
    EXPECT_EQ(e.kind(), SwarmErrorKind::kCommand);
    EXPECT_EQ(e.http_status(), 400);
  }
  c.auto_sync_train_config_and_start_engine(yaml(), false, 120.0);
  // Episode commands carry the key of this client's claim: for an episode it never claimed it has
  // none.
  try {
    c.end_episode("t", "no-such-episode", reward(1));
    ADD_FAILURE() << "ending an unknown episode succeeded";
  } catch (const SwarmError& e) {
    EXPECT_EQ(e.http_status(), 401);
    EXPECT_THAT(e.what(), HasSubstr("no-such-episode"));
    EXPECT_THAT(e.what(), HasSubstr("Authorization: Bearer"));
  }
  SwarmClient other(url_, fast());
  client::Episode theirs = other.begin_episode();
  try {
    c.end_episode("t", theirs.episode_uuid, reward(1));
    ADD_FAILURE() << "ending another client's episode succeeded";
  } catch (const SwarmError& e) {
    EXPECT_EQ(e.http_status(), 401);
    EXPECT_EQ(e.code(), ErrorCode::kUnauthenticated);
  }
  EXPECT_TRUE(other.abort_episode(theirs.episode_uuid));
  EXPECT_FALSE(other.can_continue_episode(theirs.episode_uuid));
  // A key of another episode, edited: 401 from the chat API.
  client::Episode mine = c.begin_episode();
  std::string key = mine.api_key;
  key[key.size() - 3] = key[key.size() - 3] == 'A' ? 'B' : 'A';
  try {
    ChatClient(mine.base_url, key).chat(Json::array({client::user_message("x")}));
    ADD_FAILURE() << "an edited key was accepted";
  } catch (const SwarmError& e) {
    EXPECT_EQ(e.kind(), SwarmErrorKind::kChat);
    EXPECT_EQ(e.http_status(), 401);
  }
  EXPECT_EQ(c.end_episode("t", mine.episode_uuid, reward(0)), EndResult::kEnded);
}

TEST_F(ClientE2eTest, ClaimsWaitForTheEngineAndFailWhenItStops) {
  SwarmClient c(url_, fast());
  ClaimOptions quick;
  quick.max_wait = 0.3;
  try {
    c.begin_episode(quick);
    ADD_FAILURE() << "claimed from an OFFLINE server";
  } catch (const SwarmError& e) {
    EXPECT_EQ(e.kind(), SwarmErrorKind::kTimeout);
  }
  std::optional<client::Episode> waited;
  std::thread waiter([&] { waited = c.begin_episode(); });
  c.sync_train_config(edited(yaml(), "max_env_worker: 8", "max_env_worker: 1"));
  c.start_engine(true, 120.0);
  waiter.join();
  ASSERT_TRUE(waited);
  // The pool held one episode: the next claim waits until the engine is stopped under it.
  std::optional<SwarmErrorKind> failure;
  std::promise<void> pool_empty;
  std::thread second([&] {
    ClaimOptions o;
    std::once_flag once;
    o.on_wait = [&](const std::string&) { std::call_once(once, [&] { pool_empty.set_value(); }); };
    try {
      c.begin_episode(o);
    } catch (const SwarmError& e) {
      failure = e.kind();
    }
  });
  // Stop only once the claim was answered "No available episodes" (the engine was seen running).
  const bool waited_on_empty_pool =
      pool_empty.get_future().wait_for(120s) == std::future_status::ready;
  c.stop_engine(true, 60.0);
  second.join();
  ASSERT_TRUE(waited_on_empty_pool);
  EXPECT_EQ(failure, SwarmErrorKind::kOffline);
  c.auto_sync_train_config_and_start_engine(yaml(), /*force_restart=*/false, 120.0);
  EXPECT_EQ(c.get_engine_status().status, client::kRolling);
}

TEST_F(ClientE2eTest, OneClientSharedByManyThreads) {
  SwarmClient c(url_, fast());
  c.auto_sync_train_config_and_start_engine(
      edited(yaml(), "train_batch_size: 2", "train_batch_size: 100"), false, 120.0);
  std::atomic<int> ended{0};
  std::vector<std::string> errors(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      try {
        client::Episode ep = c.begin_episode();
        ChatClient chat(ep.base_url, ep.api_key);
        std::string text = "thread " + std::to_string(i);
        if (chat.chat(Json::array({client::user_message(text)})).content.value_or("") != text)
          errors[i] = "content";
        if (c.end_episode("task-" + std::to_string(i % 4), ep.episode_uuid, reward(i)) ==
            EndResult::kEnded)
          ++ended;
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(ended.load(), 16);
  EXPECT_EQ(c.get_rollout_stat()["completed_episodes"], 16);
}

TEST_F(ClientE2eTest, ThrottlePolicyAndAgreeSyncWeight) {
  SwarmClient c(url_, fast());
  c.auto_sync_train_config_and_start_engine(yaml(), false, 120.0);
  ClaimOptions cocktail;
  cocktail.throttle_policy = client::ThrottlePolicy{"cocktail-a", 1.5, std::nullopt, std::nullopt};
  client::Episode ep = c.begin_episode(cocktail);
  EXPECT_EQ(c.get_rollout_stat()["running_episode_details"][ep.episode_uuid]["optional_task_id"],
            "cocktail-a");
  EXPECT_EQ(c.end_episode("cocktail-a", ep.episode_uuid, reward(1)), EndResult::kEnded);
  c.stop_engine(true, 60.0);

  c.auto_sync_train_config_and_start_engine(
      echo_yaml(
          model_,
          "  swarm_mode_sample_collection_method: rollout_until_any_client_agree_sync_weight\n"),
      false, 120.0);
  EXPECT_FALSE(c.agree_sync_weight(false));  // nothing finished since the last weight sync
  client::Episode done = c.begin_episode();
  ChatClient(done.base_url, done.api_key).chat(Json::array({client::user_message("x")}));
  EXPECT_EQ(c.end_episode("t", done.episode_uuid, reward(1)), EndResult::kEnded);
  EXPECT_TRUE(c.agree_sync_weight(true, 60.0));
  EXPECT_TRUE(eventually([&] { return c.get_rollout_stat().value("batches_recorded", 0) >= 1; }));
}

TEST(ClientAdminTest, ProtectedCommandsNeedTheAdminToken) {
  ScratchDir dir;
  fs::path model = fixture(false).tokenizer;
  SwarmProcess swarm(SwarmProcess::Options{dir / "server", bin("ajet-echo-engine"), "tok-123", {}});
  SwarmClient anonymous(swarm.url(), fast());
  try {
    anonymous.sync_train_config(echo_yaml(model));
    ADD_FAILURE() << "sync_train_config without the admin token succeeded";
  } catch (const SwarmError& e) {
    EXPECT_EQ(e.http_status(), 401);
    EXPECT_THAT(e.what(), HasSubstr("admin token"));
  }
  SwarmClient admin(swarm.url(), fast("tok-123"));
  admin.auto_sync_train_config_and_start_engine(echo_yaml(model), false, 120.0);
  client::Episode ep = anonymous.begin_episode();  // episodes need no admin token
  EXPECT_EQ(anonymous.end_episode("t", ep.episode_uuid, reward(1)), EndResult::kEnded);
  EXPECT_THROW(anonymous.stop_engine(), SwarmError);
  admin.stop_engine(true, 60.0);
  EXPECT_EQ(admin.get_engine_status().status, client::kOffline);
}

// Sets an environment variable for the scope (unset again after).
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

// Two servers with tokens of their own: AJET_ADMIN_TOKENS gives each client its server's token,
// with AJET_ADMIN_TOKEN (here wrong for both) as the fallback for servers it does not list.
TEST(ClientAdminTest, EachServerGetsItsTokenFromAjetAdminTokens) {
  ScratchDir dir;
  fs::path model = fixture(false).tokenizer;
  SwarmProcess a(SwarmProcess::Options{dir / "a", bin("ajet-echo-engine"), "tok-a", {}});
  SwarmProcess b(SwarmProcess::Options{dir / "b", bin("ajet-echo-engine"), "tok-b", {}});
  ScopedEnv one("AJET_ADMIN_TOKEN", "tok-wrong");
  ScopedEnv list("AJET_ADMIN_TOKENS", a.url() + "=tok-a,\n  " + b.url() + "/=tok-b");
  EXPECT_EQ(client::admin_token_for(a.url() + "/"), "tok-a");
  EXPECT_EQ(client::admin_token_for(b.url()), "tok-b");
  EXPECT_EQ(client::admin_token_for("http://127.0.0.1:1"), "tok-wrong");
  for (const SwarmProcess* s : {&a, &b}) {
    SwarmClient c(s->url(), fast());
    c.auto_sync_train_config_and_start_engine(echo_yaml(model), false, 120.0);
    c.stop_engine(true, 60.0);
    EXPECT_EQ(c.get_engine_status().status, client::kOffline);
  }
  {
    ScopedEnv only_a("AJET_ADMIN_TOKENS", a.url() + "=tok-a");
    SwarmClient c(b.url(), fast());  // not listed: AJET_ADMIN_TOKEN, which b refuses
    try {
      c.sync_train_config(echo_yaml(model));
      ADD_FAILURE() << "b accepted AJET_ADMIN_TOKEN's token";
    } catch (const SwarmError& e) {
      EXPECT_EQ(e.http_status(), 401);
    }
  }
  {
    // An https:// entry (a TLS proxy the Python client dials) is another server's, not a malformed
    // list.
    ScopedEnv with_https("AJET_ADMIN_TOKENS", "https://proxy.example=tok-p " + a.url() + "=tok-a");
    EXPECT_EQ(client::admin_token_for(a.url()), "tok-a");
    EXPECT_EQ(client::admin_token_for("https://proxy.example/"), "tok-p");
  }
  // Malformed lists are named by entry, never by a token.
  for (const auto& [value, message] : std::vector<std::pair<std::string, std::string>>{
           {"secret-token", "entry 1 does not start with http://"},
           {a.url() + "=tok-a " + b.url(), "entry 2 (" + b.url() + ") has no =TOKEN"},
           {a.url() + "=", "entry 1 (" + a.url() + ") has no =TOKEN"}}) {
    ScopedEnv bad("AJET_ADMIN_TOKENS", value);
    try {
      client::admin_token_for(a.url());
      ADD_FAILURE() << value;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(message));
      EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("secret-token")));
      EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("tok-a")));
    }
  }
}

TEST(ClientUnreachableTest, AnUnreachableServerReadsCannotConnect) {
  SwarmClient c("http://127.0.0.1:1", fast());
  EXPECT_EQ(c.get_engine_status().status, client::kCannotConnect);
  EXPECT_TRUE(c.get_rollout_stat().empty());
  EXPECT_FALSE(c.can_continue_episode("x"));
  EXPECT_FALSE(c.abort_episode("x"));
  try {
    c.auto_sync_train_config_and_start_engine("ajet: {}\n");
    ADD_FAILURE() << "no error";
  } catch (const SwarmError& e) {
    EXPECT_EQ(e.kind(), SwarmErrorKind::kConnection);
  }
  ClaimOptions quick;
  quick.max_wait = 0.2;
  try {
    c.begin_episode(quick);
    ADD_FAILURE() << "no error";
  } catch (const SwarmError& e) {
    EXPECT_EQ(e.kind(), SwarmErrorKind::kTimeout);
  }
  EXPECT_EQ(c.rewrite_base_url("http://10.1.2.3:10086/v1"), "http://127.0.0.1:1/v1");
}

TEST(ClientRealEngineTest, ClaimChatStreamAndEndThroughTheRealEngine) {
  BootedSwarm swarm("ajet-engine");
  if (HasFailure()) return;
  SwarmClient c(swarm.url(), fast());
  client::Episode ep = c.begin_episode();
  ChatClient chat(ep.base_url, ep.api_key);
  Json r = chat.create(Json::array({client::user_message("Once upon a time")}), nullptr,
                       {{"max_tokens", 4}, {"logprobs", true}, {"top_logprobs", 2}});
  const Json& choice = r["choices"][0];
  EXPECT_THAT(choice["finish_reason"].get<std::string>(), ::testing::AnyOf("stop", "length"));
  EXPECT_GT(r["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_FALSE(choice["logprobs"]["content"].empty());
  client::ChatMessage streamed =
      chat.stream(Json::array({client::user_message("Hello")}), nullptr, {{"max_tokens", 4}});
  EXPECT_THAT(streamed.finish_reason, ::testing::AnyOf("stop", "length"));
  EXPECT_EQ(c.end_episode("t", ep.episode_uuid, reward(0.5)), EndResult::kEnded);
  EXPECT_EQ(c.get_rollout_stat()["completed_episodes"], 1);
}

}  // namespace
}  // namespace ajet::clients_test
