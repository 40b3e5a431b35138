// Turning a judge's words into rewards: pointwise scores parsed from a judge model's reply,
// listwise rankings parsed and normalised to [-1, 1], a command judge's JSON output, and the
// judge prompt templates. Pure functions; every malformed input throws Error(kInvalidArgument)
// saying what was expected, which the proxy counts as a judge failure.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ajet::proxy {

enum class JudgeMode { kPointwise, kListwise };

// Listwise rewards from a ranking of n answers, best first (0-based answer indices, each exactly
// once): rank r gets 1 - 2r/(n-1), so the best is 1, the worst -1 and the ranks are evenly spaced
// (n = 1: 0). Throws unless `ranking` is a permutation of 0..n-1.
std::vector<double> listwise_rewards(const std::vector<int>& ranking, size_t n);

// Listwise rewards from scores (higher is better): each answer's rank, ties sharing their average
// rank, normalised as above. Equal scores all get 0.
std::vector<double> rank_normalised(const std::vector<double>& scores);

// The score in a pointwise judge model's reply: the number after the last "score" (any case,
// followed by any of `:`, `=`, `>`, `"`, `*` and spaces: `Score: 7`, `{"score": 0.5}`,
// `<score>3</score>`), else the whole reply when it is one number. Must be finite.
double parse_pointwise_score(std::string_view reply);

// The ranking in a listwise judge model's reply: the last `[...]` holding the answer numbers as
// presented (1-based), best first, each of 1..n exactly once. Returns 0-based indices.
std::vector<int> parse_ranking(std::string_view reply, size_t n);

// A judge command's output: the last line that is a JSON object, with either "scores" (n finite
// numbers; pointwise: the rewards; listwise: ranked and normalised) or "ranking" (0-based answer
// indices best first; listwise only). Returns the n rewards.
std::vector<double> parse_command_output(std::string_view output, size_t n, JudgeMode mode);

// Prompt templates: `{{name}}` is replaced by vars[name]. Placeholders: question (the request's
// conversation), answer (pointwise: one answer), answers (listwise: "Answer 1:\n...\n\nAnswer
// 2:..."), n (listwise: the number of answers).
std::string fill_template(std::string_view tmpl, const std::map<std::string, std::string>& vars);
// Throws naming the first placeholder the mode does not know, or when the template names neither
// answer nor answers as its mode needs.
void check_template(std::string_view tmpl, JudgeMode mode);
std::string default_template(JudgeMode mode);
// "Answer 1:\n<a>\n\nAnswer 2:\n<b>" for the listwise template.
std::string numbered_answers(const std::vector<std::string>& answers);

}  // namespace ajet::proxy
