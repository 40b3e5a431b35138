// One generation for `ajet-engine generate`: a prompt (raw text, or an OpenAI chat request rendered
// with the model's chat template) generated in this process or through a running engine, printed as
// it is produced, or as one JSON object with ids, logprobs and finish reasons (logprobs), or as
// OpenAI assistant messages with tool calls parsed (chat).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>

#include "engine/options.h"

namespace ajet::engine {

struct GenerateOptions {
  // The in-process engine's options (asked for only when needed: --model, or --conf's
  // ajet.model.path).
  std::function<EngineOptions()> engine;
  std::string
      address;  // not empty: through a running `ajet-engine serve` (unix:/path or tcp:HOST:PORT)
  std::chrono::milliseconds connect_timeout{10'000};
  // With `address`: the engine token's file; empty: AJET_ENGINE_TOKEN, if set (rpc/token.h).
  std::string token_file;
  std::optional<std::string> prompt;  // nullopt: read from the input stream
  int32_t max_tokens = 64;
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = 0;
  std::optional<int64_t> seed;
  int32_t n = 1;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool chat = false;
  bool ignore_eos = false;
};

// Generates and prints: the text (or JSON) on `out`, the streamed sample's "[finish, N tokens]" on
// `err`.
void run_generate(const GenerateOptions& options, std::istream& in, std::ostream& out,
                  std::ostream& err);

}  // namespace ajet::engine
