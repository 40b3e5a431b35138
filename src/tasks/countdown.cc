#include "tasks/countdown.h"

#include <algorithm>

#include "common/error.h"
#include "tasks/expression.h"
#include "tasks/generator.h"

namespace ajet::tasks {

namespace {

struct CountdownParams {
  int64_t min_numbers = 3;
  int64_t max_numbers = 4;
  int64_t min_number = 1;
  int64_t max_number = 20;
  int64_t min_target = 10;
  int64_t max_target = 100;
  double holdout_fraction = kDefaultHoldoutFraction;
};

CountdownParams read_countdown_params(const OrderedJson& json) {
  Params p(json, "countdown",
           {"min_numbers", "max_numbers", "min_number", "max_number", "min_target", "max_target",
            "holdout_fraction"});
  CountdownParams c;
  c.min_numbers = p.get_int("min_numbers", c.min_numbers, 2, 6);
  c.max_numbers = p.get_int("max_numbers", c.max_numbers, c.min_numbers, 6);
  c.min_number = p.get_int("min_number", c.min_number, 1, 10000);
  c.max_number = p.get_int("max_number", c.max_number, c.min_number, 10000);
  c.min_target = p.get_int("min_target", c.min_target, -1000000, 1000000);
  c.max_target = p.get_int("max_target", c.max_target, c.min_target, 1000000);
  c.holdout_fraction = p.get_number("holdout_fraction", c.holdout_fraction, 0, 1);
  return c;
}

// An expression tree node flattened to what rendering needs: its text, value and precedence.
struct Node {
  std::string text;
  Rational value;
  int prec = 3;  // 3 leaf / bracketed, 2 for * /, 1 for + -
};

int precedence(char op) { return op == '+' || op == '-' ? 1 : 2; }

std::optional<Node> combine(const Node& l, char op, const Node& r) {
  const int p = precedence(op);
  // Brackets only where precedence or a non-associative operator on the right needs them.
  const std::string lt = l.prec < p ? "(" + l.text + ")" : l.text;
  const bool right_brackets = r.prec < p || (r.prec == p && (op == '-' || op == '/'));
  const std::string rt = right_brackets ? "(" + r.text + ")" : r.text;
  Evaluation e = evaluate_expression(lt + op + rt);
  if (!e.ok) return std::nullopt;
  return Node{lt + op + rt, e.value, p};
}

// A random expression using every number once (random order, random tree, random operators).
std::optional<Node> random_expression(const std::vector<int64_t>& numbers, Rng& rng) {
  std::vector<Node> items;
  for (int64_t n : numbers) items.push_back(Node{std::to_string(n), Rational{n, 1}, 3});
  rng.shuffle(items);
  while (items.size() > 1) {
    size_t i = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(items.size()) - 2));
    const char op = std::string("+-*/")[static_cast<size_t>(rng.uniform_int(0, 3))];
    std::optional<Node> c = combine(items[i], op, items[i + 1]);
    if (!c) return std::nullopt;
    items[i] = std::move(*c);
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
  return items[0];
}

std::vector<int64_t> task_numbers(const Task& task) {
  auto it = task.metadata.find("numbers");
  if (it == task.metadata.end() || !it->is_array() || it->empty()) {
    invalid_argument("countdown task " + task.task_id +
                     ": metadata needs 'numbers' (an array of integers)");
  }
  std::vector<int64_t> out;
  for (const OrderedJson& v : *it) {
    if (!v.is_number_integer())
      invalid_argument("countdown task " + task.task_id + ": metadata.numbers must hold integers");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

int64_t task_target(const Task& task) {
  auto it = task.metadata.find("target");
  if (it == task.metadata.end() || !it->is_number_integer()) {
    invalid_argument("countdown task " + task.task_id + ": metadata needs an integer 'target'");
  }
  return it->get<int64_t>();
}

class CountdownTask final : public BuiltinTask {
 public:
  std::string_view name() const override { return "countdown"; }
  std::vector<std::string> error_kinds() const override { return {"invalid", "incorrect"}; }

  std::vector<Task> generate(const GenerateOptions& options) const override {
    const CountdownParams p = read_countdown_params(options.params);
    return generate_split("countdown", options, p.holdout_fraction,
                          [&p](Rng& rng) { return sample(p, rng); });
  }

  Judgement judge_answer(const Task& task, std::string_view answer,
                         const AgentOptions&) const override {
    std::vector<int64_t> numbers = task_numbers(task);
    const int64_t target = task_target(task);
    Judgement j;
    j.details["target"] = target;
    size_t count = 0;
    std::optional<std::string> inner = extract_tagged(answer, "<answer>", "</answer>", count);
    if (!inner) {
      j.reason = "no_answer";
      return j;
    }
    std::string expr = trim(*inner);
    j.details["answer"] = expr;
    if (count > 1) {
      j.reason = "multiple_answers";
      return j;
    }
    const size_t eq = expr.find('=');
    if (eq != std::string::npos) {
      // "EXPR = N": the claimed N must be a plain integer; the value that counts is EXPR's.
      if (!parse_integer_literal(trim(std::string_view(expr).substr(eq + 1)))) {
        j.reason = "invalid_equation";
        return j;
      }
      expr = trim(std::string_view(expr).substr(0, eq));
    }
    const Evaluation e = evaluate_expression(expr);
    if (!e.parsed) {
      j.reason = "invalid_equation";
      j.details["error"] = e.error;
      return j;
    }
    j.reward = 0.1;  // well-formed from here on
    std::vector<int64_t> used = e.numbers;
    std::sort(used.begin(), used.end());
    std::sort(numbers.begin(), numbers.end());
    if (used != numbers) {
      j.reason = "wrong_numbers";
      return j;
    }
    if (!e.ok) {
      j.reason = e.error == "division by zero" ? "division_by_zero" : "arithmetic_error";
      j.details["error"] = e.error;
      return j;
    }
    j.details["value"] = e.value.to_string();
    if (!(e.value == Rational{target, 1})) {
      j.reason = "wrong_value";
      return j;
    }
    j.reward = 1.0;
    j.is_success = true;
    j.reason = "correct";
    return j;
  }

  Judgement judge_episode(const Task& task, const std::vector<text::ChatMessage>& messages,
                          const AgentOptions& options) const override {
    for (size_t i = messages.size(); i > 0; --i) {
      if (messages[i - 1].role == text::Role::kAssistant)
        return judge_answer(task, messages[i - 1].content, options);
    }
    Judgement j;
    j.reason = "no_answer";
    return j;
  }

  Demo make_demo(const Task& task, std::string_view kind, Rng& rng) const override {
    auto sol = task.metadata.find("solution");
    if (sol == task.metadata.end() || !sol->is_string()) {
      invalid_argument("countdown task " + task.task_id + ": demos need metadata.solution");
    }
    const std::string solution = sol->get<std::string>();
    Demo d;
    d.task_id = task.task_id;
    d.env_type = "countdown";
    d.kind = std::string(kind);
    d.messages = initial_messages(task, kCountdownSystemPrompt);
    std::string reply;
    if (kind == "correct") {
      reply = solution;
    } else if (kind == "invalid") {
      reply = find_variant(task, rng, 0.0, [&](Rng& r) { return malformed(solution, r); });
    } else if (kind == "incorrect") {
      reply = find_variant(task, rng, 0.1, [&](Rng& r) { return incorrect(task, solution, r); });
    } else {
      invalid_argument("countdown demo kind must be correct, invalid or incorrect, got '" +
                       std::string(kind) + "'");
    }
    d.messages.push_back(text::ChatMessage{.role = text::Role::kAssistant,
                                           .content = "<answer>" + reply + "</answer>"});
    d.judgement = judge_episode(task, d.messages, {});
    return d;
  }

 protected:
  EpisodeResult run_episode_unchecked(const Task& task, ChatModel& model,
                                      const AgentOptions& options) const override {
    EpisodeResult r;
    r.messages = initial_messages(task, kCountdownSystemPrompt);
    r.tools = task_tools(task);
    std::string termination;
    std::string error;
    Judgement judgement;
    std::optional<ModelReply> reply = call_model(model, r.messages, r.tools, termination, error);
    if (reply) {
      r.messages.push_back(reply->message);
      judgement = judge_answer(task, reply->message.content, options);
      if (judgement.reason != "no_answer") {
        termination = "answered";
      } else {
        termination = reply->finish_reason == "length" ? "truncated" : "no_answer";
      }
    }
    const bool answered = termination == "answered";
    r.output.reward = answered ? judgement.reward : 0.0;
    r.output.is_success = answered && judgement.is_success;
    OrderedJson& md = r.output.metadata;
    md["task_id"] = task.task_id;
    md["env_type"] = "countdown";
    md["termination"] = termination;
    md["turns"] = reply ? 1 : 0;
    if (answered) md["judge_reason"] = judgement.reason;
    if (judgement.details.contains("answer")) md["answer"] = judgement.details["answer"];
    if (!error.empty()) md["error"] = error;
    OrderedJson& lm = r.output.log_metrics;
    lm["success"] = r.output.is_success ? 1.0 : 0.0;
    lm["well_formed"] = r.output.reward > 0 ? 1.0 : 0.0;
    lm["answered"] = answered ? 1.0 : 0.0;
    return r;
  }

 private:
  static SampledProblem sample(const CountdownParams& p, Rng& rng) {
    for (int redraw = 0; redraw < 1000; ++redraw) {
      const int64_t k = rng.uniform_int(p.min_numbers, p.max_numbers);
      std::vector<int64_t> numbers;
      for (int64_t i = 0; i < k; ++i)
        numbers.push_back(rng.uniform_int(p.min_number, p.max_number));
      for (int attempt = 0; attempt < 50; ++attempt) {
        std::optional<Node> n = random_expression(numbers, rng);
        if (!n || !n->value.is_integer() || n->value.num < p.min_target ||
            n->value.num > p.max_target)
          continue;
        return make_problem(numbers, n->value.num, n->text);
      }
    }
    invalid_argument("countdown: no reachable target in [" + std::to_string(p.min_target) + ", " +
                     std::to_string(p.max_target) +
                     "] for these number ranges; widen min_target/max_target");
  }

  static SampledProblem make_problem(const std::vector<int64_t>& numbers, int64_t target,
                                     const std::string& solution) {
    std::vector<int64_t> sorted = numbers;
    std::sort(sorted.begin(), sorted.end());
    SampledProblem out;
    out.key = "countdown:";
    for (size_t i = 0; i < sorted.size(); ++i)
      out.key += (i ? "," : "") + std::to_string(sorted[i]);
    out.key += "=" + std::to_string(target);
    std::string shown;
    for (int64_t n : numbers) shown += (shown.empty() ? "" : " ") + std::to_string(n);
    const std::string query = "Numbers: " + shown + ". Target: " + std::to_string(target) + ".";
    Task& t = out.task;
    t.main_query = query;
    t.init_messages = OrderedJson::array();
    t.init_messages.push_back(
        OrderedJson{{"role", "system"}, {"content", std::string(kCountdownSystemPrompt)}});
    t.init_messages.push_back(OrderedJson{{"role", "user"}, {"content", query}});
    t.metadata["numbers"] = numbers;
    t.metadata["target"] = target;
    t.metadata["solution"] = solution;
    t.metadata["num_numbers"] = numbers.size();
    t.metadata["difficulty"] = static_cast<int64_t>(numbers.size()) - 2;
    return out;
  }

  // Draws variants until the judge gives exactly `want` (so a demo's kind never lies).
  template <class F>
  std::string find_variant(const Task& task, Rng& rng, double want, F&& make) const {
    for (int attempt = 0; attempt < 500; ++attempt) {
      std::string v = make(rng);
      Judgement j = judge_answer(task, "<answer>" + v + "</answer>", {});
      if (j.reward == want) return v;
    }
    return want == 0.0 ? "(" : "0";  // unreachable in practice; both are judged as their kind
  }

  static std::string malformed(const std::string& s, Rng& rng) {
    std::string out = s;
    switch (rng.uniform_int(0, 3)) {
      case 0: {  // a bracket or a digit lost
        const size_t at =
            static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(out.size()) - 1));
        out.erase(at, 1);
        return out;
      }
      case 1: return out + std::string(1, "+-*/"[rng.uniform_int(0, 3)]);  // dangling operator
      case 2: {                                                            // an operator doubled
        for (size_t i = 0; i < out.size(); ++i) {
          if (std::string_view("+*/").find(out[i]) != std::string_view::npos &&
              rng.bernoulli(0.5)) {
            return out.insert(i, 1, out[i]);
          }
        }
        return out + "*";
      }
      default: {  // a word instead of an operator
        for (size_t i = 0; i < out.size(); ++i) {
          if (std::string_view("+-*/").find(out[i]) != std::string_view::npos)
            return out.replace(i, 1, " x ");
        }
        return out + " x";
      }
    }
  }

  static std::string incorrect(const Task& task, const std::string& solution, Rng& rng) {
    if (rng.bernoulli(0.5)) {  // the right numbers, the wrong value
      std::optional<Node> n = random_expression(task_numbers(task), rng);
      if (n) return n->text;
    }
    // One number replaced by another value (or the expression using a number twice).
    std::vector<std::pair<size_t, size_t>> literals;  // [begin, end) of each integer literal
    for (size_t i = 0; i < solution.size();) {
      if (solution[i] >= '0' && solution[i] <= '9') {
        size_t b = i;
        while (i < solution.size() && solution[i] >= '0' && solution[i] <= '9') ++i;
        literals.emplace_back(b, i);
      } else {
        ++i;
      }
    }
    if (literals.empty()) return solution + "+1";
    const auto [b, en] = literals[static_cast<size_t>(
        rng.uniform_int(0, static_cast<int64_t>(literals.size()) - 1))];
    std::string out = solution;
    out.replace(b, en - b, std::to_string(rng.uniform_int(1, 20)));
    return out;
  }
};

}  // namespace

const BuiltinTask& countdown_task() {
  static const CountdownTask task;
  return task;
}

}  // namespace ajet::tasks
