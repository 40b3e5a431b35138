#include "proxy/judge.h"

#include <csignal>
#include <filesystem>
#include <future>
#include <mutex>

#include "client/swarm_client.h"
#include "common/encoding.h"
#include "common/fs.h"
#include "common/subprocess.h"
#include "http/client.h"

namespace ajet::proxy {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxJudgeOutputBytes = 1 << 20;

std::string mode_name(JudgeMode mode) {
  return mode == JudgeMode::kPointwise ? "pointwise" : "listwise";
}

// ---- a command ----

class CommandJudge final : public Judge {
 public:
  explicit CommandJudge(CommandJudgeOptions options) : options_(std::move(options)) {}

  std::vector<double> score(const JudgeInput& input) override {
    const Json doc = {{"api", api_name(input.api)},
                      {"task_id", input.task_id},
                      {"mode", mode_name(options_.mode)},
                      {"request", input.request != nullptr ? *input.request : Json(nullptr)},
                      {"question", input.question},
                      {"answers", input.answers}};
    // The document goes through a file, not a pipe: a command that never reads its stdin cannot
    // block the proxy on a full pipe, so the timeout below always holds.
    const fs::path file = fs::temp_directory_path() / ("ajet-judge-" + new_uuid_hex() + ".json");
    write_file_atomic(file, doc.dump(-1, ' ', false, Json::error_handler_t::replace));
    struct Remove {
      fs::path path;
      ~Remove() {
        std::error_code ec;
        fs::remove(path, ec);
      }
    } remove{file};
    return run(file, input.answers.size());
  }

  std::string describe() const override {
    return "command `" + options_.command + "` (" + mode_name(options_.mode) + ")";
  }

 private:
  std::vector<double> run(const fs::path& input_file, size_t n) {
    SpawnOptions spawn;
    spawn.argv = {"/bin/sh", "-c", "exec 0<\"$AJET_JUDGE_INPUT\"\n" + options_.command};
    spawn.env = {{"AJET_JUDGE_INPUT", input_file.string()}};
    Subprocess child;
    try {
      child = Subprocess::spawn(spawn);
    } catch (const std::exception& e) {
      throw JudgeFailure("crash", std::string("judge command could not start: ") + e.what());
    }
    std::string output;
    auto on_line = [&](std::string line) {
      if (output.size() < kMaxJudgeOutputBytes) output += line + "\n";
    };
    const auto deadline = Clock::now() + options_.timeout;
    bool exited = false;
    while (!exited) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      exited = child.wait_some(std::min(left, std::chrono::milliseconds(200)), on_line);
    }
    if (!exited) {
      child.terminate(std::chrono::milliseconds(1000), on_line);
      throw JudgeFailure("timeout", "judge command timed out after " +
                                        std::to_string(options_.timeout.count() / 1000.0) + " s");
    }
    const int status = child.wait(on_line);
    if (!exited_cleanly(status)) {
      throw JudgeFailure("crash",
                         "judge command failed (" + describe_exit(status) + "): " + tail(output));
    }
    try {
      return parse_command_output(output, n, options_.mode);
    } catch (const Error& e) {
      throw JudgeFailure("malformed", e.what());
    }
  }

  static std::string tail(const std::string& text) {
    return text.size() <= 500 ? text : "…" + text.substr(text.size() - 500);
  }

  CommandJudgeOptions options_;
};

// ---- a judge model ----

// Where one judge call goes, and what to do after it (abort a claimed eval episode).
struct Endpoint {
  std::string base_url;  // "http://host:port/v1"
  std::string key;
  std::string episode_uuid;  // a claimed eval episode, or ""
};

class ModelJudge final : public Judge {
 public:
  explicit ModelJudge(ModelJudgeOptions options) : options_(std::move(options)) {
    if (options_.prompt_template.empty())
      options_.prompt_template = default_template(options_.mode);
    check_template(options_.prompt_template, options_.mode);
    if (options_.url.empty() == options_.swarm_url.empty()) {
      invalid_argument(
          "a judge model needs exactly one of a URL (--judge-url) or a swarm front "
          "(--judge-swarm)");
    }
    if (!options_.swarm_url.empty()) {
      client::SwarmClientOptions o;
      o.timeout = options_.timeout;
      swarm_ = std::make_unique<client::SwarmClient>(options_.swarm_url, o);
    }
  }

  std::vector<double> score(const JudgeInput& input) override {
    const size_t n = input.answers.size();
    if (options_.mode == JudgeMode::kListwise) {
      const std::string reply =
          ask(fill_template(options_.prompt_template, {{"question", input.question},
                                                       {"answers", numbered_answers(input.answers)},
                                                       {"n", std::to_string(n)}}));
      try {
        return listwise_rewards(parse_ranking(reply, n), n);
      } catch (const Error& e) {
        throw JudgeFailure("malformed", e.what());
      }
    }
    std::vector<std::future<double>> scores;
    for (const std::string& answer : input.answers) {
      scores.push_back(std::async(std::launch::async, [this, &input, &answer] {
        const std::string reply = ask(fill_template(
            options_.prompt_template, {{"question", input.question}, {"answer", answer}}));
        try {
          return parse_pointwise_score(reply);
        } catch (const Error& e) {
          throw JudgeFailure("malformed", e.what());
        }
      }));
    }
    std::vector<double> rewards;
    for (auto& s : scores) rewards.push_back(s.get());  // the first failure propagates
    return rewards;
  }

  std::string describe() const override {
    return "model " + options_.model + " at " +
           (options_.url.empty() ? "swarm front " + options_.swarm_url : options_.url) + " (" +
           mode_name(options_.mode) + ")";
  }

 private:
  Endpoint endpoint() {
    if (!swarm_) return Endpoint{options_.url, options_.key, ""};
    client::ClaimOptions claim;
    claim.episode_type = "eval";
    claim.max_wait = std::chrono::duration<double>(options_.timeout).count();
    try {
      client::Episode e = swarm_->begin_episode(claim);
      return Endpoint{e.base_url, e.api_key, e.episode_uuid};
    } catch (const std::exception& e) {
      throw JudgeFailure("unavailable", std::string("judge front: no eval episode: ") + e.what());
    }
  }

  // One chat call to the judge model; the reply's text.
  std::string ask(const std::string& prompt) {
    Endpoint at = endpoint();
    struct Release {
      client::SwarmClient* swarm;
      std::string uuid;
      ~Release() {
        if (swarm != nullptr && !uuid.empty()) swarm->abort_episode(uuid, "proxy_judge");
      }
    } release{swarm_.get(), at.episode_uuid};
    const Json body = {{"model", options_.model},
                       {"messages", Json::array({{{"role", "user"}, {"content", prompt}}})},
                       {"max_tokens", options_.max_tokens},
                       {"temperature", options_.temperature}};
    http::ClientOptions o;
    o.total_timeout = options_.timeout;
    o.timeout = options_.timeout;
    http::Headers headers;
    if (!at.key.empty()) headers.add("Authorization", "Bearer " + at.key);
    http::ClientResponse r;
    try {
      http::HttpClient client(at.base_url, o);
      r = client.post_json("/chat/completions", body, headers);
    } catch (const Error& e) {
      throw JudgeFailure(e.code() == ErrorCode::kUnavailable &&
                                 std::string(e.what()).find("timed out") != std::string::npos
                             ? "timeout"
                             : "unavailable",
                         std::string("judge model: ") + e.what());
    }
    if (r.status != 200) {
      throw JudgeFailure("unavailable", "judge model answered HTTP " + std::to_string(r.status) +
                                            ": " + r.body.substr(0, 300));
    }
    try {
      const Json reply = parse_json(r.body, "judge model answer");
      return reply.at("choices").at(0).at("message").at("content").get<std::string>();
    } catch (const std::exception& e) {
      throw JudgeFailure("malformed", std::string("judge model answer: ") + e.what());
    }
  }

  ModelJudgeOptions options_;
  std::unique_ptr<client::SwarmClient> swarm_;
};

}  // namespace

std::unique_ptr<Judge> make_command_judge(CommandJudgeOptions options) {
  if (options.command.empty()) invalid_argument("--judge-command is empty");
  return std::make_unique<CommandJudge>(std::move(options));
}

std::unique_ptr<Judge> make_model_judge(ModelJudgeOptions options) {
  return std::make_unique<ModelJudge>(std::move(options));
}

}  // namespace ajet::proxy
