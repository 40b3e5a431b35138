// Where a study's candidates come from. The controller asks a Proposer for the plan's hypotheses,
// for each new round's candidates and, at the end, for the conclusion's prose; it checks every
// proposal against the search space (check_params) and drops what does not fit, so a proposer (an
// LLM, say) can be wrong without harming the study. BuiltinProposer: a seeded random search in the
// first round, then half local moves around the best trials so far and half fresh random points.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "research/journal.h"
#include "research/study.h"

namespace ajet::research {

struct ProposalRequest {
  const Study* study = nullptr;
  int64_t round = 1;             // the round being planned (1 = the first)
  int64_t count = 0;             // how many candidates are wanted
  std::vector<TrialRow> trials;  // every trial so far, with its status and result
  std::vector<Point> points;     // every validation value so far
};

struct ConclusionFacts {
  std::string
      summary;  // the controller's own conclusion (numbers, seeds); prose may be added to it
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string name() const = 0;
  // Hypotheses for the plan, one Markdown line each.
  virtual std::vector<std::string> hypotheses(const Study& study) = 0;
  // Up to request.count candidates (may return fewer; the controller fills with BuiltinProposer).
  virtual std::vector<Params> propose(const ProposalRequest& request) = 0;
  // Optional prose for the conclusion; nullopt: the controller's summary stands alone.
  virtual std::optional<std::string> conclusion_prose(const ConclusionFacts& facts) = 0;
  // The proposer's own reasons for the candidates of its last propose() answer (an LLM's "why"), ""
  // when it gave none or none of its candidates was used. The controller writes it into that
  // round's decision, so the notebook's decision log says why the round tries what it tries.
  virtual std::string rationale() const { return ""; }
  // What the proposer noted since the last call (fallbacks, dropped candidates), oldest first; the
  // controller keeps them with the decision they belong to (its numbers, "proposer_notes").
  virtual std::vector<std::string> take_notes() { return {}; }
};

class BuiltinProposer : public Proposer {
 public:
  std::string name() const override {
    return "built-in (random search, then local moves around the best)";
  }
  std::vector<std::string> hypotheses(const Study& study) override;
  std::vector<Params> propose(const ProposalRequest& request) override;
  std::optional<std::string> conclusion_prose(const ConclusionFacts&) override {
    return std::nullopt;
  }
};

// A uniform random point of the space (log-uniform ranges sampled in log space), values rounded to
// 3 significant digits so tables stay readable.
Params random_params(const Study& study, std::mt19937_64& rng);
// A point near `from`: each numeric parameter moves by a random factor (log-uniform: x e^{±0.5 of
// the range's log width / 2}; uniform and int: ± a quarter of the range), each choice changes with
// probability 1/2.
Params nearby_params(const Study& study, const Params& from, std::mt19937_64& rng);

}  // namespace ajet::research
