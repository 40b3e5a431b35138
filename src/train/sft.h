// Supervised fine-tuning (the `ajet sft` warm-up): next-token cross-entropy on the assistant tokens
// of chat demonstrations, so a freshly initialised model starts RL with a non-zero reward.
// Demonstrations are OpenAI message lists (JSONL from `ajet tasks demos`), rendered with the
// model's own chat template and masked by its token spans: loss only on assistant bodies and their
// end-of-turn token, exactly the tokens the model generates in an episode. It never samples, never
// talks RPC and never decides when to stop training beyond its step count.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/qwen2.h"
#include "text/chat_template.h"
#include "text/messages.h"
#include "text/tokenizer.h"
#include "tracking/chat_format.h"

namespace ajet::train {

// One tokenized demonstration. loss_mask[i] = 1 when token i is a training target (predicted from
// the tokens before it); the first token is never a target.
struct SftExample {
  std::vector<int32_t> token_ids;  // (T,)
  std::vector<uint8_t> loss_mask;  // (T,)
  std::string source;              // "demos.jsonl:12" (for errors and logs)

  int64_t trained_tokens() const;
};

// Renders `messages` (with `tools`) with the format's chat template (no generation prompt) and
// masks every assistant message's body plus the end-of-turn token that closes it.
SftExample tokenize_demo(const tracking::ChatFormat& format,
                         const std::vector<text::ChatMessage>& messages,
                         const std::vector<text::OrderedJson>& tools, std::string source = "");

struct DemoReadOptions {
  int64_t max_tokens = 0;  // skip (and count) demos longer than this; 0 = keep all
  double min_reward =
      -1e300;  // skip demos whose "reward" field is below this (missing reward: kept)
};

struct DemoSet {
  std::vector<SftExample> examples;
  int64_t skipped_too_long = 0;
  int64_t skipped_reward = 0;
};

// JSONL, one demonstration per line: {"messages": [OpenAI messages], "tools"?: [...], "reward"?: n,
// ...} (the shape `ajet tasks demos` writes). Errors name the file, the line and the field; a demo
// without an assistant message is an error (it would train nothing).
DemoSet read_demos_jsonl(const std::filesystem::path& path, const tracking::ChatFormat& format,
                         const DemoReadOptions& options = {});

struct SftOptions {
  int64_t steps = 100;       // optimizer steps
  double lr = 1e-3;          // peak learning rate (AdamW)
  int64_t warmup_steps = 0;  // linear warmup to lr, then cosine to min_lr_ratio * lr
  double min_lr_ratio = 0.1;
  double weight_decay = 0.0;
  double grad_clip = 1.0;  // global gradient-norm clip; <= 0: off
  int64_t batch_tokens =
      4096;  // tokens per step: demos are taken in a seeded order until this is full
  int64_t attention_block = 128;  // query rows per attention block at most
  // The step's computation as laid out since 2026-12-03 (docs/sft.md, "Faster SFT step"): attention
  // blocks that follow the demos (a block never spans two demos, so it skips the masked tail of the
  // demo before) and the last layer's MLP only on the rows that predict a target. Same loss and
  // gradients up to float rounding as false (the earlier layout: fixed blocks, every row through
  // the last layer), which stays for the A/B bench (bench/train/sft_step_bench.cc) and the equality
  // test.
  bool demo_blocks = true;
  uint64_t seed = 1;  // the order of demos (a fresh permutation per epoch)
  // Pack the prefix the step's demos share (system prompt, tools block) once instead of once per
  // demo. Same loss and gradients; a calc demo is ~75% shared prompt, so a step holds ~3x more
  // demos.
  bool share_prefix = true;
  // Worker threads per step: > 1 splits the step's demos into that many consecutive parts (about
  // equal in tokens, each packed on its own) that run forward and backward at the same time, each
  // with an equal share of the intra-op threads (at least one); their gradients are summed in part
  // order, so a step is deterministic for a given worker and thread count. Same loss and gradients
  // as one part up to float summation order. On idle cores one worker with all threads is a little
  // faster; single- threaded workers avoid OpenMP barrier waits when other jobs share the cores.
  int64_t workers = 1;
  // Checked after every step (after on_step): when it reads true, training stops there. The
  // schedule still spans `steps`. Lets a caller stop on a condition it measures (`ajet sft
  // --stop-at-success`).
  const std::atomic<bool>* stop = nullptr;
  // Wall-clock limit of the training loop in seconds (0: none), on_step's time (evaluations)
  // included: no step starts that would end after it, at the mean step time so far. A run that
  // stops there ran fewer than `steps` steps.
  double max_seconds = 0;
  // With max_seconds: the cosine ends when the time does. Before each step the schedule's length is
  // re-estimated as the steps that fit in max_seconds at the mean step time so far (at most
  // `steps`), so a run sized for a slower or faster machine still decays to min_lr_ratio * lr.
  // Without it the schedule spans `steps` and a time limit cuts it off.
  bool fit_schedule_to_time = false;
};

struct SftStep {
  int64_t step = 0;  // 1-based
  double loss = 0;   // mean cross-entropy over the step's trained tokens (before the update)
  double lr = 0;
  double grad_norm = 0;  // before clipping
  int64_t examples = 0;
  int64_t tokens = 0;  // packed tokens
  int64_t shared_prefix =
      0;  // tokens of the prefix packed once for all the step's demos (per worker part)
  int64_t trained_tokens = 0;
  double seconds = 0;  // wall time of this step
  int64_t planned_steps =
      0;  // the schedule's length when this step ran (`steps`, or fewer with fit_schedule_to_time)
};

// Intra-op threads each of `workers` worker threads gets: this thread's count shared out, at least
// one.
int sft_worker_threads(int64_t workers);

// Learning rate of 0-based step `step` of a schedule `total_steps` long (options.steps when
// omitted).
double sft_learning_rate(const SftOptions& options, int64_t step, int64_t total_steps = -1);

// Trains `model` in place (full fine-tuning, train mode during steps). Calls on_step after every
// step. Deterministic for a given model, examples, options and thread count. Throws
// Error(kInvalidArgument) for bad options or an empty example set.
std::vector<SftStep> run_sft(model::Qwen2Model& model, const std::vector<SftExample>& examples,
                             const SftOptions& options,
                             const std::function<void(const SftStep&)>& on_step = {});

// One step's loss (mean cross-entropy over the trained tokens of `batch`, packed as run_sft packs
// one worker part: options.share_prefix, attention_block, demo_blocks) with its gradients
// accumulated into the model parameters' .grad. What run_sft does per step before clipping and the
// optimizer; for tests and benches. Returns 0 and touches no gradient when the batch has no trained
// token.
double sft_step_gradients(model::Qwen2Model& model, const std::vector<const SftExample*>& batch,
                          const SftOptions& options);

// Makes glibc's malloc keep freed memory for the next step: allocations up to 32 MiB come from the
// heap and the heap is never trimmed. By default each step's large tensors (up to ~8 MiB on the
// tiny preset) are fresh mmaps whose pages fault in and are zeroed again every step: ~35% of a calc
// SFT step on one thread (bench/train/sft_step_bench.cc --keep-memory). Process-wide; `ajet sft`
// calls it first. The process keeps its peak step memory (tens of MiB on the tiny preset). No-op
// without glibc.
void keep_freed_memory();

// Mean cross-entropy per trained token over `examples` (no gradient), packed `batch_tokens` at a
// time. With share_prefix, each packed batch's common prefix is computed once (same value up to
// float summation order).
double sft_loss(model::Qwen2Model& model, const std::vector<SftExample>& examples,
                int64_t batch_tokens = 4096, bool share_prefix = true);

}  // namespace ajet::train
