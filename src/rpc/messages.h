// Typed engine RPC messages on top of generic frames: `generate` and its streamed `tokens` events,
// `status`, `abort`, and the `train_step` batch. Encode/decode only; the decoders validate shapes
// and ranges and name the bad field. Vocabulary and context checks belong to the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/strings.h"
#include "rpc/frame.h"

namespace ajet::rpc {

inline constexpr std::string_view kMethodGenerate = "generate";
inline constexpr std::string_view kMethodStatus = "status";
// The trainer's methods: docs/engine-rpc.md, "Trainer methods" (set_weights is reserved, not
// implemented).
inline constexpr std::string_view kMethodTrainStep = "train_step";
inline constexpr std::string_view kMethodSaveCheckpoint = "save_checkpoint";
inline constexpr std::string_view kMethodLoadCheckpoint = "load_checkpoint";
inline constexpr std::string_view kMethodSetWeights = "set_weights";
// Elastic groups (an engine served with --elastic): the front asks the would-be rank 0 to serve a
// rendezvous store, then every member to join that generation's group, which makes every member
// hold the source rank's weights and trainer state. docs/engine-rpc.md, "Elastic groups".
inline constexpr std::string_view kMethodOpenGroup = "open_group";
inline constexpr std::string_view kMethodJoinGroup = "join_group";
// Disaggregated training: the front asks a trainer (rank 0) to serve a rendezvous store, then the
// trainer and every inference replica to meet in a push group, in which the trainer's weights go to
// the replicas. docs/engine-rpc.md, "Weight pushes".
inline constexpr std::string_view kMethodOpenPush = "open_push";
inline constexpr std::string_view kMethodPushWeights = "push_weights";
// Several LoRA adapters on one base (docs/engine-rpc.md, "Adapters"): list, create (or load a PEFT
// directory), save and remove them while the engine runs.
inline constexpr std::string_view kMethodAdapters = "adapters";
inline constexpr std::string_view kMethodAdapterCreate = "adapter_create";
inline constexpr std::string_view kMethodAdapterSave = "adapter_save";
inline constexpr std::string_view kMethodAdapterRemove = "adapter_remove";
inline constexpr std::string_view kMethodAdapterEvict = "adapter_evict";
using ajet::adapter_name_problem;  // common/strings.h

// `n`. The front checks the same range (openai::kMaxChoices), and ajet.rollout.max_num_seqs, which
// the engine's scheduler also enforces (a request's samples decode together).
inline constexpr int kMaxSamplesPerRequest = 64;
inline constexpr int kMaxTopLogprobs = 20;  // as the OpenAI API

// ---- generate -------------------------------------------------------------------------------

struct GenerateRequest {
  std::vector<int32_t> prompt;          // (P,) token ids, P >= 1
  int32_t n = 1;                        // samples sharing one prefill, 1..256
  int32_t max_tokens = 16;              // per sample, >= 1
  double temperature = 1.0;             // >= 0; 0 = greedy
  double top_p = 1.0;                   // (0, 1]
  int32_t top_k = 0;                    // >= 0; 0 = no top-k truncation
  std::optional<int64_t> seed;          // reproducible per request when set
  std::vector<int32_t> stop_token_ids;  // generation of any of these ends a sample (the id is kept)
  int32_t top_logprobs = 0;             // 0..20 alternatives per generated token
  // Raw logprobs of the prompt's own tokens: -1 none, 0 each token's, 1..20 also alternatives.
  int32_t prompt_logprobs = -1;
  std::string tag;      // opaque, for logs (e.g. episode uuid + call index)
  std::string adapter;  // a LoRA adapter the engine serves; empty: the base model
};

Frame encode_generate_request(const GenerateRequest& request);
// Throws kInvalidArgument naming the field ("generate: 'top_p' must be in (0, 1], got 0").
GenerateRequest decode_generate_request(const Frame& frame);

// The last four: a madness detector stopped the sample (batching/madness.h).
enum class FinishReason {
  kStop,
  kLength,
  kAbort,
  kRepetition,
  kLowEntropy,
  kGarbage,
  kLanguageSwitch
};
bool is_madness(FinishReason reason);
std::string_view finish_reason_name(FinishReason reason);
std::optional<FinishReason> finish_reason_from_name(std::string_view name);

// One streamed reply of `generate`: the next tokens of one sample. T may be 0 (a final event that
// only carries the finish reason, e.g. after an abort).
struct TokensEvent {
  int32_t sample = 0;              // which of the n samples, 0..n-1
  std::vector<int32_t> token_ids;  // (T,)
  std::vector<float> logprobs;     // (T,) under the sampling distribution actually used
  std::vector<float>
      raw_logprobs;  // (T,) under the raw model distribution (temperature 1, no truncation)
  std::vector<int64_t> policy_versions;  // (T,) weights version that produced each token
  int32_t top_k = 0;                     // K alternatives per token (0 = none)
  std::vector<int32_t> top_ids;     // (T * K,) row-major: token t's alternatives at [t*K, t*K+K)
  std::vector<float> top_logprobs;  // (T * K,) their logprobs under the sampling distribution
  // Once per request (its first event with tokens), when it asked for prompt_logprobs: positions
  // 1..P-1 of the prompt, each with the K = prompt_top_k best alternatives (row-major).
  int32_t prompt_top_k = -1;               // -1: none carried
  std::vector<int32_t> prompt_ids;         // (P-1,)
  std::vector<float> prompt_logprobs;      // (P-1,) raw
  std::vector<int32_t> prompt_ranks;       // (P-1,) 1 = the model's first choice
  std::vector<int32_t> prompt_top_ids;     // ((P-1) * K,)
  std::vector<float> prompt_top_logprobs;  // ((P-1) * K,)
  // On the sample's last event only:
  std::optional<FinishReason> finish_reason;
  int64_t prompt_tokens = 0;      // P
  int64_t completion_tokens = 0;  // tokens this sample generated in total
};

Frame encode_tokens_event(const TokensEvent& event);
TokensEvent decode_tokens_event(const Frame& frame);

// The final kDone frame of `generate`, sent after every sample's last event.
struct GenerateDone {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // summed over samples
};
Frame encode_generate_done(const GenerateDone& done);
GenerateDone decode_generate_done(const Frame& frame);

// ---- status ---------------------------------------------------------------------------------

// `status` has no parameters; its kDone body is an opaque JSON object (policy_version, model,
// running, waiting, cache usage, blas, threads ...) defined by the engine.
Frame make_status_request();

// ---- train_step (docs/engine-rpc.md) -------------------------------------------------------

// A batch of S samples, N tokens in all, packed back to back. Per-token arrays have N entries;
// sample s covers tokens [sample_offsets[s], sample_offsets[s+1]). `meta` carries scalars and
// per-sample values the trainer needs beyond these arrays (step, task ids, rewards, ...).
struct TrainBatch {
  std::vector<int64_t> sample_offsets;  // (S+1,) 0 = offsets[0] <= ... <= offsets[S] = N
  std::vector<int32_t> token_ids;       // (N,)
  std::vector<uint8_t> loss_mask;       // (N,) 1 on generated tokens, else 0
  std::vector<float> logprobs;          // (N,) behaviour logprobs from the rollout
  std::vector<float> advantages;        // (N,) per token, or empty when `rewards` is given
  Json meta = Json::object();
  // Optional (empty = absent; added for the trainer, older senders omit them). Per sample (S):
  std::vector<double> rewards;             // episode reward; the trainer then computes advantages
  std::vector<double> weights;             // per-episode weight 1 / (samples of the episode)
  std::vector<std::string> task_ids;       // advantage group
  std::vector<std::string> episode_uuids;  // advantages are per episode
  std::vector<int32_t> policy_versions;    // (N,) weights version of each generated token
  // On-policy distillation (docs/training.md): (N,) the teacher's logprob of each token, NaN where
  // it has none (not trained, or the teacher failed for the sample); with teacher_top_k K > 0 also
  // (N * K,) the teacher's K best ids (-1: none) and their logprobs at each position.
  std::vector<float> teacher_logprobs;
  int32_t teacher_top_k = 0;
  std::vector<int32_t> teacher_top_ids;
  std::vector<float> teacher_top_logprobs;
};
Frame encode_train_batch(const TrainBatch& batch);  // method train_step
TrainBatch decode_train_batch(const Frame& frame);

}  // namespace ajet::rpc
