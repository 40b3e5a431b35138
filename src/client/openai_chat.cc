#include "client/openai_chat.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "common/json.h"

namespace ajet::client {

namespace {

bool retryable(int status) { return status == 409 || status == 429 || status == 503; }

double retry_after(const http::ClientResponse& r, double cap) {
  if (auto v = r.headers.get("Retry-After")) {
    char* end = nullptr;
    std::string text(*v);
    double s = std::strtod(text.c_str(), &end);
    if (end != text.c_str() && s >= 0) return std::min(s, cap);
  }
  return 1.0;
}

SwarmError chat_error(const http::ClientResponse& r) {
  Json body = try_parse_json(r.body).value_or(Json(Json::value_t::discarded));
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    const Json& e = body["error"];
    std::string message = e.contains("message") && e["message"].is_string()
                              ? e["message"].get<std::string>()
                              : e.dump();
    std::string code =
        e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : "";
    return SwarmError(SwarmErrorKind::kChat,
                      fmt::format("chat completion failed ({}): {}", r.status, message), r.status,
                      code);
  }
  return SwarmError(SwarmErrorKind::kChat,
                    fmt::format("chat completion failed ({}): {}", r.status, r.body.substr(0, 500)),
                    r.status);
}

std::string string_or_empty(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

Json ChatMessage::to_json() const {
  Json m = {{"role", role}, {"content", content ? Json(*content) : Json(nullptr)}};
  if (!tool_calls.empty()) {
    Json calls = Json::array();
    for (const auto& c : tool_calls) {
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    m["tool_calls"] = calls;
  }
  return m;
}

Json system_message(const std::string& text) { return {{"role", "system"}, {"content", text}}; }
Json user_message(const std::string& text) { return {{"role", "user"}, {"content", text}}; }
Json tool_message(const std::string& tool_call_id, const std::string& content) {
  return {{"role", "tool"}, {"tool_call_id", tool_call_id}, {"content", content}};
}
Json function_tool(const std::string& name, const std::string& description,
                   const Json& parameters) {
  return {{"type", "function"},
          {"function", {{"name", name}, {"description", description}, {"parameters", parameters}}}};
}

ChatMessage parse_message(const Json& message, const std::string& finish_reason) {
  if (!message.is_object()) invalid_argument("chat completion: message is not an object");
  ChatMessage m;
  m.role = message.value("role", "assistant");
  if (auto c = message.find("content"); c != message.end() && c->is_string())
    m.content = c->get<std::string>();
  m.reasoning_content = string_or_empty(message, "reasoning_content");
  if (auto calls = message.find("tool_calls"); calls != message.end() && calls->is_array()) {
    for (const auto& c : *calls) {
      if (!c.is_object()) continue;
      const Json fn = c.value("function", Json::object());
      m.tool_calls.push_back({string_or_empty(c, "id"), string_or_empty(fn, "name"),
                              string_or_empty(fn, "arguments")});
    }
  }
  m.finish_reason = finish_reason;
  return m;
}

void StreamAccumulator::add(const Json& chunk) {
  if (!chunk.is_object()) return;
  if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) usage_ = *u;
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array()) return;
  for (const auto& choice : *choices) {
    if (!choice.is_object() || choice.value("index", int64_t(0)) != index_) continue;
    const Json delta = choice.value("delta", Json::object());
    if (auto c = delta.find("content"); c != delta.end() && c->is_string()) {
      message_.content = message_.content.value_or("") + c->get<std::string>();
    }
    message_.reasoning_content += string_or_empty(delta, "reasoning_content");
    if (auto calls = delta.find("tool_calls"); calls != delta.end() && calls->is_array()) {
      for (const auto& tc : *calls) {
        size_t i = size_t(std::max<int64_t>(0, tc.value("index", int64_t(0))));
        if (calls_.size() <= i) calls_.resize(i + 1);
        if (auto id = string_or_empty(tc, "id"); !id.empty()) calls_[i].id = id;
        const Json fn = tc.value("function", Json::object());
        calls_[i].name += string_or_empty(fn, "name");
        calls_[i].arguments += string_or_empty(fn, "arguments");
      }
    }
    if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string())
      message_.finish_reason = *f;
  }
}

ChatMessage StreamAccumulator::message() const {
  ChatMessage m = message_;
  m.tool_calls = calls_;
  return m;
}

static http::ClientOptions chat_http_options(const ChatOptions& o) {
  http::ClientOptions h;
  h.timeout = o.timeout;
  h.connect_timeout = o.connect_timeout;
  h.user_agent = "ajet-chat-cpp";
  return h;
}

ChatClient::ChatClient(std::string base_url, std::string api_key, ChatOptions options)
    : base_url_(std::move(base_url)),
      api_key_(std::move(api_key)),
      options_(std::move(options)),
      pool_(base_url_, chat_http_options(options_), 8) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
}

http::Headers ChatClient::headers() const {
  http::Headers h{{"Authorization", "Bearer " + api_key_}, {"Content-Type", "application/json"}};
  if (!options_.agent_name.empty()) h.add("X-Agent-Name", options_.agent_name);
  return h;
}

Json ChatClient::body(const Json& messages, const Json& tools, const Json& params,
                      bool stream) const {
  if (!messages.is_array()) invalid_argument("chat: messages must be a JSON array");
  Json b = {{"model", options_.model}, {"messages", messages}};
  if (tools.is_array() && !tools.empty()) b["tools"] = tools;
  if (params.is_object()) {
    for (const auto& [k, v] : params.items()) b[k] = v;
  }
  if (stream) {
    b["stream"] = true;
  } else {
    b.erase("stream");
  }
  return b;
}

Json ChatClient::create(const Json& messages, const Json& tools, const Json& params) {
  const std::string text = body(messages, tools, params, false).dump();
  for (int attempt = 0;; ++attempt) {
    auto conn = pool_.acquire();
    http::ClientResponse r;
    try {
      r = conn->request("POST", "/chat/completions", headers(), text);
    } catch (const Error& e) {
      conn.discard();
      throw SwarmError(SwarmErrorKind::kConnection,
                       fmt::format("POST {}/chat/completions: {}", base_url_, e.what()));
    }
    if (r.status == 200) {
      Json data = try_parse_json(r.body).value_or(Json(Json::value_t::discarded));
      if (!data.is_object() || !data.contains("choices") || !data["choices"].is_array()) {
        throw SwarmError(
            SwarmErrorKind::kChat,
            "chat completion: the answer is not a ChatCompletion: " + r.body.substr(0, 500),
            r.status);
      }
      return data;
    }
    if (retryable(r.status) && attempt < options_.max_retries) {
      std::this_thread::sleep_for(
          std::chrono::duration<double>(retry_after(r, options_.max_retry_after)));
      continue;
    }
    throw chat_error(r);
  }
}

ChatMessage ChatClient::chat(const Json& messages, const Json& tools, const Json& params) {
  Json data = create(messages, tools, params);
  if (data["choices"].empty())
    throw SwarmError(SwarmErrorKind::kChat, "chat completion: no choices", 200);
  const Json& choice = data["choices"][0];
  return parse_message(choice.value("message", Json::object()),
                       string_or_empty(choice, "finish_reason"));
}

ChatMessage ChatClient::stream(const Json& messages, const Json& tools, const Json& params,
                               const std::function<bool(const Json&)>& on_chunk) {
  const std::string text = body(messages, tools, params, true).dump();
  for (int attempt = 0;; ++attempt) {
    StreamAccumulator acc;
    bool done = false;
    bool stopped_early = false;
    std::optional<SwarmError> bad;
    auto conn = pool_.acquire();
    http::ClientResponse r;
    try {
      r = conn->stream("POST", "/chat/completions", headers(), text, [&](const http::SseEvent& e) {
        if (e.data == "[DONE]") {
          done = true;
          return true;  // read to the end of the body so the connection stays reusable
        }
        Json chunk = try_parse_json(e.data).value_or(Json(Json::value_t::discarded));
        if (!chunk.is_object()) {
          bad.emplace(SwarmErrorKind::kChat,
                      "chat stream: an event is not JSON: " + e.data.substr(0, 200));
          return false;
        }
        if (chunk.contains("error")) {
          bad.emplace(SwarmErrorKind::kChat, "chat stream: " + chunk["error"].dump());
          return false;
        }
        acc.add(chunk);
        if (on_chunk && !on_chunk(chunk)) {
          done = stopped_early = true;
          return false;
        }
        return true;
      });
    } catch (const Error& e) {
      conn.discard();
      throw SwarmError(SwarmErrorKind::kConnection,
                       fmt::format("POST {}/chat/completions: {}", base_url_, e.what()));
    }
    if (stopped_early || bad) conn.discard();  // reading stopped mid-body: the connection is closed
    if (bad) throw *bad;
    if (r.status == 200) {
      if (!done) {
        throw SwarmError(SwarmErrorKind::kConnection,
                         "chat stream: the server closed the stream before [DONE]");
      }
      return acc.message();
    }
    if (retryable(r.status) && attempt < options_.max_retries) {
      std::this_thread::sleep_for(
          std::chrono::duration<double>(retry_after(r, options_.max_retry_after)));
      continue;
    }
    throw chat_error(r);
  }
}

}  // namespace ajet::client
