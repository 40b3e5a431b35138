#include "proxy/scores.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/json.h"

namespace ajet::proxy {

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

// A number at the start of `text` ("-3", "7.5", "1e-2"); nullopt when there is none. strtod on a
// bounded copy: `text` need not be NUL-terminated.
std::optional<double> leading_number(std::string_view text, size_t* used = nullptr) {
  std::string copy(text.substr(0, 64));
  if (copy.empty() || !(std::isdigit(static_cast<unsigned char>(copy[0])) || copy[0] == '-' ||
                        copy[0] == '+' || copy[0] == '.')) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (end == copy.c_str()) return std::nullopt;
  if (used != nullptr) *used = static_cast<size_t>(end - copy.c_str());
  return value;
}

std::string excerpt(std::string_view text) {
  std::string out(text.substr(0, 200));
  if (text.size() > 200) out += "…";
  return out;
}

}  // namespace

std::vector<double> listwise_rewards(const std::vector<int>& ranking, size_t n) {
  if (ranking.size() != n) {
    invalid_argument("ranking names " + std::to_string(ranking.size()) + " answers, expected " +
                     std::to_string(n));
  }
  std::vector<double> rewards(n, 0.0);
  std::vector<bool> seen(n, false);
  for (size_t rank = 0; rank < n; ++rank) {
    const int index = ranking[rank];
    if (index < 0 || static_cast<size_t>(index) >= n || seen[index]) {
      invalid_argument("ranking must name each answer 0.." + std::to_string(n - 1) +
                       " exactly once; entry " + std::to_string(rank) + " is " +
                       std::to_string(index));
    }
    seen[index] = true;
    rewards[index] = n == 1 ? 0.0 : 1.0 - 2.0 * static_cast<double>(rank) / double(n - 1);
  }
  return rewards;
}

std::vector<double> rank_normalised(const std::vector<double>& scores) {
  const size_t n = scores.size();
  std::vector<double> rewards(n, 0.0);
  if (n < 2) return rewards;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  // Ties share the mean of the ranks they occupy.
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && scores[order[j + 1]] == scores[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k <= j; ++k) rewards[order[k]] = 1.0 - 2.0 * mean_rank / double(n - 1);
    i = j + 1;
  }
  return rewards;
}

double parse_pointwise_score(std::string_view reply) {
  const std::string low = lower(reply);
  size_t at = low.rfind("score");
  while (at != std::string::npos) {
    size_t i = at + 5;
    while (i < low.size() && (low[i] == ':' || low[i] == '=' || low[i] == '>' || low[i] == '"' ||
                              low[i] == '*' || std::isspace(static_cast<unsigned char>(low[i])))) {
      ++i;
    }
    if (std::optional<double> value = leading_number(std::string_view(low).substr(i))) {
      if (!std::isfinite(*value)) break;
      return *value;
    }
    if (at == 0) break;
    at = low.rfind("score", at - 1);
  }
  std::string_view whole = trim(reply);
  size_t used = 0;
  if (std::optional<double> value = leading_number(whole, &used);
      value && used == whole.size() && std::isfinite(*value)) {
    return *value;
  }
  invalid_argument("the judge's reply holds no score (expected e.g. \"Score: 7\"): " +
                   excerpt(reply));
}

std::vector<int> parse_ranking(std::string_view reply, size_t n) {
  size_t close = reply.rfind(']');
  while (close != std::string_view::npos) {
    const size_t open = reply.rfind('[', close);
    if (open == std::string_view::npos) break;
    std::optional<Json> list = try_parse_json(reply.substr(open, close - open + 1));
    if (list && list->is_array() && !list->empty()) {
      std::vector<int> ranking;
      bool numbers = true;
      for (const Json& v : *list) {
        if (!v.is_number_integer()) {
          numbers = false;
          break;
        }
        ranking.push_back(static_cast<int>(v.get<int64_t>()) - 1);
      }
      if (numbers) {
        listwise_rewards(ranking, n);  // throws unless a permutation of the n answers
        return ranking;
      }
    }
    if (open == 0) break;
    close = reply.rfind(']', open - 1);
  }
  invalid_argument("the judge's reply holds no ranking of the " + std::to_string(n) +
                   " answers (expected e.g. [2, 1, 3]): " + excerpt(reply));
}

std::vector<double> parse_command_output(std::string_view output, size_t n, JudgeMode mode) {
  std::optional<Json> doc;
  size_t end = output.size();
  while (end > 0 && !doc) {
    size_t start = output.rfind('\n', end - 1);
    start = start == std::string_view::npos ? 0 : start + 1;
    std::string_view line = trim(output.substr(start, end - start));
    if (!line.empty() && line.front() == '{') {
      std::optional<Json> parsed = try_parse_json(line);
      if (parsed && parsed->is_object()) doc = std::move(parsed);
    }
    end = start == 0 ? 0 : start - 1;
  }
  if (!doc) {
    invalid_argument(
        "the judge command printed no JSON object line (expected {\"scores\": [...]})");
  }
  if (doc->contains("scores")) {
    const Json& scores = (*doc)["scores"];
    if (!scores.is_array() || scores.size() != n) {
      invalid_argument("the judge command's \"scores\" must be an array of " + std::to_string(n) +
                       " numbers");
    }
    std::vector<double> values;
    for (const Json& s : scores) {
      if (!s.is_number() || !std::isfinite(s.get<double>())) {
        invalid_argument("the judge command's \"scores\" must be finite numbers, got " + s.dump());
      }
      values.push_back(s.get<double>());
    }
    return mode == JudgeMode::kListwise ? rank_normalised(values) : values;
  }
  if (doc->contains("ranking")) {
    if (mode != JudgeMode::kListwise) {
      invalid_argument(
          "the judge command answered a \"ranking\"; pointwise judges answer \"scores\"");
    }
    const Json& list = (*doc)["ranking"];
    std::vector<int> ranking;
    if (list.is_array()) {
      for (const Json& v : list) {
        if (!v.is_number_integer()) {
          invalid_argument("the judge command's \"ranking\" must hold answer indices");
        }
        ranking.push_back(static_cast<int>(v.get<int64_t>()));
      }
    }
    return listwise_rewards(ranking, n);
  }
  invalid_argument("the judge command's JSON has neither \"scores\" nor \"ranking\"");
}

std::string fill_template(std::string_view tmpl, const std::map<std::string, std::string>& vars) {
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t open = tmpl.find("{{", i);
    if (open == std::string_view::npos) break;
    const size_t close = tmpl.find("}}", open + 2);
    if (close == std::string_view::npos) break;
    out.append(tmpl.substr(i, open - i));
    const std::string name(trim(tmpl.substr(open + 2, close - open - 2)));
    auto it = vars.find(name);
    if (it != vars.end()) {
      out += it->second;
    } else {
      out.append(tmpl.substr(open, close + 2 - open));  // not ours: kept as written
    }
    i = close + 2;
  }
  out.append(tmpl.substr(i));
  return out;
}

void check_template(std::string_view tmpl, JudgeMode mode) {
  const std::set<std::string> known = mode == JudgeMode::kPointwise
                                          ? std::set<std::string>{"question", "answer"}
                                          : std::set<std::string>{"question", "answers", "n"};
  std::set<std::string> used;
  size_t i = 0;
  while ((i = tmpl.find("{{", i)) != std::string_view::npos) {
    const size_t close = tmpl.find("}}", i + 2);
    if (close == std::string_view::npos) break;
    const std::string name(trim(tmpl.substr(i + 2, close - i - 2)));
    if (!known.count(name)) {
      invalid_argument(
          "judge template: unknown placeholder {{" + name + "}} for a " +
          (mode == JudgeMode::kPointwise ? "pointwise" : "listwise") + " judge (known: " +
          (mode == JudgeMode::kPointwise ? "question, answer" : "question, answers, n") + ")");
    }
    used.insert(name);
    i = close + 2;
  }
  const std::string needed = mode == JudgeMode::kPointwise ? "answer" : "answers";
  if (!used.count(needed)) {
    invalid_argument("judge template: a " +
                     std::string(mode == JudgeMode::kPointwise ? "pointwise" : "listwise") +
                     " template must contain {{" + needed + "}}");
  }
}

std::string default_template(JudgeMode mode) {
  if (mode == JudgeMode::kPointwise) {
    return "You grade an AI assistant's answer to a conversation.\n\n"
           "Conversation:\n{{question}}\n\n"
           "Assistant's answer:\n{{answer}}\n\n"
           "How correct and helpful is the answer? Reply with one line \"Score: N\", N from 0 "
           "(wrong or useless) to 10 (correct and helpful).";
  }
  return "You compare {{n}} answers of an AI assistant to the same conversation.\n\n"
         "Conversation:\n{{question}}\n\n"
         "{{answers}}\n\n"
         "Rank the answers from best to worst by correctness and helpfulness. Reply with a JSON "
         "list of the answer numbers, best first, e.g. [2, 1, 3].";
}

std::string numbered_answers(const std::vector<std::string>& answers) {
  std::string out;
  for (size_t i = 0; i < answers.size(); ++i) {
    if (i > 0) out += "\n\n";
    out += "Answer " + std::to_string(i + 1) + ":\n" + answers[i];
  }
  return out;
}

}  // namespace ajet::proxy
