// The optional LLM researcher: a Proposer that asks a model behind any OpenAI-compatible endpoint
// for the plan's hypotheses, each round's candidates and the conclusion's prose, with what the
// study has measured so far as context. Nothing it says is trusted: replies must be one JSON object
// of the asked shape, candidates must be points of the search space (check_params) not yet tried,
// prose is cut to a bound; whatever fails (no answer, an error status, malformed or out-of-space
// replies) falls back to the built-in proposer for that request and leaves a note saying why, so a
// study never waits on or breaks because of the model.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "research/proposer.h"

namespace ajet::research {

struct LlmEndpoint {
  std::string base_url;  // ".../v1"
  std::string api_key;
  std::string model = "gpt-4o-mini";
  std::chrono::milliseconds timeout{120'000};  // each request
};

// The endpoint from the environment: OPENAI_BASE_URL (required; nullopt without it), OPENAI_API_KEY
// (may be empty), AJET_RESEARCH_MODEL (default: LlmEndpoint::model).
std::optional<LlmEndpoint> llm_endpoint_from_env();

// Replies longer than this are not read as proposals (a model that rambles is not followed).
inline constexpr size_t kMaxLlmReplyBytes = 64 * 1024;
inline constexpr size_t kMaxProseBytes = 4000;
inline constexpr size_t kMaxHypotheses = 8;
inline constexpr size_t kMaxRationaleBytes = 500;

class LlmProposer : public Proposer {
 public:
  // `fallback` answers whatever the model does not; `note` gets one line per fallback or dropped
  // candidate (the controller puts them in its log and the notebook).
  LlmProposer(LlmEndpoint endpoint, Proposer& fallback,
              std::function<void(const std::string&)> note = {});

  std::string name() const override;
  std::vector<std::string> hypotheses(const Study& study) override;
  std::vector<Params> propose(const ProposalRequest& request) override;
  std::optional<std::string> conclusion_prose(const ConclusionFacts& facts) override;
  // The model's "why" for the candidates of the last propose(), cut to kMaxRationaleBytes.
  std::string rationale() const override { return rationale_; }
  std::vector<std::string> take_notes() override;

  // Every note so far, oldest first.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  // One chat call; the reply's JSON object, or nullopt after noting why there is none.
  std::optional<Json> ask_json(const std::string& what, const std::string& prompt);
  std::optional<std::string> ask_text(const std::string& what, const std::string& prompt);
  void note(const std::string& line);

  LlmEndpoint endpoint_;
  Proposer& fallback_;
  std::function<void(const std::string&)> note_;
  std::vector<std::string> notes_;
  size_t notes_taken_ = 0;  // notes_[0, notes_taken_) went out through take_notes()
  std::string rationale_;
};

// Exposed for tests: the JSON object in a model's reply (bare, or inside a ``` fence, or with prose
// around it); nullopt when there is none or it is not one object. `why` says what was wrong.
std::optional<Json> json_object_in_reply(const std::string& reply, std::string* why);
// The candidates of a reply ({"candidates": [{name: value, ...}, ...]}) that are points of the
// space and not already in `tried` (nor repeated), at most `count`; every dropped one gets a line
// in `dropped`.
std::vector<Params> valid_candidates(const Study& study, const Json& reply,
                                     const std::vector<Params>& tried, int64_t count,
                                     std::vector<std::string>* dropped);

}  // namespace ajet::research
