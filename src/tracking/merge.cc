#include "tracking/merge.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "common/error.h"
#include "config/config.h"
#include "tracking/token_trie.h"

namespace ajet::tracking {

std::string_view compare_level_name(CompareLevel level) {
  return level == CompareLevel::kText ? "text" : "token";
}

CompareLevel compare_level_from_name(std::string_view name) {
  if (name == "token") return CompareLevel::kToken;
  if (name == "text") return CompareLevel::kText;
  invalid_argument("timeline_compare_level must be 'token' or 'text', got '" + std::string(name) +
                   "'");
}

std::string_view stream_part_name(StreamPart::Kind kind) {
  switch (kind) {
    case StreamPart::Kind::kPreamble: return "preamble";
    case StreamPart::Kind::kMessage: return "message";
    case StreamPart::Kind::kGenerationPrompt: return "generation_prompt";
    case StreamPart::Kind::kCompletion: return "completion";
    case StreamPart::Kind::kFooter: return "footer";
  }
  return "unknown";
}

MergeOptions MergeOptions::from_config(const config::Config& config, const ChatFormat* format) {
  MergeOptions o;
  o.compare_level = compare_level_from_name(config.context_tracker.timeline_compare_level);
  o.ignore_tools = config.context_tracker.ignore_tools;
  o.trainable_agents = config.context_tracker.trainable_agents;
  o.max_samples_per_episode = config.rollout.multi_turn.max_sample_per_task;
  o.format = format;
  return o;
}

bool MergeOptions::is_trainable(const std::string& agent_name) const {
  return trainable_agents.empty() || std::find(trainable_agents.begin(), trainable_agents.end(),
                                               agent_name) != trainable_agents.end();
}

size_t Sample::trained_tokens() const {
  return static_cast<size_t>(std::count(loss_mask.begin(), loss_mask.end(), uint8_t{1}));
}

Stream token_stream(const CallRecord& call, size_t call_pos) {
  Stream s;
  s.call = call_pos;
  const size_t prompt = call.prompt_ids.size();
  s.ids.reserve(call.stream_size());
  s.ids.insert(s.ids.end(), call.prompt_ids.begin(), call.prompt_ids.end());
  s.ids.insert(s.ids.end(), call.completion_ids.begin(), call.completion_ids.end());
  s.origins.assign(prompt, TokenOrigin{});
  s.origins.reserve(s.ids.size());
  for (size_t i = 0; i < call.completion_ids.size(); ++i) {
    s.origins.push_back({static_cast<int32_t>(call_pos), static_cast<int32_t>(i)});
  }
  std::vector<std::pair<int32_t, int32_t>> spans;  // (begin, message index)
  for (size_t i = 0; i < call.message_spans.size(); ++i) {
    if (call.message_spans[i].end > call.message_spans[i].begin)
      spans.emplace_back(call.message_spans[i].begin, static_cast<int32_t>(i));
  }
  std::sort(spans.begin(), spans.end());
  if (spans.empty() || spans.front().first > 0)
    s.parts.push_back({0, -1, StreamPart::Kind::kPreamble});
  for (auto [b, i] : spans) {
    if (b < call.generation_prompt_begin) s.parts.push_back({b, i, StreamPart::Kind::kMessage});
  }
  if (static_cast<size_t>(call.generation_prompt_begin) < prompt) {
    s.parts.push_back({call.generation_prompt_begin, -1, StreamPart::Kind::kGenerationPrompt});
  }
  if (!call.completion_ids.empty())
    s.parts.push_back({static_cast<int32_t>(prompt), -1, StreamPart::Kind::kCompletion});
  return s;
}

namespace {

const StreamPart* part_at(const Stream& s, int32_t position) {
  auto it = std::upper_bound(s.parts.begin(), s.parts.end(), position,
                             [](int32_t p, const StreamPart& part) { return p < part.begin; });
  if (it == s.parts.begin()) return nullptr;
  return &*(it - 1);
}

struct AgentWork {
  std::string name;
  std::string adapter;  // its calls' LoRA adapter ("" = the base): each (agent, adapter) apart
  bool trainable = true;
  std::vector<size_t> calls;  // positions into the calls span, call_index order
  std::vector<Stream> streams;
  TokenTrie trie;
  std::vector<std::vector<int32_t>> streams_ending_at;  // per node: streams whose last token it is
  std::vector<int32_t> leaves;                          // depth-first
  std::vector<std::vector<int32_t>> paths;              // per leaf
  std::vector<int64_t> generated_on_path;               // per leaf
  std::vector<uint8_t> kept;                            // per leaf
  std::vector<int32_t> owner;  // per node: first kept leaf (agent-local order) containing it
  int32_t first_sample = 0;    // index of its first sample in the episode
  AgentMergeDiagnostics diag;
};

bool is_generated(const TokenTrie& trie, int32_t node) {
  return trie.node(node).generation.generated();
}

// owner[node] = rank (among kept leaves, depth-first) of the first kept leaf whose path holds it.
void compute_ownership(AgentWork& a) {
  a.owner.assign(a.trie.size(), -1);
  int32_t rank = 0;
  for (size_t k = 0; k < a.leaves.size(); ++k) {
    if (!a.kept[k]) continue;
    for (int32_t n : a.paths[k]) {
      if (a.owner[static_cast<size_t>(n)] < 0) a.owner[static_cast<size_t>(n)] = rank;
    }
    ++rank;
  }
}

std::string role_of(const CallRecord& call, int32_t message_index) {
  if (message_index < 0 || static_cast<size_t>(message_index) >= call.request.messages.size())
    return "";
  return std::string(
      text::role_name(call.request.messages[static_cast<size_t>(message_index)].role));
}

const RenderNote* note_for(const CallRecord& call, int32_t message_index) {
  for (const RenderNote& n : call.render_notes) {
    if (n.message_index == message_index) return &n;
  }
  return nullptr;
}

std::string describe(const BranchDiagnostic& b, bool ours) {
  const int64_t call = ours ? b.call : b.other_call;
  const std::string& part = ours ? b.part : b.other_part;
  const int32_t msg = ours ? b.message_index : b.other_message_index;
  const std::string& role = ours ? b.role : b.other_role;
  std::string s = "call " + std::to_string(call) + " ";
  if (part == "message") {
    s += "message " + std::to_string(msg) + (role.empty() ? "" : " (" + role + ")");
  } else {
    s += part;
  }
  return s;
}

// Whether message `msg` of `prompt_call`'s request is an assistant turn with the content and tool
// calls that `generated` produced (the test prompt rendering uses to splice, without the
// generation prompt's text, which calls read back from the store do not keep decoded).
bool repeats_completion(const CallRecord& prompt_call, int32_t msg, const CallRecord& generated) {
  if (msg < 0 || static_cast<size_t>(msg) >= prompt_call.request.messages.size()) return false;
  const text::ChatMessage& m = prompt_call.request.messages[static_cast<size_t>(msg)];
  if (m.role != text::Role::kAssistant) return false;
  const std::string key = generated_signature("", generated.completion_text).key;
  return !key.empty() && message_signature(m).key == key;
}

void classify(BranchDiagnostic& b, const CallRecord& ours, const CallRecord& other) {
  const bool our_gen = b.part == "completion";
  const bool other_gen = b.other_part == "completion";
  // A call's own turn as the engine saw it: its generation prompt, then what it generated. A
  // generation prompt that opens the think block ("<think>\n") makes a later re-rendering of that
  // turn differ inside the generation prompt, before the first generated token.
  const bool our_turn = our_gen || b.part == "generation_prompt";
  const bool other_turn = other_gen || b.other_part == "generation_prompt";
  if (b.position == 0) {
    b.kind = "different_start";
    b.reason = "shares no token with sample " + std::to_string(b.from_sample) + ": " +
               describe(b, true) + " vs " + describe(b, false);
    return;
  }
  if (our_gen && other_gen) {
    b.kind = "retry";
    b.reason = "call " + std::to_string(b.call) + " sampled a different completion than call " +
               std::to_string(b.other_call) + " after the same prefix (a retry, or n > 1)";
    return;
  }
  if (our_turn != other_turn) {
    // One side is a call's own turn here; the other side's prompt has something else at this
    // place.
    const CallRecord& prompt_call = our_turn ? other : ours;
    const int64_t gen_call = our_turn ? b.call : b.other_call;
    const int32_t msg = our_turn ? b.other_message_index : b.message_index;
    const bool at_completion = our_turn ? our_gen : other_gen;
    const std::string where = describe(b, !our_turn);
    const RenderNote* note = note_for(prompt_call, msg);
    if (note != nullptr && (note->kind == RenderNote::Kind::kRewritten ||
                            note->kind == RenderNote::Kind::kFooterMismatch)) {
      b.kind = "template_rewrote";
      b.reason = where + " repeats call " + std::to_string(note->call) +
                 "'s completion but the chat template rendered " +
                 "it differently from what was generated: " + note->detail;
      return;
    }
    if (note != nullptr && note->kind == RenderNote::Kind::kSplicingDisabled) {
      b.kind = "template_rewrote";
      b.reason = where + " was re-rendered from text (splicing disabled) and differs from call " +
                 std::to_string(gen_call) + "'s generated ids";
      return;
    }
    if (note == nullptr && prompt_call.render_notes.empty() &&
        repeats_completion(prompt_call, msg, our_turn ? ours : other)) {
      // Read back from the store (no render notes): the message says what the call generated,
      // yet its ids differ, so the template rendered it differently (or splicing was off).
      b.kind = "template_rewrote";
      b.reason = where + " repeats call " + std::to_string(gen_call) +
                 "'s completion but its ids differ from what was generated: the chat template "
                 "rendered it differently (e.g. dropped <think> before a later user query)";
      return;
    }
    if (at_completion) {
      b.kind = "edited_completion";
      b.reason = where + " differs from what call " + std::to_string(gen_call) +
                 " generated there (the client edited, dropped or replaced that completion)";
      return;
    }
  }
  b.kind = "history_differs";
  b.reason = describe(b, true) + " differs from " + describe(b, false) +
             " (a different conversation: sub-agent, summarised or edited history)";
}

// Where a branch's token at one position came from: the call that brought it (the node's first
// stream) and the part of that call's stream. Fields the stream's parts do not cover keep the
// defaults of BranchDiagnostic.
struct BranchSide {
  const CallRecord* record = nullptr;
  int64_t call = -1;
  int32_t message_index = -1;
  std::string part;
  std::string role;
  TokenId token = -1;
};

BranchSide branch_side(const AgentWork& a, std::span<const CallRecord> calls, int32_t node) {
  const TokenTrie::Node& nd = a.trie.node(node);
  const Stream& st = a.streams[static_cast<size_t>(nd.first_stream)];
  BranchSide side;
  side.record = &calls[st.call];
  side.call = side.record->call_index;
  side.token = nd.token;
  if (const StreamPart* sp = part_at(st, nd.depth)) {
    side.part = std::string(stream_part_name(sp->kind));
    side.message_index = sp->message_index;
    side.role = role_of(*side.record, side.message_index);
  }
  return side;
}

// Positions into `calls`, validated, in call_index order (stable for equal indices).
std::vector<size_t> call_order(std::span<const CallRecord> calls) {
  for (const CallRecord& c : calls) validate_call(c);
  std::vector<size_t> order(calls.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return calls[a].call_index < calls[b].call_index; });
  return order;
}

// The agents in order of first call, each with its calls in call order; an agent's calls to
// different adapters are different policies' and form separate groups.
std::vector<AgentWork> group_by_agent(std::span<const CallRecord> calls,
                                      const std::vector<size_t>& order,
                                      const MergeOptions& options) {
  std::vector<AgentWork> agents;
  std::map<std::pair<std::string, std::string>, size_t> agent_pos;
  for (size_t pos : order) {
    const std::string& name = calls[pos].agent_name;
    auto [it, fresh] = agent_pos.emplace(std::pair{name, calls[pos].adapter}, agents.size());
    if (fresh) {
      agents.emplace_back();
      agents.back().name = name;
      agents.back().adapter = calls[pos].adapter;
      agents.back().trainable = options.is_trainable(name);
    }
    agents[it->second].calls.push_back(pos);
  }
  return agents;
}

// One agent's streams into its trie; then its leaves (samples), their paths and generated-token
// counts, every leaf kept, and token ownership.
void build_trie(AgentWork& a, std::span<const CallRecord> calls, const MergeOptions& options) {
  if (options.compare_level == CompareLevel::kText) {
    a.streams = text_streams(calls, a.calls, options);
  } else {
    for (size_t pos : a.calls) a.streams.push_back(token_stream(calls[pos], pos));
  }
  std::vector<int32_t> ends;
  for (size_t s = 0; s < a.streams.size(); ++s) {
    ends.push_back(a.trie.insert(a.streams[s].ids, a.streams[s].origins, static_cast<int32_t>(s)));
  }
  // Samples end at their last generated token: environment tokens after it carry no loss.
  const std::vector<uint8_t> alive = a.trie.generated_closure();
  a.streams_ending_at.assign(a.trie.size(), {});
  for (size_t s = 0; s < ends.size(); ++s) {
    int32_t n = ends[s];
    while (n != TokenTrie::kRoot && !alive[static_cast<size_t>(n)]) n = a.trie.node(n).parent;
    a.streams_ending_at[static_cast<size_t>(n)].push_back(static_cast<int32_t>(s));
  }
  a.leaves = a.trie.leaves(&alive);
  for (int32_t leaf : a.leaves) {
    a.paths.push_back(a.trie.path(leaf));
    int64_t g = 0;
    for (int32_t n : a.paths.back()) g += is_generated(a.trie, n) ? 1 : 0;
    a.generated_on_path.push_back(g);
  }
  a.kept.assign(a.leaves.size(), 1);
  compute_ownership(a);
}

// The cap over the trainable samples of the whole episode: beyond `max_samples` (> 0), the samples
// with the fewest generated tokens (ties: later ones) are dropped and ownership is recomputed.
// Returns how many were dropped.
int64_t apply_cap(std::vector<AgentWork>& agents, int64_t max_samples) {
  struct Candidate {
    size_t agent;
    size_t leaf;
    int64_t generated;
  };
  std::vector<Candidate> candidates;
  for (size_t ai = 0; ai < agents.size(); ++ai) {
    if (!agents[ai].trainable) continue;
    for (size_t k = 0; k < agents[ai].leaves.size(); ++k) {
      if (agents[ai].kept[k]) candidates.push_back({ai, k, agents[ai].generated_on_path[k]});
    }
  }
  if (static_cast<int64_t>(candidates.size()) <= max_samples) return 0;
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const Candidate& x, const Candidate& y) { return x.generated > y.generated; });
  int64_t dropped = 0;
  for (size_t i = static_cast<size_t>(max_samples); i < candidates.size(); ++i) {
    agents[candidates[i].agent].kept[candidates[i].leaf] = 0;
    ++agents[candidates[i].agent].diag.samples_dropped_by_cap;
    ++dropped;
  }
  for (AgentWork& a : agents) {
    if (a.diag.samples_dropped_by_cap > 0) compute_ownership(a);
  }
  return dropped;
}

// The agent's token counts before merging and its generated nodes' counts into a.diag.
void count_agent_tokens(AgentWork& a, std::span<const CallRecord> calls) {
  AgentMergeDiagnostics& d = a.diag;
  d.agent_name = a.name;
  d.trainable = a.trainable;
  d.calls = static_cast<int64_t>(a.calls.size());
  for (size_t pos : a.calls) {
    d.tokens_before += static_cast<int64_t>(calls[pos].stream_size());
    d.generated_tokens += static_cast<int64_t>(calls[pos].completion_ids.size());
  }
  for (size_t n = 1; n < a.trie.size(); ++n) {
    const TokenTrie::Node& node = a.trie.node(static_cast<int32_t>(n));
    if (!node.generation.generated()) continue;
    ++d.unique_generated_tokens;
    d.duplicate_generated_tokens += node.generated_count - 1;
    if (a.owner[n] < 0) ++d.untrained_generated_tokens;
  }
}

// The sample of `path`, the agent's kept leaf of rank `rank`, numbered `index` in the episode: it
// trains the generated tokens it owns.
Sample make_sample(const AgentWork& a, const EpisodeInfo& episode,
                   std::span<const CallRecord> calls, const std::vector<int32_t>& path,
                   int32_t rank, int32_t index) {
  const size_t length = path.size();
  Sample s;
  s.episode_uuid = episode.episode_uuid;
  s.task_id = episode.task_id;
  s.agent_name = a.name;
  s.adapter = a.adapter;
  s.index = index;
  s.trainable = a.trainable;
  s.reward = episode.reward;
  s.token_ids.reserve(length);
  for (size_t p = 0; p < length; ++p) {
    const TokenTrie::Node& node = a.trie.node(path[p]);
    const bool gen = node.generation.generated();
    const CallRecord* gen_call = gen ? &calls[static_cast<size_t>(node.generation.call)] : nullptr;
    s.token_ids.push_back(node.token);
    s.loss_mask.push_back(a.trainable && gen && a.owner[static_cast<size_t>(path[p])] == rank ? 1
                                                                                              : 0);
    s.logprobs.push_back(gen ? gen_call->logprobs[static_cast<size_t>(node.generation.position)]
                             : 0.0f);
    s.policy_versions.push_back(
        gen ? gen_call->policy_versions[static_cast<size_t>(node.generation.position)] : -1);
    const size_t source = gen ? static_cast<size_t>(node.generation.call)
                              : a.streams[static_cast<size_t>(node.first_stream)].call;
    s.source_calls.push_back(static_cast<int32_t>(calls[source].call_index));
  }
  for (int32_t n : path) {
    for (int32_t st : a.streams_ending_at[static_cast<size_t>(n)]) {
      s.calls.push_back(calls[a.streams[static_cast<size_t>(st)].call].call_index);
    }
  }
  std::sort(s.calls.begin(), s.calls.end());
  return s;
}

// Where and why the sample of kept rank `rank` (> 0) splits from the earlier sample it shares the
// longest prefix with: the owner of the token before its first owned one.
BranchDiagnostic branch_diagnostic(const AgentWork& a, std::span<const CallRecord> calls,
                                   const std::vector<size_t>& kept_leaves, int32_t rank,
                                   int32_t sample) {
  const std::vector<int32_t>& path = a.paths[kept_leaves[static_cast<size_t>(rank)]];
  size_t p = 0;
  while (p < path.size() && a.owner[static_cast<size_t>(path[p])] != rank) ++p;
  const int32_t from = p == 0 ? 0 : a.owner[static_cast<size_t>(path[p - 1])];
  const std::vector<int32_t>& other_path = a.paths[kept_leaves[static_cast<size_t>(from)]];
  BranchDiagnostic b;
  b.sample = sample;
  b.from_sample = a.first_sample + from;
  b.position = static_cast<int32_t>(p);
  if (p < path.size() && p < other_path.size()) {
    const BranchSide ours = branch_side(a, calls, path[p]);
    const BranchSide other = branch_side(a, calls, other_path[p]);
    b.call = ours.call;
    b.message_index = ours.message_index;
    b.part = ours.part;
    b.role = ours.role;
    b.token = ours.token;
    b.other_call = other.call;
    b.other_message_index = other.message_index;
    b.other_part = other.part;
    b.other_role = other.role;
    b.other_token = other.token;
    classify(b, *ours.record, *other.record);
  } else {
    b.kind = "history_differs";
    b.reason = "continues past the end of sample " + std::to_string(b.from_sample);
  }
  return b;
}

// Appends the agent's kept samples to `out` (depth-first), with its diagnostics in a.diag: token
// counts, and one branch per sample after the first.
void emit_agent_samples(AgentWork& a, const EpisodeInfo& episode, std::span<const CallRecord> calls,
                        MergedEpisode& out) {
  a.first_sample = static_cast<int32_t>(out.samples.size());
  count_agent_tokens(a, calls);
  AgentMergeDiagnostics& d = a.diag;
  std::vector<size_t> kept_leaves;  // agent-local rank -> leaf
  for (size_t k = 0; k < a.leaves.size(); ++k) {
    if (a.kept[k]) kept_leaves.push_back(k);
  }
  for (size_t rank = 0; rank < kept_leaves.size(); ++rank) {
    const auto r = static_cast<int32_t>(rank);
    Sample s = make_sample(a, episode, calls, a.paths[kept_leaves[rank]], r,
                           static_cast<int32_t>(out.samples.size()));
    d.tokens_after += static_cast<int64_t>(s.token_ids.size());
    d.trained_tokens += static_cast<int64_t>(s.trained_tokens());
    if (rank > 0) d.branches.push_back(branch_diagnostic(a, calls, kept_leaves, r, s.index));
    out.samples.push_back(std::move(s));
  }
  d.samples = static_cast<int64_t>(kept_leaves.size());
  d.compression_ratio = d.tokens_after > 0 ? static_cast<double>(d.tokens_before) /
                                                 static_cast<double>(d.tokens_after)
                                           : 0.0;
}

// Each trainable sample's weight 1 / (trainable samples), so an episode counts once; the episode's
// diagnostics, taking over the agents'.
void finish_episode(MergedEpisode& out, std::vector<AgentWork>& agents, size_t calls,
                    const MergeOptions& options, int64_t dropped_by_cap) {
  int64_t trainable = 0;
  for (const Sample& s : out.samples) trainable += s.trainable ? 1 : 0;
  for (Sample& s : out.samples) s.weight = s.trainable ? 1.0 / static_cast<double>(trainable) : 0.0;

  MergeDiagnostics& md = out.diagnostics;
  md.compare_level = options.compare_level;
  md.calls = static_cast<int64_t>(calls);
  md.samples = static_cast<int64_t>(out.samples.size());
  md.trainable_samples = trainable;
  md.samples_dropped_by_cap = dropped_by_cap;
  for (AgentWork& a : agents) {
    md.tokens_before += a.diag.tokens_before;
    md.tokens_after += a.diag.tokens_after;
    md.agents.push_back(std::move(a.diag));
  }
  md.compression_ratio = md.tokens_after > 0 ? static_cast<double>(md.tokens_before) /
                                                   static_cast<double>(md.tokens_after)
                                             : 0.0;
}

}  // namespace

// The phases: 1. calls in call order, grouped by agent; 2. each agent's trie, samples and token
// ownership; 3. the cap; 4. each agent's samples and diagnostics; 5. weights and episode
// diagnostics.
MergedEpisode merge_episode(const EpisodeInfo& episode, std::span<const CallRecord> calls,
                            const MergeOptions& options) {
  if (options.compare_level == CompareLevel::kText && options.format == nullptr) {
    invalid_argument(
        "timeline_compare_level 'text' needs the model's chat format (tokenizer + template)");
  }
  // 1. Agents in order of first call.
  std::vector<AgentWork> agents = group_by_agent(calls, call_order(calls), options);
  // 2. One trie per agent.
  for (AgentWork& a : agents) build_trie(a, calls, options);
  // 3. The cap, over the trainable samples of the whole episode.
  const int64_t dropped_by_cap =
      options.max_samples_per_episode > 0 ? apply_cap(agents, options.max_samples_per_episode) : 0;
  // 4. Samples, agent by agent.
  MergedEpisode out;
  for (AgentWork& a : agents) emit_agent_samples(a, episode, calls, out);
  // 5. Weights and diagnostics.
  finish_episode(out, agents, calls.size(), options, dropped_by_cap);
  return out;
}

}  // namespace ajet::tracking
