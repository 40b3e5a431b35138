// The SFT session's held-out evaluation: episodes of a built-in task played by the built-in agent
// against an in-process inference engine on the model being trained. libtorch.
#pragma once

#include "model/qwen2.h"
#include "sft/session.h"
#include "tracking/chat_format.h"

namespace ajet::sft {

struct EvalResult {
  int64_t episodes = 0;
  double success = 0;
  double reward = 0;
  double seconds = 0;
  text::OrderedJson to_json() const;
};

// options.n held-out episodes of options.task, options.parallel at a time (the engine batches their
// turns), on `threads` intra-op threads.
EvalResult evaluate(model::Qwen2Model& model, const tracking::ChatFormat& format,
                    const EvalOptions& options, int threads);

}  // namespace ajet::sft
