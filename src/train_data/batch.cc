#include "train_data/batch.h"

#include <cmath>
#include <limits>
#include <map>

#include "common/error.h"
#include "rpc/messages.h"
#include "tracking/merge.h"

namespace ajet::train_data {

size_t TrainSample::trained_tokens() const {
  size_t n = 0;
  for (uint8_t m : loss_mask) n += m;
  return n;
}

size_t Batch::tokens() const {
  size_t n = 0;
  for (const auto& s : samples) n += s.size();
  return n;
}

size_t Batch::trained_tokens() const {
  size_t n = 0;
  for (const auto& s : samples) n += s.trained_tokens();
  return n;
}

EpisodeIndex index_episodes(const Batch& batch) {
  EpisodeIndex e;
  std::map<std::string, size_t> index;
  e.episode_of.resize(batch.samples.size());
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const TrainSample& s = batch.samples[i];
    const std::string key =
        s.episode_uuid.empty() ? "\x01sample " + std::to_string(i) : s.episode_uuid;
    auto [it, fresh] = index.emplace(key, e.rewards.size());
    if (fresh) {
      e.rewards.push_back(s.reward);
      e.groups.push_back(s.task_id);
    }
    e.episode_of[i] = it->second;
  }
  return e;
}

bool Batch::has_advantages() const {
  if (samples.empty()) return false;
  for (const auto& s : samples) {
    if (s.advantages.empty() && s.size() > 0) return false;
  }
  return true;
}

bool Batch::has_teacher() const {
  for (const auto& s : samples) {
    if (!s.teacher_logprobs.empty()) return true;
  }
  return false;
}

void validate_batch(const Batch& batch, int64_t vocab_size) {
  std::map<std::string, double> episode_reward;
  const bool given = batch.has_advantages();
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const TrainSample& s = batch.samples[i];
    const std::string where = "train batch sample " + std::to_string(i) +
                              (s.episode_uuid.empty() ? "" : " (episode " + s.episode_uuid + ")");
    const size_t l = s.size();
    auto same_length = [&](size_t n, const char* field, bool optional) {
      if ((optional && n == 0) || n == l) return;
      invalid_argument(where + ": '" + field + "' has " + std::to_string(n) +
                       " entries, expected " + std::to_string(l));
    };
    same_length(s.loss_mask.size(), "loss_mask", false);
    same_length(s.logprobs.size(), "logprobs", false);
    same_length(s.policy_versions.size(), "policy_versions", true);
    same_length(s.advantages.size(), "advantages", true);
    same_length(s.teacher_logprobs.size(), "teacher_logprobs", true);
    if (s.teacher_top_k > 0) {
      if (s.teacher_logprobs.empty() || s.teacher_top_ids.size() != l * size_t(s.teacher_top_k) ||
          s.teacher_top_logprobs.size() != s.teacher_top_ids.size()) {
        invalid_argument(where + ": teacher_top_k " + std::to_string(s.teacher_top_k) +
                         " needs teacher_logprobs and (length x top_k) teacher_top_ids and "
                         "teacher_top_logprobs");
      }
      for (int32_t id : s.teacher_top_ids) {
        if (id < -1 || id >= vocab_size)
          invalid_argument(where + ": teacher_top_ids holds " + std::to_string(id) +
                           ", outside the vocabulary");
      }
    }
    for (size_t p = 0; p < l; ++p) {
      if (s.token_ids[p] < 0 || s.token_ids[p] >= vocab_size) {
        invalid_argument(where + ": token_ids[" + std::to_string(p) +
                         "] = " + std::to_string(s.token_ids[p]) +
                         " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
      }
      if (s.loss_mask[p] > 1)
        invalid_argument(where + ": loss_mask[" + std::to_string(p) + "] is not 0 or 1");
      if (!std::isfinite(s.logprobs[p]) || s.logprobs[p] > 0) {
        if (s.loss_mask[p])
          invalid_argument(where + ": logprobs[" + std::to_string(p) +
                           "] is not a finite value <= 0");
      }
      if (!s.teacher_logprobs.empty() && !std::isnan(s.teacher_logprobs[p]) &&
          !(s.teacher_logprobs[p] <= 0)) {
        invalid_argument(where + ": teacher_logprobs[" + std::to_string(p) +
                         "] is neither NaN (none) nor a logprob <= 0");
      }
      if (!s.advantages.empty() && !std::isfinite(s.advantages[p])) {
        invalid_argument(where + ": advantages[" + std::to_string(p) + "] is not finite");
      }
    }
    if (l > 0 && s.loss_mask[0] != 0)
      invalid_argument(where + ": loss_mask[0] is 1, but nothing predicts the first token");
    if (!std::isfinite(s.weight) || s.weight < 0)
      invalid_argument(where + ": weight must be finite and >= 0");
    if (!given) {
      if (!std::isfinite(s.reward)) invalid_argument(where + ": reward is not finite");
      if (!s.episode_uuid.empty()) {
        auto [it, fresh] = episode_reward.emplace(s.episode_uuid, s.reward);
        if (!fresh && it->second != s.reward) {
          invalid_argument(where + ": reward " + std::to_string(s.reward) + " differs from " +
                           std::to_string(it->second) + " of another sample of the same episode");
        }
      }
    }
  }
}

Batch batch_from_samples(std::span<const tracking::Sample> samples) {
  Batch b;
  for (const tracking::Sample& s : samples) {
    if (!s.trainable) continue;
    TrainSample t;
    t.episode_uuid = s.episode_uuid;
    t.task_id = s.task_id;
    t.reward = s.reward;
    t.weight = s.weight;
    t.token_ids.assign(s.token_ids.begin(), s.token_ids.end());
    t.loss_mask = s.loss_mask;
    t.logprobs = s.logprobs;
    t.policy_versions = s.policy_versions;
    b.samples.push_back(std::move(t));
  }
  return b;
}

Batch batch_from_rpc(const rpc::TrainBatch& r) {
  Batch b;
  if (r.sample_offsets.empty()) return b;
  const size_t count = r.sample_offsets.size() - 1;
  auto check = [&](size_t n, const char* field) {
    if (n != 0 && n != count) {
      invalid_argument("train_step batch: '" + std::string(field) + "' has " + std::to_string(n) +
                       " entries for " + std::to_string(count) + " samples");
    }
  };
  check(r.rewards.size(), "rewards");
  check(r.weights.size(), "weights");
  check(r.task_ids.size(), "task_ids");
  check(r.episode_uuids.size(), "episode_uuids");
  if (r.rewards.empty() && r.advantages.size() != r.token_ids.size()) {
    invalid_argument(
        "train_step batch: neither per-sample 'rewards' nor per-token 'advantages' were given");
  }
  for (size_t s = 0; s < count; ++s) {
    const auto begin = static_cast<size_t>(r.sample_offsets[s]),
               end = static_cast<size_t>(r.sample_offsets[s + 1]);
    if (begin > end || end > r.token_ids.size())
      invalid_argument("train_step batch: bad sample_offsets at " + std::to_string(s));
    TrainSample t;
    if (!r.episode_uuids.empty()) t.episode_uuid = r.episode_uuids[s];
    if (!r.task_ids.empty()) t.task_id = r.task_ids[s];
    if (!r.rewards.empty()) t.reward = r.rewards[s];
    if (!r.weights.empty()) t.weight = r.weights[s];
    auto slice = [&](const auto& v) { return std::vector(v.begin() + begin, v.begin() + end); };
    t.token_ids = slice(r.token_ids);
    t.loss_mask = slice(r.loss_mask);
    t.logprobs = slice(r.logprobs);
    if (!r.policy_versions.empty()) t.policy_versions = slice(r.policy_versions);
    if (r.rewards.empty()) t.advantages = slice(r.advantages);
    if (!r.teacher_logprobs.empty()) {
      t.teacher_logprobs = slice(r.teacher_logprobs);
      bool any = false;
      for (float v : t.teacher_logprobs) any = any || !std::isnan(v);
      if (!any) t.teacher_logprobs.clear();  // the teacher failed for this sample
    }
    if (!t.teacher_logprobs.empty() && r.teacher_top_k > 0) {
      const size_t k = size_t(r.teacher_top_k);
      t.teacher_top_k = r.teacher_top_k;
      t.teacher_top_ids.assign(r.teacher_top_ids.begin() + begin * k,
                               r.teacher_top_ids.begin() + end * k);
      t.teacher_top_logprobs.assign(r.teacher_top_logprobs.begin() + begin * k,
                                    r.teacher_top_logprobs.begin() + end * k);
    }
    b.samples.push_back(std::move(t));
  }
  return b;
}

rpc::TrainBatch batch_to_rpc(const Batch& b) {
  rpc::TrainBatch r;
  r.sample_offsets.push_back(0);
  const bool advantages = b.has_advantages();
  bool versions = !b.samples.empty();
  for (const auto& s : b.samples) versions = versions && s.policy_versions.size() == s.size();
  const bool teacher = b.has_teacher();
  for (const auto& s : b.samples) r.teacher_top_k = std::max(r.teacher_top_k, s.teacher_top_k);
  for (const auto& s : b.samples) {
    r.token_ids.insert(r.token_ids.end(), s.token_ids.begin(), s.token_ids.end());
    r.loss_mask.insert(r.loss_mask.end(), s.loss_mask.begin(), s.loss_mask.end());
    r.logprobs.insert(r.logprobs.end(), s.logprobs.begin(), s.logprobs.end());
    if (advantages)
      r.advantages.insert(r.advantages.end(), s.advantages.begin(), s.advantages.end());
    if (versions)
      r.policy_versions.insert(r.policy_versions.end(), s.policy_versions.begin(),
                               s.policy_versions.end());
    if (teacher) {
      const size_t k = size_t(r.teacher_top_k);
      if (s.teacher_logprobs.size() == s.size()) {
        r.teacher_logprobs.insert(r.teacher_logprobs.end(), s.teacher_logprobs.begin(),
                                  s.teacher_logprobs.end());
      } else {
        r.teacher_logprobs.insert(r.teacher_logprobs.end(), s.size(),
                                  std::numeric_limits<float>::quiet_NaN());
      }
      for (size_t p = 0; p < s.size() * k; ++p) {
        const size_t sk = size_t(s.teacher_top_k);
        const size_t pos = p / k, j = p % k;
        const bool have = sk > 0 && j < sk && s.teacher_top_ids.size() == s.size() * sk;
        r.teacher_top_ids.push_back(have ? s.teacher_top_ids[pos * sk + j] : -1);
        r.teacher_top_logprobs.push_back(have ? s.teacher_top_logprobs[pos * sk + j]
                                              : -std::numeric_limits<float>::infinity());
      }
    }
    r.sample_offsets.push_back(static_cast<int64_t>(r.token_ids.size()));
    if (!advantages) r.rewards.push_back(s.reward);
    r.weights.push_back(s.weight);
    r.task_ids.push_back(s.task_id);
    r.episode_uuids.push_back(s.episode_uuid);
  }
  return r;
}

}  // namespace ajet::train_data
