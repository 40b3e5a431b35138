#include "research/proposer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace ajet::research {
namespace {

double round_sig(double x, int digits) {
  if (x == 0 || !std::isfinite(x)) return x;
  const double scale = std::pow(10.0, digits - 1 - int(std::floor(std::log10(std::abs(x)))));
  return std::round(x * scale) / scale;
}

Json numeric_value(const Param& p, double x) {
  x = std::clamp(x, p.low, p.high);
  if (p.kind == Param::Kind::kInt) return int64_t(std::llround(x));
  return std::clamp(round_sig(x, 3), p.low, p.high);
}

// How good a trial looks so far: its result, else its value at the furthest step it reached.
std::optional<double> trial_score(const TrialRow& t, const std::vector<Point>& points) {
  if (t.result) return t.result;
  std::optional<double> last;
  int64_t last_step = -1;
  for (const Point& p : points) {
    if (p.trial == t.id && p.step > last_step) {
      last_step = p.step;
      last = p.value;
    }
  }
  return last_step > 0 ? last : std::nullopt;
}

}  // namespace

Params random_params(const Study& study, std::mt19937_64& rng) {
  Params out;
  for (const Param& p : study.space) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    switch (p.kind) {
      case Param::Kind::kChoice:
        out[p.name] =
            p.choices[std::uniform_int_distribution<size_t>(0, p.choices.size() - 1)(rng)];
        break;
      case Param::Kind::kUniform:
        out[p.name] = numeric_value(p, p.low + u(rng) * (p.high - p.low));
        break;
      case Param::Kind::kLogUniform:
        out[p.name] = numeric_value(
            p, std::exp(std::log(p.low) + u(rng) * (std::log(p.high) - std::log(p.low))));
        break;
      case Param::Kind::kInt:
        out[p.name] =
            int64_t(std::uniform_int_distribution<int64_t>(int64_t(p.low), int64_t(p.high))(rng));
        break;
    }
  }
  return out;
}

Params nearby_params(const Study& study, const Params& from, std::mt19937_64& rng) {
  Params out = from;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const Param& p : study.space) {
    const auto it = from.find(p.name);
    if (it == from.end() || (p.kind != Param::Kind::kChoice && !it->second.is_number())) {
      std::mt19937_64 fresh(rng());
      out[p.name] = random_params(study, fresh)[p.name];
      continue;
    }
    switch (p.kind) {
      case Param::Kind::kChoice:
        if (std::bernoulli_distribution(0.5)(rng)) {
          out[p.name] =
              p.choices[std::uniform_int_distribution<size_t>(0, p.choices.size() - 1)(rng)];
        }
        break;
      case Param::Kind::kUniform:
      case Param::Kind::kInt:
        out[p.name] = numeric_value(p, it->second.get<double>() + u(rng) * (p.high - p.low) / 4);
        break;
      case Param::Kind::kLogUniform: {
        const double width = std::log(p.high) - std::log(p.low);
        out[p.name] = numeric_value(p, it->second.get<double>() * std::exp(u(rng) * width / 4));
        break;
      }
    }
  }
  return out;
}

std::vector<std::string> BuiltinProposer::hypotheses(const Study& study) {
  std::vector<std::string> out;
  for (const Param& p : study.space) {
    std::string range;
    if (p.kind == Param::Kind::kChoice) {
      std::vector<std::string> vs;
      for (const Json& v : p.choices) vs.push_back(fmt::format("`{}`", value_text(v)));
      range = "one of " + fmt::format("{}", fmt::join(vs, ", "));
    } else {
      range = fmt::format("{} in [{}, {}]",
                          p.kind == Param::Kind::kLogUniform ? "log-uniform"
                          : p.kind == Param::Kind::kInt      ? "integer"
                                                             : "uniform",
                          value_text(p.low), value_text(p.high));
    }
    out.push_back(
        fmt::format("`{}` ({}, {}) changes {} at step {}; H0: it does not, beyond seed noise.",
                    p.name, p.key, range, study.objective.metric, study.objective.step));
  }
  return out;
}

std::vector<Params> BuiltinProposer::propose(const ProposalRequest& req) {
  const Study& study = *req.study;
  // Seeded by the study and the round only: a controller that plans the same round again (its
  // journal transaction never committed) proposes the same candidates.
  std::mt19937_64 rng(uint64_t(study.proposer_seed) * 1000003ULL + uint64_t(req.round));
  std::vector<Params> seen;
  for (const TrialRow& t : req.trials) seen.push_back(t.params);
  std::vector<std::pair<double, const TrialRow*>> ranked;
  for (const TrialRow& t : req.trials) {
    if (t.role != "search" && t.role != "base") continue;
    if (t.role == "base" && t.params.empty()) continue;  // no point of the space to move from
    if (const auto s = trial_score(t, req.points))
      ranked.emplace_back(study.objective.maximize ? *s : -*s, &t);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Params> out;
  const int64_t local = ranked.empty() ? 0 : req.count / 2 + req.count % 2;
  for (int64_t i = 0; i < req.count; ++i) {
    for (int attempt = 0; attempt < 50; ++attempt) {
      Params p =
          i < local
              ? nearby_params(study,
                              ranked[size_t(i) % std::min<size_t>(2, ranked.size())].second->params,
                              rng)
              : random_params(study, rng);
      if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
      seen.push_back(p);
      out.push_back(std::move(p));
      break;
    }
  }
  return out;
}

}  // namespace ajet::research
