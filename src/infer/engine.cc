#include "infer/engine.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "common/log.h"
#include "model/multi_lora.h"
#include "model/parallel.h"

namespace ajet::infer {

at::Tensor forward_cached(model::Qwen2Model& model, KvCache& cache, const AttentionBatch& batch,
                          const std::vector<int64_t>& ids, const std::vector<int64_t>& logit_rows,
                          AttentionImpl impl) {
  // No-grad rather than inference mode: tensors the model caches lazily (rotary tables) must stay
  // usable by the trainer's autograd later.
  at::NoGradGuard no_grad;
  const at::Device device = model->options().device();
  at::Tensor x = model->embed(int64_tensor(ids, device));  // (N, C)
  for (int64_t l = 0; l < model->num_layers(); ++l) {
    model::DecoderLayer& layer = model->layer(l);
    model::QKV qkv = layer->attention_inputs(x, batch.positions());  // q (N, H, D), k/v (N, Hkv, D)
    at::Tensor attn = write_and_attend(qkv.q, qkv.k, qkv.v, cache, l, batch, impl);  // (N, H*D)
    x = layer->attention_outputs(x, attn);                                           // (N, C)
  }
  if (logit_rows.empty()) return at::Tensor();
  // Every row in order (a step of decode tokens only): no gather. Prompt rows follow the sampling
  // rows (prompt_logprobs), so a full set of rows is not always in order.
  bool every_row = static_cast<int64_t>(logit_rows.size()) == batch.num_tokens();
  for (size_t i = 0; every_row && i < logit_rows.size(); ++i)
    every_row = logit_rows[i] == static_cast<int64_t>(i);
  at::Tensor last = every_row ? x : x.index_select(0, int64_tensor(logit_rows, device));  // (M, C)
  return model->lm_head(model->final_norm(last)).to(at::kCPU, at::kFloat).contiguous();   // (M, V)
}

InferenceEngine::InferenceEngine(model::Qwen2Model model, const InferenceEngineOptions& config)
    : model_(std::move(model)), config_(config), seed_source_(std::random_device{}()) {
  const hf::ModelConfig& mc = model_->config();
  vocab_size_ = mc.vocab_size;
  const at::TensorOptions options = config_.cache_dtype == at::ScalarType::Undefined
                                        ? model_->options()
                                        : model_->options().dtype(config_.cache_dtype);
  if (config_.block_size < 1) invalid_argument("engine config: block_size must be >= 1");
  batching::validate_madness_limits(config_.madness);
  if (config_.cache_bytes < 1)
    invalid_argument("engine config: cache_bytes (the KV cache budget) must be set");
  KvCacheShape shape{mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim, config_.block_size};
  const int64_t num_blocks =
      KvCache::blocks_for_bytes(shape, config_.cache_bytes, options.dtype().itemsize());
  cache_ = std::make_unique<KvCache>(shape, num_blocks, options);
  scheduler_ = std::make_unique<batching::Scheduler>(
      batching::SchedulerConfig{config_.block_size, config_.max_batch_tokens, config_.max_running,
                                config_.prefix_caching},
      num_blocks);
  // A sequence alone must always fit in the cache, so preemption can always make progress.
  max_model_len_ = config_.max_model_len > 0 ? config_.max_model_len : mc.max_position_embeddings;
  if (max_model_len_ <= 0) max_model_len_ = num_blocks * config_.block_size;
  if (mc.max_position_embeddings > 0)
    max_model_len_ = std::min(max_model_len_, mc.max_position_embeddings);
  max_model_len_ = std::min(max_model_len_, num_blocks * config_.block_size);
  counters_.total_blocks = num_blocks;
  counters_.block_size = config_.block_size;
  counters_.max_model_len = max_model_len_;
  counters_.free_blocks = num_blocks;
  stats_ = counters_;
  log().log(config_.quiet ? spdlog::level::debug : spdlog::level::info,
            "inference engine: {} cache blocks of {} tokens ({:.1f} MiB, {}), max_model_len {}, "
            "max_batch_tokens {}, max_running {}, prefix caching {}",
            num_blocks, config_.block_size, static_cast<double>(config_.cache_bytes) / (1 << 20),
            c10::toString(options.dtype().toScalarType()), max_model_len_, config_.max_batch_tokens,
            config_.max_running, config_.prefix_caching ? "on" : "off");
  if (config_.start_thread) {
    thread_ = std::thread([this] { loop(); });
  } else if (config_.threads > 0) {
    at::set_num_threads(config_.threads);
  }
}

InferenceEngine::~InferenceEngine() { stop(); }

void InferenceEngine::submit(batching::GenerateRequest request, EventCallback callback) {
  {
    std::lock_guard lock(mu_);
    if (!stopped_) {
      new_requests_.push_back({std::move(request), std::move(callback)});
      wake_.notify_one();
      return;
    }
  }
  // No engine thread any more: answer here.
  batching::RequestState state;
  state.callback = std::move(callback);
  batching::GenerateEvent event;
  event.request_id = request.id;
  event.request_finished = true;
  event.error = Error(ErrorCode::kUnavailable, "inference engine is stopped");
  call(state, event);
}

std::future<GenerateResult> InferenceEngine::generate(batching::GenerateRequest request) {
  auto promise = std::make_shared<std::promise<GenerateResult>>();
  auto result = std::make_shared<GenerateResult>();
  result->samples.resize(
      static_cast<size_t>(std::clamp<int64_t>(request.n, 1, config_.max_running)));
  std::future<GenerateResult> future = promise->get_future();
  submit(std::move(request), [promise, result](const batching::GenerateEvent& event) {
    if (event.error) {
      result->error = event.error;
    } else {
      SampleOutput& sample = result->samples.at(static_cast<size_t>(event.sample_index));
      sample.tokens.insert(sample.tokens.end(), event.tokens.begin(), event.tokens.end());
      if (event.finish) sample.finish = event.finish;
      if (!event.prompt_logprobs.empty()) result->prompt_logprobs = event.prompt_logprobs;
    }
    if (event.request_finished) promise->set_value(std::move(*result));
  });
  return future;
}

void InferenceEngine::abort(const std::string& request_id) {
  std::lock_guard lock(mu_);
  aborts_.push_back(request_id);
  wake_.notify_one();
}

std::future<void> InferenceEngine::run_exclusive(std::function<void(model::Qwen2Model&)> fn,
                                                 bool bump_version) {
  auto task = std::make_unique<ExclusiveTask>();
  task->fn = std::move(fn);
  task->bump_version = bump_version;
  return enqueue(std::move(task));
}

std::future<void> InferenceEngine::run_adapter_update(std::function<void(model::Qwen2Model&)> fn,
                                                      bool bump_version) {
  auto task = std::make_unique<ExclusiveTask>();
  task->fn = std::move(fn);
  task->bump_version = bump_version;
  task->keep_prefixes = true;
  return enqueue(std::move(task));
}

void InferenceEngine::set_adapter(int32_t slot, uint64_t uid) {
  if (slot < 0) invalid_argument("set_adapter: negative slot");
  if (size_t(slot) >= adapters_.size()) adapters_.resize(size_t(slot) + 1);
  adapters_[size_t(slot)] = AdapterSlot{uid, ++adapter_generation_};
}

std::future<void> InferenceEngine::run_exclusive_at_version(
    std::function<void(model::Qwen2Model&)> fn, int64_t version) {
  auto task = std::make_unique<ExclusiveTask>();
  task->fn = std::move(fn);
  task->set_version = version;
  return enqueue(std::move(task));
}

std::future<void> InferenceEngine::run_drained_at_version(
    std::function<void(model::Qwen2Model&)> fn, int64_t version) {
  auto task = std::make_unique<ExclusiveTask>();
  task->fn = std::move(fn);
  task->set_version = version;
  task->drain = true;
  return enqueue(std::move(task));
}

std::future<void> InferenceEngine::set_policy_version(int64_t version) {
  auto task = std::make_unique<ExclusiveTask>();
  task->set_version = version;
  return enqueue(std::move(task));
}

std::future<void> InferenceEngine::enqueue(std::unique_ptr<ExclusiveTask> task) {
  std::future<void> done = task->done.get_future();
  std::lock_guard lock(mu_);
  if (stopped_) {
    task->done.set_exception(
        std::make_exception_ptr(Error(ErrorCode::kUnavailable, "inference engine is stopped")));
  } else {
    exclusive_.push_back(std::move(task));
    wake_.notify_one();
  }
  return done;
}

EngineStats InferenceEngine::stats() const {
  std::lock_guard lock(mu_);
  EngineStats s = stats_;
  s.policy_version = policy_version_.load();
  return s;
}

bool InferenceEngine::has_inbox() const {
  return !new_requests_.empty() || !aborts_.empty() || !exclusive_.empty();
}

void InferenceEngine::loop() {
  if (config_.threads > 0) {
    at::set_num_threads(config_.threads);
  } else {
    at::init_num_threads();
  }
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
    }
    if (!step()) {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || has_inbox(); });
    }
  }
  shutdown_requests();
}

void InferenceEngine::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopping_ = true;
    stopped_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) {
    thread_.join();
  } else {
    shutdown_requests();
  }
}

void InferenceEngine::shutdown_requests() {
  std::vector<Submission> submissions;
  std::deque<std::unique_ptr<ExclusiveTask>> tasks;
  {
    std::lock_guard lock(mu_);
    submissions.swap(new_requests_);
    tasks.swap(exclusive_);
    aborts_.clear();
  }
  for (auto& task : tasks) {
    task->done.set_exception(
        std::make_exception_ptr(Error(ErrorCode::kUnavailable, "inference engine stopped")));
  }
  for (Submission& s : submissions) {
    auto state = std::make_shared<batching::RequestState>();
    state->request.id = s.request.id;
    state->callback = std::move(s.callback);
    batching::GenerateEvent event;
    event.request_id = s.request.id;
    event.request_finished = true;
    event.error = Error(ErrorCode::kUnavailable,
                        "inference engine stopped before request '" + s.request.id + "' ran");
    emit(state, event);
  }
  std::vector<std::string> ids;
  for (const auto& [id, state] : active_) ids.push_back(id);
  for (const std::string& id : ids) abort_request(id);
  publish_stats();
  flush_events();
}

bool InferenceEngine::step() {
  const bool handled = handle_inbox();
  const bool ran = run_batch();
  // Stats first, so a caller woken by its last event already sees the request counted.
  publish_stats();
  flush_events();
  return handled || ran;
}

bool InferenceEngine::handle_inbox() {
  std::vector<Submission> submissions;
  std::vector<std::string> aborts;
  std::deque<std::unique_ptr<ExclusiveTask>> tasks;
  {
    std::lock_guard lock(mu_);
    submissions.swap(new_requests_);
    aborts.swap(aborts_);
    tasks.swap(exclusive_);
  }
  // Between steps: nothing of the model is in use, so the task may change weights freely. A task
  // that waits for the in-flight requests to end holds itself, the tasks after it and every new
  // submission back until they have (the batches below run them on).
  bool held = false;
  for (auto it = tasks.begin(); it != tasks.end(); ++it) {
    auto& task = *it;
    if (task->drain && !active_.empty()) {
      std::lock_guard lock(mu_);
      for (auto back = tasks.rbegin(); back != std::make_reverse_iterator(it); ++back)
        exclusive_.push_front(std::move(*back));
      submissions.insert(submissions.end(), std::make_move_iterator(new_requests_.begin()),
                         std::make_move_iterator(new_requests_.end()));
      new_requests_ = std::move(submissions);
      submissions.clear();
      held = true;
      break;
    }
    try {
      if (task->fn) task->fn(model_);
      if (task->set_version) policy_version_.store(*task->set_version);
      if (task->bump_version) policy_version_.fetch_add(1);
      // Keys/values computed before may be from other weights: new prompts must not reuse them.
      if (!task->keep_prefixes && (task->fn || task->set_version || task->bump_version))
        scheduler_->forget_cached_prefixes();
      task->done.set_value();
    } catch (...) {
      task->done.set_exception(std::current_exception());
    }
  }
  for (Submission& s : submissions) admit(std::move(s));
  for (const std::string& id : aborts) abort_request(id);
  if (held) return !aborts.empty();
  return !submissions.empty() || !aborts.empty() || !tasks.empty();
}

void InferenceEngine::validate(const batching::GenerateRequest& r) const {
  if (r.id.empty()) invalid_argument("request id must not be empty");
  if (active_.count(r.id)) invalid_argument("request id '" + r.id + "' is already in flight");
  if (r.prompt.empty()) invalid_argument("prompt must contain at least one token");
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= vocab_size_) {
      invalid_argument("prompt token " + std::to_string(i) + " has id " +
                       std::to_string(r.prompt[i]) + ", outside the vocabulary [0, " +
                       std::to_string(vocab_size_) + ")");
    }
  }
  if (static_cast<int64_t>(r.prompt.size()) >= max_model_len_) {
    invalid_argument("prompt of " + std::to_string(r.prompt.size()) +
                     " tokens leaves no room to generate within " + "the context of " +
                     std::to_string(max_model_len_) + " tokens");
  }
  if (r.max_tokens < 1)
    invalid_argument("max_tokens must be >= 1, got " + std::to_string(r.max_tokens));
  if (r.n < 1 || r.n > config_.max_running) {
    invalid_argument("n must be in [1, " + std::to_string(config_.max_running) + "], got " +
                     std::to_string(r.n));
  }
  batching::validate_sampling_params({r.temperature, r.top_p, r.top_k, r.top_logprobs});
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > 20) {
    invalid_argument("prompt_logprobs must be -1 (none) or in [0, 20], got " +
                     std::to_string(r.prompt_logprobs));
  }
  if (r.adapter_slot >= 0) {
    if (!model_->lora_routing())
      invalid_argument("adapter slot " + std::to_string(r.adapter_slot) + ": no adapters served");
    if (size_t(r.adapter_slot) >= adapters_.size() ||
        adapters_[size_t(r.adapter_slot)].uid != r.adapter_uid || r.adapter_uid == 0) {
      fail(ErrorCode::kNotFound, "the adapter of slot " + std::to_string(r.adapter_slot) +
                                     " was removed before the request started");
    }
  }
}

void InferenceEngine::admit(Submission submission) {
  auto state = std::make_shared<batching::RequestState>();
  state->callback = std::move(submission.callback);
  state->request = std::move(submission.request);
  batching::GenerateRequest& r = state->request;
  try {
    validate(r);
  } catch (const Error& e) {
    batching::GenerateEvent event;
    event.request_id = r.id;
    event.request_finished = true;
    event.error = e;
    emit(state, std::move(event));
    return;
  }
  // The key of the adapter's weights now: prefixes cached under older weights are not reused.
  r.adapter_key = 0;
  if (r.adapter_slot >= 0) {
    const AdapterSlot& a = adapters_[size_t(r.adapter_slot)];
    r.adapter_key = (a.uid * 0x100000001b3ULL) ^ a.generation;
    if (r.adapter_key == 0) r.adapter_key = 1;
  }
  state->sampling = {r.temperature, r.top_p, r.top_k, r.top_logprobs};
  state->seed = r.seed ? *r.seed : seed_source_();
  state->sample_done.assign(static_cast<size_t>(r.n), false);
  state->samples_left = r.n;
  auto seq = std::make_unique<batching::Sequence>();
  seq->request = state;
  seq->pending_forks = r.n - 1;
  seq->tokens = r.prompt;
  seq->prompt_len = static_cast<int64_t>(r.prompt.size());
  seq->rng = batching::SampleRng(state->seed, 0);
  seq->madness = batching::MadnessDetector(config_.madness, r.prompt);
  if (r.prompt_logprobs >= 0) state->prompt_logprobs.reserve(r.prompt.size() - 1);
  active_[r.id] = state;
  scheduler_->add(std::move(seq));
}

void InferenceEngine::abort_request(const std::string& id) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  std::shared_ptr<batching::RequestState> state = it->second;
  scheduler_->remove_if([&](const batching::Sequence& seq) { return seq.request == state; });
  for (size_t i = 0; i < state->sample_done.size(); ++i) {
    if (state->sample_done[i]) continue;
    state->sample_done[i] = true;
    batching::GenerateEvent event;
    event.request_id = id;
    event.sample_index = static_cast<int64_t>(i);
    event.finish = batching::FinishReason::kAbort;
    event.request_finished = --state->samples_left == 0;
    emit(state, std::move(event));
  }
  active_.erase(id);
  ++counters_.requests_finished;
}

bool InferenceEngine::run_batch() {
  batching::StepPlan plan = scheduler_->schedule();
  counters_.preemptions += plan.num_preempted;
  if (plan.chunks.empty()) return false;
  const auto started = std::chrono::steady_clock::now();
  at::NoGradGuard no_grad;
  for (const batching::BlockCopy& copy : plan.copies) cache_->copy_block(copy.src, copy.dst);

  // The flat batch: every chunk's tokens in plan order; logits only for chunks that end a prompt or
  // carry a decode token.
  std::vector<AttentionSegment> segments;
  std::vector<int32_t> tables;
  std::vector<int64_t> ids;
  std::vector<int64_t> logit_rows;
  std::vector<std::shared_ptr<batching::RequestState>> in_batch;  // to fail them if the step throws
  std::vector<PromptRow> prompt_rows;  // after the sampling rows, in this order
  std::vector<int64_t> prompt_row_index;
  segments.reserve(plan.chunks.size());
  ids.reserve(static_cast<size_t>(plan.num_tokens));
  for (const batching::ScheduledChunk& chunk : plan.chunks) {
    const batching::Sequence& seq = *chunk.seq;
    AttentionSegment seg;
    seg.token_begin = static_cast<int64_t>(ids.size());
    seg.num_tokens = chunk.length;
    seg.start_pos = chunk.start;
    seg.table_begin = static_cast<int64_t>(tables.size());
    seg.table_size = static_cast<int64_t>(seq.blocks.size());
    tables.insert(tables.end(), seq.blocks.begin(), seq.blocks.end());
    ids.insert(ids.end(), seq.tokens.begin() + chunk.start,
               seq.tokens.begin() + chunk.start + chunk.length);
    if (chunk.needs_logits) logit_rows.push_back(seg.token_begin + chunk.length - 1);
    batching::RequestState& state = *seq.request;
    if (state.request.prompt_logprobs >= 0 && !state.prompt_logprobs_sent) {
      // Row of position p scores the prompt token at p + 1; positions already scored (a recompute
      // after preemption) are skipped.
      const int64_t done = static_cast<int64_t>(state.prompt_logprobs.size());
      const int64_t end = std::min(chunk.start + chunk.length, seq.prompt_len - 1);
      for (int64_t p = std::max(chunk.start, done); p < end; ++p) {
        prompt_row_index.push_back(seg.token_begin + (p - chunk.start));
        prompt_rows.push_back({&state, p + 1});
      }
    }
    segments.push_back(seg);
    if (in_batch.empty() || in_batch.back() != seq.request) in_batch.push_back(seq.request);
  }
  try {
    if (const auto& routing = model_->lora_routing()) {
      // Every row on its sequence's adapter (rows are the chunks' tokens, in plan order).
      int32_t first = plan.chunks.front().seq->request->request.adapter_slot;
      bool uniform = true;
      for (const batching::ScheduledChunk& chunk : plan.chunks)
        uniform = uniform && chunk.seq->request->request.adapter_slot == first;
      if (uniform) {
        routing->set_all(first);
      } else {
        std::vector<int32_t> rows;
        rows.reserve(ids.size());
        for (const batching::ScheduledChunk& chunk : plan.chunks)
          rows.insert(rows.end(), size_t(chunk.length), chunk.seq->request->request.adapter_slot);
        routing->set(rows);
      }
    }
    AttentionBatch batch(std::move(segments), std::move(tables), config_.block_size,
                         model_->options().device());
    const int64_t sampling_rows = static_cast<int64_t>(logit_rows.size());
    logit_rows.insert(logit_rows.end(), prompt_row_index.begin(), prompt_row_index.end());
    at::Tensor logits = forward_cached(model_, *cache_, batch, ids, logit_rows, config_.attention);
    // Any other forward of the model (a trainer's, a test's) sees the base unless it routes.
    if (const auto& routing = model_->lora_routing()) routing->set_all(-1);
    counters_.tokens_computed += plan.num_tokens;
    ++counters_.steps;
    if (!prompt_rows.empty()) score_prompt_rows(prompt_rows, logits, sampling_rows);
    sample_and_emit(plan, logits);
  } catch (const std::exception& e) {
    // A failed forward (out of memory, a bug) fails the requests in this batch, not the engine.
    log().error("inference engine: step failed: {}", e.what());
    fail_requests(in_batch, e.what());
  }
  counters_.busy_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return true;
}

void InferenceEngine::fail_requests(
    const std::vector<std::shared_ptr<batching::RequestState>>& failed, const std::string& why) {
  for (const std::shared_ptr<batching::RequestState>& state : failed) {
    auto it = active_.find(state->request.id);
    if (it == active_.end() || it->second != state) continue;  // finished before the failure
    scheduler_->remove_if([&](const batching::Sequence& seq) { return seq.request == state; });
    active_.erase(state->request.id);
    ++counters_.requests_finished;
    batching::GenerateEvent event;
    event.request_id = state->request.id;
    event.request_finished = true;
    event.error = Error(ErrorCode::kInternal, "inference step failed: " + why);
    emit(state, std::move(event));
  }
}

void InferenceEngine::score_prompt_rows(const std::vector<PromptRow>& rows,
                                        const at::Tensor& logits, int64_t first_row) {
  const float* data = logits.data_ptr<float>();
  const int64_t vocab = logits.size(1);
  std::vector<batching::PromptLogprob> scored(rows.size());
  at::parallel_for(0, static_cast<int64_t>(rows.size()), std::max<int64_t>(1, 8192 / vocab),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = begin; i < end; ++i) {
                       const PromptRow& r = rows[size_t(i)];
                       scored[size_t(i)] =
                           batching::score_token(data + (first_row + i) * vocab, vocab,
                                                 r.request->request.prompt[size_t(r.position)],
                                                 r.request->request.prompt_logprobs);
                     }
                   });
  // Rows of one request are consecutive and in position order (its chunk's tokens).
  for (size_t i = 0; i < rows.size(); ++i)
    rows[i].request->prompt_logprobs.push_back(std::move(scored[i]));
}

void InferenceEngine::sample_and_emit(const batching::StepPlan& plan, const at::Tensor& logits) {
  // Which sequence samples from which logits row. A prompt that just finished with n > 1 forks
  // here, before its first token, so every sample shares the prompt's blocks.
  struct Draw {
    batching::Sequence* seq;
    int64_t row;
    batching::GeneratedToken token;
  };
  std::vector<Draw> draws;
  int64_t row = 0;
  for (const batching::ScheduledChunk& chunk : plan.chunks) {
    batching::Sequence* seq = chunk.seq;
    scheduler_->advance(*seq, chunk.length);
    if (!chunk.needs_logits) continue;
    draws.push_back({seq, row, {}});
    if (seq->pending_forks > 0) {
      for (batching::Sequence* fork : scheduler_->fork(*seq, seq->pending_forks)) {
        fork->rng =
            batching::SampleRng(fork->request->seed, static_cast<uint64_t>(fork->sample_index));
        draws.push_back({fork, row, {}});
      }
    }
    ++row;
  }
  if (draws.empty()) return;
  const float* data = logits.data_ptr<float>();
  const int64_t vocab = logits.size(1);
  // Each draw has its own RNG and output slot, so rows can be sampled in parallel: a row costs a
  // few passes over the vocabulary, so ~8k logits per thread are worth a thread (64 rows of a 1k
  // vocab: 2).
  at::parallel_for(0, static_cast<int64_t>(draws.size()), std::max<int64_t>(1, 8192 / vocab),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = begin; i < end; ++i) {
                       Draw& d = draws[i];
                       d.token = batching::sample_token(data + d.row * vocab, vocab,
                                                        d.seq->request->sampling, d.seq->rng);
                     }
                   });
  const int64_t version = policy_version_.load();
  for (Draw& d : draws) {
    batching::Sequence* seq = d.seq;
    std::shared_ptr<batching::RequestState> keep = seq->request;  // finish_sample destroys seq
    batching::RequestState& state = *keep;
    d.token.policy_version = version;
    seq->tokens.push_back(d.token.id);
    ++counters_.tokens_generated;
    batching::GenerateEvent event;
    event.request_id = state.request.id;
    event.sample_index = seq->sample_index;
    event.tokens.push_back(std::move(d.token));
    if (state.request.prompt_logprobs >= 0 && !state.prompt_logprobs_sent) {
      event.prompt_logprobs = std::move(state.prompt_logprobs);
      state.prompt_logprobs = {};
      state.prompt_logprobs_sent = true;
    }
    const int32_t id = seq->tokens.back();
    const auto& stops = state.request.stop_token_ids;
    std::optional<batching::FinishReason> mad;
    if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
      finish_sample(seq, batching::FinishReason::kStop, event);
    } else if ((mad = seq->madness.push(id))) {
      ++counters_.madness_stops;
      finish_sample(seq, *mad, event);
    } else if (seq->num_generated() >= state.request.max_tokens ||
               static_cast<int64_t>(seq->tokens.size()) >= max_model_len_) {
      finish_sample(seq, batching::FinishReason::kLength, event);
    }
    emit(std::move(keep), std::move(event));
  }
}

void InferenceEngine::finish_sample(batching::Sequence* seq, batching::FinishReason reason,
                                    batching::GenerateEvent& event) {
  std::shared_ptr<batching::RequestState> state = seq->request;
  const size_t index = static_cast<size_t>(seq->sample_index);
  scheduler_->finish(seq);  // seq is gone after this
  state->sample_done[index] = true;
  event.finish = reason;
  if (--state->samples_left == 0) {
    event.request_finished = true;
    active_.erase(state->request.id);
    ++counters_.requests_finished;
  }
}

void InferenceEngine::emit(std::shared_ptr<batching::RequestState> request,
                           batching::GenerateEvent event) {
  outbox_.emplace_back(std::move(request), std::move(event));
}

void InferenceEngine::flush_events() {
  std::vector<std::pair<std::shared_ptr<batching::RequestState>, batching::GenerateEvent>> events;
  events.swap(outbox_);
  for (const auto& [request, event] : events) call(*request, event);
}

void InferenceEngine::call(batching::RequestState& request, const batching::GenerateEvent& event) {
  if (!request.callback) return;
  try {
    request.callback(event);
  } catch (const std::exception& e) {
    log().error("inference engine: callback for request '{}' threw: {}", event.request_id,
                e.what());
  } catch (...) {
    log().error("inference engine: callback for request '{}' threw", event.request_id);
  }
}

void InferenceEngine::publish_stats() {
  counters_.running = scheduler_->num_running();
  counters_.waiting = scheduler_->num_waiting();
  counters_.free_blocks = scheduler_->blocks().num_free();
  counters_.cached_blocks = scheduler_->blocks().num_cached();
  counters_.tokens_prefix_cached = scheduler_->prefix_hit_tokens();
  std::lock_guard lock(mu_);
  stats_ = counters_;
}

}  // namespace ajet::infer
