// Decides, once per engine step, which tokens of which sequences run: decode tokens of every
// running sequence first, then prefill chunks under a token budget, then FIFO admission of waiting
// sequences when KV blocks and sequence slots allow. With prefix caching, an admitted prompt starts
// after the full blocks it shares with keys/values already computed (e.g. the system prompt, or an
// agent's previous turn). Owns the sequences and their block tables; never touches tensors (block
// copies for copy-on-write are returned in the plan for the engine to perform).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "batching/block_allocator.h"
#include "batching/madness.h"
#include "batching/request.h"
#include "batching/sampler.h"

namespace ajet::batching {

// One request as the engine tracks it (shared by its samples).
struct RequestState {
  GenerateRequest request;
  SamplingParams sampling;
  uint64_t seed = 0;
  std::function<void(const GenerateEvent&)> callback;
  std::vector<bool> sample_done;  // (n)
  int64_t samples_left = 0;
  // request.prompt_logprobs >= 0: positions 1.. as they are computed (prefill chunks run in order,
  // so they fill from the front; a recompute after preemption skips those already here), until
  // the first event carries them (prompt_logprobs_sent).
  std::vector<PromptLogprob> prompt_logprobs;
  bool prompt_logprobs_sent = false;
};

// One sample of a request: token ids and where their keys/values live.
struct Sequence {
  std::shared_ptr<RequestState> request;
  int64_t sample_index = 0;
  int64_t pending_forks = 0;    // samples to fork off this one once its prompt is computed
  std::vector<int32_t> tokens;  // prompt, then generated ids
  int64_t prompt_len = 0;
  int64_t num_cached = 0;       // leading tokens whose keys/values are in the cache
  std::vector<int32_t> blocks;  // block table: position p lives in blocks[p / block_size]
  // With prefix caching every full block below num_cached is keyed; this is the key of the last one
  // (kFirstBlockKey before the first), which the next full block's key chains on.
  uint64_t last_key = kFirstBlockKey;
  bool shares_blocks =
      true;  // false once the weights changed under it: its blocks are not reusable
  SampleRng rng{0, 0};
  MadnessDetector madness;  // the engine's limits; forks copy it (before their first token)
  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
};

struct SchedulerConfig {
  int64_t block_size = 16;         // tokens per block
  int64_t max_batch_tokens = 512;  // tokens per step (decode + prefill)
  int64_t max_running = 64;        // running sequences, counting samples not yet forked
  bool prefix_caching = true;  // reuse computed full blocks across requests with the same prefix
};

// Tokens [start, start + length) of one sequence run this step (positions = indices).
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start = 0;
  int64_t length = 0;
  bool needs_logits = false;  // the chunk reaches the last known token: sample after it
};

struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;  // decode chunks first, then prefill chunks
  std::vector<BlockCopy> copies;       // copy-on-write, to perform in order before the forward
  int64_t num_tokens = 0;
  int64_t num_preempted = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, int64_t num_blocks);

  const SchedulerConfig& config() const { return config_; }
  const BlockAllocator& blocks() const { return blocks_; }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }

  // Queues a sequence with no cached tokens (a new request's first sample, pending_forks = n - 1).
  void add(std::unique_ptr<Sequence> seq);

  // Plans one step. A running sequence that needs a block when none is free preempts the most
  // recently admitted running sequences (their blocks are freed; they wait at the front of the
  // queue and are recomputed from their tokens when readmitted). Empty plan = nothing can run.
  StepPlan schedule();

  // Forks `count` samples off `parent` (its prompt just finished): they share its blocks and copy
  // its tokens; sample indices follow the parent's. The caller sets their RNGs. Returns them, in
  // order.
  std::vector<Sequence*> fork(Sequence& parent, int64_t count);

  // `length` more tokens of seq were computed: advances num_cached and, with prefix caching,
  // registers the blocks that became full so later prompts with the same prefix reuse them.
  void advance(Sequence& seq, int64_t length);

  // The weights changed: no computed block may be reused by a new prompt any more.
  void forget_cached_prefixes();
  // Prompt tokens admitted with their keys/values already in the cache, since start.
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }

  // Removes a running sequence and frees its blocks.
  void finish(Sequence* seq);

  // Removes every sequence (waiting or running) for which pred is true, freeing blocks; returns
  // them.
  std::vector<std::unique_ptr<Sequence>> remove_if(
      const std::function<bool(const Sequence&)>& pred);

 private:
  int64_t slots_used() const;
  int64_t blocks_for(int64_t num_tokens) const;
  // Makes the block holding position `pos` exist and belong to seq alone (copy-on-write).
  bool make_writable(Sequence& seq, int64_t pos, StepPlan& plan);
  void release_blocks(Sequence& seq);
  void preempt_last(StepPlan& plan);
  // The blocks of seq's prompt already computed (prefix caching), leaving at least its last token;
  // none for a request that wants its prompt's logprobs.
  std::vector<int32_t> cached_prefix(const Sequence& seq, uint64_t& last_key) const;

  SchedulerConfig config_;
  BlockAllocator blocks_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace ajet::batching
