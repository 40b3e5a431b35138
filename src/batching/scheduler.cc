#include "batching/scheduler.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace ajet::batching {
namespace {

int64_t uncached(const Sequence& seq) {
  return static_cast<int64_t>(seq.tokens.size()) - seq.num_cached;
}

// The key a sequence's first block chains on: the base's, or one its adapter's key mixes in
// (splitmix64), so prefixes cached under one adapter never serve another.
uint64_t first_block_key(const Sequence& seq) {
  const uint64_t adapter = seq.request ? seq.request->request.adapter_key : 0;
  if (adapter == 0) return kFirstBlockKey;
  uint64_t z = adapter + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return kFirstBlockKey ^ z ^ (z >> 31);
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, int64_t num_blocks)
    : config_(config), blocks_(num_blocks) {
  if (config_.block_size < 1) invalid_argument("scheduler: block_size must be >= 1");
  if (config_.max_running < 1) invalid_argument("scheduler: max_running must be >= 1");
  // Every running sequence decodes one token per step, so the budget must cover them all.
  if (config_.max_batch_tokens < config_.max_running) {
    invalid_argument("scheduler: max_batch_tokens (" + std::to_string(config_.max_batch_tokens) +
                     ") must be >= max_running (" + std::to_string(config_.max_running) + ")");
  }
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  if (seq->tokens.empty() || seq->num_cached != 0 || !seq->blocks.empty()) {
    fail(ErrorCode::kInternal, "scheduler: a new sequence needs tokens and no cache");
  }
  if (1 + seq->pending_forks > config_.max_running) {
    invalid_argument("n = " + std::to_string(1 + seq->pending_forks) +
                     " exceeds the engine's max running sequences (" +
                     std::to_string(config_.max_running) + ")");
  }
  waiting_.push_back(std::move(seq));
}

int64_t Scheduler::slots_used() const {
  int64_t used = 0;
  for (const auto& seq : running_) used += 1 + seq->pending_forks;
  return used;
}

int64_t Scheduler::blocks_for(int64_t num_tokens) const {
  return (num_tokens + config_.block_size - 1) / config_.block_size;
}

bool Scheduler::make_writable(Sequence& seq, int64_t pos, StepPlan& plan) {
  const size_t index = static_cast<size_t>(pos / config_.block_size);
  if (index == seq.blocks.size()) {
    std::optional<int32_t> block = blocks_.allocate();
    if (!block) return false;
    seq.blocks.push_back(*block);
    return true;
  }
  if (index > seq.blocks.size()) fail(ErrorCode::kInternal, "scheduler: block table has a gap");
  const int32_t shared = seq.blocks[index];
  if (blocks_.ref_count(shared) == 1) return true;
  // Shared with another sample: copy the filled part before writing into it.
  std::optional<int32_t> block = blocks_.allocate();
  if (!block) return false;
  plan.copies.push_back({shared, *block});
  blocks_.release(shared);
  seq.blocks[index] = *block;
  return true;
}

void Scheduler::release_blocks(Sequence& seq) {
  for (int32_t block : seq.blocks) blocks_.release(block);
  seq.blocks.clear();
  seq.num_cached = 0;
  seq.last_key = first_block_key(seq);
  seq.shares_blocks = true;  // recomputed from its tokens with the weights of that time, if ever
}

std::vector<int32_t> Scheduler::cached_prefix(const Sequence& seq, uint64_t& last_key) const {
  std::vector<int32_t> hits;
  last_key = first_block_key(seq);
  if (!config_.prefix_caching || !seq.shares_blocks) return hits;
  if (seq.request && seq.request->request.prompt_logprobs >= 0) return hits;
  const int64_t bs = config_.block_size;
  const int64_t max_hits =
      (static_cast<int64_t>(seq.tokens.size()) - 1) / bs;  // the last token runs: logits
  uint64_t key = last_key;
  for (int64_t b = 0; b < max_hits; ++b) {
    key = chain_block_key(key, seq.tokens.data() + b * bs, bs);
    std::optional<int32_t> block = blocks_.find(key);
    if (!block) break;
    hits.push_back(*block);
    last_key = key;
  }
  return hits;
}

void Scheduler::advance(Sequence& seq, int64_t length) {
  const int64_t bs = config_.block_size;
  const int64_t full_before =
      seq.num_cached / bs;  // already keyed (while the sequence shares blocks)
  seq.num_cached += length;
  if (!config_.prefix_caching || !seq.shares_blocks) return;
  for (int64_t b = full_before; b < seq.num_cached / bs; ++b) {
    seq.last_key = chain_block_key(seq.last_key, seq.tokens.data() + b * bs, bs);
    blocks_.set_key(seq.blocks[static_cast<size_t>(b)], seq.last_key);
  }
}

void Scheduler::forget_cached_prefixes() {
  blocks_.forget_keys();
  for (auto& seq : running_) seq->shares_blocks = false;
}

void Scheduler::preempt_last(StepPlan& plan) {
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  release_blocks(*victim);
  waiting_.push_front(std::move(victim));
  ++plan.num_preempted;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = config_.max_batch_tokens;

  // 1. One decode token for every running sequence that has finished its prompt.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& seq = *running_[i];
    if (uncached(seq) != 1) continue;
    bool writable = make_writable(seq, seq.num_cached, plan);
    while (!writable) {
      const bool self = running_.back().get() == &seq;
      preempt_last(plan);
      if (self) break;
      writable = make_writable(seq, seq.num_cached, plan);
    }
    if (!writable) break;  // seq preempted itself; it was the last running sequence
    plan.chunks.push_back({&seq, seq.num_cached, 1, true});
    --budget;
  }

  // 2. Continue prompts already admitted (their blocks were allocated at admission).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& seq = *running_[i];
    const int64_t left = uncached(seq);
    if (left <= 1) continue;
    const int64_t length = std::min(left, budget);
    plan.chunks.push_back({&seq, seq.num_cached, length, length == left});
    budget -= length;
  }

  // 3. Admit waiting sequences in order while slots, blocks (keeping one spare block per running
  // sequence for its next decode) and budget allow.
  while (budget > 0 && !waiting_.empty()) {
    Sequence& seq = *waiting_.front();
    if (slots_used() + 1 + seq.pending_forks > config_.max_running) break;
    const int64_t need = blocks_for(static_cast<int64_t>(seq.tokens.size()));
    uint64_t last_key = kFirstBlockKey;
    const std::vector<int32_t> hits = cached_prefix(seq, last_key);
    int64_t idle_hits = 0;  // cached blocks nobody references: counted in num_free until taken
    for (int32_t block : hits) idle_hits += blocks_.ref_count(block) == 0 ? 1 : 0;
    const int64_t fresh = need - static_cast<int64_t>(hits.size());
    if (blocks_.num_free() - idle_hits < fresh + num_running()) break;
    for (int32_t block : hits) {
      blocks_.acquire(block);
      seq.blocks.push_back(block);
    }
    seq.num_cached = static_cast<int64_t>(hits.size()) * config_.block_size;
    seq.last_key = last_key;
    prefix_hit_tokens_ += seq.num_cached;
    for (int64_t b = 0; b < fresh; ++b) seq.blocks.push_back(*blocks_.allocate());
    const int64_t left = uncached(seq);
    const int64_t length = std::min(left, budget);
    plan.chunks.push_back({&seq, seq.num_cached, length, length == left});
    budget -= length;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }

  plan.num_tokens = config_.max_batch_tokens - budget;
  return plan;
}

std::vector<Sequence*> Scheduler::fork(Sequence& parent, int64_t count) {
  if (count > parent.pending_forks)
    fail(ErrorCode::kInternal, "scheduler: fork beyond the request's n");
  std::vector<Sequence*> forks;
  for (int64_t k = 1; k <= count; ++k) {
    auto seq = std::make_unique<Sequence>();
    seq->request = parent.request;
    seq->sample_index = parent.sample_index + k;
    seq->tokens = parent.tokens;
    seq->prompt_len = parent.prompt_len;
    seq->num_cached = parent.num_cached;
    seq->blocks = parent.blocks;
    seq->last_key = parent.last_key;
    seq->shares_blocks = parent.shares_blocks;
    seq->madness = parent.madness;
    for (int32_t block : seq->blocks) blocks_.add_ref(block);
    forks.push_back(seq.get());
    running_.push_back(std::move(seq));
  }
  parent.pending_forks -= count;
  return forks;
}

void Scheduler::finish(Sequence* seq) {
  auto it =
      std::find_if(running_.begin(), running_.end(), [&](const auto& s) { return s.get() == seq; });
  if (it == running_.end())
    fail(ErrorCode::kInternal, "scheduler: finishing a sequence that is not running");
  release_blocks(**it);
  running_.erase(it);
}

std::vector<std::unique_ptr<Sequence>> Scheduler::remove_if(
    const std::function<bool(const Sequence&)>& pred) {
  std::vector<std::unique_ptr<Sequence>> removed;
  auto take = [&](auto& container) {
    for (auto it = container.begin(); it != container.end();) {
      if (pred(**it)) {
        release_blocks(**it);
        removed.push_back(std::move(*it));
        it = container.erase(it);
      } else {
        ++it;
      }
    }
  };
  take(running_);
  take(waiting_);
  return removed;
}

}  // namespace ajet::batching
