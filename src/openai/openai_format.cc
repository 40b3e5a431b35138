#include "openai/openai_format.h"

#include "common/encoding.h"

namespace ajet::openai {

namespace {

Json byte_list(const std::string& bytes) {
  Json out = Json::array();
  for (unsigned char c : bytes) out.push_back(int(c));
  return out;
}

void put_meta(Json& j, const ResponseMeta& meta) {
  j["id"] = meta.id;
  j["created"] = meta.created;
  j["model"] = meta.model;
  if (!meta.system_fingerprint.empty()) j["system_fingerprint"] = meta.system_fingerprint;
}

}  // namespace

std::string new_response_id(std::string_view prefix) {
  return std::string(prefix) + new_uuid_hex().substr(0, 24);
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

Json prompt_logprobs_json(const rpc::TokensEvent& e, const text::Tokenizer& tok) {
  Json out = Json::array();
  out.push_back(nullptr);
  const size_t k = size_t(std::max(e.prompt_top_k, 0));
  for (size_t p = 0; p < e.prompt_ids.size(); ++p) {
    Json entry = Json::object();
    entry[std::to_string(e.prompt_ids[p])] = {{"logprob", e.prompt_logprobs[p]},
                                              {"rank", e.prompt_ranks[p]},
                                              {"decoded_token", tok.token_bytes(e.prompt_ids[p])}};
    for (size_t j = 0; j < k; ++j) {
      const int32_t id = e.prompt_top_ids[p * k + j];
      if (id < 0 || id == e.prompt_ids[p]) continue;
      entry[std::to_string(id)] = {{"logprob", e.prompt_top_logprobs[p * k + j]},
                                   {"rank", int64_t(j) + 1},
                                   {"decoded_token", tok.token_bytes(id)}};
    }
    out.push_back(std::move(entry));
  }
  return out;
}

Json chat_logprobs_json(const ChoiceState& choice, size_t begin, size_t end,
                        const text::Tokenizer& tok) {
  Json content = Json::array();
  const int k = choice.top_k();
  for (size_t t = begin; t < end && t < choice.tokens(); ++t) {
    std::string bytes = tok.token_bytes(choice.ids()[t]);
    Json top = Json::array();
    for (int j = 0; j < k; ++j) {
      size_t at = t * size_t(k) + size_t(j);
      if (at >= choice.top_ids().size()) break;
      std::string alt = tok.token_bytes(choice.top_ids()[at]);
      top.push_back(
          {{"token", alt}, {"logprob", choice.top_logprobs()[at]}, {"bytes", byte_list(alt)}});
    }
    content.push_back({{"token", bytes},
                       {"logprob", choice.logprobs()[t]},
                       {"bytes", byte_list(bytes)},
                       {"top_logprobs", std::move(top)}});
  }
  return Json{{"content", std::move(content)}, {"refusal", nullptr}};
}

Json completion_logprobs_json(const ChoiceState& choice, size_t begin, size_t end,
                              const text::Tokenizer& tok, size_t text_offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  const int k = choice.top_k();
  for (size_t t = begin; t < end && t < choice.tokens(); ++t) {
    std::string bytes = tok.token_bytes(choice.ids()[t]);
    tokens.push_back(bytes);
    token_logprobs.push_back(choice.logprobs()[t]);
    offsets.push_back(text_offset);
    text_offset += bytes.size();
    Json alts = Json::object();
    for (int j = 0; j < k; ++j) {
      size_t at = t * size_t(k) + size_t(j);
      if (at >= choice.top_ids().size()) break;
      alts[tok.token_bytes(choice.top_ids()[at])] = choice.top_logprobs()[at];
    }
    top.push_back(k > 0 ? std::move(alts) : Json(nullptr));
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

Json tool_calls_json(const std::vector<text::ToolCall>& calls, bool with_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c = {{"id", calls[i].id},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

Json chat_message_json(const text::ParsedOutput& output) {
  Json m = {{"role", "assistant"}};
  m["content"] =
      (output.content.empty() && !output.tool_calls.empty()) ? Json(nullptr) : Json(output.content);
  if (!output.tool_calls.empty()) m["tool_calls"] = tool_calls_json(output.tool_calls, false);
  if (output.reasoning_content) m["reasoning_content"] = *output.reasoning_content;
  return m;
}

Json chat_chunk_json(const ResponseMeta& meta, int index, Json delta, Json finish_reason,
                     Json logprobs) {
  Json j = {{"object", "chat.completion.chunk"}};
  put_meta(j, meta);
  j["choices"] = Json::array({Json{{"index", index},
                                   {"delta", std::move(delta)},
                                   {"logprobs", std::move(logprobs)},
                                   {"finish_reason", std::move(finish_reason)}}});
  return j;
}

Json completion_chunk_json(const ResponseMeta& meta, int index, std::string text,
                           Json finish_reason, Json logprobs) {
  Json j = {{"object", "text_completion"}};
  put_meta(j, meta);
  j["choices"] = Json::array({Json{{"index", index},
                                   {"text", std::move(text)},
                                   {"logprobs", std::move(logprobs)},
                                   {"finish_reason", std::move(finish_reason)}}});
  return j;
}

Json usage_chunk_json(const ResponseMeta& meta, std::string_view object, Json usage) {
  Json j = {{"object", object}};
  put_meta(j, meta);
  j["choices"] = Json::array();
  j["usage"] = std::move(usage);
  return j;
}

std::string sse_data(const Json& value) {
  std::string out = "data: ";
  out += value.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += "\n\n";
  return out;
}

}  // namespace ajet::openai
