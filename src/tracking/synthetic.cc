#include "tracking/synthetic.h"

#include <algorithm>
#include <random>

namespace ajet::tracking::synthetic {

namespace {

constexpr TokenId kRoleSystem = 3;
constexpr TokenId kRoleUser = 4;
constexpr TokenId kRoleAssistant = 5;
constexpr TokenId kRoleTool = 6;

TokenId role_token(text::Role r) {
  switch (r) {
    case text::Role::kSystem:
    case text::Role::kDeveloper: return kRoleSystem;
    case text::Role::kUser: return kRoleUser;
    case text::Role::kAssistant: return kRoleAssistant;
    case text::Role::kTool: return kRoleTool;
  }
  return kRoleUser;
}

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  double real() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
  // About `mean` (+-25 %), at least 1.
  int around(int mean) { return std::max(1, uniform(mean - mean / 4, mean + mean / 4)); }
  std::vector<TokenId> tokens(int n, int vocab) {
    std::vector<TokenId> v(static_cast<size_t>(n));
    for (TokenId& t : v) t = uniform(kFirstToken, vocab - 1);
    return v;
  }
  float logprob() { return static_cast<float>(-3.0 * real()); }

 private:
  std::mt19937_64 rng_;
};

// A prompt under construction: ids, one span per message, and the request's roles.
struct Prompt {
  std::vector<TokenId> ids;
  std::vector<MessageTokens> spans;
  std::vector<text::Role> roles;

  void add_message(text::Role role, const std::vector<TokenId>& content) {
    const auto b = static_cast<int32_t>(ids.size());
    ids.push_back(kTurnStart);
    ids.push_back(role_token(role));
    ids.insert(ids.end(), content.begin(), content.end());
    spans.push_back({b, static_cast<int32_t>(ids.size()), -1});
    roles.push_back(role);
  }
  // The previous call's generation prompt + completion (+ the end token the template supplies after
  // a truncated completion) as an assistant message.
  void add_turn(const CallRecord& call) {
    const auto b = static_cast<int32_t>(ids.size());
    ids.insert(ids.end(), call.prompt_ids.begin() + call.generation_prompt_begin,
               call.prompt_ids.end());
    ids.insert(ids.end(), call.completion_ids.begin(), call.completion_ids.end());
    if (!call.ended_with_end_token) ids.push_back(kEndOfTurn);
    spans.push_back({b, static_cast<int32_t>(ids.size()), -1});
    roles.push_back(text::Role::kAssistant);
  }
};

CallRecord make_call(const std::string& episode, const std::string& agent, int64_t index,
                     const Prompt& p, Gen& g, int completion_tokens, bool stop, int vocab) {
  CallRecord c;
  c.episode_uuid = episode;
  c.agent_name = agent;
  c.call_index = index;
  for (text::Role r : p.roles) {
    text::ChatMessage m;
    m.role = r;
    m.content = "synthetic";
    c.request.messages.push_back(std::move(m));
  }
  c.prompt_ids = p.ids;
  c.message_spans = p.spans;
  c.generation_prompt_begin = static_cast<int32_t>(c.prompt_ids.size());
  c.prompt_ids.push_back(kTurnStart);
  c.prompt_ids.push_back(kRoleAssistant);
  c.completion_ids = g.tokens(completion_tokens, vocab);
  if (stop) c.completion_ids.push_back(kEndOfTurn);
  for (size_t i = 0; i < c.completion_ids.size(); ++i) {
    c.logprobs.push_back(g.logprob());
    c.policy_versions.push_back(0);
  }
  c.finish_reason = stop ? FinishReason::kStop : FinishReason::kLength;
  c.ended_with_end_token = stop;
  return c;
}

}  // namespace

std::vector<CallRecord> linear_episode(const AgentShape& shape,
                                       const std::vector<TokenId>& system_prompt,
                                       const std::vector<TokenId>& task,
                                       const std::string& episode_uuid, uint64_t seed) {
  Gen g(seed);
  Prompt p;
  p.add_message(text::Role::kSystem, system_prompt);
  p.add_message(text::Role::kUser, task);
  std::vector<CallRecord> calls;
  for (int k = 0; k < shape.turns; ++k) {
    calls.push_back(make_call(episode_uuid, "agent", k, p, g,
                              g.around(shape.generated_tokens_per_turn) - 1, true,
                              shape.vocab_size));
    p.add_turn(calls.back());
    p.add_message(text::Role::kTool,
                  g.tokens(g.around(shape.observation_tokens_per_turn), shape.vocab_size));
  }
  return calls;
}

std::vector<std::vector<CallRecord>> grpo_group(const AgentShape& shape, int group_size,
                                                uint64_t seed) {
  Gen g(seed);
  const std::vector<TokenId> system_prompt =
      g.tokens(shape.system_prompt_tokens - 2, shape.vocab_size);
  const std::vector<TokenId> task = g.tokens(shape.task_tokens, shape.vocab_size);
  std::vector<std::vector<CallRecord>> group;
  for (int i = 0; i < group_size; ++i) {
    group.push_back(linear_episode(shape, system_prompt, task,
                                   "episode-" + std::to_string(seed) + "-" + std::to_string(i),
                                   seed * 1000003u + static_cast<uint64_t>(i) + 1));
  }
  return group;
}

std::vector<CallRecord> random_tree(const TreeShape& shape, const std::string& episode_uuid,
                                    uint64_t seed) {
  Gen g(seed);
  std::vector<CallRecord> calls;
  auto env_message = [&](Prompt& p) {
    const text::Role r = g.real() < 0.5 ? text::Role::kUser : text::Role::kTool;
    p.add_message(r, g.tokens(g.uniform(1, shape.max_message_tokens), shape.vocab_size));
  };
  const double total = shape.p_continue + shape.p_retry + shape.p_edit + 0.1;
  for (int k = 0; k < shape.calls; ++k) {
    const std::string& agent =
        shape.agents[static_cast<size_t>(g.uniform(0, static_cast<int>(shape.agents.size()) - 1))];
    std::vector<size_t> mine;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].agent_name == agent) mine.push_back(i);
    }
    Prompt p;
    const double r = g.real() * total;
    const CallRecord* base =
        mine.empty()
            ? nullptr
            : &calls[mine[static_cast<size_t>(g.uniform(0, static_cast<int>(mine.size()) - 1))]];
    auto copy_prefix = [&](const CallRecord& c, size_t messages) {
      for (size_t m = 0; m < messages; ++m) {
        const MessageTokens& s = c.message_spans[m];
        p.ids.insert(p.ids.end(), c.prompt_ids.begin() + s.begin, c.prompt_ids.begin() + s.end);
        p.spans.push_back({s.begin, s.end, -1});
        p.roles.push_back(c.request.messages[m].role);
      }
    };
    if (base != nullptr && r < shape.p_continue) {
      copy_prefix(*base, base->message_spans.size());
      p.add_turn(*base);
      env_message(p);
      if (g.real() < 0.3) env_message(p);
    } else if (base != nullptr && r < shape.p_continue + shape.p_retry) {
      copy_prefix(*base, base->message_spans.size());
    } else if (base != nullptr && r < shape.p_continue + shape.p_retry + shape.p_edit) {
      copy_prefix(*base,
                  static_cast<size_t>(g.uniform(1, static_cast<int>(base->message_spans.size()))));
      env_message(p);
    } else {
      p.add_message(text::Role::kSystem,
                    g.tokens(g.uniform(1, shape.max_message_tokens), shape.vocab_size));
      p.add_message(text::Role::kUser,
                    g.tokens(g.uniform(1, shape.max_message_tokens), shape.vocab_size));
    }
    const bool stop = g.real() < 0.7;
    calls.push_back(make_call(episode_uuid, agent, k, p, g,
                              g.uniform(stop ? 0 : 1, shape.max_completion_tokens), stop,
                              shape.vocab_size));
  }
  return calls;
}

}  // namespace ajet::tracking::synthetic
