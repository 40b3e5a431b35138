#include "episodes/batch_metrics.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace ajet::episodes {

namespace {

bool metric_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '/' || c == '@' || c == ':' || c == '-';
}

// The engine's timings under timing/ (seconds everywhere, named _s).
const std::map<std::string, std::string>& timing_names() {
  static const std::map<std::string, std::string> names = {
      {"step_time_s", "timing/step_s"},
      {"seconds", "timing/trainer_s"},
      {"old_logprob_seconds", "timing/old_logprob_s"},
      {"ref_logprob_seconds", "timing/ref_logprob_s"},
      {"inference_paused_s", "timing/inference_paused_s"}};
  return names;
}

class Flattener {
 public:
  void number(const std::string& name, const Json& v) {
    if (!v.is_number() || name.size() > kMaxMetricNameLength) return;
    const double d = v.get<double>();
    if (std::isfinite(d)) out_[name] = d;
  }
  // Objects as prefix/key, arrays as prefix/index, a few levels deep.
  void any(const std::string& name, const Json& v, int depth = 0) {
    if (v.is_object() && depth < 4) {
      for (const auto& [key, item] : v.items())
        any(name + "/" + metric_name_piece(key), item, depth + 1);
    } else if (v.is_array() && depth < 4) {
      for (size_t i = 0; i < v.size(); ++i) any(name + "/" + std::to_string(i), v[i], depth + 1);
    } else {
      number(name, v);
    }
  }
  void rollout(const Json& summary) {
    for (const auto& [key, v] : summary.items()) {
      if (key == "staleness" && v.is_object()) {
        if (v.empty()) continue;
        double sum = 0;
        size_t n = 0;
        for (const auto& [uuid, s] : v.items()) {
          if (!s.is_number()) continue;
          sum += s.get<double>();
          n += 1;
        }
        if (n > 0) number("rollout/staleness_mean", Json(sum / double(n)));
      } else if (key == "client_shares" && v.is_object()) {
        for (const auto& [client, share] : v.items())
          any("rollout/client/" + metric_name_piece(client), share, 1);
      } else {
        any("rollout/" + metric_name_piece(key), v, 1);
      }
    }
  }
  void data_parallel(const Json& dp) {
    for (const auto& [key, v] : dp.items()) {
      if (key == "ranks" && v.is_array()) {
        for (size_t i = 0; i < v.size(); ++i) {
          const Json& rank = v[i];
          const int64_t r = rank.is_object() && rank.value("rank", Json()).is_number_integer()
                                ? rank["rank"].get<int64_t>()
                                : int64_t(i);
          if (!rank.is_object()) continue;
          for (const auto& [field, x] : rank.items()) {
            if (field != "rank")
              any("train/data_parallel/rank" + std::to_string(r) + "/" + metric_name_piece(field),
                  x, 2);
          }
        }
      } else {
        any("train/data_parallel/" + metric_name_piece(key), v, 1);
      }
    }
  }
  MetricValues take() { return MetricValues(out_.begin(), out_.end()); }

 private:
  std::map<std::string, double> out_;
};

}  // namespace

bool valid_metric_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxMetricNameLength &&
         std::all_of(name.begin(), name.end(), metric_char);
}

std::string metric_name_piece(std::string_view text, size_t max_length) {
  std::string out;
  for (char c : text.substr(0, max_length)) out.push_back(metric_char(c) && c != '/' ? c : '_');
  return out.empty() ? "_" : out;
}

MetricValues batch_metrics(const Json& stats) {
  Flattener f;
  if (!stats.is_object()) return f.take();
  for (const auto& [key, v] : stats.items()) {
    if (key == "rollout" && v.is_object()) {
      f.rollout(v);
    } else if ((key == "merge" || key == "distill" || key == "madness") && v.is_object()) {
      f.any(key, v);
    } else if (key == "data_parallel" && v.is_object()) {
      f.data_parallel(v);
    } else if (auto it = timing_names().find(key); it != timing_names().end()) {
      f.number(it->second, v);
    } else {
      f.any("train/" + metric_name_piece(key), v);
    }
  }
  const Json tokens = stats.value("tokens", Json()), step_s = stats.value("step_time_s", Json());
  if (tokens.is_number() && step_s.is_number() && step_s.get<double>() > 0) {
    f.number("perf/train_tokens_per_s", Json(tokens.get<double>() / step_s.get<double>()));
  }
  return f.take();
}

}  // namespace ajet::episodes
