#include "openai/openai_params.h"

#include <fmt/format.h>

#include <cmath>
#include <unordered_set>

#include "common/error.h"

namespace ajet::openai {

namespace {

using text::OrderedJson;

std::string type_name(const OrderedJson& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

[[noreturn]] void bad_field(std::string_view field, const std::string& what) {
  invalid_argument(fmt::format("request body: field '{}' {}", field, what));
}

// "max_tokens (4096)", or "max_tokens (4096, the default)" when the request did not set it.
std::string factor(std::string_view field, int64_t value, bool sent) {
  if (sent) return fmt::format("{} ({})", field, value);
  return fmt::format("{} ({}, the default)", field, value);
}

const OrderedJson* field(const OrderedJson& body, std::string_view key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> number(const OrderedJson& body, std::string_view key) {
  const OrderedJson* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) bad_field(key, "must be a number, got " + type_name(*v));
  double d = v->get<double>();
  if (!std::isfinite(d)) bad_field(key, "must be finite");
  return d;
}

// `name`: the field as the client named it (empty: `key`).
std::optional<int64_t> integer(const OrderedJson& body, std::string_view key,
                               std::string_view name = {}) {
  if (name.empty()) name = key;
  const OrderedJson* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
  }
  if (!v->is_number_integer() && !v->is_number_unsigned())
    bad_field(name, "must be an integer, got " + type_name(*v));
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
    bad_field(name, "is too large");
  return v->get<int64_t>();
}

std::optional<bool> boolean(const OrderedJson& body, std::string_view key) {
  const OrderedJson* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) bad_field(key, "must be a boolean, got " + type_name(*v));
  return v->get<bool>();
}

void parse_common(const OrderedJson& body, const FieldNames& names, OpenAiParams& p) {
  if (!body.is_object())
    invalid_argument("request body must be a JSON object, got " + type_name(body));
  if (const OrderedJson* m = field(body, "model")) {
    if (!m->is_string()) bad_field("model", "must be a string, got " + type_name(*m));
    p.model = m->get<std::string>();
  }
  if (auto n = integer(body, "n")) {
    if (*n < 1 || *n > kMaxChoices)
      bad_field("n", fmt::format("must be between 1 and {}, got {}", kMaxChoices, *n));
    p.n = int(*n);
  }
  auto max_tokens = integer(body, "max_tokens", names.max_tokens);
  auto max_completion = integer(body, "max_completion_tokens");
  if (max_tokens && *max_tokens < 1)
    bad_field(names.max_tokens, fmt::format("must be at least 1, got {}", *max_tokens));
  if (max_completion && *max_completion < 1) {
    bad_field("max_completion_tokens", fmt::format("must be at least 1, got {}", *max_completion));
  }
  p.max_tokens = max_completion ? max_completion : max_tokens;
  p.max_tokens_field = max_completion ? "max_completion_tokens" : names.max_tokens;
  p.wording = names.wording;
  if ((p.temperature = number(body, "temperature")) && (*p.temperature < 0 || *p.temperature > 2)) {
    bad_field("temperature", fmt::format("must be between 0 and 2, got {}", *p.temperature));
  }
  if ((p.top_p = number(body, "top_p")) && (*p.top_p <= 0 || *p.top_p > 1)) {
    bad_field("top_p", fmt::format("must be in (0, 1], got {}", *p.top_p));
  }
  if ((p.top_k = integer(body, "top_k")) && (*p.top_k < -1 || *p.top_k > INT32_MAX)) {
    bad_field("top_k", fmt::format("must be -1 (off) or a positive integer up to {}, got {}",
                                   INT32_MAX, *p.top_k));
  }
  p.seed = integer(body, "seed");
  if (const OrderedJson* stop = field(body, "stop")) {
    const std::string& name = names.stop;
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string())
          bad_field(fmt::format("{}[{}]", name, i),
                    "must be a string, got " + type_name((*stop)[i]));
        p.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      bad_field(name, "must be a string or an array of strings, got " + type_name(*stop));
    }
    if (p.stop.size() > kMaxStopStrings)
      bad_field(name, fmt::format("has {} strings; at most {}", p.stop.size(), kMaxStopStrings));
    for (size_t i = 0; i < p.stop.size(); ++i) {
      if (p.stop[i].empty()) bad_field(fmt::format("{}[{}]", name, i), "must not be empty");
      if (p.stop[i].size() > kMaxStopBytes) {
        bad_field(fmt::format("{}[{}]", name, i),
                  fmt::format("is {} bytes long; at most {}", p.stop[i].size(), kMaxStopBytes));
      }
    }
  }
  p.stream = boolean(body, "stream").value_or(false);
  if (auto lp = integer(body, "prompt_logprobs")) {
    if (*lp < 0 || *lp > rpc::kMaxTopLogprobs) {
      bad_field("prompt_logprobs",
                fmt::format("must be between 0 and {}, got {}", rpc::kMaxTopLogprobs, *lp));
    }
    if (p.stream) bad_field("prompt_logprobs", "is not supported with \"stream\": true");
    p.prompt_logprobs = int(*lp);
  }
  if (const OrderedJson* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_field("stream_options", "must be an object, got " + type_name(*so));
    if (auto it = so->find("include_usage"); it != so->end() && !it->is_null()) {
      if (!it->is_boolean())
        bad_field("stream_options.include_usage", "must be a boolean, got " + type_name(*it));
      p.include_usage = it->get<bool>();
    }
  }
}

}  // namespace

OpenAiParams parse_chat_params(const OrderedJson& body, const FieldNames& names) {
  OpenAiParams p;
  parse_common(body, names, p);
  p.logprobs = boolean(body, "logprobs").value_or(false);
  if (auto top = integer(body, "top_logprobs")) {
    if (*top < 0 || *top > rpc::kMaxTopLogprobs) {
      bad_field("top_logprobs",
                fmt::format("must be between 0 and {}, got {}", rpc::kMaxTopLogprobs, *top));
    }
    if (*top > 0 && !p.logprobs) bad_field("top_logprobs", "needs \"logprobs\": true");
    p.top_logprobs = int(*top);
  }
  if (const OrderedJson* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      std::string s = tc->get<std::string>();
      if (s == "auto")
        p.tool_choice = ToolChoice::kAuto;
      else if (s == "none")
        p.tool_choice = ToolChoice::kNone;
      else if (s == "required")
        p.tool_choice = ToolChoice::kRequired;
      else
        bad_field(
            "tool_choice",
            "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}, got \"" +
                s + "\"");
    } else if (tc->is_object()) {
      auto fn = tc->find("function");
      auto type = tc->find("type");
      if (type == tc->end() || !type->is_string() || type->get<std::string>() != "function" ||
          fn == tc->end() || !fn->is_object() || !fn->contains("name") ||
          !(*fn)["name"].is_string()) {
        bad_field("tool_choice", "must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
      p.tool_choice = ToolChoice::kNamed;
      p.tool_choice_name = (*fn)["name"].get<std::string>();
    } else {
      bad_field("tool_choice", "must be a string or an object, got " + type_name(*tc));
    }
  }
  if (const OrderedJson* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object())
      bad_field("chat_template_kwargs", "must be an object, got " + type_name(*kw));
    if (auto it = kw->find("enable_thinking"); it != kw->end() && !it->is_null()) {
      if (!it->is_boolean()) bad_field("chat_template_kwargs.enable_thinking", "must be a boolean");
      p.enable_thinking = it->get<bool>();
    }
  }
  return p;
}

OpenAiParams parse_completion_params(const OrderedJson& body) {
  OpenAiParams p;
  p.top_logprobs_field = "logprobs";
  parse_common(body, FieldNames{}, p);
  if (auto lp = integer(body, "logprobs")) {
    if (*lp < 0 || *lp > 5)
      bad_field("logprobs", fmt::format("must be between 0 and 5, got {}", *lp));
    p.logprobs = true;
    p.top_logprobs = int(*lp);
  }
  if (boolean(body, "echo").value_or(false)) bad_field("echo", "is not supported");
  if (field(body, "suffix") != nullptr) bad_field("suffix", "is not supported");
  if (auto best_of = integer(body, "best_of"); best_of && *best_of != p.n)
    bad_field("best_of", "is not supported");
  return p;
}

CompletionPrompt parse_completion_prompt(const OrderedJson& body) {
  const OrderedJson* prompt = field(body, "prompt");
  if (prompt == nullptr) bad_field("prompt", "is required");
  auto ids_of = [](const OrderedJson& list, const std::string& where) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < list.size(); ++i) {
      const OrderedJson& v = list[i];
      if (!v.is_number_integer() && !v.is_number_unsigned())
        bad_field(fmt::format("{}[{}]", where, i), "must be a token id");
      int64_t id = v.get<int64_t>();
      if (id < 0 || id > INT32_MAX)
        bad_field(fmt::format("{}[{}]", where, i), "is not a valid token id");
      ids.push_back(int32_t(id));
    }
    return ids;
  };
  CompletionPrompt out;
  if (prompt->is_string()) {
    out.text = prompt->get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    out.ids = ids_of(*prompt, "prompt");
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    out.text = (*prompt)[0].get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_array()) {
    out.ids = ids_of((*prompt)[0], "prompt[0]");
  } else if (prompt->is_array() && prompt->size() > 1) {
    bad_field("prompt", "holds several prompts; send one prompt per request");
  } else {
    bad_field("prompt", "must be a string or a list of token ids");
  }
  if (out.text && out.text->empty()) bad_field("prompt", "must not be empty");
  if (!out.text && out.ids.empty()) bad_field("prompt", "must not be empty");
  return out;
}

rpc::GenerateRequest resolve_generation(const OpenAiParams& p, const episodes::SamplingRules& rules,
                                        bool train, size_t prompt_tokens) {
  rpc::GenerateRequest g;
  if (p.n > rules.max_num_seqs) {
    bad_field("n", fmt::format("is {}; this engine decodes at most {} sequences together "
                               "(ajet.rollout.max_num_seqs), so n must be at most that",
                               p.n, rules.max_num_seqs));
  }
  g.n = p.n;
  const int64_t room = rules.max_model_len - int64_t(prompt_tokens);
  const bool anthropic = p.wording == ErrorWording::kAnthropic;
  if (room < 1 && anthropic) {
    invalid_argument(fmt::format("prompt is too long: {} tokens > {} maximum", prompt_tokens,
                                 rules.max_model_len));
  }
  if (room < 1) {
    throw ContextLengthExceeded(
        fmt::format("This model's maximum context length is {} tokens. However, your messages "
                    "resulted in {} tokens. "
                    "Please reduce the length of the messages. (The context is "
                    "ajet.rollout.max_model_len, at most the "
                    "model's max_position_embeddings; nothing is left to generate.)",
                    rules.max_model_len, prompt_tokens));
  }
  int64_t max_tokens = rules.max_tokens_per_turn;
  if (p.max_tokens) {
    // train: the request may only shorten the turn; eval: the request decides.
    max_tokens = train ? std::min(*p.max_tokens, rules.max_tokens_per_turn) : *p.max_tokens;
    if (max_tokens > room && anthropic) {
      invalid_argument(
          fmt::format("input length and `max_tokens` exceed context limit: {} + {} > {}, decrease "
                      "input length or `max_tokens` and try again",
                      prompt_tokens, max_tokens, rules.max_model_len));
    }
    if (max_tokens > room) {
      throw ContextLengthExceeded(fmt::format(
          "This model's maximum context length is {} tokens. However, you requested {} tokens ({} "
          "in the "
          "messages, {} in the completion). Please reduce the length of the messages or "
          "completion: {} ({}) "
          "leaves no room; lower {} to at most {} (the context is ajet.rollout.max_model_len).",
          rules.max_model_len, int64_t(prompt_tokens) + max_tokens, prompt_tokens, max_tokens,
          p.max_tokens_field, max_tokens, p.max_tokens_field, room));
    }
  } else {
    max_tokens = std::min(max_tokens, room);
  }
  g.max_tokens = int32_t(std::min<int64_t>(max_tokens, INT32_MAX));
  if (train) {
    g.temperature = rules.train_temperature;
    g.top_p = rules.train_top_p;
    g.top_k = rules.train_top_k;
  } else {
    g.temperature = p.temperature.value_or(rules.eval_temperature);
    g.top_p = p.top_p.value_or(rules.eval_top_p);
    g.top_k = p.top_k ? int32_t(std::max<int64_t>(*p.top_k, 0)) : rules.eval_top_k;
  }
  g.seed = p.seed;
  g.top_logprobs = p.logprobs ? p.top_logprobs : 0;
  g.prompt_logprobs = p.prompt_logprobs;
  return g;
}

void check_token_entries(const OpenAiParams& p, const rpc::GenerateRequest& g, int64_t limit) {
  const int64_t entries = int64_t(g.n) * int64_t(g.max_tokens) * (1 + int64_t(g.top_logprobs));
  if (g.prompt_logprobs >= 0) {
    const int64_t prompt = int64_t(g.prompt.size()) * (1 + int64_t(g.prompt_logprobs));
    if (limit > 0 && entries + prompt > limit) {
      invalid_argument(fmt::format(
          "request body: the prompt's {} tokens × (1 + prompt_logprobs {}) plus {} generated "
          "entries = {} token entries, above this front's limit of {} per request (ajet-swarm "
          "--max-request-token-entries)",
          g.prompt.size(), g.prompt_logprobs, entries, entries + prompt, limit));
    }
  }
  if (limit <= 0 || entries <= limit) return;
  invalid_argument(fmt::format(
      "request body: {} × {} × (1 + {}) = {} token entries, above this front's limit of {} per "
      "request "
      "(ajet-swarm --max-request-token-entries): lower n, {} or {}.",
      factor("n", g.n, true), factor(p.max_tokens_field, g.max_tokens, p.max_tokens.has_value()),
      factor(p.top_logprobs_field, g.top_logprobs, true), entries, limit, p.max_tokens_field,
      p.top_logprobs_field));
}

void check_tool_results(const text::ChatRequest& request) {
  std::unordered_set<std::string> calls;
  for (size_t i = 0; i < request.messages.size(); ++i) {
    const text::ChatMessage& m = request.messages[i];
    for (const text::ToolCall& call : m.tool_calls) calls.insert(call.id);
    if (m.role != text::Role::kTool || m.tool_call_id.value_or("").empty()) continue;
    if (!calls.contains(*m.tool_call_id)) {
      bad_field(
          fmt::format("messages[{}].tool_call_id", i),
          fmt::format(
              "'{}' answers no tool call: no earlier assistant message has a tool_calls entry with "
              "that id",
              *m.tool_call_id));
    }
  }
}

}  // namespace ajet::openai
