// Judges of the proxy: something that gives each of a request's N answers a reward. Two kinds,
// chosen once at start-up: a command (run per group, a JSON document on stdin, JSON scores on
// stdout) and an OpenAI-compatible judge model (a fixed URL and key, or an eval episode of a swarm
// front per call). Both are pointwise or listwise (judge/scores.h). A judge's address comes from
// the operator's flags only: nothing in an application's request can make the proxy dial
// elsewhere. score() blocks (a worker thread calls it) and is thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "proxy/api.h"
#include "proxy/scores.h"

namespace ajet::proxy {

// What a judge reads of one group.
struct JudgeInput {
  Api api = Api::kChat;
  const Json* request = nullptr;  // the application's body, as sent
  std::string question;           // request_text(): the conversation as text
  std::vector<std::string> answers;
  std::string task_id;
};

// A judge that gave no usable rewards. `kind` labels the failure in the metrics: "crash" (a
// command that exited non-zero or could not start), "timeout", "malformed" (output without the
// rewards asked for), "unavailable" (a judge model that did not answer 200).
class JudgeFailure : public Error {
 public:
  JudgeFailure(std::string kind, const std::string& message)
      : Error(ErrorCode::kUnavailable, message), kind_(std::move(kind)) {}
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
};

class Judge {
 public:
  virtual ~Judge() = default;
  // One reward per answer, in order. Throws JudgeFailure.
  virtual std::vector<double> score(const JudgeInput& input) = 0;
  virtual std::string describe() const = 0;  // for the ready line: "command ./judge.py (listwise)"
};

struct CommandJudgeOptions {
  std::string command;  // run with /bin/sh -c
  JudgeMode mode = JudgeMode::kPointwise;
  std::chrono::milliseconds timeout{60'000};
};
// Runs `command` once per group with stdin a JSON document {"api", "task_id", "mode", "request",
// "question", "answers": [text...]} (also at the path in $AJET_JUDGE_INPUT) and reads
// parse_command_output() of what it prints. Past the timeout the command's process group is killed.
std::unique_ptr<Judge> make_command_judge(CommandJudgeOptions options);

struct ModelJudgeOptions {
  // Where the judge model is: either a fixed OpenAI-compatible base URL ("http://host:port/v1") and
  // key, or a swarm front (`swarm_url`) whose eval episodes serve it: each judge call claims one,
  // asks its /v1/chat/completions, and aborts it (nothing of the judge is trained).
  std::string url;
  std::string key;
  std::string swarm_url;
  std::string model = "judge";
  JudgeMode mode = JudgeMode::kPointwise;
  std::string prompt_template;  // "" → default_template(mode)
  int max_tokens = 256;
  double temperature = 0.0;
  std::chrono::milliseconds timeout{120'000};  // each judge call, whole
};
// Pointwise: one call per answer (in parallel), the score parsed from each reply. Listwise: one
// call with every answer, the ranking parsed and normalised. The template is checked here (Error
// kInvalidArgument naming the placeholder).
std::unique_ptr<Judge> make_model_judge(ModelJudgeOptions options);

}  // namespace ajet::proxy
