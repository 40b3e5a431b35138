// The scheduler one step at a time, with the engine's part (cache the chunk, append a token after a
// chunk that needs logits) simulated by hand: budgets, FIFO admission, waiting for blocks, fork
// with copy-on-write, and preemption with recompute.
#include "batching/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ajet::batching {
namespace {

std::unique_ptr<Sequence> make_seq(int64_t prompt_len, int64_t n = 1) {
  auto seq = std::make_unique<Sequence>();
  seq->request = std::make_shared<RequestState>();
  seq->tokens.resize(static_cast<size_t>(prompt_len));
  std::iota(seq->tokens.begin(), seq->tokens.end(), 1);
  seq->prompt_len = prompt_len;
  seq->pending_forks = n - 1;
  return seq;
}

// What the engine does after the forward: the chunk is cached; a chunk that reached the end
// samples.
void run(const StepPlan& plan) {
  for (const ScheduledChunk& c : plan.chunks) {
    ASSERT_EQ(c.start, c.seq->num_cached);
    c.seq->num_cached += c.length;
    if (c.needs_logits) c.seq->tokens.push_back(7);
  }
}

int64_t blocks_held(const Scheduler& s) { return s.blocks().num_blocks() - s.blocks().num_free(); }

TEST(Scheduler, ChunksLongPromptsUnderTheBudget) {
  Scheduler s({/*block_size=*/4, /*max_batch_tokens=*/16, /*max_running=*/4}, 64);
  Sequence* a = nullptr;
  {
    auto seq = make_seq(40);
    a = seq.get();
    s.add(std::move(seq));
  }
  std::vector<int64_t> lengths;
  for (int step = 0; step < 3; ++step) {
    StepPlan plan = s.schedule();
    ASSERT_EQ(plan.chunks.size(), 1u);
    lengths.push_back(plan.chunks[0].length);
    EXPECT_EQ(plan.chunks[0].needs_logits, step == 2);
    run(plan);
  }
  EXPECT_EQ(lengths, (std::vector<int64_t>{16, 16, 8}));
  EXPECT_EQ(a->tokens.size(), 41u);
  EXPECT_EQ(a->blocks.size(), 10u);  // 40 prompt tokens in blocks of 4, allocated at admission
  StepPlan plan = s.schedule();      // decode: position 40 opens block 11
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].length, 1);
  EXPECT_EQ(a->blocks.size(), 11u);
}

TEST(Scheduler, DecodeTokensComeBeforePrefillAndAdmissionIsFifo) {
  Scheduler s({4, 8, 4}, 64);
  auto first = make_seq(3);
  Sequence* a = first.get();
  s.add(std::move(first));
  run(s.schedule());  // a's whole prompt: now decoding
  auto second = make_seq(20);
  auto third = make_seq(2);
  Sequence* b = second.get();
  Sequence* c = third.get();
  s.add(std::move(second));
  s.add(std::move(third));
  StepPlan plan = s.schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);  // a decodes, b gets the other 7 tokens; c waits behind b
  EXPECT_EQ(plan.chunks[0].seq, a);
  EXPECT_EQ(plan.chunks[0].length, 1);
  EXPECT_EQ(plan.chunks[1].seq, b);
  EXPECT_EQ(plan.chunks[1].length, 7);
  run(plan);
  plan = s.schedule();  // a decodes, b continues with 7 more; no budget left to admit c
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[1].seq, b);
  EXPECT_EQ(plan.chunks[1].length, 7);
  EXPECT_EQ(s.num_waiting(), 1);
  run(plan);
  plan = s.schedule();  // a decodes, b finishes its last 6, c is admitted with the 1 token left
  ASSERT_EQ(plan.chunks.size(), 3u);
  EXPECT_EQ(plan.chunks[1].seq, b);
  EXPECT_EQ(plan.chunks[1].length, 6);
  EXPECT_TRUE(plan.chunks[1].needs_logits);
  EXPECT_EQ(plan.chunks[2].seq, c);
  EXPECT_EQ(plan.chunks[2].length, 1);
  EXPECT_FALSE(plan.chunks[2].needs_logits);
  EXPECT_EQ(plan.num_tokens, 8);
}

TEST(Scheduler, RequestsWaitForBlocksAndRunWhenFreed) {
  // 6 blocks of 4: a 12-token prompt takes 3; a second one needs 3 + 1 spare for the first's
  // decode.
  Scheduler s({4, 64, 8}, 6);
  auto first = make_seq(12);
  auto second = make_seq(12);
  Sequence* a = first.get();
  Sequence* b = second.get();
  s.add(std::move(first));
  s.add(std::move(second));
  StepPlan plan = s.schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].seq, a);
  EXPECT_EQ(s.num_waiting(), 1);
  run(plan);
  plan = s.schedule();  // a decodes into a 4th block; b still cannot get 3 + 1 spare
  EXPECT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(s.num_waiting(), 1);
  run(plan);
  s.finish(a);
  EXPECT_EQ(s.blocks().num_free(), 6);
  plan = s.schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].seq, b);
  EXPECT_EQ(s.num_waiting(), 0);
}

TEST(Scheduler, ForkSharesPromptBlocksAndCopiesThePartialOneOnWrite) {
  Scheduler s({4, 64, 8}, 32);
  auto parent_seq = make_seq(6, /*n=*/3);
  Sequence* parent = parent_seq.get();
  s.add(std::move(parent_seq));
  StepPlan plan = s.schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  ASSERT_TRUE(plan.chunks[0].needs_logits);
  parent->num_cached += 6;
  std::vector<Sequence*> forks = s.fork(*parent, 2);  // the engine forks before appending tokens
  ASSERT_EQ(forks.size(), 2u);
  EXPECT_EQ(forks[0]->sample_index, 1);
  EXPECT_EQ(forks[1]->sample_index, 2);
  EXPECT_EQ(parent->pending_forks, 0);
  EXPECT_EQ(blocks_held(s), 2);  // positions 0-3 and 4-5, shared three ways
  EXPECT_EQ(s.blocks().ref_count(parent->blocks[0]), 3);
  EXPECT_EQ(s.blocks().ref_count(parent->blocks[1]), 3);
  for (Sequence* seq : {parent, forks[0], forks[1]}) seq->tokens.push_back(9);

  plan = s.schedule();  // each writes position 6, inside the shared partial block
  ASSERT_EQ(plan.chunks.size(), 3u);
  ASSERT_EQ(plan.copies.size(), 2u);  // the first two copy; the last is then the only owner
  const int32_t shared = forks[1]->blocks[1];
  EXPECT_EQ(plan.copies[0].src, shared);
  EXPECT_EQ(plan.copies[1].src, shared);
  EXPECT_EQ(parent->blocks[1], plan.copies[0].dst);
  EXPECT_EQ(forks[0]->blocks[1], plan.copies[1].dst);
  EXPECT_EQ(s.blocks().ref_count(shared), 1);
  EXPECT_EQ(s.blocks().ref_count(parent->blocks[0]), 3);  // the full prompt block stays shared
  EXPECT_EQ(blocks_held(s), 4);
  run(plan);
  s.finish(forks[1]);
  s.finish(parent);
  EXPECT_EQ(s.blocks().ref_count(forks[0]->blocks[0]), 1);
  s.finish(forks[0]);
  EXPECT_EQ(s.blocks().num_free(), 32);
}

TEST(Scheduler, PreemptsTheNewestSequenceWhenBlocksRunOutAndRecomputesIt) {
  // 5 blocks of 2: a (3 tokens, 2 blocks) and b (2 tokens, 1 block) fit with spares, then grow.
  Scheduler s({2, 64, 8}, 5);
  auto first = make_seq(3);
  auto second = make_seq(2);
  Sequence* a = first.get();
  Sequence* b = second.get();
  s.add(std::move(first));
  run(s.schedule());
  s.add(std::move(second));
  StepPlan plan = s.schedule();  // a decodes at 3 (block 2 of 2 has room), b admitted (1 block)
  EXPECT_EQ(plan.chunks.size(), 2u);
  run(plan);
  EXPECT_EQ(blocks_held(s), 3);
  int64_t preempted = 0;
  for (int step = 0; step < 6 && preempted == 0; ++step) {
    plan = s.schedule();
    preempted += plan.num_preempted;
    run(plan);
  }
  ASSERT_EQ(preempted, 1);
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_EQ(s.running()[0].get(), a);
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_EQ(b->num_cached, 0);
  EXPECT_TRUE(b->blocks.empty());
  const size_t b_tokens = b->tokens.size();
  EXPECT_GT(b_tokens, 2u);  // it keeps what it generated and will recompute it
  s.finish(a);
  plan = s.schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].seq, b);
  EXPECT_EQ(plan.chunks[0].length, static_cast<int64_t>(b_tokens));
  EXPECT_TRUE(plan.chunks[0].needs_logits);
}

TEST(Scheduler, SlotsCountSamplesNotYetForked) {
  Scheduler s({4, 64, 4}, 64);
  s.add(make_seq(5, /*n=*/3));
  s.add(make_seq(5, /*n=*/2));
  StepPlan plan = s.schedule();
  EXPECT_EQ(plan.chunks.size(), 1u);  // 3 slots taken; 2 more would exceed 4
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_THROW(s.add(make_seq(5, /*n=*/5)), Error);
}

TEST(Scheduler, RemoveIfFreesBlocksOfWaitingAndRunning) {
  Scheduler s({4, 64, 8}, 16);
  auto first = make_seq(8);
  RequestState* victim = first->request.get();
  s.add(std::move(first));
  s.add(make_seq(8));
  run(s.schedule());
  auto third = make_seq(8);
  third->request =
      s.running()[0]->request;  // a second sequence of the first request, still waiting
  s.add(std::move(third));
  auto removed = s.remove_if([&](const Sequence& seq) { return seq.request.get() == victim; });
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_EQ(s.num_waiting(), 0);
  EXPECT_EQ(blocks_held(s), 2);
}

TEST(Scheduler, RejectsABudgetSmallerThanTheDecodeBatch) {
  EXPECT_THROW(Scheduler({4, 8, 16}, 16), Error);
}

TEST(BlockAllocator, CountsReferences) {
  BlockAllocator a(2);
  int32_t x = *a.allocate();
  int32_t y = *a.allocate();
  EXPECT_FALSE(a.allocate().has_value());
  a.add_ref(x);
  a.release(x);
  EXPECT_EQ(a.num_free(), 0);
  a.release(x);
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_THROW(a.release(x), Error);
  a.release(y);
  EXPECT_EQ(a.num_free(), 2);
}

// ---------------------------------------------------------------------------------------------------
// Prefix caching

// The key prefix caching gives the first `blocks` full blocks of `tokens` (block size 4).
uint64_t key_of(const std::vector<int32_t>& tokens, int64_t blocks) {
  uint64_t key = kFirstBlockKey;
  for (int64_t b = 0; b < blocks; ++b) key = chain_block_key(key, tokens.data() + b * 4, 4);
  return key;
}

// The engine's part with prefix caching: advance() caches the chunk and registers its full blocks.
void run_advancing(Scheduler& s, const StepPlan& plan) {
  for (const ScheduledChunk& c : plan.chunks) {
    ASSERT_EQ(c.start, c.seq->num_cached);
    s.advance(*c.seq, c.length);
    if (c.needs_logits) c.seq->tokens.push_back(7);
  }
}

Sequence* admit(Scheduler& s, std::unique_ptr<Sequence> seq) {
  Sequence* p = seq.get();
  s.add(std::move(seq));
  return p;
}

TEST(PrefixCaching, APromptStartsAfterTheFullBlocksAlreadyComputed) {
  Scheduler s({/*block_size=*/4, /*max_batch_tokens=*/64, /*max_running=*/4}, 32);
  Sequence* a = admit(s, make_seq(10));  // tokens 1..10: blocks [1-4] [5-8] full, [9 10] not
  run_advancing(s, s.schedule());
  EXPECT_EQ(s.blocks().find(key_of(a->tokens, 2)), a->blocks[1]);
  EXPECT_EQ(s.blocks().num_cached(), 2);

  Sequence* b = admit(s, make_seq(10));  // the same prompt
  StepPlan plan = s.schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);  // a's decode token, b's prompt
  EXPECT_EQ(plan.chunks[1].seq, b);
  EXPECT_EQ(plan.chunks[1].start, 8);
  EXPECT_EQ(plan.chunks[1].length, 2);
  EXPECT_EQ(b->blocks[0], a->blocks[0]);
  EXPECT_EQ(b->blocks[1], a->blocks[1]);
  EXPECT_NE(b->blocks[2], a->blocks[2]);  // the partial block is b's own
  EXPECT_EQ(s.blocks().ref_count(a->blocks[0]), 2);
  EXPECT_EQ(s.prefix_hit_tokens(), 8);
  run_advancing(s, plan);

  // A prompt that is exactly the cached blocks still computes its last block (its logits are
  // needed).
  Sequence* c = admit(s, make_seq(8));
  plan = s.schedule();
  EXPECT_EQ(plan.chunks.back().seq, c);
  EXPECT_EQ(plan.chunks.back().start, 4);
  EXPECT_EQ(s.prefix_hit_tokens(), 12);

  // A prompt that differs inside the second block shares only the first.
  auto d_seq = make_seq(10);
  d_seq->tokens[5] = 99;
  Sequence* d = admit(s, std::move(d_seq));
  plan = s.schedule();
  EXPECT_EQ(plan.chunks.back().seq, d);
  EXPECT_EQ(plan.chunks.back().start, 4);
}

TEST(PrefixCaching, OffComputesEveryPromptInFull) {
  Scheduler s({4, 64, 4, /*prefix_caching=*/false}, 32);
  admit(s, make_seq(10));
  run_advancing(s, s.schedule());
  EXPECT_EQ(s.blocks().num_cached(), 0);
  Sequence* b = admit(s, make_seq(10));
  StepPlan plan = s.schedule();
  EXPECT_EQ(plan.chunks.back().seq, b);
  EXPECT_EQ(plan.chunks.back().start, 0);
  EXPECT_EQ(s.prefix_hit_tokens(), 0);
}

TEST(PrefixCaching, GeneratedTokensBecomeAPrefixForTheNextTurn) {
  Scheduler s({4, 64, 4}, 32);
  Sequence* a = admit(s, make_seq(6));
  run_advancing(s, s.schedule());  // prompt computed, token 7 sampled (7 tokens)
  for (int i = 0; i < 3; ++i)
    run_advancing(s, s.schedule());  // 3 decode steps: 10 tokens, 9 computed
  EXPECT_EQ(a->num_cached, 9);
  EXPECT_EQ(s.blocks().num_cached(), 2);  // [1..4] and [5 6 7 7]
  EXPECT_EQ(s.blocks().find(key_of(a->tokens, 2)), a->blocks[1]);
  auto next_turn = make_seq(12);  // the previous turn's tokens, then the new message
  std::copy(a->tokens.begin(), a->tokens.end(), next_turn->tokens.begin());
  Sequence* b = admit(s, std::move(next_turn));
  StepPlan plan = s.schedule();
  EXPECT_EQ(plan.chunks.back().seq, b);
  EXPECT_EQ(plan.chunks.back().start, 8);
}

TEST(PrefixCaching, FinishedBlocksStayReusableUntilFreshBlocksAreNeeded) {
  Scheduler s({4, 64, 4}, 6);
  Sequence* a = admit(s, make_seq(10));  // 3 blocks, 2 of them full
  run_advancing(s, s.schedule());
  s.finish(a);
  EXPECT_EQ(s.blocks().num_free(), 6);  // idle cached blocks still count as free
  EXPECT_EQ(s.blocks().num_cached(), 2);

  Sequence* b = admit(s, make_seq(10));  // reuses both
  StepPlan plan = s.schedule();
  EXPECT_EQ(plan.chunks.back().start, 8);
  run_advancing(s, plan);
  s.finish(b);

  auto other = make_seq(20);  // 5 blocks: the 4 free ones, then the idle block released first
  for (int32_t& t : other->tokens) t += 100;
  Sequence* c = admit(s, std::move(other));
  plan = s.schedule();
  EXPECT_EQ(plan.chunks.back().seq, c);
  EXPECT_EQ(plan.chunks.back().start, 0);
  EXPECT_EQ(s.blocks().num_cached(), 1);  // one cached block was taken back
  EXPECT_EQ(s.blocks().num_free(), 1);
}

TEST(PrefixCaching, AWeightChangeForgetsEveryCachedBlock) {
  Scheduler s({4, 64, 4}, 32);
  Sequence* a = admit(s, make_seq(10));
  run_advancing(s, s.schedule());
  s.forget_cached_prefixes();
  EXPECT_EQ(s.blocks().num_cached(), 0);
  for (int i = 0; i < 8; ++i)
    run_advancing(s, s.schedule());  // a decodes on: its blocks are not registered
  EXPECT_EQ(s.blocks().num_cached(), 0);
  Sequence* b = admit(s, make_seq(10));
  StepPlan plan = s.schedule();
  EXPECT_EQ(plan.chunks.back().seq, b);
  EXPECT_EQ(plan.chunks.back().start, 0);
  EXPECT_GT(a->num_cached, 10);
}

}  // namespace
}  // namespace ajet::batching
