// Text-level merging (see merge.h): calls compared message by message, re-rendered history replaced
// by the exact ids of the completion it repeats.
#include <algorithm>
#include <functional>
#include <map>

#include "common/error.h"
#include "text/messages.h"
#include "tracking/merge.h"

namespace ajet::tracking {

namespace {

// One message-sized piece of a call's stream.
struct Unit {
  uint64_t key = 0;
  std::vector<TokenId> ids;
  std::vector<TokenOrigin> origins;
  int32_t message_index = -1;
  StreamPart::Kind kind = StreamPart::Kind::kMessage;
  bool completion = false;
  int32_t generation_prompt_tokens =
      0;  // completion units: generation prompt, completion, footer lengths
  int32_t completion_tokens = 0;
};

uint64_t hash_text(std::string_view s) { return std::hash<std::string_view>{}(s); }

uint64_t hash_ids(std::span<const TokenId> ids) {
  std::string_view bytes(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(TokenId));
  return hash_text(bytes) ^ 0x9e3779b97f4a7c15ull;
}

uint64_t mix(uint64_t a, uint64_t b) {
  return a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
}

Unit env_unit(const CallRecord& c, int32_t b, int32_t e, int32_t message_index,
              StreamPart::Kind kind) {
  Unit u;
  u.ids.assign(c.prompt_ids.begin() + b, c.prompt_ids.begin() + e);
  u.origins.assign(u.ids.size(), TokenOrigin{});
  u.message_index = message_index;
  u.kind = kind;
  if (message_index >= 0 && static_cast<size_t>(message_index) < c.request.messages.size()) {
    const text::ChatMessage& m = c.request.messages[static_cast<size_t>(message_index)];
    u.key = mix(hash_text(text::role_name(m.role)), hash_text(comparable_content(m)));
  } else {
    u.key = hash_ids(u.ids);
  }
  return u;
}

std::vector<Unit> units_of(const CallRecord& c, size_t call_pos, const MergeOptions& options) {
  std::vector<Unit> units;
  std::vector<std::pair<int32_t, int32_t>> spans;  // (begin, message index)
  for (size_t i = 0; i < c.message_spans.size(); ++i) {
    const MessageTokens& s = c.message_spans[i];
    if (s.end > s.begin && s.end <= c.generation_prompt_begin)
      spans.emplace_back(s.begin, static_cast<int32_t>(i));
  }
  std::sort(spans.begin(), spans.end());
  int32_t cursor = 0;
  for (auto [b, i] : spans) {
    if (b < cursor) continue;  // overlapping spans: keep the first
    if (b > cursor) units.push_back(env_unit(c, cursor, b, -1, StreamPart::Kind::kPreamble));
    const int32_t e = c.message_spans[static_cast<size_t>(i)].end;
    units.push_back(env_unit(c, b, e, i, StreamPart::Kind::kMessage));
    cursor = e;
  }
  if (cursor < c.generation_prompt_begin) {
    units.push_back(
        env_unit(c, cursor, c.generation_prompt_begin, -1, StreamPart::Kind::kPreamble));
  }
  if (!options.ignore_tools && !units.empty()) {
    std::string tools;
    for (const text::OrderedJson& t : c.request.tools) tools += t.dump();
    units.front().key = mix(units.front().key, hash_text(tools));
  }

  // The completion as a whole assistant turn: generation prompt + generated ids + template footer.
  const ChatFormat& f = *options.format;
  Unit u;
  u.completion = true;
  u.kind = StreamPart::Kind::kGenerationPrompt;
  u.ids.assign(c.prompt_ids.begin() + c.generation_prompt_begin, c.prompt_ids.end());
  u.generation_prompt_tokens = static_cast<int32_t>(u.ids.size());
  u.origins.assign(u.ids.size(), TokenOrigin{});
  for (size_t i = 0; i < c.completion_ids.size(); ++i) {
    u.ids.push_back(c.completion_ids[i]);
    u.origins.push_back({static_cast<int32_t>(call_pos), static_cast<int32_t>(i)});
  }
  u.completion_tokens = static_cast<int32_t>(c.completion_ids.size());
  if (!c.ended_with_end_token) u.ids.push_back(f.end_of_turn);
  u.ids.insert(u.ids.end(), f.footer_after_end.begin(), f.footer_after_end.end());
  u.origins.resize(u.ids.size(), TokenOrigin{});
  const text::ParsedOutput parsed =
      parse_generated(generation_prompt_tail(c, f), c.completion_text);
  text::ChatMessage m;
  m.role = text::Role::kAssistant;
  m.content = parsed.content;
  u.key = mix(hash_text(text::role_name(text::Role::kAssistant)), hash_text(comparable_content(m)));
  units.push_back(std::move(u));
  return units;
}

}  // namespace

std::vector<Stream> text_streams(std::span<const CallRecord> calls,
                                 const std::vector<size_t>& agent_calls,
                                 const MergeOptions& options) {
  if (options.format == nullptr)
    invalid_argument("text-level merging needs the model's chat format");
  struct UNode {
    size_t call = 0;  // index into agent_calls of the unit chosen as canonical
    size_t unit = 0;
    bool completion = false;
  };
  std::vector<std::vector<Unit>> units;
  std::vector<std::vector<int32_t>> node_path;  // per call: unit-trie node of each unit
  std::vector<UNode> nodes;
  std::map<std::pair<int32_t, uint64_t>, int32_t> children;
  for (size_t k = 0; k < agent_calls.size(); ++k) {
    units.push_back(units_of(calls[agent_calls[k]], agent_calls[k], options));
    node_path.emplace_back();
    int32_t at = -1;
    for (size_t u = 0; u < units[k].size(); ++u) {
      auto [it, fresh] =
          children.emplace(std::make_pair(at, units[k][u].key), static_cast<int32_t>(nodes.size()));
      if (fresh) {
        nodes.push_back({k, u, units[k][u].completion});
      } else if (units[k][u].completion && !nodes[static_cast<size_t>(it->second)].completion) {
        // Upstream's toggle: a message that repeats a completion takes the completion's exact ids.
        nodes[static_cast<size_t>(it->second)] = {k, u, true};
      }
      at = it->second;
      node_path[k].push_back(at);
    }
  }

  std::vector<Stream> out;
  for (size_t k = 0; k < agent_calls.size(); ++k) {
    Stream s;
    s.call = agent_calls[k];
    for (size_t u = 0; u < units[k].size(); ++u) {
      const UNode& n = nodes[static_cast<size_t>(node_path[k][u])];
      const Unit& canon = units[n.call][n.unit];
      const Unit& own = units[k][u];
      const auto begin = static_cast<int32_t>(s.ids.size());
      if (canon.completion) {
        const StreamPart::Kind head =
            own.completion ? StreamPart::Kind::kGenerationPrompt : own.kind;
        s.parts.push_back({begin, own.message_index, head});
        s.parts.push_back({begin + canon.generation_prompt_tokens, own.message_index,
                           StreamPart::Kind::kCompletion});
        s.parts.push_back({begin + canon.generation_prompt_tokens + canon.completion_tokens,
                           own.message_index, StreamPart::Kind::kFooter});
      } else {
        s.parts.push_back({begin, own.message_index, own.kind});
      }
      s.ids.insert(s.ids.end(), canon.ids.begin(), canon.ids.end());
      s.origins.insert(s.origins.end(), canon.origins.begin(), canon.origins.end());
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace ajet::tracking
