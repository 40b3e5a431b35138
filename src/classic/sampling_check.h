// Whether a validation that asked for sampled episodes got sampled requests: the tracked requests
// of a few of its sampled episodes, read back from the front (GET /episodes/{uuid}, their
// "sampling"). A command agent that drops AJET_SAMPLING sends no temperature, and an eval request
// without one runs at ajet.rollout.val_kwargs' (greedy by default): its "sampled" success and
// pass@k are greedy's. Reads only; never fails a validation (an episode it cannot read is skipped).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "classic/episode_runner.h"
#include "client/swarm_client.h"

namespace ajet::classic {

struct SamplingCheck {
  int64_t episodes = 0;  // sampled episodes read back
  int64_t calls = 0;     // their model calls
  int64_t sampled_calls =
      0;  // of which ran at temperature > 0 (sent, or the eval default when absent)

  // Requests were read and none of them sampled.
  bool all_greedy() const { return calls > 0 && sampled_calls == 0; }
  double sampled_share() const { return calls > 0 ? double(sampled_calls) / double(calls) : 0.0; }
};

// Reads the calls of the first `max_episodes` ended episodes of `sampled`. `absent_temperature` is
// what an eval request without "temperature" runs at (val_kwargs.temperature when do_sample, else
// 0).
SamplingCheck check_sampled_requests(client::SwarmClient& client,
                                     const std::vector<EpisodeResult>& sampled,
                                     double absent_temperature, size_t max_episodes = 8);

// The warning of a validation whose sampled episodes all ran greedy: what happened and the fix.
std::string greedy_validation_warning(const SamplingCheck& check, double temperature);

}  // namespace ajet::classic
