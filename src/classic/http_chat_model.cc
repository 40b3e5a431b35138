#include "classic/http_chat_model.h"

#include "client/swarm_types.h"
#include "common/error.h"
#include "common/mix.h"
#include "text/messages.h"

namespace ajet::classic {

Json plain_json(const tasks::OrderedJson& j) { return Json(j); }

HttpChatModel::HttpChatModel(const std::string& base_url, const std::string& api_key, Json params,
                             std::optional<uint64_t> seed)
    : chat_(base_url, api_key), params_(std::move(params)), seed_(seed) {}

tasks::ModelReply HttpChatModel::complete(const std::vector<text::ChatMessage>& messages,
                                          const std::vector<tasks::OrderedJson>& tools) {
  Json body_messages = Json::array();
  for (const auto& m : messages) body_messages.push_back(plain_json(text::to_openai_json(m)));
  Json body_tools = nullptr;
  if (!tools.empty()) {
    body_tools = Json::array();
    for (const auto& t : tools) body_tools.push_back(plain_json(t));
  }
  Json answer;
  try {
    if (seed_) {  // 62 bits: a JSON integer every client and server reads as int64
      params_["seed"] = int64_t(splitmix64_finalize(*seed_ * kGoldenGamma + uint64_t(calls_)) >> 2);
    }
    calls_ += 1;
    answer = chat_.create(body_messages, body_tools, params_);
  } catch (const client::SwarmError& e) {
    std::string what = e.what();
    if (e.http_status() == 400 && (what.find("context") != std::string::npos)) {
      throw Error(ErrorCode::kResourceExhausted, what);
    }
    throw;
  }
  if (!answer.contains("choices") || !answer["choices"].is_array() || answer["choices"].empty()) {
    fail(ErrorCode::kInternal, "chat completion without choices: " + answer.dump().substr(0, 200));
  }
  const Json& choice = answer["choices"][0];
  if (answer.contains("usage") && answer["usage"].is_object()) {
    completion_tokens_ += answer["usage"].value("completion_tokens", int64_t{0});
  }
  tasks::ModelReply reply;
  reply.message =
      text::parse_chat_message(tasks::OrderedJson(choice.at("message")), "response message");
  reply.message.role = text::Role::kAssistant;
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    reply.finish_reason = choice["finish_reason"].get<std::string>();
  }
  return reply;
}

}  // namespace ajet::classic
