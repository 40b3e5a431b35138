#include "tasks/calc.h"

#include "common/error.h"
#include "common/json.h"
#include "tasks/expression.h"
#include "tasks/generator.h"

namespace ajet::tasks {

namespace {

constexpr std::string_view kAnswerOpen = "<answer>";
constexpr std::string_view kAnswerClose = "</answer>";

struct CalcParams {
  int64_t min_operand = 1;
  int64_t max_operand = 99;
  int64_t min_operands = 2;
  int64_t max_operands = 3;
  std::string operators = "+-*";
  double word_problem_ratio = 0.3;
  int64_t max_tool_calls = kCalcDefaultMaxToolCalls;
  double holdout_fraction = kDefaultHoldoutFraction;
};

CalcParams read_calc_params(const OrderedJson& json) {
  Params p(json, "calc",
           {"min_operand", "max_operand", "min_operands", "max_operands", "operators",
            "word_problem_ratio", "max_tool_calls", "holdout_fraction"});
  CalcParams c;
  c.min_operand = p.get_int("min_operand", c.min_operand, 0, 999999);
  c.max_operand = p.get_int("max_operand", c.max_operand, c.min_operand, 999999);
  c.min_operands = p.get_int("min_operands", c.min_operands, 2, 6);
  c.max_operands = p.get_int("max_operands", c.max_operands, c.min_operands, 6);
  c.operators = p.get_string("operators", c.operators);
  if (c.operators.empty()) invalid_argument("calc param 'operators' must not be empty");
  for (char op : c.operators) {
    if (op != '+' && op != '-' && op != '*') {
      invalid_argument("calc param 'operators' may only hold + - *, got '" + c.operators + "'");
    }
  }
  c.word_problem_ratio = p.get_number("word_problem_ratio", c.word_problem_ratio, 0, 1);
  c.max_tool_calls = p.get_int("max_tool_calls", c.max_tool_calls, 1, 20);
  c.holdout_fraction = p.get_number("holdout_fraction", c.holdout_fraction, 0, 1);
  return c;
}

std::string op_word(char op) {
  switch (op) {
    case '+': return "plus";
    case '-': return "minus";
    default: return "times";
  }
}

const std::vector<std::string> kNames = {"Ann", "Bob", "Eva", "Tom", "Lia", "Max", "Sam", "Zoe"};
const std::vector<std::string> kItems = {"apples", "pens", "cards", "books", "coins", "shells"};

// A short word problem for `a op b`, or "" when the story would not fit (a - b < 0).
std::string story(int64_t a, char op, int64_t b, Rng& rng) {
  const std::string& who = rng.pick(kNames);
  const std::string& what = rng.pick(kItems);
  const std::string sa = std::to_string(a);
  const std::string sb = std::to_string(b);
  switch (op) {
    case '+':
      return who + " has " + sa + " " + what + " and gets " + sb + " more. How many " + what +
             " now?";
    case '-':
      if (a < b) return "";
      return who + " has " + sa + " " + what + " and gives away " + sb + ". How many " + what +
             " are left?";
    default:
      return who + " buys " + sa + " bags of " + sb + " " + what + ". How many " + what +
             " in total?";
  }
}

int64_t expected_answer(const Task& task) {
  auto it = task.metadata.find("answer");
  if (it != task.metadata.end() && it->is_number_integer()) return it->get<int64_t>();
  auto ex = task.metadata.find("expression");
  if (ex != task.metadata.end() && ex->is_string()) {
    Evaluation e = evaluate_expression(ex->get<std::string>());
    if (e.ok && e.value.is_integer()) return e.value.num;
    invalid_argument("calc task " + task.task_id + ": metadata.expression '" +
                     ex->get<std::string>() + "' has no integer value (" +
                     (e.ok ? e.value.to_string() : e.error) + ")");
  }
  invalid_argument("calc task " + task.task_id +
                   ": metadata needs an integer 'answer' or an 'expression'");
}

int64_t max_tool_calls_of(const Task& task, const AgentOptions& options) {
  if (options.max_tool_calls) return *options.max_tool_calls;
  auto it = task.metadata.find("max_tool_calls");
  if (it != task.metadata.end() && it->is_number_integer() && it->get<int64_t>() > 0)
    return it->get<int64_t>();
  return kCalcDefaultMaxToolCalls;
}

// Splits a generated expression ("37*4+15") into operand texts and operators.
void split_expression(const std::string& expr, std::vector<std::string>& operands,
                      std::vector<char>& ops) {
  operands.assign(1, "");
  ops.clear();
  for (char c : expr) {
    if (c >= '0' && c <= '9') {
      operands.back() += c;
    } else {
      ops.push_back(c);
      operands.emplace_back();
    }
  }
}

std::string join_expression(const std::vector<std::string>& operands,
                            const std::vector<char>& ops) {
  std::string out = operands[0];
  for (size_t i = 0; i < ops.size(); ++i) out += ops[i] + operands[i + 1];
  return out;
}

// One digit changed, dropped or inserted; nullopt when the result is not a canonical integer.
std::optional<std::string> perturb_digits(const std::string& digits_text, Rng& rng) {
  std::string s = digits_text;
  const bool negative = !s.empty() && s[0] == '-';
  std::string d = negative ? s.substr(1) : s;
  const int mode = static_cast<int>(rng.uniform_int(0, 2));
  const size_t at = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(d.size()) - 1));
  const char digit = static_cast<char>('0' + rng.uniform_int(0, 9));
  if (mode == 0) {
    if (d[at] == digit) return std::nullopt;
    d[at] = digit;
  } else if (mode == 1) {
    if (d.size() < 2) return std::nullopt;
    d.erase(at, 1);
  } else {
    d.insert(
        d.begin() + static_cast<std::ptrdiff_t>(rng.uniform_int(0, static_cast<int64_t>(d.size()))),
        digit);
  }
  std::string out = (negative ? "-" : "") + d;
  if (!parse_integer_literal(out)) return std::nullopt;
  return out;
}

std::string wrong_value_text(int64_t truth, Rng& rng) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto p = perturb_digits(std::to_string(truth), rng);
    if (p && *p != std::to_string(truth)) return *p;
  }
  return std::to_string(truth + 1);
}

text::ChatMessage tool_call_message(const std::string& expression) {
  text::ChatMessage m{.role = text::Role::kAssistant, .content = "", .content_was_null = true};
  OrderedJson args = OrderedJson::object();
  args["expression"] = expression;
  m.tool_calls.push_back(
      text::ToolCall{.id = "call_0", .name = "calculator", .arguments = text::template_json(args)});
  return m;
}

text::ChatMessage assistant(std::string content) {
  return text::ChatMessage{.role = text::Role::kAssistant, .content = std::move(content)};
}

class CalcTask final : public BuiltinTask {
 public:
  std::string_view name() const override { return "calc"; }
  std::vector<std::string> error_kinds() const override {
    return {"bad_expr", "bad_copy", "no_tool"};
  }

  std::vector<Task> generate(const GenerateOptions& options) const override {
    const CalcParams p = read_calc_params(options.params);
    return generate_split("calc", options, p.holdout_fraction,
                          [&p](Rng& rng) { return sample(p, rng); });
  }

  Judgement judge_answer(const Task& task, std::string_view answer,
                         const AgentOptions&) const override {
    const int64_t expected = expected_answer(task);
    Judgement j;
    j.details["expected"] = expected;
    size_t count = 0;
    std::optional<std::string> inner = extract_tagged(answer, kAnswerOpen, kAnswerClose, count);
    if (!inner) {
      j.reason = "no_answer";
      return j;
    }
    const std::string given = trim(*inner);
    j.details["answer"] = given;
    if (count > 1) {
      j.reason = "multiple_answers";
      return j;
    }
    std::optional<int64_t> value = parse_integer_literal(given);
    if (!value) {
      j.reason = "bad_answer_format";
      return j;
    }
    if (*value != expected) {
      j.reason = "wrong_answer";
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
      const text::ChatMessage& m = messages[i - 1];
      if (m.role != text::Role::kAssistant) continue;
      if (!m.tool_calls.empty()) break;  // ended on a tool call: no final answer
      return judge_answer(task, m.content, options);
    }
    Judgement j;
    j.details["expected"] = expected_answer(task);
    j.reason = "no_answer";
    return j;
  }

  Demo make_demo(const Task& task, std::string_view kind, Rng& rng) const override {
    const int64_t truth = expected_answer(task);
    auto ex = task.metadata.find("expression");
    if (ex == task.metadata.end() || !ex->is_string()) {
      invalid_argument("calc task " + task.task_id + ": demos need metadata.expression");
    }
    const std::string expression = ex->get<std::string>();
    Demo d;
    d.task_id = task.task_id;
    d.env_type = "calc";
    d.kind = std::string(kind);
    d.messages = initial_messages(task, kCalcSystemPrompt);
    d.tools = task_tools(task);
    if (d.tools.empty()) d.tools.push_back(calculator_tool());
    auto with_tool = [&](const std::string& expr, const std::string& answer) {
      d.messages.push_back(tool_call_message(expr));
      d.messages.push_back(text::ChatMessage{
          .role = text::Role::kTool, .content = calculator(expr), .tool_call_id = "call_0"});
      d.messages.push_back(assistant("<answer>" + answer + "</answer>"));
    };
    if (kind == "correct") {
      with_tool(expression, std::to_string(truth));
    } else if (kind == "bad_expr") {
      const std::string wrong = bad_expression(expression, truth, rng);
      with_tool(wrong, calculator(wrong));
    } else if (kind == "bad_copy") {
      with_tool(expression, wrong_value_text(truth, rng));
    } else if (kind == "no_tool") {
      std::string guess;
      do {
        guess = rng.bernoulli(0.5) ? wrong_value_text(truth, rng)
                                   : std::to_string(rng.uniform_int(-999, 9999));
      } while (guess == std::to_string(truth));
      d.messages.push_back(assistant("<answer>" + guess + "</answer>"));
    } else {
      invalid_argument("calc demo kind must be correct, bad_expr, bad_copy or no_tool, got '" +
                       std::string(kind) + "'");
    }
    d.judgement = judge_episode(task, d.messages, {});
    return d;
  }

 protected:
  EpisodeResult run_episode_unchecked(const Task& task, ChatModel& model,
                                      const AgentOptions& options) const override {
    EpisodeResult r;
    r.messages = initial_messages(task, kCalcSystemPrompt);
    r.tools = task_tools(task);
    if (r.tools.empty()) r.tools.push_back(calculator_tool());
    const int64_t max_calls = max_tool_calls_of(task, options);
    int64_t calls = 0;
    int64_t turns = 0;
    int64_t tool_errors = 0;
    std::string termination;
    std::string error;
    Judgement judgement;
    // Bounded: every turn either ends the episode or makes at least one tool call.
    while (termination.empty()) {
      std::optional<ModelReply> reply = call_model(model, r.messages, r.tools, termination, error);
      if (!reply) break;
      ++turns;
      r.messages.push_back(reply->message);
      const text::ChatMessage& m = r.messages.back();
      if (m.tool_calls.empty()) {
        judgement = judge_answer(task, m.content, options);
        if (judgement.reason != "no_answer") {
          termination = "answered";
        } else if (m.content.find("<tool_call>") != std::string::npos) {
          termination = "malformed_tool_call";
        } else {
          termination = reply->finish_reason == "length" ? "truncated" : "no_answer";
        }
        break;
      }
      for (const text::ToolCall& call : m.tool_calls) {
        ++calls;
        std::string result =
            calls > max_calls ? "error: tool call limit reached (" + std::to_string(max_calls) + ")"
                              : execute_calculator_call(call);
        if (result.rfind("error:", 0) == 0) ++tool_errors;
        r.messages.push_back(text::ChatMessage{
            .role = text::Role::kTool, .content = std::move(result), .tool_call_id = call.id});
      }
      if (calls > max_calls) termination = "tool_call_limit";
    }
    const bool answered = termination == "answered";
    r.output.reward = answered ? judgement.reward : 0.0;
    r.output.is_success = answered && judgement.is_success;
    OrderedJson& md = r.output.metadata;
    md["task_id"] = task.task_id;
    md["env_type"] = "calc";
    md["termination"] = termination;
    md["turns"] = turns;
    md["tool_calls"] = calls;
    if (answered) md["judge_reason"] = judgement.reason;
    if (judgement.details.contains("answer")) md["answer"] = judgement.details["answer"];
    if (!error.empty()) md["error"] = error;
    OrderedJson& lm = r.output.log_metrics;
    lm["success"] = r.output.is_success ? 1.0 : 0.0;
    lm["turns"] = static_cast<double>(turns);
    lm["tool_calls"] = static_cast<double>(calls);
    lm["used_tool"] = calls > 0 ? 1.0 : 0.0;
    lm["tool_errors"] = static_cast<double>(tool_errors);
    lm["answered"] = answered ? 1.0 : 0.0;
    return r;
  }

 private:
  static SampledProblem sample(const CalcParams& p, Rng& rng) {
    const int64_t n = rng.uniform_int(p.min_operands, p.max_operands);
    std::vector<int64_t> operands;
    std::vector<char> ops;
    for (int64_t i = 0; i < n; ++i)
      operands.push_back(rng.uniform_int(p.min_operand, p.max_operand));
    for (int64_t i = 0; i + 1 < n; ++i)
      ops.push_back(p.operators[static_cast<size_t>(
          rng.uniform_int(0, static_cast<int64_t>(p.operators.size()) - 1))]);
    std::string expr = std::to_string(operands[0]);
    for (size_t i = 0; i < ops.size(); ++i) expr += ops[i] + std::to_string(operands[i + 1]);
    const Evaluation e = evaluate_expression(expr);
    if (!e.ok || !e.value.is_integer())
      invalid_argument("calc: generated expression '" + expr + "' failed: " + e.error);
    const int64_t answer = e.value.num;

    std::string style = "symbolic";
    std::string query = expr + "=?";
    if (rng.bernoulli(p.word_problem_ratio)) {
      std::string s =
          (n == 2 && rng.bernoulli(0.5)) ? story(operands[0], ops[0], operands[1], rng) : "";
      if (!s.empty()) {
        style = "story";
        query = s;
      } else {
        style = "verbal";
        query = "What is " + std::to_string(operands[0]);
        for (size_t i = 0; i < ops.size(); ++i)
          query += " " + op_word(ops[i]) + " " + std::to_string(operands[i + 1]);
        query += "?";
      }
    }
    bool has_mul = false;
    for (char op : ops) has_mul = has_mul || op == '*';
    const int64_t difficulty = std::min<int64_t>(3, (n - 1) + (has_mul ? 1 : 0));

    SampledProblem out;
    out.key = "calc:" + expr;
    Task& t = out.task;
    t.main_query = query;
    t.init_messages = OrderedJson::array();
    t.init_messages.push_back(
        OrderedJson{{"role", "system"}, {"content", std::string(kCalcSystemPrompt)}});
    t.init_messages.push_back(OrderedJson{{"role", "user"}, {"content", query}});
    t.metadata["expression"] = expr;
    t.metadata["answer"] = answer;
    t.metadata["num_operands"] = n;
    t.metadata["difficulty"] = difficulty;
    t.metadata["style"] = style;
    t.metadata["max_tool_calls"] = p.max_tool_calls;
    t.metadata["tools"] = OrderedJson::array({calculator_tool()});
    return out;
  }

  // A wrong but valid expression close to the right one (the reference's bad_expr errors).
  static std::string bad_expression(const std::string& expression, int64_t truth, Rng& rng) {
    std::vector<std::string> operands;
    std::vector<char> ops;
    split_expression(expression, operands, ops);
    for (int attempt = 0; attempt < 200; ++attempt) {
      std::vector<std::string> o = operands;
      std::vector<char> p = ops;
      const int mode = static_cast<int>(rng.uniform_int(0, 2));
      if (mode == 0) {  // a digit of one operand changed, dropped or inserted
        size_t i = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(o.size()) - 1));
        auto changed = perturb_digits(o[i], rng);
        if (!changed) continue;
        o[i] = *changed;
      } else if (mode == 1) {  // an operator swapped
        size_t i = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(p.size()) - 1));
        const char repl = std::string("+-*")[static_cast<size_t>(rng.uniform_int(0, 2))];
        if (repl == p[i]) continue;
        p[i] = repl;
      } else {  // the last operand dropped
        o.pop_back();
        p.pop_back();
      }
      const std::string wrong = join_expression(o, p);
      const Evaluation e = evaluate_expression(wrong);
      if (e.ok && e.value.is_integer() && e.value.num != truth) return wrong;
    }
    return expression + "+1";
  }
};

}  // namespace

OrderedJson calculator_tool() {
  // Keys in sorted order on purpose: a client whose JSON library sorts keys (nlohmann::json,
  // ajet::Json) and one that keeps insertion order (Python, JS, OrderedJson) then send
  // byte-identical tool definitions, so the rendered prompt is the one the model was trained on.
  OrderedJson parameters = OrderedJson::object();
  parameters["properties"] = OrderedJson{{"expression", OrderedJson{{"type", "string"}}}};
  parameters["required"] = OrderedJson::array({"expression"});
  parameters["type"] = "object";
  OrderedJson function = OrderedJson::object();
  function["description"] = "Evaluate an integer expression.";
  function["name"] = "calculator";
  function["parameters"] = std::move(parameters);
  OrderedJson tool = OrderedJson::object();
  tool["function"] = std::move(function);
  tool["type"] = "function";
  return tool;
}

std::string execute_calculator_call(const text::ToolCall& call) {
  if (call.name != "calculator") return "error: unknown tool '" + call.name + "'";
  std::optional<OrderedJson> parsed = try_parse_ordered_json(call.arguments);
  if (!parsed) return "error: arguments are not JSON";
  const OrderedJson& args = *parsed;
  if (!args.is_object() || !args.contains("expression"))
    return "error: arguments need \"expression\"";
  const OrderedJson& e = args["expression"];
  if (e.is_string()) return calculator(e.get<std::string>());
  if (e.is_number_integer()) return calculator(e.dump());
  return "error: \"expression\" must be a string";
}

const BuiltinTask& calc_task() {
  static const CalcTask task;
  return task;
}

}  // namespace ajet::tasks
