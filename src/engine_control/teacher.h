// The teacher of on-policy distillation (ajet.distillation; docs/training.md "Distillation"):
// before a batch trains, each sample's token ids go to the teacher's OpenAI-compatible /completions
// with `prompt_logprobs` (vLLM's extension; this project's front serves it too), and the teacher's
// logprob of every trained token (and its top k alternatives) joins the train_step batch. A sample
// whose request fails, times out or answers something unreadable keeps NaN teacher logprobs: it
// gets no distillation term, and is counted, never read as zero. Torch-free; runs on the batch
// runner's thread with a few request threads of its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "rpc/messages.h"

namespace ajet::engine_control {

struct TeacherOptions {
  std::string base_url;  // "http://host:port/v1": requests go to <base_url>/completions
  std::string api_key;   // Authorization: Bearer (empty: none)
  std::string model;     // the request's `model` (empty: left out)
  double timeout_s = 120;
  int concurrency = 4;
  int top_k = 0;  // alternatives per position (0: the token's own logprob only)
};

struct TeacherReport {
  int64_t samples = 0;          // samples sent
  int64_t failed = 0;           // samples without teacher logprobs (error, timeout, bad answer)
  int64_t tokens = 0;           // trained tokens with a teacher logprob
  double reverse_kl = 0;        // token mean of (behaviour logprob - teacher logprob): k1
  double in_teacher_top_k = 0;  // fraction of those tokens among the teacher's top k (top_k > 0)
  double seconds = 0;
  std::vector<std::string> errors;  // the first few failures, for the log

  Json to_json() const;
};

// The teacher's logprob of each prompt position from a /completions answer (vLLM's
// choices[0].prompt_logprobs: null, then {"<id>": {"logprob", "rank", ...}} per position). `ids`
// are the prompt's ids; entry p of the result is the logprob of ids[p] (NaN for p = 0). With
// top_k > 0, `top_ids`/`top_logprobs` get (len * top_k) entries: the best alternatives by rank
// (-1 / -inf where fewer). Throws Error(kInvalidArgument) naming what is wrong with the answer.
std::vector<float> parse_prompt_logprobs(const Json& answer, const std::vector<int32_t>& ids,
                                         int top_k, std::vector<int32_t>* top_ids,
                                         std::vector<float>* top_logprobs);

// Asks the teacher about every sample of `batch` and fills its teacher_* arrays (NaN / -1 where
// there is nothing). Never throws for a teacher's failure: the report counts it.
TeacherReport fill_teacher_logprobs(rpc::TrainBatch& batch, const TeacherOptions& options);

}  // namespace ajet::engine_control
