// A minimal OpenAI chat client for C++ agents (classic-mode built-in agents, tests, benchmarks):
// POST {base_url}/chat/completions with the episode key, plain or streamed (SSE), tools and
// tool_calls. Thread-safe (connections are pooled); cheap to create per episode. Retries only the
// answers the swarm server marks retryable (409/429/503, after Retry-After); never resends a call
// that may have reached the model otherwise (each call is recorded for training).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "client/connection_pool.h"
#include "client/swarm_types.h"
#include "common/json.h"

namespace ajet::client {

struct ChatOptions {
  std::string model = "agentjet";
  std::string
      agent_name;  // X-Agent-Name: this agent's name in a multi-agent episode ("" = default)
  std::chrono::milliseconds timeout{
      300'000};  // each wait; for a stream, the longest gap between chunks
  std::chrono::milliseconds connect_timeout{5'000};
  int max_retries = 2;
  double max_retry_after = 30;  // seconds; a longer Retry-After is capped
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it
};

struct ChatMessage {
  std::string role = "assistant";
  std::optional<std::string> content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  std::string finish_reason;
  Json to_json() const;  // the assistant message to append to the conversation
};

// Message builders for the conversation array.
Json system_message(const std::string& text);
Json user_message(const std::string& text);
Json tool_message(const std::string& tool_call_id, const std::string& content);
// A tools array entry: {"type":"function","function":{name, description, parameters}}.
Json function_tool(const std::string& name, const std::string& description, const Json& parameters);

class ChatClient {
 public:
  // `base_url` ends in /v1 (as begin_episode returns it).
  ChatClient(std::string base_url, std::string api_key, ChatOptions options = {});

  // The whole ChatCompletion. `params` are merged into the body (temperature, max_tokens, n,
  // logprobs …). Throws SwarmError(kChat) with the OpenAI error's status and code, or kConnection.
  Json create(const Json& messages, const Json& tools = nullptr,
              const Json& params = Json::object());
  // The first choice's message.
  ChatMessage chat(const Json& messages, const Json& tools = nullptr,
                   const Json& params = Json::object());
  // stream=true: `on_chunk` sees every ChatCompletionChunk as it arrives (return false to stop
  // early); returns the first choice's message assembled from the deltas.
  ChatMessage stream(const Json& messages, const Json& tools, const Json& params,
                     const std::function<bool(const Json& chunk)>& on_chunk = {});

  const std::string& base_url() const { return base_url_; }

 private:
  Json body(const Json& messages, const Json& tools, const Json& params, bool stream) const;
  http::Headers headers() const;

  std::string base_url_;
  std::string api_key_;
  ChatOptions options_;
  ConnectionPool pool_;
};

// Parses a message object ({"role","content","tool_calls"}) as the API returns it.
ChatMessage parse_message(const Json& message, const std::string& finish_reason = "");

// Assembles deltas of one choice into a message, as the OpenAI SDKs do.
class StreamAccumulator {
 public:
  explicit StreamAccumulator(int64_t index = 0) : index_(index) {}
  void add(const Json& chunk);
  ChatMessage message() const;
  std::optional<Json> usage() const { return usage_; }

 private:
  int64_t index_;
  ChatMessage message_;
  std::vector<ToolCall> calls_;  // by delta index
  std::optional<Json> usage_;
};

}  // namespace ajet::client
