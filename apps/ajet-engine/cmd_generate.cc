// `ajet-engine generate`: the quickest way to try a model by hand. Reads a prompt on stdin (raw
// text, or with --chat an OpenAI chat request rendered with the model's chat template), generates
// in this process (or through a running engine with --engine ADDR) and prints the text as it is
// produced, or with --logprobs one JSON object with ids, logprobs and finish reasons. With --chat
// the output is parsed for tool calls and printed as OpenAI assistant messages
// (src/engine/generate.h). This file only parses flags.
#include <iostream>
#include <memory>

#include "command.h"
#include "engine/generate.h"
#include "engine_flags.h"

namespace ajet::engine_cli {
namespace {

struct GenerateArgs {
  EngineFlags engine;
  engine::GenerateOptions options;
  double connect_timeout_s = 10.0;
};

void run(const std::shared_ptr<GenerateArgs>& args) {
  engine::GenerateOptions o = args->options;
  o.engine = [args] { return args->engine.resolve(); };
  o.connect_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(args->connect_timeout_s * 1000));
  engine::run_generate(o, std::cin, std::cout, std::cerr);
}

const CommandRegistration kGenerate("generate", [](CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  engine::GenerateOptions& o = args->options;
  auto* cmd = app.add_subcommand(
      "generate", "Generate from a prompt on stdin (raw text, or a chat request with --chat)");
  args->engine.add_to(cmd);
  cmd->add_option("--engine", o.address,
                  "Generate through a running `ajet-engine serve` (unix:/path or tcp:HOST:PORT) "
                  "instead of in-process");
  cmd->add_option("--token-file", o.token_file,
                  "With --engine: file holding the engine's shared secret (mode 0600). Default: "
                  "the AJET_ENGINE_TOKEN variable, if set");
  cmd->add_option("--connect-timeout", args->connect_timeout_s,
                  "With --engine: seconds to keep trying to connect")
      ->capture_default_str();
  cmd->add_option("--prompt", o.prompt, "The prompt text (instead of stdin)");
  cmd->add_option("--max-tokens", o.max_tokens, "Tokens to generate per sample")
      ->capture_default_str();
  cmd->add_option("--temperature", o.temperature, "0: greedy")->capture_default_str();
  cmd->add_option("--top-p", o.top_p, "Nucleus sampling, (0, 1]")->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "0: off")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Sampling seed (same seed, same output)");
  cmd->add_option("--n", o.n, "Samples sharing one prefill")->capture_default_str();
  cmd->add_flag("--logprobs", o.logprobs, "Print ids, logprobs and finish reasons as JSON");
  cmd->add_option("--top-logprobs", o.top_logprobs,
                  "With --logprobs: alternatives per token (0..20)")
      ->capture_default_str();
  cmd->add_flag("--chat", o.chat,
                "stdin is a chat request ({\"messages\": [...], \"tools\"?: [...]}); prints "
                "assistant messages");
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Do not stop at the model's end-of-sequence tokens");
  cmd->callback([args] { run(args); });
});

}  // namespace
}  // namespace ajet::engine_cli
