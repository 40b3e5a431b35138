#include "classic/sampling_check.h"

#include <fmt/format.h>

namespace ajet::classic {

SamplingCheck check_sampled_requests(client::SwarmClient& client,
                                     const std::vector<EpisodeResult>& sampled,
                                     double absent_temperature, size_t max_episodes) {
  SamplingCheck check;
  for (const EpisodeResult& result : sampled) {
    if (size_t(check.episodes) >= max_episodes) break;
    if (!result.ended || result.episode_uuid.empty()) continue;
    Json doc;
    try {
      doc = client.get_episode(result.episode_uuid);
    } catch (const std::exception&) {
      continue;  // a store that cannot say is no evidence either way
    }
    if (!doc.contains("calls") || !doc["calls"].is_array()) continue;
    check.episodes += 1;
    for (const Json& call : doc["calls"]) {
      const Json sampling = call.value("sampling", Json::object());
      const double t = sampling.contains("temperature") && sampling["temperature"].is_number()
                           ? sampling["temperature"].get<double>()
                           : absent_temperature;
      check.calls += 1;
      check.sampled_calls += t > 0 ? 1 : 0;
    }
  }
  return check;
}

std::string greedy_validation_warning(const SamplingCheck& check, double temperature) {
  return fmt::format(
      "validation asked for sampled episodes (temperature {:g}), but all {} model calls of the {} "
      "sampled "
      "episodes checked ran greedy (temperature 0 or none sent): their success and pass@k are "
      "greedy's. Pass "
      "the sampling parameters of $AJET_SAMPLING (worker mode: the request's \"sampling\") in "
      "every request "
      "of an eval episode (docs/classic.md)",
      temperature, check.calls, check.episodes);
}

}  // namespace ajet::classic
