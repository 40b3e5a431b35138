// The built-in agents' ChatModel bound to one episode: POST {base_url}/chat/completions with the
// episode key (client::ChatClient), the reply parsed back into a text::ChatMessage. Counts calls
// and generated tokens (usage) for the progress line. One object per episode, one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "client/openai_chat.h"
#include "common/json.h"
#include "tasks/agent.h"

namespace ajet::classic {

// The same document as an unordered ajet::Json (the client's type).
Json plain_json(const tasks::OrderedJson& j);

class HttpChatModel : public tasks::ChatModel {
 public:
  // `params` go into every request body (eval episodes: temperature, top_p; train: {}: the server's
  // rollout settings apply anyway). With `seed` (the episode's env_seed), call i also sends
  // `"seed": mix(seed, i)`: every token the episode samples follows from it (docs/determinism.md).
  HttpChatModel(const std::string& base_url, const std::string& api_key, Json params,
                std::optional<uint64_t> seed = std::nullopt);

  // A 400 naming the context window becomes Error(kResourceExhausted) (the agent's context_limit);
  // every other failure is rethrown as is (model_error).
  tasks::ModelReply complete(const std::vector<text::ChatMessage>& messages,
                             const std::vector<tasks::OrderedJson>& tools) override;

  int64_t calls() const { return calls_; }
  int64_t completion_tokens() const { return completion_tokens_; }

 private:
  client::ChatClient chat_;
  Json params_;
  std::optional<uint64_t> seed_;
  int64_t calls_ = 0;
  int64_t completion_tokens_ = 0;
};

}  // namespace ajet::classic
