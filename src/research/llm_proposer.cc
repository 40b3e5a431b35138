#include "research/llm_proposer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

#include "client/openai_chat.h"
#include "common/error.h"

namespace ajet::research {
namespace {

constexpr const char* kSystemPrompt =
    "You are the researcher of a reinforcement-learning study of an LLM agent. The study's "
    "controller runs "
    "the trials, prunes them and keeps the journal; you suggest what to try and explain what was "
    "found. "
    "Answer exactly in the format asked for.";

std::string kind_text(const Param& p) {
  switch (p.kind) {
    case Param::Kind::kChoice: {
      std::string s = "one of [";
      for (size_t i = 0; i < p.choices.size(); ++i) s += (i ? ", " : "") + p.choices[i].dump();
      return s + "]";
    }
    case Param::Kind::kUniform: return fmt::format("a number in [{}, {}]", p.low, p.high);
    case Param::Kind::kLogUniform:
      return fmt::format("a number in [{}, {}] (searched on a log scale)", p.low, p.high);
    case Param::Kind::kInt: return fmt::format("an integer in [{}, {}]", p.low, p.high);
  }
  return "?";
}

std::string study_text(const Study& study) {
  std::string s = "Question: " + study.question + "\n";
  s += fmt::format("Objective: {} {} at RL step {} (held-out validation).\n",
                   study.objective.maximize ? "maximize" : "minimize", study.objective.metric,
                   study.objective.step);
  s += "Search space (name: config key, values):\n";
  for (const Param& p : study.space)
    s += fmt::format("- {}: {}, {}\n", p.name, p.key, kind_text(p));
  s += fmt::format("Budget: {} search trials, {} s of wall time, {} s per trial.\n",
                   study.budget.trials, study.budget.wall_seconds, study.budget.trial_seconds);
  return s;
}

std::string params_text(const Params& params) {
  if (params.empty()) return "(the base config)";
  std::string s;
  for (const auto& [k, v] : params) s += (s.empty() ? "" : ", ") + k + "=" + value_text(v);
  return s;
}

std::string trials_text(const ProposalRequest& r) {
  if (r.trials.empty()) return "No trial has run yet.\n";
  std::map<int64_t, std::vector<const Point*>> by_trial;
  for (const Point& p : r.points) by_trial[p.trial].push_back(&p);
  std::string s = "Trials so far (name: parameters; status; objective at each validated step):\n";
  for (const TrialRow& t : r.trials) {
    s += fmt::format("- {}: {}; {}", t.name, params_text(t.params), t.status);
    if (!t.reason.empty()) s += " (" + t.reason + ")";
    std::string curve;
    for (const Point* p : by_trial[t.id])
      curve += fmt::format("{}{}: {:.3f}", curve.empty() ? "" : ", ", p->step, p->value);
    if (!curve.empty()) s += "; " + curve;
    s += "\n";
  }
  return s;
}

// A JSON value for a parameter: integers stay integers (a model writes 8 or 8.0 for an int
// parameter).
Json normalised(const Param& p, const Json& v) {
  if (p.kind == Param::Kind::kInt && v.is_number_float()) {
    double d = v.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return Json(static_cast<int64_t>(d));
  }
  return v;
}

}  // namespace

std::optional<LlmEndpoint> llm_endpoint_from_env() {
  const char* url = std::getenv("OPENAI_BASE_URL");
  if (!url || !*url) return std::nullopt;
  LlmEndpoint e;
  e.base_url = url;
  if (const char* key = std::getenv("OPENAI_API_KEY")) e.api_key = key;
  const char* model = std::getenv("AJET_RESEARCH_MODEL");
  if (model && *model) e.model = model;
  return e;
}

std::optional<Json> json_object_in_reply(const std::string& reply, std::string* why) {
  auto fail = [&](std::string w) -> std::optional<Json> {
    if (why) *why = std::move(w);
    return std::nullopt;
  };
  if (reply.size() > kMaxLlmReplyBytes)
    return fail(fmt::format("the reply is {} bytes (at most {} are read)", reply.size(),
                            kMaxLlmReplyBytes));
  // The outermost braces: a fence or prose around the object is tolerated, two objects are not.
  size_t open = reply.find('{'), close = reply.rfind('}');
  if (open == std::string::npos || close == std::string::npos || close < open)
    return fail("the reply holds no JSON object");
  std::optional<Json> j =
      try_parse_json(std::string_view(reply).substr(open, close - open + 1), 16);
  if (!j) return fail("the reply's {...} is not valid JSON");
  if (!j->is_object()) return fail("the reply's JSON is not an object");
  return j;
}

std::vector<Params> valid_candidates(const Study& study, const Json& reply,
                                     const std::vector<Params>& tried, int64_t count,
                                     std::vector<std::string>* dropped) {
  std::vector<Params> out;
  auto drop = [&](std::string line) {
    if (dropped) dropped->push_back(std::move(line));
  };
  auto it = reply.find("candidates");
  if (it == reply.end() || !it->is_array()) {
    drop("the reply has no \"candidates\" array");
    return out;
  }
  std::vector<Params> seen;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& c = (*it)[i];
    std::string where = fmt::format("candidate {}", i + 1);
    if (static_cast<int64_t>(out.size()) >= count) {
      drop(fmt::format("{} and later: more than the {} asked for", where, count));
      break;
    }
    if (!c.is_object()) {
      drop(where + ": not an object");
      continue;
    }
    Params p;
    for (const Param& param : study.space) {
      auto v = c.find(param.name);
      if (v != c.end()) p[param.name] = normalised(param, *v);
    }
    for (auto kv = c.begin(); kv != c.end(); ++kv)
      if (!p.count(kv.key())) p[kv.key()] = kv.value();  // unknown names: check_params says which
    try {
      check_params(study, p);
    } catch (const Error& e) {
      drop(where + ": " + e.what());
      continue;
    }
    if (std::find(tried.begin(), tried.end(), p) != tried.end()) {
      drop(where + ": " + params_text(p) + " was tried already");
      continue;
    }
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) {
      drop(where + ": " + params_text(p) + " repeats an earlier candidate");
      continue;
    }
    seen.push_back(p);
    out.push_back(std::move(p));
  }
  return out;
}

LlmProposer::LlmProposer(LlmEndpoint endpoint, Proposer& fallback,
                         std::function<void(const std::string&)> note)
    : endpoint_(std::move(endpoint)), fallback_(fallback), note_(std::move(note)) {}

std::string LlmProposer::name() const {
  return fmt::format(
      "LLM researcher ({} at {}), checked against the space; the built-in search where it fails",
      endpoint_.model, endpoint_.base_url);
}

void LlmProposer::note(const std::string& line) {
  notes_.push_back(line);
  if (note_) note_(line);
}

std::vector<std::string> LlmProposer::take_notes() {
  std::vector<std::string> out(notes_.begin() + long(notes_taken_), notes_.end());
  notes_taken_ = notes_.size();
  return out;
}

std::optional<std::string> LlmProposer::ask_text(const std::string& what,
                                                 const std::string& prompt) {
  try {
    client::ChatOptions options;
    options.model = endpoint_.model;
    options.timeout = endpoint_.timeout;
    options.max_retries = 1;
    client::ChatClient chat(endpoint_.base_url, endpoint_.api_key, options);
    Json messages =
        Json::array({client::system_message(kSystemPrompt), client::user_message(prompt)});
    client::ChatMessage m = chat.chat(messages, nullptr, Json{{"temperature", 0.7}});
    if (!m.content || m.content->empty()) {
      note(fmt::format("LLM researcher, {}: an empty reply (finish_reason {})", what,
                       m.finish_reason));
      return std::nullopt;
    }
    return *m.content;
  } catch (const std::exception& e) {
    note(fmt::format("LLM researcher, {}: no answer ({})", what, e.what()));
    return std::nullopt;
  }
}

std::optional<Json> LlmProposer::ask_json(const std::string& what, const std::string& prompt) {
  std::optional<std::string> reply = ask_text(what, prompt);
  if (!reply) return std::nullopt;
  std::string why;
  std::optional<Json> j = json_object_in_reply(*reply, &why);
  if (!j) note(fmt::format("LLM researcher, {}: {}", what, why));
  return j;
}

std::vector<std::string> LlmProposer::hypotheses(const Study& study) {
  std::string prompt =
      study_text(study) +
      fmt::format(
          "\nBefore any trial runs: state at most {} hypotheses this study tests, each one "
          "sentence naming the parameters involved and the outcome you expect. Reply with "
          "one JSON object: {{\"hypotheses\": [\"...\", ...]}}",
          kMaxHypotheses);
  std::optional<Json> j = ask_json("hypotheses", prompt);
  std::vector<std::string> out;
  if (j) {
    auto it = j->find("hypotheses");
    if (it != j->end() && it->is_array()) {
      for (const Json& h : *it) {
        if (out.size() >= kMaxHypotheses) break;
        if (h.is_string() && !h.get<std::string>().empty()) {
          std::string s = h.get<std::string>();
          if (s.size() > 500) s = s.substr(0, 500) + " …";
          std::replace(s.begin(), s.end(), '\n', ' ');  // one Markdown line each
          out.push_back("(LLM) " + s);
        }
      }
    }
    if (out.empty()) note("LLM researcher, hypotheses: the reply has no \"hypotheses\" strings");
  }
  if (out.empty()) return fallback_.hypotheses(study);
  return out;
}

std::vector<Params> LlmProposer::propose(const ProposalRequest& request) {
  const Study& study = *request.study;
  std::string prompt =
      study_text(study) + "\n" + trials_text(request) +
      fmt::format(
          "\nPropose the {} configurations of round {} most likely to improve the objective "
          "(points of the search space not tried yet; every parameter given). Reply with one "
          "JSON object: {{\"candidates\": [{{\"<name>\": <value>, ...}}, ...], \"why\": \"...\"}}",
          request.count, request.round);
  rationale_.clear();
  std::optional<Json> j = ask_json(fmt::format("round {}", request.round), prompt);
  std::vector<Params> out;
  if (j) {
    std::vector<Params> tried;
    for (const TrialRow& t : request.trials) tried.push_back(t.params);
    std::vector<std::string> dropped;
    out = valid_candidates(study, *j, tried, request.count, &dropped);
    for (const std::string& d : dropped)
      note(fmt::format("LLM researcher, round {}: dropped {}", request.round, d));
    auto why = j->find("why");
    if (!out.empty() && why != j->end() && why->is_string() && !why->get<std::string>().empty()) {
      rationale_ = why->get<std::string>();
      if (rationale_.size() > kMaxRationaleBytes)
        rationale_ = rationale_.substr(0, kMaxRationaleBytes) + " …";
      std::replace(rationale_.begin(), rationale_.end(), '\n',
                   ' ');  // one table cell in the decision log
      note(fmt::format("LLM researcher, round {}: {} candidate(s): {}", request.round, out.size(),
                       rationale_));
    }
  }
  if (static_cast<int64_t>(out.size()) < request.count) {
    ProposalRequest rest = request;
    rest.count = request.count - static_cast<int64_t>(out.size());
    for (const Params& p : out) {  // the built-in search must not propose the model's points again
      TrialRow planned;
      planned.params = p;
      planned.status = kPending;
      rest.trials.push_back(planned);
    }
    note(fmt::format("LLM researcher, round {}: {} of {} candidate(s) from the built-in search",
                     request.round, rest.count, request.count));
    for (Params& p : fallback_.propose(rest)) out.push_back(std::move(p));
  }
  return out;
}

std::optional<std::string> LlmProposer::conclusion_prose(const ConclusionFacts& facts) {
  std::string prompt = "The study is over. The controller's conclusion, with the numbers:\n\n" +
                       facts.summary +
                       "\n\nWrite one or two paragraphs of plain prose (no headings, no tables) "
                       "that explain what the "
                       "numbers show and what to try next. Do not state numbers that are not in "
                       "the conclusion above.";
  std::optional<std::string> text = ask_text("conclusion", prompt);
  if (!text) return std::nullopt;
  if (text->size() > kMaxProseBytes) {
    note(fmt::format("LLM researcher, conclusion: {} bytes cut to {}", text->size(),
                     kMaxProseBytes));
    text->resize(kMaxProseBytes);
    *text += " …";
  }
  return text;
}

}  // namespace ajet::research
