// The stock agent CLIs from npm, unchanged, against the real ajet-swarm with ajet-echo-engine:
// Claude Code (`claude -p`, ANTHROPIC_BASE_URL and the episode key), Codex (`codex exec`, a custom
// provider with wire_api = "responses") and Qwen Code (`qwen -p`, OpenAI chat), each with its
// default system prompt and tools, through one episode with a tool round trip made on cue (the echo
// engine answers the last user message, so a prompt holding a <tool_call> block is a tool call; the
// CLI runs the tool and sends its result; the echo of that result is the final answer). The calls
// are tracked and merged into one sample per conversation.
//
// The CLIs come from scripts/npm-deps.sh (tests/js/package.json pins their versions); without npm
// or the registry the tests skip loudly. The CLIs run in a scratch HOME with every proxy variable
// pointing at a closed port (only the front, on 127.0.0.1, is reachable) and their own telemetry
// and update checks off.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

// node_modules/.bin with the CLIs, or nullopt with `why` (the caller skips, naming it).
std::optional<fs::path> npm_bin(std::string* why) {
  if (run_capture("command -v node").status != 0) {
    *why =
        "node is not installed (scripts/setup.sh installs nodejs and npm): the stock CLIs cannot "
        "run";
    return std::nullopt;
  }
  Captured r =
      run_capture("bash " + shell_quote(source("scripts/npm-deps.sh").string()) + " 2>/dev/null");
  std::string last = r.out;
  while (!last.empty() && (last.back() == '\n' || last.back() == '\r')) last.pop_back();
  last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
  if (r.status != 0 || !fs::is_directory(last)) {
    *why =
        "scripts/npm-deps.sh failed (npm or the registry unavailable): the stock CLIs are not "
        "installed";
    return std::nullopt;
  }
  return fs::path(last) / ".bin";
}

// The last line of `out` that parses as a JSON object or array (the CLIs' --output-format json).
Json last_json_line(const std::string& out) {
  size_t end = out.size();
  while (end > 0) {
    size_t begin = out.rfind('\n', end - 1);
    begin = begin == std::string::npos ? 0 : begin + 1;
    Json j = Json::parse(out.substr(begin, end - begin), nullptr, false);
    if (!j.is_discarded() && (j.is_object() || j.is_array())) return j;
    if (begin == 0) break;
    end = begin - 1;
  }
  return Json();
}

const char* kMarker = "ajet-tool-42";

class StockCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    bin_ = npm_bin(&why);
    if (!bin_) GTEST_SKIP() << "SKIPPED: " << why;
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), "", {}});
    api_ = std::make_unique<Api>(swarm_->url());
    // The CLIs' default prompts are 40-60k tokens with the 400-id fixture tokenizer, and the echo
    // of Qwen Code's first user message (its skills list) is ~10k: room for both.
    std::string yaml = config_yaml(fixture(false).tokenizer);
    for (auto [from, to] : {std::pair{"max_model_len: 512", "max_model_len: 200000"},
                            std::pair{"max_prompt_length: 256", "max_prompt_length: 180000"},
                            std::pair{"max_response_length: 256", "max_response_length: 16384"},
                            std::pair{"max_response_length_in_one_turn: 48",
                                      "max_response_length_in_one_turn: 16384"}}) {
      yaml.replace(yaml.find(from), std::string(from).size(), to);
    }
    api_->boot(yaml);
    fs::create_directories(home());
    fs::create_directories(work());
  }
  fs::path home() const { return dir_ / "home"; }
  fs::path work() const { return dir_ / "work"; }
  // `command` run in work() with a scratch HOME, the outside world unreachable, and `env` set.
  Captured run_cli(const std::string& env, const std::string& command) {
    const std::string closed = closed_.url();
    const std::string line =
        "cd " + shell_quote(work().string()) +
        " && env -u ANTHROPIC_AUTH_TOKEN -u OPENAI_ORG_ID HOME=" + shell_quote(home().string()) +
        " HTTPS_PROXY=" + closed + " HTTP_PROXY=" + closed + " https_proxy=" + closed +
        " http_proxy=" + closed + " ALL_PROXY=" + closed +
        " NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost " + env + " timeout 300 " +
        command + " < /dev/null";
    return run_capture(line);
  }
  std::string cli(const std::string& name) const { return shell_quote((*bin_ / name).string()); }
  // The episode's calls, and the tool result the last one sent back.
  Json episode(const std::string& uuid) {
    auto r = api_->get("/episodes/" + uuid);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json();
  }
  static bool some_call_sent_tool_result(const Json& ep, const std::string& text) {
    for (const Json& call : ep["calls"]) {
      for (const Json& m : call["request"]["messages"]) {
        if (m["role"] == "tool" && m["content"].is_string() &&
            m["content"].get<std::string>().find(text) != std::string::npos) {
          return true;
        }
      }
    }
    return false;
  }
  void end_episode(const Json& claim) {
    auto r = api_->end("client-a", claim["episode_uuid"], "task", 1.0);
    EXPECT_EQ(r.status, 200) << r.body;
  }

  ScratchDir dir_;
  ClosedPort closed_;
  std::optional<fs::path> bin_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

std::string tool_call(const std::string& name, const Json& arguments) {
  return "<tool_call>\n" + Json{{"name", name}, {"arguments", arguments}}.dump() + "\n</tool_call>";
}

// Before (issue 39): every request of stock Claude Code was a 400 (adaptive thinking, system
// messages inside `messages`).
TEST_F(StockCliTest, ClaudeCodeRunsAToolRoundTripInOneEpisode) {
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  // Bash is among Claude Code's default tools; --allowedTools only grants it without a prompt.
  const std::string prompt =
      tool_call("Bash", {{"command", "echo ajet-tool-$((6*7))"}, {"description", "marker"}});
  Captured r = run_cli(
      "ANTHROPIC_BASE_URL=" + swarm_->url() + " ANTHROPIC_API_KEY=" + key +
          " CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1"
          " DISABLE_ERROR_REPORTING=1",
      cli("claude") + " -p " + shell_quote(prompt) + " --output-format json --allowedTools Bash");
  Json result = last_json_line(r.out);
  ASSERT_TRUE(result.is_object()) << r.out;
  EXPECT_EQ(result["is_error"], false) << r.out;
  EXPECT_THAT(result.value("result", ""), HasSubstr(kMarker))
      << "the echo of the tool's result is the answer";

  Json ep = episode(claim["episode_uuid"]);
  ASSERT_GE(ep["calls"].size(), 2u) << swarm_->output();
  EXPECT_TRUE(some_call_sent_tool_result(ep, kMarker))
      << ep["calls"].back()["request"].dump().substr(0, 2000);
  for (const Json& call : ep["calls"]) {
    EXPECT_EQ(call["agent_name"], "default_agent_name")
        << "Claude Code's model name does not split the episode";
  }
  EXPECT_EQ(ep["samples"].size(), 1u) << "the calls of one conversation merge into one sample";
  end_episode(claim);
}

// Before: every request of stock Codex was a 400 (its namespace and web_search tools).
TEST_F(StockCliTest, CodexRunsAToolRoundTripInOneEpisode) {
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  const fs::path codex_home = home() / ".codex";
  fs::create_directories(codex_home);
  write_file_atomic(codex_home / "config.toml",
                    "model = \"agentjet\"\n"
                    "model_provider = \"ajet\"\n"
                    "check_for_update_on_startup = false\n\n"
                    "[analytics]\nenabled = false\n\n"
                    "[model_providers.ajet]\n"
                    "name = \"AgentJet\"\n"
                    "base_url = \"" +
                        swarm_->url() +
                        "/v1\"\n"
                        "env_key = \"AJET_EPISODE_KEY\"\n"
                        "wire_api = \"responses\"\n");
  const std::string prompt = tool_call("exec_command", {{"cmd", "echo ajet-tool-$((6*7))"}});
  // Codex prefers a `bwrap` on PATH to the one it bundles, and runs it with --argv0, which Debian
  // 12's bubblewrap (0.8) lacks ("execvp codex-linux-sandbox"): its own bwrap goes first on PATH
  // (docs/agents.md says the same for users).
  const fs::path bundled =
      bin_->parent_path() /
      "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/codex-resources/bwrap";
  const fs::path shim = dir_ / "codex-bwrap";
  std::string path_env;
  if (fs::exists(bundled)) {
    fs::create_directories(shim);
    fs::remove(shim / "bwrap");
    fs::create_symlink(bundled, shim / "bwrap");
    path_env = " PATH=" + shell_quote(shim.string()) + ":\"$PATH\"";
  }
  Captured r = run_cli(
      "CODEX_HOME=" + shell_quote(codex_home.string()) + " AJET_EPISODE_KEY=" + key + path_env,
      cli("codex") + " exec --skip-git-repo-check " + shell_quote(prompt));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(kMarker)) << r.out;

  Json ep = episode(claim["episode_uuid"]);
  ASSERT_GE(ep["calls"].size(), 2u) << r.out << swarm_->output();
  EXPECT_TRUE(some_call_sent_tool_result(ep, kMarker))
      << ep["calls"].back()["request"].dump().substr(0, 2000);
  EXPECT_EQ(ep["samples"].size(), 1u);
  EXPECT_FALSE(swarm_->wait_for_line("flattened namespace tool(s)", 10s).empty())
      << swarm_->output();
  end_episode(claim);
}

// Qwen Code speaks OpenAI chat; read_file is among the tools it offers without approval in -p mode.
TEST_F(StockCliTest, QwenCodeRunsAToolRoundTripInOneEpisode) {
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  write_file_atomic(work() / "hello.txt", std::string(kMarker) + "\n");
  const std::string prompt =
      tool_call("read_file", {{"file_path", (work() / "hello.txt").string()}});
  Captured r = run_cli(
      "OPENAI_BASE_URL=" + swarm_->url() + "/v1 OPENAI_API_KEY=" + key + " OPENAI_MODEL=agentjet",
      cli("qwen") + " -p " + shell_quote(prompt) + " --output-format json");
  EXPECT_EQ(r.status, 0) << r.out;

  Json ep = episode(claim["episode_uuid"]);
  ASSERT_GE(ep["calls"].size(), 2u) << r.out << swarm_->output();
  EXPECT_TRUE(some_call_sent_tool_result(ep, kMarker)) << r.out;
  end_episode(claim);
}

}  // namespace
}  // namespace ajet::e2e
