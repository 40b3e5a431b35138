#include "rpc/messages.h"

#include "common/strings.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace ajet::rpc {
namespace {

constexpr std::string_view kGenerateWhere = "generate request";
constexpr std::string_view kEventWhere = "tokens event";
constexpr std::string_view kTrainWhere = "train_step batch";

[[noreturn]] void bad(std::string_view where, const std::string& message) {
  invalid_argument(std::string(where) + ": " + message);
}

int32_t get_int_in(const Json& body, std::string_view key, std::string_view where, int64_t lo,
                   int64_t hi, std::optional<int32_t> fallback) {
  auto v = get_optional_int(body, key, where);
  if (!v) {
    if (!fallback) bad(where, "missing required field '" + std::string(key) + "'");
    return *fallback;
  }
  if (*v < lo || *v > hi) {
    bad(where, "'" + std::string(key) + "' must be in [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "], got " + std::to_string(*v));
  }
  return static_cast<int32_t>(*v);
}

void check_token_ids(const std::vector<int32_t>& ids, std::string_view name,
                     std::string_view where) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) {
      bad(where, std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                     " is not a valid token id");
    }
  }
}

template <class T>
void check_length(const std::vector<T>& v, size_t want, std::string_view name,
                  std::string_view where) {
  if (v.size() != want) {
    bad(where, "array '" + std::string(name) + "' has " + std::to_string(v.size()) +
                   " entries, expected " + std::to_string(want));
  }
}

}  // namespace

// ---- generate -------------------------------------------------------------------------------

Frame encode_generate_request(const GenerateRequest& r) {
  Frame f;
  f.method = std::string(kMethodGenerate);
  f.body = {{"n", r.n},         {"max_tokens", r.max_tokens}, {"temperature", r.temperature},
            {"top_p", r.top_p}, {"top_k", r.top_k},           {"top_logprobs", r.top_logprobs}};
  if (r.seed) f.body["seed"] = *r.seed;
  if (r.prompt_logprobs >= 0) f.body["prompt_logprobs"] = r.prompt_logprobs;
  if (!r.tag.empty()) f.body["tag"] = r.tag;
  if (!r.adapter.empty()) f.body["adapter"] = r.adapter;
  f.add_array("prompt", r.prompt);
  if (!r.stop_token_ids.empty()) f.add_array("stop_token_ids", r.stop_token_ids);
  return f;
}

GenerateRequest decode_generate_request(const Frame& f) {
  const auto where = kGenerateWhere;
  const Json& b = f.body;
  GenerateRequest r;
  r.prompt = f.array<int32_t>("prompt", where);
  if (r.prompt.empty()) bad(where, "'prompt' is empty");
  check_token_ids(r.prompt, "prompt", where);
  r.stop_token_ids =
      f.optional_array<int32_t>("stop_token_ids", where).value_or(std::vector<int32_t>{});
  check_token_ids(r.stop_token_ids, "stop_token_ids", where);
  r.n = get_int_in(b, "n", where, 1, kMaxSamplesPerRequest, 1);
  r.max_tokens =
      get_int_in(b, "max_tokens", where, 1, std::numeric_limits<int32_t>::max(), std::nullopt);
  r.top_k = get_int_in(b, "top_k", where, 0, std::numeric_limits<int32_t>::max(), 0);
  r.top_logprobs = get_int_in(b, "top_logprobs", where, 0, kMaxTopLogprobs, 0);
  r.prompt_logprobs = get_int_in(b, "prompt_logprobs", where, -1, kMaxTopLogprobs, -1);
  r.temperature = get_optional_number(b, "temperature", where).value_or(1.0);
  if (!std::isfinite(r.temperature) || r.temperature < 0) {
    bad(where, "'temperature' must be a finite number >= 0, got " + std::to_string(r.temperature));
  }
  r.top_p = get_optional_number(b, "top_p", where).value_or(1.0);
  if (!(r.top_p > 0 && r.top_p <= 1))
    bad(where, "'top_p' must be in (0, 1], got " + std::to_string(r.top_p));
  r.seed = get_optional_int(b, "seed", where);
  r.tag = get_optional_string(b, "tag", where).value_or("");
  r.adapter = get_optional_string(b, "adapter", where).value_or("");
  if (!r.adapter.empty()) {
    if (std::string why = adapter_name_problem(r.adapter); !why.empty())
      bad(where, "'adapter' " + why);
  }
  return r;
}

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kRepetition: return "repetition";
    case FinishReason::kLowEntropy: return "low_entropy";
    case FinishReason::kGarbage: return "garbage";
    case FinishReason::kLanguageSwitch: return "language_switch";
  }
  return "unknown";
}

bool is_madness(FinishReason reason) {
  return reason != FinishReason::kStop && reason != FinishReason::kLength &&
         reason != FinishReason::kAbort;
}

std::optional<FinishReason> finish_reason_from_name(std::string_view name) {
  for (auto r :
       {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort, FinishReason::kRepetition,
        FinishReason::kLowEntropy, FinishReason::kGarbage, FinishReason::kLanguageSwitch}) {
    if (finish_reason_name(r) == name) return r;
  }
  return std::nullopt;
}

Frame encode_tokens_event(const TokensEvent& e) {
  const size_t t = e.token_ids.size();
  const auto where = kEventWhere;
  // Catch engine bugs here, where the stack still says which code built the event.
  check_length(e.logprobs, t, "logprobs", where);
  check_length(e.raw_logprobs, t, "raw_logprobs", where);
  check_length(e.policy_versions, t, "policy_versions", where);
  check_length(e.top_ids, t * static_cast<size_t>(std::max(e.top_k, 0)), "top_ids", where);
  check_length(e.top_logprobs, e.top_ids.size(), "top_logprobs", where);
  Frame f;
  f.body = {{"event", "tokens"}, {"sample", e.sample}};
  f.add_array("token_ids", e.token_ids);
  f.add_array("logprobs", e.logprobs);
  f.add_array("raw_logprobs", e.raw_logprobs);
  f.add_array("policy_versions", e.policy_versions);
  if (e.top_k > 0) {
    f.body["top_k"] = e.top_k;
    f.add_array("top_ids", e.top_ids);
    f.add_array("top_logprobs", e.top_logprobs);
  }
  if (e.prompt_top_k >= 0) {
    const size_t p = e.prompt_ids.size();
    check_length(e.prompt_logprobs, p, "prompt_logprobs", where);
    check_length(e.prompt_ranks, p, "prompt_ranks", where);
    check_length(e.prompt_top_ids, p * size_t(e.prompt_top_k), "prompt_top_ids", where);
    check_length(e.prompt_top_logprobs, e.prompt_top_ids.size(), "prompt_top_logprobs", where);
    f.body["prompt_top_k"] = e.prompt_top_k;
    f.add_array("prompt_ids", e.prompt_ids);
    f.add_array("prompt_logprobs", e.prompt_logprobs);
    f.add_array("prompt_ranks", e.prompt_ranks);
    if (e.prompt_top_k > 0) {
      f.add_array("prompt_top_ids", e.prompt_top_ids);
      f.add_array("prompt_top_logprobs", e.prompt_top_logprobs);
    }
  }
  if (e.finish_reason) {
    f.body["finish_reason"] = finish_reason_name(*e.finish_reason);
    f.body["prompt_tokens"] = e.prompt_tokens;
    f.body["completion_tokens"] = e.completion_tokens;
  }
  return f;
}

TokensEvent decode_tokens_event(const Frame& f) {
  const auto where = kEventWhere;
  const Json& b = f.body;
  if (auto ev = get_optional_string(b, "event", where); ev && *ev != "tokens") {
    bad(where, "'event' is '" + ev->substr(0, 32) + "', expected 'tokens'");
  }
  TokensEvent e;
  e.sample = get_int_in(b, "sample", where, 0, kMaxSamplesPerRequest - 1, std::nullopt);
  e.token_ids = f.array<int32_t>("token_ids", where);
  const size_t t = e.token_ids.size();
  e.logprobs = f.array<float>("logprobs", where);
  check_length(e.logprobs, t, "logprobs", where);
  e.raw_logprobs = f.array<float>("raw_logprobs", where);
  check_length(e.raw_logprobs, t, "raw_logprobs", where);
  e.policy_versions = f.array<int64_t>("policy_versions", where);
  check_length(e.policy_versions, t, "policy_versions", where);
  e.top_k = get_int_in(b, "top_k", where, 0, kMaxTopLogprobs, 0);
  if (e.top_k > 0) {
    e.top_ids = f.array<int32_t>("top_ids", where);
    check_length(e.top_ids, t * e.top_k, "top_ids", where);
    e.top_logprobs = f.array<float>("top_logprobs", where);
    check_length(e.top_logprobs, t * e.top_k, "top_logprobs", where);
  }
  e.prompt_top_k = get_int_in(b, "prompt_top_k", where, -1, kMaxTopLogprobs, -1);
  if (e.prompt_top_k >= 0) {
    e.prompt_ids = f.array<int32_t>("prompt_ids", where);
    const size_t p = e.prompt_ids.size();
    e.prompt_logprobs = f.array<float>("prompt_logprobs", where);
    check_length(e.prompt_logprobs, p, "prompt_logprobs", where);
    e.prompt_ranks = f.array<int32_t>("prompt_ranks", where);
    check_length(e.prompt_ranks, p, "prompt_ranks", where);
    if (e.prompt_top_k > 0) {
      e.prompt_top_ids = f.array<int32_t>("prompt_top_ids", where);
      check_length(e.prompt_top_ids, p * size_t(e.prompt_top_k), "prompt_top_ids", where);
      e.prompt_top_logprobs = f.array<float>("prompt_top_logprobs", where);
      check_length(e.prompt_top_logprobs, e.prompt_top_ids.size(), "prompt_top_logprobs", where);
    }
  }
  if (auto reason = get_optional_string(b, "finish_reason", where)) {
    e.finish_reason = finish_reason_from_name(*reason);
    if (!e.finish_reason)
      bad(where,
          "unknown finish_reason '" + reason->substr(0, 32) +
              "' (stop, length, abort, repetition, low_entropy, garbage or language_switch)");
    e.prompt_tokens = get_int(b, "prompt_tokens", where);
    e.completion_tokens = get_int(b, "completion_tokens", where);
  }
  return e;
}

Frame encode_generate_done(const GenerateDone& d) {
  Frame f;
  f.body = {{"prompt_tokens", d.prompt_tokens}, {"completion_tokens", d.completion_tokens}};
  return f;
}

GenerateDone decode_generate_done(const Frame& f) {
  return GenerateDone{get_int(f.body, "prompt_tokens", "generate done"),
                      get_int(f.body, "completion_tokens", "generate done")};
}

// ---- status ---------------------------------------------------------------------------------

Frame make_status_request() {
  Frame f;
  f.method = std::string(kMethodStatus);
  return f;
}

// ---- train_step -----------------------------------------------------------------------------

Frame encode_train_batch(const TrainBatch& batch) {
  Frame f;
  f.method = std::string(kMethodTrainStep);
  f.body = {{"meta", batch.meta}};
  f.add_array("sample_offsets", batch.sample_offsets);
  f.add_array("token_ids", batch.token_ids);
  f.add_array("loss_mask", batch.loss_mask);
  f.add_array("logprobs", batch.logprobs);
  if (!batch.advantages.empty()) f.add_array("advantages", batch.advantages);
  if (!batch.policy_versions.empty()) f.add_array("policy_versions", batch.policy_versions);
  if (!batch.rewards.empty()) f.body["rewards"] = batch.rewards;
  if (!batch.weights.empty()) f.body["weights"] = batch.weights;
  if (!batch.task_ids.empty()) f.body["task_ids"] = batch.task_ids;
  if (!batch.episode_uuids.empty()) f.body["episode_uuids"] = batch.episode_uuids;
  if (!batch.teacher_logprobs.empty()) f.add_array("teacher_logprobs", batch.teacher_logprobs);
  if (batch.teacher_top_k > 0) {
    f.body["teacher_top_k"] = batch.teacher_top_k;
    f.add_array("teacher_top_ids", batch.teacher_top_ids);
    f.add_array("teacher_top_logprobs", batch.teacher_top_logprobs);
  }
  return f;
}

TrainBatch decode_train_batch(const Frame& f) {
  const auto where = kTrainWhere;
  TrainBatch b;
  b.sample_offsets = f.array<int64_t>("sample_offsets", where);
  b.token_ids = f.array<int32_t>("token_ids", where);
  b.loss_mask = f.array<uint8_t>("loss_mask", where);
  b.logprobs = f.array<float>("logprobs", where);
  b.advantages = f.optional_array<float>("advantages", where).value_or(std::vector<float>{});
  b.policy_versions =
      f.optional_array<int32_t>("policy_versions", where).value_or(std::vector<int32_t>{});
  const size_t n = b.token_ids.size();
  check_length(b.loss_mask, n, "loss_mask", where);
  check_length(b.logprobs, n, "logprobs", where);
  if (!b.advantages.empty() || n == 0) check_length(b.advantages, n, "advantages", where);
  if (!b.policy_versions.empty()) check_length(b.policy_versions, n, "policy_versions", where);
  b.teacher_logprobs =
      f.optional_array<float>("teacher_logprobs", where).value_or(std::vector<float>{});
  if (!b.teacher_logprobs.empty()) check_length(b.teacher_logprobs, n, "teacher_logprobs", where);
  b.teacher_top_k = get_int_in(f.body, "teacher_top_k", where, 0, kMaxTopLogprobs, 0);
  if (b.teacher_top_k > 0) {
    if (b.teacher_logprobs.empty()) bad(where, "'teacher_top_k' needs 'teacher_logprobs'");
    b.teacher_top_ids = f.array<int32_t>("teacher_top_ids", where);
    check_length(b.teacher_top_ids, n * size_t(b.teacher_top_k), "teacher_top_ids", where);
    for (int32_t id : b.teacher_top_ids) {
      if (id < -1) bad(where, "'teacher_top_ids' holds " + std::to_string(id) + " (ids or -1)");
    }
    b.teacher_top_logprobs = f.array<float>("teacher_top_logprobs", where);
    check_length(b.teacher_top_logprobs, b.teacher_top_ids.size(), "teacher_top_logprobs", where);
  }
  check_token_ids(b.token_ids, "token_ids", where);
  const auto& off = b.sample_offsets;
  if (off.empty() || off.front() != 0 || off.back() != static_cast<int64_t>(n)) {
    bad(where, "'sample_offsets' must start at 0 and end at the token count " + std::to_string(n));
  }
  for (size_t s = 1; s < off.size(); ++s) {
    if (off[s] < off[s - 1]) bad(where, "'sample_offsets' decreases at index " + std::to_string(s));
  }
  for (size_t i = 0; i < n; ++i) {
    if (b.loss_mask[i] > 1)
      bad(where, "loss_mask[" + std::to_string(i) + "] = " + std::to_string(b.loss_mask[i]) +
                     " is not 0 or 1");
  }
  if (auto meta = f.body.find("meta"); meta != f.body.end()) {
    if (!meta->is_object()) bad(where, "'meta' must be an object");
    b.meta = *meta;
  }
  // Optional per-sample fields: a list of S numbers / strings each.
  const size_t samples = off.size() - 1;
  auto per_sample = [&](const char* key, bool numbers, auto& out) {
    auto it = f.body.find(key);
    if (it == f.body.end()) return;
    if (!it->is_array() || it->size() != samples) {
      bad(where, std::string("'") + key + "' must be a list of " + std::to_string(samples) +
                     " entries (one per sample)");
    }
    for (size_t i = 0; i < samples; ++i) {
      const Json& v = (*it)[i];
      if (numbers ? !v.is_number() : !v.is_string()) {
        bad(where, std::string("'") + key + "[" + std::to_string(i) + "]' must be a " +
                       (numbers ? "number" : "string"));
      }
    }
    out = it->get<std::remove_reference_t<decltype(out)>>();
  };
  per_sample("rewards", true, b.rewards);
  per_sample("weights", true, b.weights);
  per_sample("task_ids", false, b.task_ids);
  per_sample("episode_uuids", false, b.episode_uuids);
  if (b.advantages.empty() && b.rewards.empty() && n > 0) {
    bad(where, "either per-token 'advantages' or per-sample 'rewards' must be given");
  }
  return b;
}

}  // namespace ajet::rpc
