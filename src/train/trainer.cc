#include "train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <type_traits>

#include "common/clock.h"
#include "common/error.h"
#include "common/mix.h"
#include "tracking/packing.h"
#include "train/packed_forward.h"

namespace ajet::train {

namespace {

using Clock = std::chrono::steady_clock;

// One packed sequence ready for the model, and where each trained term's logprob lives in it.
struct MicroBatch {
  tracking::PackedSequence seq;
  AttentionPlan plan;
  torch::Tensor ids, positions;  // (T,) int64
  torch::Tensor rows,
      targets;  // (M,) int64: packed index whose logits predict each target; target id
  std::vector<int32_t> term_sample;  // (K,) index into the sample list given to make_micro_batches
  std::vector<int32_t> term_position;  // (K,) position in that sample
  torch::Tensor term_slot;             // (K,) int64 index into the M predicted tokens
};

// Packs `samples` (plain or tree) into sequences of at most `budget` tokens (a longer sample gets
// one of its own). Every trained (sample, position) becomes one term; a packed token trained in
// several samples is predicted once and shared by its terms.
std::vector<MicroBatch> make_micro_batches(
    const std::vector<const train_data::TrainSample*>& samples, train_data::Packing packing,
    int64_t budget, bool beyond_shared, int64_t block_rows, torch::Device device) {
  std::vector<std::span<const int32_t>> views;
  views.reserve(samples.size());
  for (const train_data::TrainSample* s : samples) views.emplace_back(s->token_ids);
  const std::span<const std::span<const int32_t>> all(views);
  auto seqs = packing == train_data::Packing::kTree
                  ? tracking::pack_tree(all, static_cast<size_t>(budget), beyond_shared)
                  : tracking::pack_plain(all, static_cast<size_t>(budget));
  std::vector<MicroBatch> out;
  out.reserve(seqs.size());
  for (auto& seq : seqs) {
    MicroBatch mb;
    const size_t t = seq.size();
    std::vector<int64_t> ids(t), pos(t), rows, targets, slots;
    std::vector<int64_t> slot_of(t, -1);
    for (size_t i = 0; i < t; ++i) {
      ids[i] = seq.token_ids[i];
      pos[i] = seq.position_ids[i];
      auto ks = seq.occurrence_samples(i);
      auto ps = seq.occurrence_positions(i);
      for (size_t o = 0; o < ks.size(); ++o) {
        const int32_t input = seq.samples[static_cast<size_t>(ks[o])];
        const int32_t p = ps[o];
        if (!samples[static_cast<size_t>(input)]->loss_mask[static_cast<size_t>(p)]) continue;
        if (slot_of[i] < 0) {
          if (seq.parent[i] < 0)
            fail(ErrorCode::kInternal, "packing: a trained token has no predecessor");
          slot_of[i] = static_cast<int64_t>(rows.size());
          rows.push_back(seq.parent[i]);
          targets.push_back(seq.token_ids[i]);
        }
        mb.term_sample.push_back(input);
        mb.term_position.push_back(p);
        slots.push_back(slot_of[i]);
      }
    }
    // On the model's device (a no-op on the CPU): built once here, used by every layer.
    mb.ids = torch::tensor(ids, torch::kLong).to(device);
    mb.positions = torch::tensor(pos, torch::kLong).to(device);
    mb.rows = torch::tensor(rows, torch::kLong).to(device);
    mb.targets = torch::tensor(targets, torch::kLong).to(device);
    mb.term_slot = torch::tensor(slots, torch::kLong).to(device);
    mb.plan = plan_attention(seq.subtree_end, block_rows).to(device);
    mb.seq = std::move(seq);
    out.push_back(std::move(mb));
  }
  return out;
}

// The optimizer's key for a parameter's state: libtorch 1.x keys it by the TensorImpl address as
// text, 2.x by the address itself (a CUDA build uses a PyTorch 2.x libtorch; docs/engine.md,
// "GPU").
template <typename Optimizer>
auto optimizer_state_key(const Optimizer& optimizer, const torch::Tensor& p) {
  using Key = typename std::decay_t<decltype(optimizer.state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream address;  // what c10::guts::to_string writes
    address << p.unsafeGetTensorImpl();
    return address.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

torch::Tensor float_tensor(const std::vector<float>& v, torch::Device device) {
  return torch::tensor(v, torch::kFloat).to(device);
}

// Per-sample advantages of a batch: each sample gets its episode's advantage, computed from the
// episodes' rewards grouped by task, unless the batch carries advantages per token.
struct SampleAdvantages {
  bool per_token = false;          // the batch gives per-token advantages: `per_sample` stays 0
  std::vector<double> per_sample;  // (N,) the advantage of the sample's episode
  std::vector<uint8_t> keep;       // (N,) 0 when the episode's group was dropped
};

// Fills the group and reward metrics of `m` (left at 0 with per-token advantages).
SampleAdvantages sample_advantages(const train_data::Batch& batch,
                                   const train_data::AdvantageOptions& options,
                                   train_data::TrainMetrics& m) {
  const size_t n = batch.samples.size();
  SampleAdvantages out{batch.has_advantages(), std::vector<double>(n, 0.0),
                       std::vector<uint8_t>(n, 1)};
  if (out.per_token) return out;
  const train_data::EpisodeIndex e = train_data::index_episodes(batch);
  train_data::AdvantageResult r = train_data::compute_advantages(e.rewards, e.groups, options);
  for (size_t i = 0; i < n; ++i) {
    out.per_sample[i] = r.advantages[e.episode_of[i]];
    out.keep[i] = r.kept[e.episode_of[i]];
  }
  m.groups = r.groups;
  m.zero_variance_groups = r.zero_variance_groups;
  for (double x : e.rewards) m.reward_mean += x / static_cast<double>(e.rewards.size());
  return out;
}

// The samples of a batch that carry loss terms, in batch order ("active sample a" below).
struct ActiveSamples {
  bool per_token_advantages = false;
  std::vector<size_t> index;                         // (A,) position in batch.samples
  std::vector<const train_data::TrainSample*> ptrs;  // (A,)
  std::vector<double> trained;                       // (A,) loss-mask tokens
  std::vector<double> advantage;  // (A,) the episode's advantage (0 with per-token advantages)

  size_t size() const { return ptrs.size(); }
  // The advantage of active sample `a` at position `p`.
  double advantage_at(size_t a, size_t p) const {
    return per_token_advantages ? static_cast<double>(ptrs[a]->advantages[p]) : advantage[a];
  }
};

// The mean of a sample's per-token advantages over its trained tokens.
double token_mean_advantage(const train_data::TrainSample& t) {
  double sum = 0, n = 0;
  for (size_t p = 0; p < t.size(); ++p) {
    if (t.loss_mask[p] == 0) continue;
    sum += t.advantages[p];
    n += 1;
  }
  return n > 0 ? sum / n : 0.0;
}

// A sample is active when its group is kept (or, with distillation, it has teacher logprobs: a
// zero-variance group still has a teacher to learn from), it has trained tokens and (with
// episode_weighting) a positive weight. Counts the dropped ones and the active ones' tokens and
// advantages into `m`.
ActiveSamples select_active(const train_data::Batch& batch, const SampleAdvantages& adv,
                            bool episode_weighting, bool distill, train_data::TrainMetrics& m) {
  ActiveSamples out;
  out.per_token_advantages = adv.per_token;
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const train_data::TrainSample& t = batch.samples[i];
    const bool kept = adv.keep[i] || (distill && !t.teacher_logprobs.empty());
    if (kept && t.trained_tokens() > 0 && (!episode_weighting || t.weight > 0)) {
      out.index.push_back(i);
    } else {
      ++m.dropped_samples;
    }
  }
  const size_t count = out.index.size();
  out.trained.resize(count);
  out.advantage.resize(count);
  for (size_t a = 0; a < count; ++a) {
    const train_data::TrainSample& t = batch.samples[out.index[a]];
    out.ptrs.push_back(&t);
    out.trained[a] = static_cast<double>(t.trained_tokens());
    out.advantage[a] = adv.per_sample[out.index[a]];
    m.tokens += static_cast<int64_t>(t.size());
    m.trained_tokens += static_cast<int64_t>(t.trained_tokens());
    // Per-token advantages (REINFORCE++ attached by the split, or the caller's) enter the metric as
    // the sample's token mean.
    const double shown = adv.per_token ? token_mean_advantage(t) : out.advantage[a];
    m.advantage_mean += shown / static_cast<double>(count);
    m.advantage_abs_mean += std::abs(shown) / static_cast<double>(count);
  }
  m.samples = static_cast<int64_t>(count);
  return out;
}

// The logprobs the loss compares the policy with, per active sample and position.
struct StepLogprobs {
  bool recompute = false;  // old logprobs are `recomputed`, else the samples' behaviour logprobs
  bool reuse_forward = false;  // the first mini-batch of epoch 0 fills its own `recomputed` rows
  std::vector<std::vector<float>> recomputed;  // (A, len) with recompute
  std::vector<std::vector<float>> reference;   // (A, len) with use_kl
};

// Mini-batch `k` of `num` over `order`: the slice [count k / num, count (k + 1) / num).
std::vector<size_t> mini_batch_slice(const std::vector<size_t>& order, int64_t k, int64_t num) {
  const size_t count = order.size();
  const size_t lo = count * static_cast<size_t>(k) / static_cast<size_t>(num);
  const size_t hi = count * static_cast<size_t>(k + 1) / static_cast<size_t>(num);
  return {order.begin() + static_cast<std::ptrdiff_t>(lo),
          order.begin() + static_cast<std::ptrdiff_t>(hi)};
}

// N and S of the header's loss normalisation, over the whole mini-batch on every rank.
struct Normalisers {
  double terms = 0;  // N: trained terms
  double seqs = 0;   // S: samples
};

// c_s = w_s * agg_s of the header, for each sample of the mini-batch `part` (positions in
// `active`).
std::vector<double> loss_coefficients(const train_data::TrainerOptions& o,
                                      const ActiveSamples& active, const std::vector<size_t>& part,
                                      const Normalisers& norm) {
  std::vector<double> coef(part.size());
  for (size_t j = 0; j < part.size(); ++j) {
    const size_t a = part[j];
    const double w = o.episode_weighting ? active.ptrs[a]->weight : 1.0;
    switch (o.aggregation) {
      case train_data::LossAggregation::kTokenMean: coef[j] = w / norm.terms; break;
      case train_data::LossAggregation::kSeqMeanTokenMean:
        coef[j] = w / (norm.seqs * active.trained[a]);
        break;
      case train_data::LossAggregation::kSeqMeanTokenSum: coef[j] = w / norm.seqs; break;
      case train_data::LossAggregation::kSeqMeanTokenSumNorm: coef[j] = w / o.norm_constant; break;
    }
  }
  return coef;
}

// The per-term inputs of one micro-batch's loss: (K,) each.
struct TermInputs {
  std::vector<float> old, advantage, coef, behaviour, reference;
  // Distillation in loss mode: the teacher's logprob (0 where none) and the mask; top-k forward
  // KL: (K * k) the teacher's top ids (the term's own token where none) and their logprobs (-inf).
  std::vector<float> teacher, teacher_mask;
  int64_t top_k = 0;
  std::vector<int64_t> top_ids;
  std::vector<float> top_logprobs;
};

// Sums of one mini-batch's losses over its micro-batches (this rank only).
struct MiniBatchLoss {
  double loss = 0;  // scaled by loss_scale
  double pg = 0;
  double distill = 0;
};

// Token sums of the loss diagnostics over every term of every mini-batch and epoch of a step.
// Summed over ranks once, at the end of the step, as one tensor; then divided by the token count.
struct TokenSums {
  double tokens = 0, kl = 0, entropy = 0, clipped = 0, dual_clipped = 0, approx_kl = 0,
         is_weight = 0, is_truncated = 0, distill = 0, distill_tokens = 0;

  void add(const LossOutput& out) {
    distill += out.distill_sum;
    distill_tokens += out.distill_tokens;
    tokens += out.tokens;
    kl += out.kl_sum;
    entropy += out.entropy_sum;
    clipped += out.clipped;
    dual_clipped += out.dual_clipped;
    approx_kl += out.approx_kl_sum;
    is_weight += out.is_weight_sum;
    is_truncated += out.is_truncated;
  }
  // Every field, in the one order every rank packs them in to sum them over ranks as an (8,)
  // tensor.
  std::vector<double*> fields() {
    return {&tokens,    &kl,        &entropy,      &clipped, &dual_clipped,
            &approx_kl, &is_weight, &is_truncated, &distill, &distill_tokens};
  }
  // Token means into `m` (the importance weight is 1 when there were no tokens).
  void finish(train_data::TrainMetrics& m) const {
    const double n = std::max(1.0, tokens);
    m.kl = kl / n;
    m.entropy = entropy / n;
    m.clip_fraction = clipped / n;
    m.dual_clip_fraction = dual_clipped / n;
    m.approx_kl = approx_kl / n;
    m.is_weight = tokens > 0 ? is_weight / n : 1.0;
    m.is_truncated_fraction = is_truncated / n;
    // Loss mode: the estimate under the current policy as trained (advantage mode: set from the
    // behaviour logprobs before the step).
    if (distill_tokens > 0) m.distill_estimate = distill / distill_tokens;
  }
};

// Sums over the mini-batches of a step; all but `tokens` are summed over ranks as they are added.
struct StepSums {
  TokenSums tokens;
  double loss = 0, pg_loss = 0, distill_loss = 0;  // over every optimizer step
  double grad_norm = 0;                            // over the steps that updated the weights
  int64_t updates = 0;

  // Means over optimizer steps into `m`; call after m.optimizer_steps is final and `tokens` summed.
  void finish(train_data::TrainMetrics& m) const {
    tokens.finish(m);
    const double done = static_cast<double>(std::max<int64_t>(1, m.optimizer_steps));
    m.loss = loss / done;
    m.pg_loss = pg_loss / done;
    m.distill_loss = distill_loss / done;
    m.grad_norm = updates > 0 ? grad_norm / static_cast<double>(updates) : 0.0;
  }
};

}  // namespace

struct Trainer::Impl {
  model::Qwen2Model model;
  train_data::TrainerOptions o;
  std::optional<model::Qwen2Model> reference;
  std::vector<std::pair<std::string, torch::Tensor>> params;  // trainable
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::mt19937_64 rng;
  int64_t global_step = 0;
  int64_t policy_version = 0;
  GradientHook hook;
  std::shared_ptr<Collective> collective;
  bool rollback_on_failure = false;

  Impl(model::Qwen2Model m, train_data::TrainerOptions options)
      : model(std::move(m)), o(std::move(options)), rng(o.seed) {}

  bool lora() const { return o.lora.enabled(); }
  // What draws the dropout masks: the adapters' own generator, else the default one (checkpoints
  // keep its state).
  at::Generator dropout_generator() {
    at::Generator gen = lora() ? lora_dropout_generator(model) : at::Generator();
    return gen.defined() ? gen : at::detail::getDefaultCPUGenerator();
  }
  // Where the weights live: every tensor a step builds goes there (ajet.engine.device).
  torch::Device device() const { return model->options().device(); }

  // The rows that form logits, scaled so that lm_head gives logits / temperature (lm_head is
  // linear); autograd carries the factor into the gradient. Untouched at temperature 1.
  torch::Tensor tempered(torch::Tensor rows) const {
    return o.temperature == 1.0 ? rows : rows * (1.0 / o.temperature);
  }

  // Logprob of every trained position of `samples` on `net` (no gradient, eval mode).
  std::vector<std::vector<float>> evaluate(
      const std::vector<const train_data::TrainSample*>& samples, model::Qwen2Model& net) {
    torch::NoGradGuard no_grad;
    std::vector<std::vector<float>> out(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) out[i].assign(samples[i]->size(), 0.0f);
    for (auto& mb :
         make_micro_batches(samples, o.packing, o.micro_batch_tokens, o.budget_beyond_shared_prefix,
                            o.attention_block, device())) {
      auto hidden = packed_hidden(net, mb.ids, mb.positions, mb.plan,
                                  mb.rows);  // (M, C): the rows that predict
      auto tl = token_logprobs(net, tempered(hidden), mb.targets, o.logprob_chunk);
      auto lp = tl.logprob.index_select(0, mb.term_slot)
                    .to(torch::kCPU)
                    .contiguous();  // (K,) read on the host
      const float* d = lp.data_ptr<float>();
      for (size_t k = 0; k < mb.term_sample.size(); ++k) {
        out[static_cast<size_t>(mb.term_sample[k])][static_cast<size_t>(mb.term_position[k])] =
            d[k];
      }
    }
    return out;
  }

  void all_reduce(std::vector<torch::Tensor>& tensors) {
    if (collective) collective->all_reduce_sum(tensors);
  }

  bool corrected() const { return o.loss.correction != train_data::OffPolicyCorrection::kNone; }

  // Replaces each value by its sum over ranks: one all_reduce of one (n,) double tensor, packed in
  // the order given (every rank must give the same order).
  void sum_over_ranks(const std::vector<double*>& values) {
    std::vector<double> packed;
    for (const double* v : values) packed.push_back(*v);
    std::vector<torch::Tensor> sums = {torch::tensor(packed, torch::kDouble)};
    all_reduce(sums);
    for (size_t i = 0; i < values.size(); ++i)
      *values[i] = sums[0][static_cast<int64_t>(i)].item<double>();
  }

  // 0 .. count - 1, shuffled with `rng` when the options ask for it.
  std::vector<size_t> draw_order(size_t count) {
    std::vector<size_t> order(count);
    for (size_t a = 0; a < count; ++a) order[a] = a;
    if (o.shuffle) std::shuffle(order.begin(), order.end(), rng);
    return order;
  }

  // Old (proximal) logprobs on the current weights, when recomputed, and reference logprobs with
  // use_kl; records their timings in `m`. `first_order` is epoch 0's order: the samples of its
  // first mini-batch are trained on the weights the old logprobs must come from, so (reuse_forward)
  // their training forward gives the old logprobs (detached) and only the other mini-batches need a
  // separate pass here. With dropout (LoRA) the training forward is not the policy's, so then every
  // sample gets the separate eval-mode pass. Call in eval mode.
  StepLogprobs step_logprobs(const ActiveSamples& active, const std::vector<size_t>& first_order,
                             train_data::TrainMetrics& m) {
    StepLogprobs lp;
    lp.recompute = o.recompute_old_logprobs || corrected();
    lp.reuse_forward = lp.recompute && !(lora() && o.lora.dropout > 0);
    lp.recomputed.resize(active.size());
    auto t_old = Clock::now();
    if (lp.recompute) recompute_old_logprobs(active, first_order, lp);
    m.old_logprob_seconds = seconds_since(t_old);
    auto t_ref = Clock::now();
    if (o.loss.use_kl) lp.reference = reference_logprobs(active.ptrs);
    m.ref_logprob_seconds = seconds_since(t_ref);
    return lp;
  }

  // Fills lp.recomputed; with reuse_forward the first mini-batch's rows are zeros until its
  // forward.
  void recompute_old_logprobs(const ActiveSamples& active, const std::vector<size_t>& first_order,
                              StepLogprobs& lp) {
    const size_t count = active.size();
    const size_t first_size = count / static_cast<size_t>(o.mini_batch_num);
    std::vector<size_t> need;
    for (size_t r = lp.reuse_forward ? first_size : 0; r < count; ++r)
      need.push_back(first_order[r]);
    std::vector<const train_data::TrainSample*> need_ptrs;
    for (size_t a : need) need_ptrs.push_back(active.ptrs[a]);
    auto logprobs = evaluate(need_ptrs, model);
    for (size_t r = 0; r < need.size(); ++r) lp.recomputed[need[r]] = std::move(logprobs[r]);
    if (lp.reuse_forward) {
      for (size_t r = 0; r < first_size; ++r) {
        lp.recomputed[first_order[r]].assign(active.ptrs[first_order[r]]->size(), 0.0f);
      }
    }
  }

  // m.rollout_logprob_diff over every rank's trained tokens; lp.recomputed is complete once epoch
  // 0's first mini-batch has run.
  void rollout_logprob_diff(const ActiveSamples& active, const StepLogprobs& lp,
                            train_data::TrainMetrics& m) {
    double sum = 0, count = 0;
    for (size_t a = 0; a < active.size(); ++a) {
      const train_data::TrainSample& sample = *active.ptrs[a];
      for (size_t p = 0; p < sample.size(); ++p) {
        if (!sample.loss_mask[p]) continue;
        sum += std::abs(static_cast<double>(lp.recomputed[a][p]) - sample.logprobs[p]);
        count += 1;
      }
    }
    sum_over_ranks({&sum, &count});
    m.rollout_logprob_diff = count > 0 ? sum / count : 0.0;
  }

  // The KL reference's logprobs: the model with LoRA switched off, or the frozen copy.
  std::vector<std::vector<float>> reference_logprobs(
      const std::vector<const train_data::TrainSample*>& ptrs) {
    if (!lora()) return evaluate(ptrs, *reference);
    set_lora_enabled(model, false);
    std::vector<std::vector<float>> out;
    try {
      out = evaluate(ptrs, model);
    } catch (...) {
      set_lora_enabled(model, true);
      throw;
    }
    set_lora_enabled(model, true);
    return out;
  }

  // One optimizer step on the mini-batch `part` (positions in `active`):
  //   1. normalisers over every rank (all_reduce 1); nothing to train anywhere: a skipped step;
  //   2. the samples' loss coefficients;
  //   3. forward, loss and backward of each micro-batch (gradients accumulate);
  //   4. gradients over every rank (all_reduce 2), loss sums (all_reduce 3), clip, AdamW.
  // `old_from_forward`: this is epoch 0's first mini-batch and its forward gives the old logprobs.
  void train_mini_batch(const ActiveSamples& active, const std::vector<size_t>& part,
                        bool old_from_forward, StepLogprobs& lp, StepSums& sums,
                        train_data::TrainMetrics& m) {
    Normalisers norm;
    for (size_t a : part) norm.terms += active.trained[a];
    norm.seqs = static_cast<double>(part.size());
    sum_over_ranks({&norm.terms, &norm.seqs});
    if (norm.terms == 0) {
      ++m.skipped_steps;
      ++global_step;
      return;
    }
    const std::vector<double> coef = loss_coefficients(o, active, part, norm);
    const MiniBatchLoss loss =
        forward_backward(active, part, coef, old_from_forward, lp, sums.tokens, m);
    reduce_and_step(loss, sums, m);
  }

  // The micro-batches of `part`: forward, loss, backward. Adds their diagnostics to `tokens` and
  // their counts to `m`; returns this rank's loss sums.
  MiniBatchLoss forward_backward(const ActiveSamples& active, const std::vector<size_t>& part,
                                 const std::vector<double>& coef, bool old_from_forward,
                                 StepLogprobs& lp, TokenSums& tokens, train_data::TrainMetrics& m) {
    std::vector<const train_data::TrainSample*> mb_ptrs;
    for (size_t a : part) mb_ptrs.push_back(active.ptrs[a]);
    MiniBatchLoss sum;
    for (auto& mb :
         make_micro_batches(mb_ptrs, o.packing, o.micro_batch_tokens, o.budget_beyond_shared_prefix,
                            o.attention_block, device())) {
      TermInputs in = gather_terms(mb, active, part, coef, lp);
      auto hidden = packed_hidden(model, mb.ids, mb.positions, mb.plan,
                                  mb.rows,  // (M, C): the rows that predict
                                  o.activation_checkpointing);
      auto tl = token_logprobs(model, tempered(hidden), mb.targets, o.logprob_chunk);
      LossTerms lt;
      lt.logprob = tl.logprob.index_select(0, mb.term_slot);  // (K,)
      auto entropy = tl.entropy.index_select(0, mb.term_slot);
      lt.entropy = o.loss.entropy_coef != 0 ? entropy : entropy.detach();
      if (old_from_forward) {
        // The weights have not moved yet: this forward's logprobs are the old ones. Kept for later
        // epochs.
        auto detached =
            lt.logprob.detach().to(torch::kCPU, torch::kFloat).contiguous();  // read on the host
        const float* d = detached.data_ptr<float>();
        for (size_t q = 0; q < mb.term_sample.size(); ++q) {
          const size_t a = part[static_cast<size_t>(mb.term_sample[q])];
          lp.recomputed[a][static_cast<size_t>(mb.term_position[q])] = d[q];
          in.old[q] = d[q];
        }
      }
      lt.old_logprob = float_tensor(in.old, device());
      lt.advantage = float_tensor(in.advantage, device());
      lt.coef = float_tensor(in.coef, device());
      if (corrected()) lt.behaviour_logprob = float_tensor(in.behaviour, device());
      if (o.loss.use_kl) lt.ref_logprob = float_tensor(in.reference, device());
      if (o.distill.enabled && o.distill.as_loss) {
        if (o.distill.topk_forward) {
          const int64_t kt = static_cast<int64_t>(mb.term_sample.size());
          const int64_t k = std::max<int64_t>(in.top_k, 1);
          lt.teacher_top_logprob = float_tensor(in.top_logprobs, device()).view({kt, k});
          lt.student_top_logprob =
              top_logprobs(tempered(hidden), mb, lt.logprob, in.top_ids, kt, k);
        } else {
          lt.teacher_logprob = float_tensor(in.teacher, device());
          lt.teacher_mask = float_tensor(in.teacher_mask, device());
        }
      }
      LossOutput out = policy_loss(lt, o.loss, o.distill);
      (out.loss * o.loss_scale).backward();
      sum.loss += out.loss.item<double>() * o.loss_scale;
      sum.pg += out.pg_loss;
      sum.distill += out.distill_loss;
      tokens.add(out);
      m.packed_tokens += static_cast<int64_t>(mb.seq.size());
      ++m.micro_batches;
    }
    return sum;
  }

  // The current policy's logprobs (K, k) of the ids `ids` (K * k) at each term's row: the logit of
  // an id minus the row's log-normaliser, which is the term's own logit minus its logprob
  // (differentiable through both: the chunked logprob's own backward and the gathered products).
  torch::Tensor top_logprobs(const torch::Tensor& hidden, const MicroBatch& mb,
                             const torch::Tensor& term_logprob, const std::vector<int64_t>& ids,
                             int64_t kt, int64_t k) {
    const torch::Tensor weight = lm_head_weight(model);                      // (V, C)
    const torch::Tensor h = hidden.index_select(0, mb.term_slot);            // (K, C)
    const torch::Tensor targets = mb.targets.index_select(0, mb.term_slot);  // (K,)
    const torch::Tensor own = (weight.index_select(0, targets) * h).sum(1);  // (K,)
    const torch::Tensor id_tensor =
        torch::from_blob(const_cast<int64_t*>(ids.data()), {kt * k}, torch::kLong)
            .clone()
            .to(h.device());
    const torch::Tensor w = weight.index_select(0, id_tensor).view({kt, k, -1});  // (K, k, C)
    const torch::Tensor logits = (w * h.unsqueeze(1)).sum(2);                     // (K, k)
    return logits - (own - term_logprob).unsqueeze(1);
  }

  // The trained tokens with a teacher logprob and the mean distance to the teacher under the
  // behaviour logprobs (what advantage mode adds; loss mode reports its own after the step), over
  // every rank.
  void distill_counts(const ActiveSamples& active, train_data::TrainMetrics& m) {
    const train_data::KlType type =
        o.distill.topk_forward ? train_data::KlType::kK1 : o.distill.kl_type;
    double sum = 0, count = 0;
    for (const train_data::TrainSample* t : active.ptrs) {
      if (t->teacher_logprobs.empty()) continue;
      for (size_t p = 0; p < t->size(); ++p) {
        if (!t->loss_mask[p] || std::isnan(t->teacher_logprobs[p])) continue;
        sum += train_data::kl_value(t->logprobs[p], t->teacher_logprobs[p], type);
        count += 1;
      }
    }
    sum_over_ranks({&sum, &count});
    m.distill_tokens = static_cast<int64_t>(count);
    m.distill_estimate = count > 0 ? sum / count : 0.0;
  }

  // Each term's old, behaviour and reference logprob, advantage and coefficient.
  TermInputs gather_terms(const MicroBatch& mb, const ActiveSamples& active,
                          const std::vector<size_t>& part, const std::vector<double>& coef,
                          const StepLogprobs& lp) const {
    const size_t kt = mb.term_sample.size();
    TermInputs in{std::vector<float>(kt), std::vector<float>(kt), std::vector<float>(kt),
                  std::vector<float>(kt), std::vector<float>(kt)};
    if (o.distill.enabled && o.distill.as_loss) {
      if (o.distill.topk_forward) {
        for (size_t a : part) in.top_k = std::max<int64_t>(in.top_k, active.ptrs[a]->teacher_top_k);
        in.top_k = std::max<int64_t>(in.top_k, 1);
        in.top_ids.assign(kt * static_cast<size_t>(in.top_k), 0);
        in.top_logprobs.assign(kt * static_cast<size_t>(in.top_k), 0.0f);
      } else {
        in.teacher.assign(kt, 0.0f);
        in.teacher_mask.assign(kt, 0.0f);
      }
    }
    for (size_t q = 0; q < kt; ++q) {
      const auto j = static_cast<size_t>(mb.term_sample[q]);
      const auto p = static_cast<size_t>(mb.term_position[q]);
      const size_t a = part[j];
      in.behaviour[q] = active.ptrs[a]->logprobs[p];
      in.old[q] = lp.recompute ? lp.recomputed[a][p] : in.behaviour[q];
      in.advantage[q] = static_cast<float>(active.advantage_at(a, p));
      in.coef[q] = static_cast<float>(coef[j]);
      if (o.loss.use_kl) in.reference[q] = lp.reference[a][p];
      if (o.distill.enabled) distill_term(*active.ptrs[a], p, q, in);
    }
    return in;
  }

  // Term q (sample t, position p) under ajet.distillation (train_data::DistillOptions).
  void distill_term(const train_data::TrainSample& t, size_t p, size_t q, TermInputs& in) const {
    const train_data::DistillOptions& d = o.distill;
    in.advantage[q] = static_cast<float>(d.reward_weight * in.advantage[q]);
    const bool has = !t.teacher_logprobs.empty() && !std::isnan(t.teacher_logprobs[p]);
    if (!d.as_loss) {
      if (has)
        in.advantage[q] -= static_cast<float>(
            d.coef * train_data::kl_value(in.behaviour[q], t.teacher_logprobs[p], d.kl_type));
      return;
    }
    if (d.topk_forward) {
      const size_t sk = static_cast<size_t>(t.teacher_top_k);
      for (int64_t j = 0; j < in.top_k; ++j) {
        const size_t at = q * static_cast<size_t>(in.top_k) + static_cast<size_t>(j);
        const bool present =
            has && static_cast<size_t>(j) < sk && t.teacher_top_ids[p * sk + j] >= 0;
        in.top_ids[at] = present ? t.teacher_top_ids[p * sk + j] : t.token_ids[p];
        in.top_logprobs[at] =
            present ? t.teacher_top_logprobs[p * sk + j] : -std::numeric_limits<float>::infinity();
      }
      return;
    }
    in.teacher[q] = has ? t.teacher_logprobs[p] : 0.0f;
    in.teacher_mask[q] = has ? 1.0f : 0.0f;
  }

  // The end of a mini-batch: gradients summed over ranks, the hook, the global norm (before
  // clipping), the loss sums over ranks, then clip and AdamW step unless the norm is non-finite.
  void reduce_and_step(MiniBatchLoss loss, StepSums& sums, train_data::TrainMetrics& m) {
    std::vector<torch::Tensor> grads;
    for (auto& [name, p] : params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad());
    }
    all_reduce(grads);
    if (hook) hook(grads);
    std::vector<torch::Tensor> norms;
    for (auto& g : grads) norms.push_back(g.norm(2).to(torch::kDouble));
    const double norm = torch::stack(norms).norm(2).item<double>();
    sum_over_ranks({&loss.loss, &loss.pg, &loss.distill});
    sums.loss += loss.loss;
    sums.pg_loss += loss.pg;
    sums.distill_loss += loss.distill;
    if (!std::isfinite(norm)) {
      ++m.skipped_steps;
    } else {
      if (o.optim.grad_clip > 0 && norm > o.optim.grad_clip) {
        const double factor = o.optim.grad_clip / (norm + 1e-6);
        for (auto& g : grads) g.mul_(factor);
      }
      m.lr = train_data::learning_rate(o.optim, global_step);
      for (auto& group : optimizer->param_groups()) group.options().set_lr(m.lr);
      optimizer->step();
      sums.grad_norm += norm;
      ++sums.updates;
    }
    optimizer->zero_grad();
    ++global_step;
    ++m.optimizer_steps;
  }
};

Trainer::Trainer(model::Qwen2Model model, train_data::TrainerOptions options)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(options))) {
  Impl& s = *impl_;
  if (s.o.mini_batch_num < 1 || s.o.ppo_epochs < 1)
    invalid_argument("trainer: mini_batch_num and ppo_epochs must be >= 1");
  if (s.o.micro_batch_tokens < 1) invalid_argument("trainer: micro_batch_tokens must be >= 1");
  if (s.lora()) {
    if (!has_lora(s.model)) {
      attach_lora(s.model, s.o.lora, s.o.seed);
    } else {
      for (auto& p : s.model->parameters()) p.set_requires_grad(false);
      for (auto& [name, p] : lora_named_parameters(s.model)) p.set_requires_grad(true);
    }
    s.params = lora_named_parameters(s.model);
  } else {
    s.params = s.model->hf_named_parameters();
    for (auto& [name, p] : s.params) p.set_requires_grad(true);
    if (s.o.loss.use_kl) {
      // The KL reference: a frozen copy of the weights the run starts from.
      model::Qwen2Model ref(s.model->config());
      ref->to(s.model->options().device(), s.model->options().dtype().toScalarType());
      torch::NoGradGuard no_grad;
      auto src = s.model->hf_named_parameters();
      auto dst = ref->hf_named_parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
      for (auto& p : ref->parameters()) p.set_requires_grad(false);
      ref->eval();
      s.reference = ref;
    }
  }
  std::vector<torch::Tensor> tensors;
  for (auto& [name, p] : s.params) tensors.push_back(p);
  torch::optim::AdamWOptions adam(s.o.optim.lr);
  adam.betas({s.o.optim.beta1, s.o.optim.beta2})
      .eps(s.o.optim.eps)
      .weight_decay(s.o.optim.weight_decay);
  s.optimizer = std::make_unique<torch::optim::AdamW>(tensors, adam);
}

Trainer::~Trainer() = default;

void Trainer::set_gradient_hook(GradientHook hook) { impl_->hook = std::move(hook); }
void Collective::broadcast(std::vector<torch::Tensor>&, int) {
  fail(ErrorCode::kFailedPrecondition, "this data-parallel transport cannot broadcast");
}

void Trainer::set_collective(std::shared_ptr<Collective> collective) {
  impl_->collective = std::move(collective);
}
model::Qwen2Model& Trainer::model() { return impl_->model; }
const train_data::TrainerOptions& Trainer::options() const { return impl_->o; }
int64_t Trainer::global_step() const { return impl_->global_step; }
int64_t Trainer::policy_version() const { return impl_->policy_version; }
std::vector<std::pair<std::string, torch::Tensor>> Trainer::trainable_parameters() {
  return impl_->params;
}
std::optional<model::Qwen2Model> Trainer::reference_model() { return impl_->reference; }

std::vector<std::vector<float>> Trainer::compute_logprobs(const train_data::Batch& batch) {
  train_data::validate_batch(batch, impl_->model->config().vocab_size);
  std::vector<const train_data::TrainSample*> ptrs;
  for (const auto& s : batch.samples) ptrs.push_back(&s);
  const bool was_training = impl_->model->is_training();
  impl_->model->eval();
  auto out = impl_->evaluate(ptrs, impl_->model);
  impl_->model->train(was_training);
  return out;
}

// The phases, in the order of the header: advantages -> active samples -> old/reference logprobs ->
// PPO epochs x mini-batches (one optimizer step each) -> metrics. Every rank issues the same
// all_reduce calls in the same order: three per mini-batch (one when it is skipped), one at the
// end.
void Trainer::set_rollback_on_failure(bool on) { impl_->rollback_on_failure = on; }

train_data::TrainMetrics Trainer::train_step(const train_data::Batch& batch) {
  if (!impl_->rollback_on_failure) return train_step_unguarded(batch);
  State before = state();
  std::vector<torch::Tensor> params;
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : impl_->params) params.push_back(p.detach().clone());
  }
  try {
    return train_step_unguarded(batch);
  } catch (...) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) impl_->params[i].second.detach().copy_(params[i]);
    load_state(before);
    throw;
  }
}

train_data::TrainMetrics Trainer::train_step_unguarded(const train_data::Batch& batch) {
  const auto t0 = Clock::now();
  Impl& s = *impl_;
  const train_data::TrainerOptions& o = s.o;
  train_data::validate_batch(batch, s.model->config().vocab_size);
  train_data::TrainMetrics m;

  // 1. Advantages: per episode from rewards, or as given per token.
  const SampleAdvantages adv = sample_advantages(batch, o.advantage, m);
  // 2. Samples that carry loss terms.
  const ActiveSamples active = select_active(batch, adv, o.episode_weighting, o.distill.enabled, m);
  if (o.distill.enabled) s.distill_counts(active, m);
  // 3. Epoch 0's order, then old (proximal) and reference logprobs on the weights before any
  // update.
  const bool was_training = s.model->is_training();
  s.model->eval();
  const std::vector<size_t> first_order = s.draw_order(active.size());  // positions in `active`
  StepLogprobs lp = s.step_logprobs(active, first_order, m);
  // 4. PPO epochs of mini-batches, one optimizer step each.
  StepSums sums;
  s.model->train();
  for (int64_t epoch = 0; epoch < o.ppo_epochs; ++epoch) {
    const std::vector<size_t> order = epoch == 0 ? first_order : s.draw_order(active.size());
    for (int64_t k = 0; k < o.mini_batch_num; ++k) {
      const bool old_from_forward = lp.reuse_forward && epoch == 0 && k == 0;
      s.train_mini_batch(active, mini_batch_slice(order, k, o.mini_batch_num), old_from_forward, lp,
                         sums, m);
    }
  }
  s.model->train(was_training);
  // 5. Metrics: token means over every rank, means over optimizer steps.
  if (lp.recompute) s.rollout_logprob_diff(active, lp, m);
  s.sum_over_ranks(sums.tokens.fields());
  sums.finish(m);
  ++s.policy_version;
  m.global_step = s.global_step;
  m.policy_version = s.policy_version;
  m.seconds = seconds_since(t0);
  return m;
}

void copy_parameters(model::Qwen2Model& from, model::Qwen2Model& to) {
  auto src = from->named_parameters(/*recurse=*/true);
  auto dst = to->named_parameters(/*recurse=*/true);
  if (src.size() != dst.size()) {
    invalid_argument("copy_parameters: the models have " + std::to_string(src.size()) + " and " +
                     std::to_string(dst.size()) + " parameters");
  }
  for (const auto& item : src) {
    const torch::Tensor* target = dst.find(item.key());
    if (!target || target->sizes() != item.value().sizes()) {
      invalid_argument("copy_parameters: parameter '" + item.key() +
                       "' is missing or has another shape in the target");
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& item : src) dst[item.key()].copy_(item.value());
}

namespace {

// Folds one tensor's shape and bytes into h: FNV-1a over 64-bit words, one multiply per 8 bytes.
uint64_t hash_tensor(uint64_t h, const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
  for (int64_t d : t.sizes()) h = splitmix64_finalize(h ^ uint64_t(d));
  const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
  const size_t n = size_t(t.numel()) * t.element_size();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes + i, 8);
    h = (h ^ word) * 0x100000001b3ULL;
  }
  for (; i < n; ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
  return h;
}

}  // namespace

uint64_t parameter_checksum(model::Qwen2Model& model) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : model->named_parameters(/*recurse=*/true))
    named.emplace_back(item.key(), item.value());
  return named_tensors_checksum(named);
}

uint64_t named_tensors_checksum(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  torch::NoGradGuard no_grad;
  uint64_t h = fnv1a64("ajet parameters");
  for (const auto& [name, value] : named) {
    h = splitmix64_finalize(h ^ fnv1a64(name));
    h = hash_tensor(h, value);
  }
  return splitmix64_finalize(h);
}

uint64_t tensors_checksum(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  uint64_t h = fnv1a64("ajet tensors");
  for (const auto& t : tensors) h = hash_tensor(h, t);
  return splitmix64_finalize(h);
}

Trainer::State Trainer::state() {
  Impl& s = *impl_;
  State st;
  st.global_step = s.global_step;
  st.policy_version = s.policy_version;
  std::ostringstream rng;
  rng << s.rng;
  st.shuffle_rng = rng.str();
  {
    auto gen = s.dropout_generator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    st.torch_rng = gen.get_state();
  }
  for (auto& [name, p] : s.params) {
    auto it = s.optimizer->state().find(optimizer_state_key(*s.optimizer, p));
    if (it == s.optimizer->state().end()) continue;  // never stepped
    auto& ps = static_cast<torch::optim::AdamWParamState&>(*it->second);
    st.optimizer.push_back(
        {name, ps.step(), ps.exp_avg().detach().clone(), ps.exp_avg_sq().detach().clone()});
  }
  return st;
}

void Trainer::load_state(const State& st) {
  Impl& s = *impl_;
  std::map<std::string, torch::Tensor> by_name(s.params.begin(), s.params.end());
  for (const auto& e : st.optimizer) {
    auto it = by_name.find(e.name);
    if (it == by_name.end())
      invalid_argument("trainer state: optimizer entry '" + e.name +
                       "' is not a trainable parameter");
    if (!e.exp_avg.defined() || !e.exp_avg_sq.defined() ||
        e.exp_avg.sizes() != it->second.sizes() || e.exp_avg_sq.sizes() != it->second.sizes()) {
      invalid_argument("trainer state: optimizer moments of '" + e.name +
                       "' do not match the parameter's shape");
    }
  }
  std::mt19937_64 rng;
  std::istringstream in(st.shuffle_rng);
  in >> rng;
  if (!in) invalid_argument("trainer state: the shuffle RNG state is malformed");
  s.optimizer->state().clear();
  for (const auto& e : st.optimizer) {
    const auto& p = by_name.at(e.name);
    auto ps = std::make_unique<torch::optim::AdamWParamState>();
    ps->step(e.step);
    ps->exp_avg(e.exp_avg.to(p.options()).clone());
    ps->exp_avg_sq(e.exp_avg_sq.to(p.options()).clone());
    s.optimizer->state()[optimizer_state_key(*s.optimizer, p)] = std::move(ps);
  }
  s.rng = rng;
  if (st.torch_rng.defined()) {
    auto gen = s.dropout_generator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(st.torch_rng);
  }
  s.global_step = st.global_step;
  s.policy_version = st.policy_version;
  for (auto& [name, p] : s.params) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

}  // namespace ajet::train
