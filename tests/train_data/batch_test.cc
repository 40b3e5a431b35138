// Train batches: validation messages and the engine RPC round trip (no libtorch in this file).
#include "train_data/batch.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "rpc/messages.h"
#include "tracking/merge.h"

namespace ajet::train_data {
namespace {

TrainSample sample(std::string episode, std::string task, double reward, std::vector<int32_t> ids,
                   std::vector<uint8_t> mask) {
  TrainSample s;
  s.episode_uuid = std::move(episode);
  s.task_id = std::move(task);
  s.reward = reward;
  s.token_ids = std::move(ids);
  s.loss_mask = std::move(mask);
  s.logprobs.assign(s.token_ids.size(), 0.0f);
  for (size_t i = 0; i < s.logprobs.size(); ++i) s.logprobs[i] = s.loss_mask[i] ? -0.5f : 0.0f;
  return s;
}

void expect_invalid(const Batch& b, const std::string& fragment) {
  try {
    validate_batch(b, 10);
    FAIL() << "expected an error containing " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Batch, ValidationNamesSampleAndField) {
  Batch ok;
  ok.samples = {sample("e1", "t", 1, {1, 2, 3}, {0, 1, 1}), sample("e2", "t", 0, {1, 4}, {0, 1})};
  EXPECT_NO_THROW(validate_batch(ok, 10));
  EXPECT_EQ(ok.tokens(), 5u);
  EXPECT_EQ(ok.trained_tokens(), 3u);

  Batch b = ok;
  b.samples[1].token_ids[1] = 10;
  expect_invalid(b, "sample 1 (episode e2): token_ids[1] = 10 is outside the vocabulary");
  b = ok;
  b.samples[0].loss_mask = {1, 1, 1};
  expect_invalid(b, "loss_mask[0] is 1");
  b = ok;
  b.samples[0].logprobs.pop_back();
  expect_invalid(b, "'logprobs' has 2 entries, expected 3");
  b = ok;
  b.samples[1].episode_uuid = "e1";
  expect_invalid(b, "differs from");
  b = ok;
  b.samples[0].weight = -1;
  expect_invalid(b, "weight");
}

TEST(Batch, RpcRoundTripKeepsEveryField) {
  Batch b;
  b.samples = {sample("e1", "t1", 1.25, {1, 2, 3}, {0, 1, 1}),
               sample("e2", "t2", -3, {4, 5}, {0, 1})};
  b.samples[0].weight = 0.5;
  b.samples[0].policy_versions = {-1, 7, 7};
  b.samples[1].policy_versions = {-1, 8};
  rpc::Frame f = rpc::encode_train_batch(batch_to_rpc(b));
  Batch back = batch_from_rpc(rpc::decode_train_batch(f));
  ASSERT_EQ(back.samples.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back.samples[i].episode_uuid, b.samples[i].episode_uuid);
    EXPECT_EQ(back.samples[i].task_id, b.samples[i].task_id);
    EXPECT_EQ(back.samples[i].reward, b.samples[i].reward);
    EXPECT_EQ(back.samples[i].weight, b.samples[i].weight);
    EXPECT_EQ(back.samples[i].token_ids, b.samples[i].token_ids);
    EXPECT_EQ(back.samples[i].loss_mask, b.samples[i].loss_mask);
    EXPECT_EQ(back.samples[i].logprobs, b.samples[i].logprobs);
    EXPECT_EQ(back.samples[i].policy_versions, b.samples[i].policy_versions);
    EXPECT_TRUE(back.samples[i].advantages.empty());
  }
  // Per-token advantages instead of rewards.
  b.samples[0].advantages = {0, 1.5f, 1.5f};
  b.samples[1].advantages = {0, -2};
  back = batch_from_rpc(rpc::decode_train_batch(rpc::encode_train_batch(batch_to_rpc(b))));
  EXPECT_TRUE(back.has_advantages());
  EXPECT_EQ(back.samples[1].advantages, b.samples[1].advantages);
}

TEST(Batch, RpcDecoderChecksPerSampleFields) {
  Batch b;
  b.samples = {sample("e1", "t1", 1, {1, 2}, {0, 1})};
  rpc::TrainBatch r = batch_to_rpc(b);
  r.task_ids.push_back("extra");
  EXPECT_THROW(rpc::decode_train_batch(rpc::encode_train_batch(r)), Error);
  r = batch_to_rpc(b);
  r.rewards.clear();
  EXPECT_THROW(rpc::decode_train_batch(rpc::encode_train_batch(r)),
               Error);  // neither rewards nor advantages
}

TEST(Batch, FromTrackingSamplesSkipsUntrainable) {
  std::vector<tracking::Sample> samples(2);
  samples[0].episode_uuid = "e";
  samples[0].task_id = "t";
  samples[0].reward = 2;
  samples[0].weight = 0.5;
  samples[0].token_ids = {1, 2};
  samples[0].loss_mask = {0, 1};
  samples[0].logprobs = {0, -0.1f};
  samples[0].policy_versions = {-1, 3};
  samples[1] = samples[0];
  samples[1].trainable = false;
  Batch b = batch_from_samples(samples);
  ASSERT_EQ(b.samples.size(), 1u);
  EXPECT_EQ(b.samples[0].weight, 0.5);
  EXPECT_EQ(b.samples[0].token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(b.samples[0].policy_versions, (std::vector<int32_t>{-1, 3}));
}

}  // namespace
}  // namespace ajet::train_data
