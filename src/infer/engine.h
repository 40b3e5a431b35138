// The inference engine: one thread owns the model and the paged KV cache and runs a
// continuous-batching loop (admit waiting requests, decode every running sequence, prefill prompts
// in chunks, sample, emit events). Any thread may submit, abort, read stats, or run code on the
// model between steps (weight updates). Never sees text or the wire protocol; callbacks run on the
// engine thread and must be cheap.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "batching/request.h"
#include "batching/scheduler.h"
#include "infer/attention.h"
#include "infer/kv_cache.h"
#include "model/qwen2.h"

namespace ajet::infer {

// How an InferenceEngine is built (batch limits, cache bytes, attention). Not config::EngineConfig,
// the `ajet.engine` section of the YAML config, from which the engine's runtime fills some of
// these.
struct InferenceEngineOptions {
  int threads = 0;  // libtorch intra-op threads for the engine thread; 0 = unchanged
  int64_t cache_bytes =
      0;  // memory bound of the KV cache (keys + values, all layers); the owner sets it
  int64_t block_size = 16;         // tokens per cache block
  int64_t max_batch_tokens = 512;  // tokens per step: decode tokens first, then prefill chunks
  int64_t max_running = 64;        // sequences decoding at once (samples of n > 1 count each)
  int64_t max_model_len = 0;       // prompt + generated limit; 0 = max_position_embeddings
  bool prefix_caching =
      true;  // reuse computed full blocks of shared prompt prefixes (batching/scheduler.h)
  bool start_thread = true;  // false: no engine thread, the owner calls step() (tests)
  bool quiet = false;  // log the cache sizing at debug, not info (owners that build many engines)
  AttentionImpl attention = AttentionImpl::kAuto;
  // Element type of the KV cache; Undefined = the model's. bfloat16 under a float32 model halves
  // the bytes a decode step reads from the cache (and doubles the tokens cache_bytes holds);
  // attention still computes in float32 on the keys and values rounded to bfloat16.
  at::ScalarType cache_dtype = at::ScalarType::Undefined;
  // Degenerate generations stop early with a madness finish reason (batching/madness.h); off by
  // default.
  batching::MadnessLimits madness;
};

struct EngineStats {
  int64_t running = 0;  // sequences admitted (prefilling or decoding)
  int64_t waiting = 0;  // sequences queued for cache blocks or a slot
  int64_t free_blocks = 0;
  int64_t total_blocks = 0;
  int64_t block_size = 0;
  int64_t max_model_len = 0;
  int64_t steps = 0;
  int64_t tokens_generated = 0;      // sampled tokens
  int64_t tokens_computed = 0;       // tokens run through the model (prefill, recompute and decode)
  int64_t tokens_prefix_cached = 0;  // prompt tokens not computed: their keys/values were cached
  int64_t cached_blocks = 0;         // blocks whose contents prefix caching can reuse (now)
  int64_t preemptions = 0;
  int64_t requests_finished = 0;
  int64_t policy_version = 0;
  int64_t madness_stops = 0;  // samples a madness detector stopped (every detector)
  double busy_seconds = 0;    // wall time spent running batches (forward and sampling) since start
};

using EventCallback = std::function<void(const batching::GenerateEvent&)>;

// Everything one request produced, gathered from its events (see InferenceEngine::generate).
struct SampleOutput {
  std::vector<batching::GeneratedToken> tokens;
  std::optional<batching::FinishReason> finish;
};
struct GenerateResult {
  std::vector<SampleOutput> samples;                     // (n)
  std::vector<batching::PromptLogprob> prompt_logprobs;  // request.prompt_logprobs >= 0
  std::optional<Error> error;
};

// One forward pass of a step's flat batch over the paged cache: ids (N) are the batch's tokens in
// segment order; their keys/values are written into the cache and every layer attends over it.
// Returns float32 CPU logits (M, V) for the rows in logit_rows (undefined tensor when none).
at::Tensor forward_cached(model::Qwen2Model& model, KvCache& cache, const AttentionBatch& batch,
                          const std::vector<int64_t>& ids, const std::vector<int64_t>& logit_rows,
                          AttentionImpl impl = AttentionImpl::kAuto);

class InferenceEngine {
 public:
  // The model must already be on its device and dtype; the cache takes both from its parameters.
  InferenceEngine(model::Qwen2Model model, const InferenceEngineOptions& config);
  ~InferenceEngine();  // stop()
  InferenceEngine(const InferenceEngine&) = delete;
  InferenceEngine& operator=(const InferenceEngine&) = delete;

  // Queues a request; every outcome (tokens, finish, or a validation error) arrives through
  // `callback` on the engine thread. Thread-safe.
  void submit(batching::GenerateRequest request, EventCallback callback);
  // Submits and gathers all events; the future is ready when the request is finished.
  std::future<GenerateResult> generate(batching::GenerateRequest request);
  // Finishes the request's unfinished samples with `abort`. Unknown or finished ids are ignored.
  void abort(const std::string& request_id);

  // Runs fn on the engine thread between two steps with exclusive access to the model; afterwards
  // the policy version is incremented when bump_version is set (and fn did not throw). Tokens
  // sampled after that carry the new version. Sequences in flight keep their cached keys/values
  // from older weights.
  std::future<void> run_exclusive(std::function<void(model::Qwen2Model&)> fn, bool bump_version);
  // Like run_exclusive for fn that changes only the LoRA adapters whose slots it passes to
  // set_adapter: the base's cached prefixes and every other adapter's stay usable.
  std::future<void> run_adapter_update(std::function<void(model::Qwen2Model&)> fn,
                                       bool bump_version);
  // Only inside a run_exclusive / run_adapter_update fn (the engine thread): slot now holds adapter
  // `uid` (0: nothing) with new weights; its cached prefixes are no longer reused. Requests for
  // the slot carry the uid they were resolved to; one that no longer matches is refused.
  void set_adapter(int32_t slot, uint64_t uid);
  // run_exclusive, then (when fn did not throw) the policy version becomes `version`: weights
  // restored from a checkpoint and their version change together, no step runs in between.
  std::future<void> run_exclusive_at_version(std::function<void(model::Qwen2Model&)> fn,
                                             int64_t version);
  // Like run_exclusive_at_version, but only once no request is in flight: requests submitted from
  // now wait (queued, not admitted) while the admitted ones run to their end on the current
  // weights, then fn runs and the version is set, then the waiting ones start on the new weights.
  // So no request ever samples from two versions (disaggregated weight pushes, docs/cluster.md).
  // The wait is bounded by the in-flight requests' max_tokens.
  std::future<void> run_drained_at_version(std::function<void(model::Qwen2Model&)> fn,
                                           int64_t version);
  // Sets the policy version (e.g. restored from a checkpoint), between steps like run_exclusive.
  std::future<void> set_policy_version(int64_t version);
  int64_t policy_version() const { return policy_version_.load(); }

  EngineStats stats() const;
  int64_t max_model_len() const { return max_model_len_; }
  const InferenceEngineOptions& config() const { return config_; }
  // The KV cache's element type (config().cache_dtype, or the model's when that is Undefined).
  at::ScalarType cache_dtype() const { return cache_->dtype(); }

  // Manual mode (start_thread = false): handles queued submissions, aborts and exclusive tasks,
  // then runs one batch. Returns false when there was nothing to do at all.
  bool step();
  // Stops the engine thread; unfinished requests end with `abort`, queued exclusive tasks fail.
  void stop();

 private:
  struct Submission {
    batching::GenerateRequest request;
    EventCallback callback;
  };
  struct ExclusiveTask {
    std::function<void(model::Qwen2Model&)> fn;
    bool bump_version = false;
    std::optional<int64_t> set_version;
    bool drain = false;          // run only when no request is in flight (run_drained_at_version)
    bool keep_prefixes = false;  // fn changes only adapters (run_adapter_update)
    std::promise<void> done;
  };

  std::future<void> enqueue(std::unique_ptr<ExclusiveTask> task);
  void loop();
  bool has_inbox() const;  // under mu_
  bool handle_inbox();
  void admit(Submission submission);
  void validate(const batching::GenerateRequest& request) const;
  void abort_request(const std::string& id);
  bool run_batch();
  void sample_and_emit(const batching::StepPlan& plan, const at::Tensor& logits);
  // Rows past the sampling rows of `logits` are prompt positions (prompt_logprobs requests).
  struct PromptRow {
    batching::RequestState* request;
    int64_t position;  // the prompt token scored (>= 1)
  };
  void score_prompt_rows(const std::vector<PromptRow>& rows, const at::Tensor& logits,
                         int64_t first_row);
  void fail_requests(const std::vector<std::shared_ptr<batching::RequestState>>& failed,
                     const std::string& why);
  void finish_sample(batching::Sequence* seq, batching::FinishReason reason,
                     batching::GenerateEvent& event);
  // Events are queued during a step and delivered after it (stats already published).
  void emit(std::shared_ptr<batching::RequestState> request, batching::GenerateEvent event);
  void flush_events();
  static void call(batching::RequestState& request, const batching::GenerateEvent& event);
  void shutdown_requests();
  void publish_stats();

  model::Qwen2Model model_;
  InferenceEngineOptions config_;
  int64_t max_model_len_ = 0;
  int64_t vocab_size_ = 0;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<batching::Scheduler> scheduler_;
  std::unordered_map<std::string, std::shared_ptr<batching::RequestState>>
      active_;                   // engine thread only
  std::mt19937_64 seed_source_;  // engine thread only
  std::vector<std::pair<std::shared_ptr<batching::RequestState>, batching::GenerateEvent>>
      outbox_;  // engine thread only
  std::atomic<int64_t> policy_version_{0};
  struct AdapterSlot {
    uint64_t uid = 0;
    uint64_t generation = 0;
  };
  std::vector<AdapterSlot> adapters_;  // engine thread only, by slot
  uint64_t adapter_generation_ = 0;    // engine thread only

  mutable std::mutex mu_;  // guards the inbox, stopping_ and stats_
  std::condition_variable wake_;
  std::vector<Submission> new_requests_;
  std::vector<std::string> aborts_;
  std::deque<std::unique_ptr<ExclusiveTask>> exclusive_;
  bool stopping_ = false;
  bool stopped_ = false;
  EngineStats stats_;     // published copy of counters_
  EngineStats counters_;  // engine thread only
  std::thread thread_;
};

}  // namespace ajet::infer
