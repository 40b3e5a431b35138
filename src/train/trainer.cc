#include "train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>

#include "common/clock.h"
#include "common/error.h"
#include "tracking/packing.h"
#include "train/packed_forward.h"

namespace ajet::train {

namespace {

using Clock = std::chrono::steady_clock;

// One packed sequence ready for the model, and where each trained term's logprob lives in it.
struct MicroBatch {
  tracking::PackedSequence seq;
  AttentionPlan plan;
  torch::Tensor ids, positions;        // (T,) int64
  torch::Tensor rows, targets;         // (M,) int64: packed index whose logits predict each target; target id
  std::vector<int32_t> term_sample;    // (K,) index into the sample list given to make_micro_batches
  std::vector<int32_t> term_position;  // (K,) position in that sample
  torch::Tensor term_slot;             // (K,) int64 index into the M predicted tokens
};

// Packs `samples` (plain or tree) into sequences of at most `budget` tokens (a longer sample gets one
// of its own). Every trained (sample, position) becomes one term; a packed token trained in several
// samples is predicted once and shared by its terms.
std::vector<MicroBatch> make_micro_batches(const std::vector<const TrainSample*>& samples, Packing packing,
                                           int64_t budget, int64_t block_rows) {
  std::vector<std::span<const int32_t>> views;
  views.reserve(samples.size());
  for (const TrainSample* s : samples) views.emplace_back(s->token_ids);
  const std::span<const std::span<const int32_t>> all(views);
  auto seqs = packing == Packing::kTree ? tracking::pack_tree(all, static_cast<size_t>(budget))
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
          if (seq.parent[i] < 0) fail(ErrorCode::kInternal, "packing: a trained token has no predecessor");
          slot_of[i] = static_cast<int64_t>(rows.size());
          rows.push_back(seq.parent[i]);
          targets.push_back(seq.token_ids[i]);
        }
        mb.term_sample.push_back(input);
        mb.term_position.push_back(p);
        slots.push_back(slot_of[i]);
      }
    }
    mb.ids = torch::tensor(ids, torch::kLong);
    mb.positions = torch::tensor(pos, torch::kLong);
    mb.rows = torch::tensor(rows, torch::kLong);
    mb.targets = torch::tensor(targets, torch::kLong);
    mb.term_slot = torch::tensor(slots, torch::kLong);
    mb.plan = plan_attention(seq.subtree_end, block_rows);
    mb.seq = std::move(seq);
    out.push_back(std::move(mb));
  }
  return out;
}

torch::Tensor float_tensor(const std::vector<float>& v) { return torch::tensor(v, torch::kFloat); }

}  // namespace

struct Trainer::Impl {
  model::Qwen2Model model;
  TrainerOptions o;
  std::optional<model::Qwen2Model> reference;
  std::vector<std::pair<std::string, torch::Tensor>> params;  // trainable
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::mt19937_64 rng;
  int64_t global_step = 0;
  int64_t policy_version = 0;
  GradientHook hook;
  std::shared_ptr<Collective> collective;

  Impl(model::Qwen2Model m, TrainerOptions options) : model(std::move(m)), o(std::move(options)), rng(o.seed) {}

  bool lora() const { return o.lora.enabled(); }

  // Logprob of every trained position of `samples` on `net` (no gradient, eval mode).
  std::vector<std::vector<float>> evaluate(const std::vector<const TrainSample*>& samples, model::Qwen2Model& net) {
    torch::NoGradGuard no_grad;
    std::vector<std::vector<float>> out(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) out[i].assign(samples[i]->size(), 0.0f);
    for (auto& mb : make_micro_batches(samples, o.packing, o.micro_batch_tokens, o.attention_block)) {
      auto hidden = packed_hidden(net, mb.ids, mb.positions, mb.plan);   // (T, C)
      auto tl = token_logprobs(net, hidden.index_select(0, mb.rows), mb.targets, o.logprob_chunk);
      auto lp = tl.logprob.index_select(0, mb.term_slot).contiguous();  // (K,)
      const float* d = lp.data_ptr<float>();
      for (size_t k = 0; k < mb.term_sample.size(); ++k) {
        out[static_cast<size_t>(mb.term_sample[k])][static_cast<size_t>(mb.term_position[k])] = d[k];
      }
    }
    return out;
  }

  void all_reduce(std::vector<torch::Tensor>& tensors) {
    if (collective) collective->all_reduce_sum(tensors);
  }
};

Trainer::Trainer(model::Qwen2Model model, TrainerOptions options)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(options))) {
  Impl& s = *impl_;
  if (s.o.mini_batch_num < 1 || s.o.ppo_epochs < 1) invalid_argument("trainer: mini_batch_num and ppo_epochs must be >= 1");
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
  adam.betas({s.o.optim.beta1, s.o.optim.beta2}).eps(s.o.optim.eps).weight_decay(s.o.optim.weight_decay);
  s.optimizer = std::make_unique<torch::optim::AdamW>(tensors, adam);
}

Trainer::~Trainer() = default;

void Trainer::set_gradient_hook(GradientHook hook) { impl_->hook = std::move(hook); }
void Trainer::set_collective(std::shared_ptr<Collective> collective) { impl_->collective = std::move(collective); }
model::Qwen2Model& Trainer::model() { return impl_->model; }
const TrainerOptions& Trainer::options() const { return impl_->o; }
int64_t Trainer::global_step() const { return impl_->global_step; }
int64_t Trainer::policy_version() const { return impl_->policy_version; }
std::vector<std::pair<std::string, torch::Tensor>> Trainer::trainable_parameters() { return impl_->params; }
std::optional<model::Qwen2Model> Trainer::reference_model() { return impl_->reference; }

std::vector<std::vector<float>> Trainer::compute_logprobs(const Batch& batch) {
  validate_batch(batch, impl_->model->config().vocab_size);
  std::vector<const TrainSample*> ptrs;
  for (const auto& s : batch.samples) ptrs.push_back(&s);
  const bool was_training = impl_->model->is_training();
  impl_->model->eval();
  auto out = impl_->evaluate(ptrs, impl_->model);
  impl_->model->train(was_training);
  return out;
}

TrainMetrics Trainer::train_step(const Batch& batch) {
  const auto t0 = Clock::now();
  Impl& s = *impl_;
  const TrainerOptions& o = s.o;
  validate_batch(batch, s.model->config().vocab_size);
  TrainMetrics m;
  const size_t n = batch.samples.size();

  // Advantages: per episode from rewards, or as given per token.
  const bool given = batch.has_advantages();
  std::vector<double> sample_adv(n, 0.0);
  std::vector<uint8_t> keep(n, 1);
  if (!given) {
    std::map<std::string, size_t> episode_index;
    std::vector<double> rewards;
    std::vector<std::string> groups;
    std::vector<size_t> episode_of(n);
    for (size_t i = 0; i < n; ++i) {
      const TrainSample& t = batch.samples[i];
      const std::string key = t.episode_uuid.empty() ? "\x01sample " + std::to_string(i) : t.episode_uuid;
      auto [it, fresh] = episode_index.emplace(key, rewards.size());
      if (fresh) {
        rewards.push_back(t.reward);
        groups.push_back(t.task_id);
      }
      episode_of[i] = it->second;
    }
    AdvantageResult r = compute_advantages(rewards, groups, o.advantage);
    for (size_t i = 0; i < n; ++i) {
      sample_adv[i] = r.advantages[episode_of[i]];
      keep[i] = r.kept[episode_of[i]];
    }
    m.groups = r.groups;
    m.zero_variance_groups = r.zero_variance_groups;
    for (double x : rewards) m.reward_mean += x / static_cast<double>(rewards.size());
  }
  auto advantage = [&](size_t i, size_t p) {
    return given ? static_cast<double>(batch.samples[i].advantages[p]) : sample_adv[i];
  };

  // Samples that carry loss terms.
  std::vector<size_t> active;
  for (size_t i = 0; i < n; ++i) {
    const TrainSample& t = batch.samples[i];
    if (keep[i] && t.trained_tokens() > 0 && (!o.episode_weighting || t.weight > 0)) {
      active.push_back(i);
    } else {
      ++m.dropped_samples;
    }
  }
  std::vector<const TrainSample*> ptrs;
  std::vector<double> trained(active.size());
  for (size_t a = 0; a < active.size(); ++a) {
    const TrainSample& t = batch.samples[active[a]];
    ptrs.push_back(&t);
    trained[a] = static_cast<double>(t.trained_tokens());
    m.tokens += static_cast<int64_t>(t.size());
    m.trained_tokens += static_cast<int64_t>(t.trained_tokens());
    m.advantage_mean += sample_adv[active[a]] / static_cast<double>(active.size());
    m.advantage_abs_mean += std::abs(sample_adv[active[a]]) / static_cast<double>(active.size());
  }
  m.samples = static_cast<int64_t>(active.size());

  // Old (proximal) and reference logprobs on the weights before any update of this step.
  const bool was_training = s.model->is_training();
  s.model->eval();
  const bool corrected = o.loss.correction != OffPolicyCorrection::kNone;
  const bool recompute = o.recompute_old_logprobs || corrected;
  const size_t count = active.size();
  // Epoch 0's order is drawn first: the samples of its first mini-batch are trained on the weights
  // the old logprobs must come from, so their training forward gives the old logprobs (detached) and
  // only the other mini-batches need a separate pass. With dropout (LoRA) the training forward is
  // not the policy's, so then every sample gets the separate eval-mode pass.
  std::vector<size_t> first_order(count);  // positions in `active`
  for (size_t a = 0; a < count; ++a) first_order[a] = a;
  if (o.shuffle) std::shuffle(first_order.begin(), first_order.end(), s.rng);
  const bool reuse_forward = recompute && !(s.lora() && o.lora.dropout > 0);
  const size_t first_size = count / static_cast<size_t>(o.mini_batch_num);
  std::vector<std::vector<float>> recomputed(count), reference;
  auto t_old = Clock::now();
  if (recompute) {
    std::vector<size_t> need;
    for (size_t r = reuse_forward ? first_size : 0; r < count; ++r) need.push_back(first_order[r]);
    std::vector<const TrainSample*> need_ptrs;
    for (size_t a : need) need_ptrs.push_back(ptrs[a]);
    auto lp = s.evaluate(need_ptrs, s.model);
    for (size_t r = 0; r < need.size(); ++r) recomputed[need[r]] = std::move(lp[r]);
    if (reuse_forward) {
      for (size_t r = 0; r < first_size; ++r) recomputed[first_order[r]].assign(ptrs[first_order[r]]->size(), 0.0f);
    }
  }
  m.old_logprob_seconds = seconds_since(t_old);
  auto t_ref = Clock::now();
  if (o.loss.use_kl) {
    if (s.lora()) {
      set_lora_enabled(s.model, false);
      try {
        reference = s.evaluate(ptrs, s.model);
      } catch (...) {
        set_lora_enabled(s.model, true);
        throw;
      }
      set_lora_enabled(s.model, true);
    } else {
      reference = s.evaluate(ptrs, *s.reference);
    }
  }
  m.ref_logprob_seconds = seconds_since(t_ref);

  // Token-mean sums for the metrics (over every term of every mini-batch and epoch).
  double terms = 0, kl_sum = 0, entropy_sum = 0, clipped = 0, dual = 0, approx = 0, isw = 0, istrunc = 0;
  double loss_sum = 0, pg_sum = 0, grad_norm_sum = 0;
  int64_t steps = 0;

  s.model->train();
  for (int64_t epoch = 0; epoch < o.ppo_epochs; ++epoch) {
    std::vector<size_t> order = first_order;  // positions in `active`
    if (epoch > 0) {
      for (size_t a = 0; a < count; ++a) order[a] = a;
      if (o.shuffle) std::shuffle(order.begin(), order.end(), s.rng);
    }
    for (int64_t k = 0; k < o.mini_batch_num; ++k) {
      const bool old_from_forward = reuse_forward && epoch == 0 && k == 0;
      const size_t lo = count * static_cast<size_t>(k) / static_cast<size_t>(o.mini_batch_num);
      const size_t hi = count * static_cast<size_t>(k + 1) / static_cast<size_t>(o.mini_batch_num);
      std::vector<size_t> part(order.begin() + static_cast<std::ptrdiff_t>(lo), order.begin() + static_cast<std::ptrdiff_t>(hi));
      // Normalisers over the whole mini-batch on every rank.
      double local_terms = 0;
      for (size_t a : part) local_terms += trained[a];
      std::vector<torch::Tensor> totals = {torch::tensor({local_terms, static_cast<double>(part.size())}, torch::kDouble)};
      s.all_reduce(totals);
      const double total_terms = totals[0][0].item<double>();
      const double total_seqs = totals[0][1].item<double>();
      if (total_terms == 0) {
        ++m.skipped_steps;
        ++s.global_step;
        continue;
      }
      std::vector<const TrainSample*> mb_ptrs;
      std::vector<double> coef(part.size());
      for (size_t j = 0; j < part.size(); ++j) {
        const size_t a = part[j];
        mb_ptrs.push_back(ptrs[a]);
        const double w = o.episode_weighting ? ptrs[a]->weight : 1.0;
        switch (o.aggregation) {
          case LossAggregation::kTokenMean: coef[j] = w / total_terms; break;
          case LossAggregation::kSeqMeanTokenMean: coef[j] = w / (total_seqs * trained[a]); break;
          case LossAggregation::kSeqMeanTokenSum: coef[j] = w / total_seqs; break;
          case LossAggregation::kSeqMeanTokenSumNorm: coef[j] = w / o.norm_constant; break;
        }
      }
      double mb_loss = 0, mb_pg = 0;
      for (auto& mb : make_micro_batches(mb_ptrs, o.packing, o.micro_batch_tokens, o.attention_block)) {
        const size_t kt = mb.term_sample.size();
        std::vector<float> old(kt), adv(kt), cf(kt), behaviour(kt), ref(kt);
        for (size_t q = 0; q < kt; ++q) {
          const auto j = static_cast<size_t>(mb.term_sample[q]);
          const auto p = static_cast<size_t>(mb.term_position[q]);
          const size_t a = part[j];
          behaviour[q] = ptrs[a]->logprobs[p];
          old[q] = recompute ? recomputed[a][p] : behaviour[q];
          adv[q] = static_cast<float>(advantage(active[a], p));
          cf[q] = static_cast<float>(coef[j]);
          if (o.loss.use_kl) ref[q] = reference[a][p];
        }
        auto hidden = packed_hidden(s.model, mb.ids, mb.positions, mb.plan);  // (T, C)
        auto tl = token_logprobs(s.model, hidden.index_select(0, mb.rows), mb.targets, o.logprob_chunk);
        LossTerms lt;
        lt.logprob = tl.logprob.index_select(0, mb.term_slot);                 // (K,)
        auto entropy = tl.entropy.index_select(0, mb.term_slot);
        lt.entropy = o.loss.entropy_coef != 0 ? entropy : entropy.detach();
        if (old_from_forward) {
          // The weights have not moved yet: this forward's logprobs are the old ones. Kept for later epochs.
          auto detached = lt.logprob.detach().to(torch::kFloat).contiguous();
          const float* d = detached.data_ptr<float>();
          for (size_t q = 0; q < kt; ++q) {
            const size_t a = part[static_cast<size_t>(mb.term_sample[q])];
            recomputed[a][static_cast<size_t>(mb.term_position[q])] = d[q];
            old[q] = d[q];
          }
        }
        lt.old_logprob = float_tensor(old);
        lt.advantage = float_tensor(adv);
        lt.coef = float_tensor(cf);
        if (corrected) lt.behaviour_logprob = float_tensor(behaviour);
        if (o.loss.use_kl) lt.ref_logprob = float_tensor(ref);
        LossOutput out = policy_loss(lt, o.loss);
        (out.loss * o.loss_scale).backward();
        mb_loss += out.loss.item<double>() * o.loss_scale;
        mb_pg += out.pg_loss;
        terms += out.tokens;
        kl_sum += out.kl_sum;
        entropy_sum += out.entropy_sum;
        clipped += out.clipped;
        dual += out.dual_clipped;
        approx += out.approx_kl_sum;
        isw += out.is_weight_sum;
        istrunc += out.is_truncated;
        m.packed_tokens += static_cast<int64_t>(mb.seq.size());
        ++m.micro_batches;
      }

      // Gradients of the whole mini-batch: reduce over ranks, hook, clip, step.
      std::vector<torch::Tensor> grads;
      for (auto& [name, p] : s.params) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        grads.push_back(p.grad());
      }
      s.all_reduce(grads);
      if (s.hook) s.hook(grads);
      std::vector<torch::Tensor> norms;
      for (auto& g : grads) norms.push_back(g.norm(2).to(torch::kDouble));
      const double norm = torch::stack(norms).norm(2).item<double>();
      std::vector<torch::Tensor> sums = {torch::tensor({mb_loss, mb_pg}, torch::kDouble)};
      s.all_reduce(sums);
      loss_sum += sums[0][0].item<double>();
      pg_sum += sums[0][1].item<double>();
      if (!std::isfinite(norm)) {
        ++m.skipped_steps;
      } else {
        if (o.optim.grad_clip > 0 && norm > o.optim.grad_clip) {
          const double factor = o.optim.grad_clip / (norm + 1e-6);
          for (auto& g : grads) g.mul_(factor);
        }
        m.lr = learning_rate(o.optim, s.global_step);
        for (auto& group : s.optimizer->param_groups()) group.options().set_lr(m.lr);
        s.optimizer->step();
        grad_norm_sum += norm;
        ++steps;
      }
      s.optimizer->zero_grad();
      ++s.global_step;
      ++m.optimizer_steps;
    }
  }
  s.model->train(was_training);

  std::vector<torch::Tensor> sums = {torch::tensor({terms, kl_sum, entropy_sum, clipped, dual, approx, isw, istrunc}, torch::kDouble)};
  s.all_reduce(sums);
  auto v = sums[0];
  const double tokens = std::max(1.0, v[0].item<double>());
  m.kl = v[1].item<double>() / tokens;
  m.entropy = v[2].item<double>() / tokens;
  m.clip_fraction = v[3].item<double>() / tokens;
  m.dual_clip_fraction = v[4].item<double>() / tokens;
  m.approx_kl = v[5].item<double>() / tokens;
  m.is_weight = v[0].item<double>() > 0 ? v[6].item<double>() / tokens : 1.0;
  m.is_truncated_fraction = v[7].item<double>() / tokens;
  const double done = static_cast<double>(std::max<int64_t>(1, m.optimizer_steps));
  m.loss = loss_sum / done;
  m.pg_loss = pg_sum / done;
  m.grad_norm = steps > 0 ? grad_norm_sum / static_cast<double>(steps) : 0.0;
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
      invalid_argument("copy_parameters: parameter '" + item.key() + "' is missing or has another shape in the target");
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& item : src) dst[item.key()].copy_(item.value());
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
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    st.torch_rng = gen.get_state();
  }
  for (auto& [name, p] : s.params) {
    auto it = s.optimizer->state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == s.optimizer->state().end()) continue;  // never stepped
    auto& ps = static_cast<torch::optim::AdamWParamState&>(*it->second);
    st.optimizer.push_back({name, ps.step(), ps.exp_avg().detach().clone(), ps.exp_avg_sq().detach().clone()});
  }
  return st;
}

void Trainer::load_state(const State& st) {
  Impl& s = *impl_;
  std::map<std::string, torch::Tensor> by_name(s.params.begin(), s.params.end());
  for (const auto& e : st.optimizer) {
    auto it = by_name.find(e.name);
    if (it == by_name.end()) invalid_argument("trainer state: optimizer entry '" + e.name + "' is not a trainable parameter");
    if (!e.exp_avg.defined() || !e.exp_avg_sq.defined() || e.exp_avg.sizes() != it->second.sizes() ||
        e.exp_avg_sq.sizes() != it->second.sizes()) {
      invalid_argument("trainer state: optimizer moments of '" + e.name + "' do not match the parameter's shape");
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
    s.optimizer->state()[c10::guts::to_string(p.unsafeGetTensorImpl())] = std::move(ps);
  }
  s.rng = rng;
  if (st.torch_rng.defined()) {
    auto gen = at::detail::getDefaultCPUGenerator();
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
