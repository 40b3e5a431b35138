// Trainer equivalences and behaviour: micro-batching = full batch, tree = plain packing, merged
// samples = one sample per call (issue 5), two in-process ranks = one rank, rollout = recomputed
// old logprobs when they agree, logprobs at the rollout temperature and their gap to the rollout's,
// zero-variance groups dropped, and a toy bandit learns.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <barrier>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tracking/merge.h"
#include "tracking/synthetic.h"
#include "train_test_util.h"

namespace ajet::train {
namespace {

using testing::clone_model;
using testing::relative_difference;
using testing::step_gradients;
using testing::test_options;
using train_data::testing::random_batch;

void expect_same_gradients(const std::vector<std::vector<torch::Tensor>>& a,
                           const std::vector<std::vector<torch::Tensor>>& b, double tolerance,
                           const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t s = 0; s < a.size(); ++s)
    EXPECT_LT(relative_difference(a[s], b[s]), tolerance) << what << " step " << s;
}

TEST(Trainer, MicroBatchingEqualsTheFullBatch) {
  auto base = testing::random_model(testing::qwen2_config(), 1);
  train_data::Batch batch = random_batch(3, 4, 9, 7, 61, 2);
  for (auto agg :
       {train_data::LossAggregation::kTokenMean, train_data::LossAggregation::kSeqMeanTokenMean}) {
    for (auto packing : {train_data::Packing::kPlain, train_data::Packing::kTree}) {
      train_data::TrainerOptions o = test_options();
      o.aggregation = agg;
      o.packing = packing;
      o.mini_batch_num = 2;
      o.loss.use_kl = true;
      o.loss.kl_coef = 0.1;
      o.loss.entropy_coef = 0.01;
      Trainer full(clone_model(base), o);
      o.micro_batch_tokens = 20;  // many micro-batches per mini-batch
      Trainer micro(clone_model(base), o);
      train_data::TrainMetrics mf, mm;
      auto gf = step_gradients(full, batch, &mf);
      auto gm = step_gradients(micro, batch, &mm);
      const std::string what = std::string(train_data::aggregation_name(agg)) + " " +
                               std::string(train_data::packing_name(packing));
      expect_same_gradients(gm, gf, 1e-5, what);
      EXPECT_GT(mm.micro_batches, mf.micro_batches) << what;
      EXPECT_NEAR(mm.loss, mf.loss, 1e-5 * std::max(1.0, std::abs(mf.loss))) << what;
      EXPECT_NEAR(mm.kl, mf.kl, 1e-6) << what;
      EXPECT_NEAR(mm.entropy, mf.entropy, 1e-5) << what;
    }
  }
}

TEST(Trainer, TreePackingEqualsPlainPacking) {
  auto base = testing::random_model(testing::qwen3_config(), 3);
  train_data::Batch batch = random_batch(2, 5, 12, 6, 53, 4);
  train_data::TrainerOptions o = test_options();
  o.loss.use_kl = true;
  o.loss.kl_coef = 0.05;
  o.packing = train_data::Packing::kPlain;
  Trainer plain(clone_model(base), o);
  o.packing = train_data::Packing::kTree;
  Trainer tree(clone_model(base), o);
  train_data::TrainMetrics mp, mt;
  auto gp = step_gradients(plain, batch, &mp);
  auto gt = step_gradients(tree, batch, &mt);
  expect_same_gradients(gt, gp, 1e-5, "tree vs plain");
  EXPECT_NEAR(mt.loss, mp.loss, 1e-6);
  EXPECT_LT(mt.packed_tokens, mp.packed_tokens);  // the shared prompts are computed once
  EXPECT_EQ(mt.trained_tokens, mp.trained_tokens);
}

// Issue 40: a group's prompt longer than the micro-batch budget is packed once (one tree per group)
// instead of once per sample, with the same loss, KL, entropy and gradients, old-logprob and
// reference passes included; the budget still bounds the tokens beyond the shared prompt.
TEST(Trainer, APromptLongerThanTheBudgetIsComputedOnceWithTheSameGradients) {
  auto base = testing::random_model(testing::qwen2_config(), 5);
  train_data::Batch batch = random_batch(2, 4, 40, 6, 61, 9);  // two groups of 4, 40-token prompts
  train_data::TrainerOptions o = test_options();
  o.loss.use_kl = true;  // the reference pass too
  o.loss.kl_coef = 0.1;
  o.loss.entropy_coef = 0.01;
  o.micro_batch_tokens = 30;  // below the prompt
  o.budget_beyond_shared_prefix = false;
  Trainer each(clone_model(base), o);
  o.budget_beyond_shared_prefix = true;
  Trainer shared(clone_model(base), o);
  train_data::TrainMetrics me, ms;
  auto ge = step_gradients(each, batch, &me);
  auto gs = step_gradients(shared, batch, &ms);
  expect_same_gradients(gs, ge, 1e-5, "shared prompt vs once per sample");
  EXPECT_NEAR(ms.loss, me.loss, 1e-6);
  EXPECT_NEAR(ms.kl, me.kl, 1e-6);
  EXPECT_NEAR(ms.entropy, me.entropy, 1e-5);
  EXPECT_EQ(me.micro_batches, 8) << "each sample alone: every one is longer than the budget";
  EXPECT_EQ(ms.micro_batches, 2) << "one tree per group";
  EXPECT_LT(ms.packed_tokens,
            me.packed_tokens - 2 * 3 * 40 + 1);  // each group's prompt once, not 4 times
  // The logprob passes agree as well.
  auto le = each.compute_logprobs(batch), ls = shared.compute_logprobs(batch);
  ASSERT_EQ(le.size(), ls.size());
  for (size_t i = 0; i < le.size(); ++i) {
    for (size_t p = 0; p < le[i].size(); ++p)
      EXPECT_NEAR(le[i][p], ls[i][p], 1e-5) << i << " " << p;
  }
}

// Activation checkpointing recomputes each layer in the backward pass: the same gradients, for full
// fine-tuning and for LoRA with dropout (the rerun draws the forward's masks), over two steps (so
// the dropout generator is left where it would have been).
TEST(Trainer, ActivationCheckpointingGivesTheSameGradients) {
  auto base = testing::random_model(testing::qwen2_config(), 6);
  train_data::Batch batch = random_batch(2, 3, 10, 6, 61, 12);
  for (int lora : {0, 4}) {
    train_data::TrainerOptions o = test_options();
    o.loss.use_kl = true;
    o.loss.kl_coef = 0.1;
    o.mini_batch_num = 2;
    if (lora > 0) {
      o.lora.rank = lora;
      o.lora.dropout = 0.3;
      o.optim.lr = 1e-2;  // B starts at 0: the second step sees a non-zero adapter
    } else {
      // AdamW's first update is ~lr * sign(g): a gradient entry at rounding level (the no-grad
      // forward's kernels sum in another order) may flip sign and move its weight by lr; compare at
      // fixed weights.
      o.optim.lr = 0;
    }
    Trainer plain(clone_model(base), o);
    o.activation_checkpointing = true;
    Trainer checkpointed(clone_model(base), o);
    for (int step = 0; step < 2; ++step) {
      train_data::TrainMetrics mp, mc;
      auto gp = step_gradients(plain, batch, &mp);
      auto gc = step_gradients(checkpointed, batch, &mc);
      expect_same_gradients(gc, gp, 1e-5,
                            "lora " + std::to_string(lora) + " step " + std::to_string(step));
      EXPECT_NEAR(mc.loss, mp.loss, 1e-6) << lora << " " << step;
      ASSERT_FALSE(gp.empty());
      double norm = 0;
      for (const auto& g : gp.front()) norm += g.defined() ? g.norm().item<double>() : 0.0;
      EXPECT_GT(norm, 0.0) << "the gradients compared are not all zero";
    }
  }
}

// Issue 5: GRPO groups of linear multi-turn episodes, merged by the tracking module (one sample per
// episode) against one sample per call (the call's prompt as context, its completion trained). With
// token-mean and every sample weighted 1, every generated token is one term with coefficient 1/N in
// both, and advantages are per episode, so the loss and its gradients agree token for token.
TEST(Trainer, MergedSamplesEqualOneSamplePerCall) {
  auto config = testing::qwen2_config();
  auto base = testing::random_model(config, 5);
  tracking::synthetic::AgentShape shape;
  shape.turns = 4;
  shape.system_prompt_tokens = 10;
  shape.task_tokens = 4;
  shape.generated_tokens_per_turn = 6;
  shape.observation_tokens_per_turn = 3;
  shape.vocab_size = static_cast<int>(config.vocab_size);
  train_data::Batch merged, per_call;
  for (int g = 0; g < 2; ++g) {
    auto group = tracking::synthetic::grpo_group(shape, 3, 100 + static_cast<uint64_t>(g));
    for (size_t e = 0; e < group.size(); ++e) {
      const auto& calls = group[e];
      const double reward = static_cast<double>((e * 7 + static_cast<size_t>(g)) % 3) - 0.5;
      const std::string task = "task-" + std::to_string(g);
      tracking::MergedEpisode m =
          tracking::merge_episode({calls[0].episode_uuid, task, reward}, calls, {});
      ASSERT_EQ(m.samples.size(), 1u) << "a linear episode merges into one sample";
      train_data::Batch one = train_data::batch_from_samples(m.samples);
      merged.samples.push_back(one.samples[0]);
      for (const auto& call : calls) {
        train_data::TrainSample s;
        s.episode_uuid = call.episode_uuid;
        s.task_id = task;
        s.reward = reward;
        s.token_ids = call.prompt_ids;
        s.token_ids.insert(s.token_ids.end(), call.completion_ids.begin(),
                           call.completion_ids.end());
        s.loss_mask.assign(call.prompt_ids.size(), 0);
        s.loss_mask.insert(s.loss_mask.end(), call.completion_ids.size(), 1);
        s.logprobs.assign(call.prompt_ids.size(), 0.0f);
        s.logprobs.insert(s.logprobs.end(), call.logprobs.begin(), call.logprobs.end());
        per_call.samples.push_back(std::move(s));
      }
    }
  }
  ASSERT_EQ(merged.trained_tokens(), per_call.trained_tokens());
  EXPECT_LT(merged.tokens() * 2, per_call.tokens());

  train_data::TrainerOptions o = test_options();
  o.episode_weighting = false;
  o.loss.use_kl = true;
  o.loss.kl_coef = 0.1;
  o.loss.entropy_coef = 0.01;
  for (bool recompute : {true, false}) {
    o.recompute_old_logprobs = recompute;
    Trainer a(clone_model(base), o), b(clone_model(base), o);
    // Token for token: the logprob of every generated token, in call order.
    auto la = a.compute_logprobs(merged), lb = b.compute_logprobs(per_call);
    std::vector<float> fa, fb;
    for (size_t i = 0; i < la.size(); ++i) {
      for (size_t p = 0; p < la[i].size(); ++p) {
        if (merged.samples[i].loss_mask[p]) fa.push_back(la[i][p]);
      }
    }
    for (size_t i = 0; i < lb.size(); ++i) {
      for (size_t p = 0; p < lb[i].size(); ++p) {
        if (per_call.samples[i].loss_mask[p]) fb.push_back(lb[i][p]);
      }
    }
    ASSERT_EQ(fa.size(), fb.size());
    for (size_t k = 0; k < fa.size(); ++k)
      EXPECT_NEAR(fa[k], fb[k], 1e-5 * std::max(1.0f, std::abs(fb[k]))) << k;
    train_data::TrainMetrics ma, mb;
    auto ga = step_gradients(a, merged, &ma);
    auto gb = step_gradients(b, per_call, &mb);
    expect_same_gradients(ga, gb, 1e-5, recompute ? "recompute" : "rollout logprobs");
    EXPECT_NEAR(ma.loss, mb.loss, 1e-5 * std::max(1.0, std::abs(mb.loss)));
    EXPECT_NEAR(ma.pg_loss, mb.pg_loss, 1e-5 * std::max(1.0, std::abs(mb.pg_loss)));
    EXPECT_NEAR(ma.entropy, mb.entropy, 1e-5);
    EXPECT_EQ(ma.trained_tokens, mb.trained_tokens);
    EXPECT_LT(ma.tokens * 2, mb.tokens);  // the point of merging
  }
}

// An in-process all-reduce for N threads: the last arrival sums, everyone copies the sum back.
class ThreadCollective {
 public:
  explicit ThreadCollective(int world) : world_(world) {}
  class Rank : public Collective {
   public:
    Rank(ThreadCollective* group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int world_size() const override { return group_->world_; }
    void all_reduce_sum(std::vector<torch::Tensor>& tensors) override { group_->reduce(tensors); }

   private:
    ThreadCollective* group_;
    int rank_;
  };

 private:
  void reduce(std::vector<torch::Tensor>& tensors) {
    std::unique_lock lock(mu_);
    const int64_t generation = generation_;
    if (arrived_ == 0) {
      sum_.clear();
      for (auto& t : tensors) sum_.push_back(t.detach().clone());
    } else {
      for (size_t i = 0; i < tensors.size(); ++i) sum_[i].add_(tensors[i]);
    }
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(sum_[i]);
    // The sums stay valid until every rank has copied them: the next call only starts after all
    // ranks left this one (each rank calls in lock step), and it rebuilds sum_ under the lock.
    if (++copied_ == world_) {
      copied_ = 0;
      ++released_;
      cv_.notify_all();
    } else {
      const int64_t r = released_;
      cv_.wait(lock, [&] { return released_ != r; });
    }
  }

  int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<torch::Tensor> sum_;
  int arrived_ = 0, copied_ = 0;
  int64_t generation_ = 0, released_ = 0;
};

TEST(Trainer, TwoRanksEqualOneRankOnTheWholeBatch) {
  auto base = testing::random_model(testing::qwen2_config(), 6);
  train_data::Batch all = random_batch(4, 3, 8, 6, 61, 7);
  train_data::Batch half[2];
  for (size_t i = 0; i < all.samples.size(); ++i)
    half[i < 6 ? 0 : 1].samples.push_back(all.samples[i]);  // whole groups
  train_data::TrainerOptions o = test_options();
  o.shuffle = false;
  o.loss.use_kl = true;
  o.loss.kl_coef = 0.1;
  for (auto agg :
       {train_data::LossAggregation::kTokenMean, train_data::LossAggregation::kSeqMeanTokenMean}) {
    o.aggregation = agg;
    Trainer single(clone_model(base), o);
    train_data::TrainMetrics ms;
    auto gs = step_gradients(single, all, &ms);
    ThreadCollective group(2);
    std::vector<std::vector<torch::Tensor>> gr[2];
    train_data::TrainMetrics mr[2];
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        Trainer t(clone_model(base), o);
        t.set_collective(std::make_shared<ThreadCollective::Rank>(&group, r));
        gr[r] = step_gradients(t, half[r], &mr[r]);
      });
    }
    for (auto& t : threads) t.join();
    expect_same_gradients(gr[0], gs, 1e-5, "rank 0");
    expect_same_gradients(gr[1], gs, 1e-5, "rank 1");
    EXPECT_NEAR(mr[0].loss, ms.loss, 1e-5 * std::max(1.0, std::abs(ms.loss)));
    EXPECT_NEAR(mr[1].kl, ms.kl, 1e-6);
  }
}

// A collective that passes tensors through (one rank) and throws on its `fail_at`-th all-reduce
// (0: never), as c10d does when a peer died mid-step.
class FailingCollective : public Collective {
 public:
  explicit FailingCollective(int fail_at) : fail_at_(fail_at) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  void all_reduce_sum(std::vector<torch::Tensor>&) override {
    if (++calls_ == fail_at_) fail(ErrorCode::kUnavailable, "the peer is gone");
  }
  int calls() const { return calls_; }

 private:
  int fail_at_;
  int calls_ = 0;
};

// With rollback on (elastic engine groups), a step that fails at its second optimizer update
// leaves the trainer exactly as before it: the next step then equals that of a trainer that never
// saw the failure, bit for bit. Without rollback the first update stays applied.
TEST(Trainer, AFailedCollectiveStepRollsBackWhenAsked) {
  auto base = testing::random_model(testing::qwen2_config(), 6);
  train_data::Batch batch = random_batch(4, 3, 8, 6, 61, 7);
  train_data::TrainerOptions o = test_options();
  o.mini_batch_num = 2;  // two optimizer updates, each after its all-reduce
  Trainer reference(clone_model(base), o);
  reference.train_step(batch);
  const uint64_t before = parameter_checksum(reference.model());
  // How many all-reduces a step makes; the failure comes at the last, after the first update.
  int per_step = 0;
  {
    Trainer counting(clone_model(base), o);
    auto counter = std::make_shared<FailingCollective>(0);
    counting.set_collective(counter);
    counting.train_step(batch);
    per_step = counter->calls();
  }
  ASSERT_GE(per_step, 2);
  for (const bool rollback : {true, false}) {
    Trainer t(clone_model(base), o);
    t.train_step(batch);
    ASSERT_EQ(parameter_checksum(t.model()), before);
    t.set_rollback_on_failure(rollback);
    t.set_collective(std::make_shared<FailingCollective>(per_step));
    EXPECT_THROW(t.train_step(batch), Error);
    if (!rollback) {
      EXPECT_NE(parameter_checksum(t.model()), before) << "the first update was not applied";
      continue;
    }
    EXPECT_EQ(parameter_checksum(t.model()), before);
    EXPECT_EQ(t.policy_version(), 1);
    EXPECT_EQ(t.global_step(), reference.global_step());
    t.set_collective(nullptr);
    reference.train_step(batch);
    t.train_step(batch);
    EXPECT_EQ(parameter_checksum(t.model()), parameter_checksum(reference.model()))
        << "the optimizer state or RNG was not restored";
  }
}

TEST(Trainer, RolloutLogprobsThatAgreeGiveTheRecomputedResult) {
  auto base = testing::random_model(testing::qwen2_config(), 8);
  train_data::Batch batch = random_batch(2, 4, 6, 5, 61, 9);
  train_data::TrainerOptions o = test_options();
  Trainer probe(clone_model(base), o);
  auto lp = probe.compute_logprobs(batch);
  for (size_t i = 0; i < batch.samples.size(); ++i) batch.samples[i].logprobs = lp[i];
  Trainer recompute(clone_model(base), o);
  o.recompute_old_logprobs = false;
  Trainer rollout(clone_model(base), o);
  o.loss.correction =
      train_data::OffPolicyCorrection::kDecoupledPpo;  // behaviour == proximal: weight 1
  Trainer decoupled(clone_model(base), o);
  train_data::TrainMetrics md;
  auto g1 = step_gradients(recompute, batch);
  auto g2 = step_gradients(rollout, batch);
  auto g3 = step_gradients(decoupled, batch, &md);
  expect_same_gradients(g2, g1, 1e-5, "rollout");
  expect_same_gradients(g3, g1, 1e-5, "decoupled");
  EXPECT_NEAR(md.is_weight, 1.0, 1e-5);
  EXPECT_EQ(md.clip_fraction, 0.0);
}

TEST(Trainer, StaleBehaviourLogprobsAreReweighted) {
  auto base = testing::random_model(testing::qwen2_config(), 8);
  train_data::Batch batch = random_batch(2, 4, 6, 5, 61, 10);
  train_data::TrainerOptions o = test_options();
  Trainer probe(clone_model(base), o);
  auto lp = probe.compute_logprobs(batch);
  // Behaviour = proximal - log 1.5 everywhere: importance weight 1.5 under a cap of 2 scales the
  // policy-gradient part of every gradient by 1.5 (no KL, no entropy here).
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    for (size_t p = 0; p < lp[i].size(); ++p)
      batch.samples[i].logprobs[p] = lp[i][p] - std::log(1.5f);
  }
  Trainer plain(clone_model(base), o);
  o.loss.correction = train_data::OffPolicyCorrection::kTis;
  Trainer tis(clone_model(base), o);
  train_data::TrainMetrics mt;
  auto g1 = step_gradients(plain, batch);
  auto g2 = step_gradients(tis, batch, &mt);
  std::vector<torch::Tensor> scaled;
  for (auto& g : g1[0]) scaled.push_back(g * 1.5);
  EXPECT_LT(relative_difference(g2[0], scaled), 1e-5);
  EXPECT_NEAR(mt.is_weight, 1.5, 1e-4);
  EXPECT_EQ(mt.is_truncated_fraction, 0.0);
}

// ajet.rollout.temperature: the trainer's logprobs are those of softmax(logits / T), the
// distribution train episodes are sampled from (as verl's actor divides its logits by the rollout
// temperature).
TEST(Trainer, LogprobsAreThoseOfTheRolloutTemperature) {
  auto base = testing::random_model(testing::qwen2_config(), 8);
  train_data::Batch batch = random_batch(1, 2, 6, 5, 61, 12);
  train_data::TrainerOptions o = test_options();
  o.temperature = 0.7;
  Trainer tempered(clone_model(base), o);
  const auto lp = tempered.compute_logprobs(batch);
  // Independently: the model's full logits for each sample, divided by T, log-softmaxed.
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const train_data::TrainSample& s = batch.samples[i];
    const auto n = static_cast<int64_t>(s.size());
    auto ids =
        torch::tensor(std::vector<int64_t>(s.token_ids.begin(), s.token_ids.end())).view({1, n});
    auto logits =
        base->forward_logits(ids, torch::arange(n).view({1, n}))[0].to(torch::kDouble);  // (n, V)
    auto expected = torch::log_softmax(logits / 0.7, -1);
    int checked = 0;
    for (int64_t p = 1; p < n; ++p) {
      if (!s.loss_mask[static_cast<size_t>(p)]) continue;
      EXPECT_NEAR(lp[i][static_cast<size_t>(p)],
                  expected[p - 1][s.token_ids[static_cast<size_t>(p)]].item<double>(), 2e-5)
          << "sample " << i << " position " << p;
      ++checked;
    }
    EXPECT_GT(checked, 0);
  }
}

// rollout_logprob_diff: how far the recomputed old logprobs are from the rollout's, over trained
// tokens.
TEST(Trainer, ReportsTheGapBetweenRolloutAndRecomputedLogprobs) {
  auto base = testing::random_model(testing::qwen2_config(), 8);
  train_data::Batch batch = random_batch(2, 4, 6, 5, 61, 13);
  train_data::TrainerOptions o = test_options();
  o.temperature = 0.7;
  Trainer probe(clone_model(base), o);
  const auto lp = probe.compute_logprobs(batch);
  for (size_t i = 0; i < batch.samples.size(); ++i) batch.samples[i].logprobs = lp[i];
  // Sampled at 0.7 and trained at 0.7: the same distribution, the gap is float noise.
  Trainer same(clone_model(base), o);
  EXPECT_LT(same.train_step(batch).rollout_logprob_diff, 1e-5);
  // A trainer that ignored the temperature would compare another distribution with what was
  // sampled.
  o.temperature = 1.0;
  Trainer untempered(clone_model(base), o);
  EXPECT_GT(untempered.train_step(batch).rollout_logprob_diff, 0.05);
  // With the rollout's own logprobs as the old ones there is nothing to compare.
  o.recompute_old_logprobs = false;
  Trainer rollout(clone_model(base), o);
  EXPECT_EQ(rollout.train_step(batch).rollout_logprob_diff, -1.0);
}

TEST(Trainer, DropsZeroVarianceGroupsAndReportsMetrics) {
  auto base = testing::random_model(testing::qwen2_config(), 2);
  train_data::Batch batch = random_batch(3, 4, 6, 5, 61, 12);
  for (size_t i = 0; i < 4; ++i) batch.samples[i].reward = 1.0;  // group 0 is flat
  batch.samples[4].reward = 0;
  batch.samples[5].reward = 1;
  train_data::TrainerOptions o = test_options();
  o.advantage.drop_zero_variance_groups = true;
  o.mini_batch_num = 2;
  o.ppo_epochs = 2;
  o.optim.warmup_steps = 10;
  Trainer t(clone_model(base), o);
  train_data::TrainMetrics m = t.train_step(batch);
  EXPECT_EQ(m.dropped_samples, 4 + (batch.samples[8].reward == batch.samples[9].reward &&
                                            batch.samples[9].reward == batch.samples[10].reward &&
                                            batch.samples[10].reward == batch.samples[11].reward
                                        ? 4
                                        : 0));
  EXPECT_EQ(m.zero_variance_groups * 4, m.dropped_samples);
  EXPECT_EQ(m.groups, 3);
  EXPECT_EQ(m.optimizer_steps, 4);
  EXPECT_EQ(m.global_step, 4);
  EXPECT_EQ(m.policy_version, 1);
  EXPECT_DOUBLE_EQ(m.lr, o.optim.lr * 4 / 10);  // the 4th step of a 10-step warmup
  EXPECT_GT(m.grad_norm, 0);
  EXPECT_GT(m.entropy, 0);
  EXPECT_EQ(m.samples + m.dropped_samples, 12);
  int64_t trained = 0;
  for (size_t i = 4; i < 12; ++i)
    trained += static_cast<int64_t>(batch.samples[i].trained_tokens());
  if (m.dropped_samples == 4) {
    EXPECT_EQ(m.trained_tokens, trained);
  }
  const Json j = m.to_json();
  EXPECT_EQ(j.at("optimizer_steps"), 4);
}

// Per-token advantages (REINFORCE++ as the split attaches them, or a caller's) show in the
// advantage metrics as each sample's token mean; before, they read 0.
TEST(Trainer, PerTokenAdvantagesEnterTheAdvantageMetrics) {
  auto base = testing::random_model(testing::qwen2_config(), 3);
  train_data::Batch batch = random_batch(2, 2, 6, 5, 61, 13);
  const std::vector<float> given = {1.5f, -0.5f, -2.0f, 0.25f};
  for (size_t i = 0; i < batch.samples.size(); ++i)
    batch.samples[i].advantages.assign(batch.samples[i].size(), given[i]);
  Trainer t(clone_model(base), test_options());
  train_data::TrainMetrics m = t.train_step(batch);
  EXPECT_NEAR(m.advantage_mean, (1.5 - 0.5 - 2.0 + 0.25) / 4, 1e-6);
  EXPECT_NEAR(m.advantage_abs_mean, (1.5 + 0.5 + 2.0 + 0.25) / 4, 1e-6);
}

// A one-step bandit: after the prompt the policy picks token 10 (reward 1) or 11 (reward -1),
// sampled from the model restricted to those two. GRPO with a group of 8 per step pushes the share
// of token 10 up.
TEST(Trainer, LearnsAToyBandit) {
  auto config = testing::qwen2_config();
  auto m = testing::random_model(config, 13);
  const std::vector<int32_t> prompt = {5, 6, 7};
  auto share = [&](model::Qwen2Model& net) {
    torch::NoGradGuard no_grad;
    auto ids = torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end())).view({1, 3});
    auto logp =
        torch::log_softmax(net->forward_logits(ids, torch::arange(3).view({1, 3}))[0][2], -1);
    const double a = logp[10].exp().item<double>(), b = logp[11].exp().item<double>();
    return std::tuple{a / (a + b), logp[10].item<float>(), logp[11].item<float>()};
  };
  train_data::TrainerOptions o = test_options();
  o.optim.lr = 1e-2;
  o.optim.weight_decay = 0;
  o.optim.grad_clip = 1.0;
  Trainer trainer(m, o);
  std::mt19937_64 rng(17);
  const double initial = std::get<0>(share(m));
  double first_reward = 0, last_reward = 0;
  for (int step = 0; step < 15; ++step) {
    auto [p10, lp10, lp11] = share(m);
    train_data::Batch batch;
    double reward_sum = 0;
    for (int e = 0; e < 8; ++e) {
      const bool pick10 = std::uniform_real_distribution<double>(0, 1)(rng) < p10;
      train_data::TrainSample s;
      s.episode_uuid = std::to_string(step * 100 + e);
      s.task_id = "bandit";
      s.reward = pick10 ? 1.0 : -1.0;
      s.token_ids = {5, 6, 7, pick10 ? 10 : 11};
      s.loss_mask = {0, 0, 0, 1};
      s.logprobs = {0, 0, 0, pick10 ? lp10 : lp11};
      reward_sum += s.reward;
      batch.samples.push_back(std::move(s));
    }
    if (step < 3) first_reward += reward_sum / 24;
    if (step >= 12) last_reward += reward_sum / 24;
    trainer.train_step(batch);
  }
  const double final_share = std::get<0>(share(m));
  EXPECT_GT(final_share, 0.95) << "initial share " << initial;
  EXPECT_GT(final_share, initial);
  EXPECT_GT(last_reward, first_reward);
}

}  // namespace
}  // namespace ajet::train
