// `ajet tasks ...`: the built-in tasks from the command line, for debugging and for agents written
// in other languages (docs/tasks.md):
//   generate  tasks of a split as JSONL (the task-file format the launcher reads)
//   demos     SFT demonstrations (OpenAI message lists, correct and deliberately imperfect) as
//   JSONL drills    copy drills (the reply repeats the user's text): the first stage of a tiny
//   model's warm-up judge     the reward of a task plus an answer / a conversation / a list of
//   moves corpus    text to train the tiny tokenizer on (`ajet tokenizer train --corpus`) measure
//   tokens per rendered episode with a given tokenizer
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "tasks/builtin.h"
#include "tasks/corpus.h"
#include "tasks/drills.h"
#include "tasks/frozenlake.h"
#include "tasks/reader.h"

namespace ajet::cli {
namespace {

using tasks::OrderedJson;

std::string dump(const OrderedJson& j) {
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

// Writes to --out atomically, or to stdout.
void emit(const std::string& out_path, const std::string& text) {
  if (out_path.empty() || out_path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  } else {
    write_file_atomic(out_path, text);
  }
}

OrderedJson parse_params(const std::string& text) {
  if (text.empty()) return OrderedJson::object();
  return parse_ordered_json(text, "--params");
}

std::vector<double> parse_mix(const std::string& text) {
  std::vector<double> out;
  if (text.empty()) return out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    try {
      size_t used = 0;
      out.push_back(std::stod(part, &used));
      if (used != part.size()) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      invalid_argument("--error-mix must be comma-separated numbers, got '" + text + "'");
    }
  }
  return out;
}

struct GenerateArgs {
  std::string task = "calc";
  int64_t n = 100;
  uint64_t seed = 1;
  std::string split = "train";
  std::string params;
  std::string out;
};

std::vector<tasks::Task> generate(const std::string& task, int64_t n, uint64_t seed,
                                  const std::string& split, const std::string& params) {
  tasks::GenerateOptions g;
  g.split = tasks::split_from_name(split);
  g.count = n;
  g.seed = seed;
  g.params = parse_params(params);
  return tasks::builtin_task(task).generate(g);
}

struct DemoArgs {
  std::string task = "calc";
  int64_t n = 100;
  uint64_t seed = 1;
  double correct_ratio = 0.7;
  std::string error_mix;
  std::string params;
  std::string out;
};

void run_demos(const DemoArgs& a) {
  const tasks::BuiltinTask& kind = tasks::builtin_task(a.task);
  const std::vector<tasks::Task> train = generate(a.task, a.n, a.seed, "train", a.params);
  const std::vector<tasks::Demo> demos = tasks::generate_demos(
      kind, train,
      tasks::DemoOptions{
          .correct_ratio = a.correct_ratio, .error_mix = parse_mix(a.error_mix), .seed = a.seed});
  std::string text;
  for (const tasks::Demo& d : demos) text += dump(tasks::demo_to_json(d)) + "\n";
  emit(a.out, text);
}

struct JudgeArgs {
  std::string task;
  std::string task_json;
  std::string answer;
  bool has_answer = false;
};

// One judge request: {"task": {...}, "answer": "..."} | {"task", "messages": [...]} | {"task",
// "actions": [...]}, optionally "env_seed".
OrderedJson judge_one(const OrderedJson& request, const std::string& fallback_task,
                      const std::string& where) {
  if (!request.is_object() || !request.contains("task"))
    invalid_argument(where + ": expected an object with 'task'");
  const tasks::Task task = tasks::task_from_json(request["task"], where + ": task");
  const tasks::BuiltinTask& kind = tasks::builtin_task_for(task, fallback_task);
  tasks::AgentOptions options;
  if (request.contains("env_seed")) {
    if (!request["env_seed"].is_number_unsigned() && !request["env_seed"].is_number_integer()) {
      invalid_argument(where + ": field 'env_seed' must be a non-negative integer");
    }
    options.env_seed = request["env_seed"].get<uint64_t>();
  }
  tasks::Judgement j;
  if (request.contains("messages")) {
    const OrderedJson& ms = request["messages"];
    if (!ms.is_array()) invalid_argument(where + ": field 'messages' must be an array");
    std::vector<text::ChatMessage> messages;
    for (size_t i = 0; i < ms.size(); ++i) {
      messages.push_back(
          text::parse_chat_message(ms[i], where + ": messages[" + std::to_string(i) + "]"));
    }
    j = kind.judge_episode(task, messages, options);
  } else if (request.contains("actions")) {
    const OrderedJson& as = request["actions"];
    if (!as.is_array())
      invalid_argument(where + ": field 'actions' must be an array of move names");
    std::string joined;
    for (const OrderedJson& a : as) {
      if (!a.is_string()) invalid_argument(where + ": field 'actions' must hold strings");
      joined += a.get<std::string>() + " ";
    }
    j = kind.judge_answer(task, joined, options);
  } else if (request.contains("answer") && request["answer"].is_string()) {
    j = kind.judge_answer(task, request["answer"].get<std::string>(), options);
  } else {
    invalid_argument(where + ": give 'answer' (a string), 'messages' or 'actions'");
  }
  OrderedJson out = tasks::judgement_to_json(j);
  out["task_id"] = task.task_id;
  return out;
}

void run_judge(const JudgeArgs& a) {
  if (!a.task_json.empty()) {
    OrderedJson request = OrderedJson::object();
    request["task"] = parse_ordered_json(a.task_json, "--task-json");
    if (!a.has_answer) invalid_argument("--task-json needs --answer");
    request["answer"] = a.answer;
    std::cout << dump(judge_one(request, a.task, "--task-json")) << "\n";
    return;
  }
  std::string line;
  size_t line_no = 0;
  size_t bad = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "stdin:" + std::to_string(line_no);
    try {
      const OrderedJson request = parse_ordered_json(line, where);
      std::cout << dump(judge_one(request, a.task, where)) << "\n" << std::flush;
    } catch (const Error& e) {
      std::fprintf(stderr, "ajet tasks judge: %s\n", e.what());
      std::cout << dump(OrderedJson{{"error", e.what()}}) << "\n" << std::flush;
      ++bad;
    }
  }
  // Bad input lines are bad data, not bad usage: exit code 1, not 2.
  if (bad > 0)
    fail(ErrorCode::kDataLoss,
         std::to_string(bad) + " of " + std::to_string(line_no) + " judge requests were bad");
}

struct MeasureArgs {
  std::string tokenizer;
  std::string task = "calc";
  int64_t n = 200;
  uint64_t seed = 7;
  double correct_ratio = 1.0;
};

const CommandRegistration kTasks("tasks", [](CLI::App& app) {
  auto* group = app.add_subcommand(
      "tasks",
      "Built-in tasks (calc, countdown, frozenlake): generate, demos, drills, judge, corpus");
  group->require_subcommand(1);

  auto g = std::make_shared<GenerateArgs>();
  auto* gen =
      group->add_subcommand("generate", "Write N tasks of a split as JSONL (one task per line)");
  gen->add_option("--task", g->task, "calc, countdown or frozenlake")->capture_default_str();
  gen->add_option("--n", g->n, "Number of tasks")->capture_default_str();
  gen->add_option("--seed", g->seed, "Generator seed")->capture_default_str();
  gen->add_option("--split", g->split, "train or val; the splits never share a problem")
      ->capture_default_str();
  gen->add_option("--params", g->params, "Generator params as a JSON object (docs/tasks.md)");
  gen->add_option("--out", g->out, "Output file (default stdout)");
  gen->callback([g] {
    emit(g->out, tasks::tasks_to_jsonl(generate(g->task, g->n, g->seed, g->split, g->params)));
  });

  auto d = std::make_shared<DemoArgs>();
  auto* demos = group->add_subcommand("demos",
                                      "Write N SFT demonstrations (JSONL: task_id, kind, reward, "
                                      "messages, tools) for training tasks");
  demos->add_option("--task", d->task, "calc, countdown or frozenlake")->capture_default_str();
  demos->add_option("--n", d->n, "Number of demos (one per generated training task)")
      ->capture_default_str();
  demos->add_option("--seed", d->seed, "Seed of the tasks and of the demos")->capture_default_str();
  demos->add_option("--correct-ratio", d->correct_ratio, "Share of correct demos")
      ->capture_default_str();
  demos->add_option(
      "--error-mix", d->error_mix,
      "Weights of the error kinds, comma-separated: calc bad_expr,bad_copy,no_tool; countdown "
      "invalid,incorrect; frozenlake wrong_move,random,bad_format (default equal)");
  demos->add_option("--params", d->params, "Generator params as a JSON object");
  demos->add_option("--out", d->out, "Output file (default stdout)");
  demos->callback([d] { run_demos(*d); });

  auto dr = std::make_shared<tasks::CopyDrillOptions>();
  auto drill_out = std::make_shared<std::string>();
  auto* drills = group->add_subcommand("drills",
                                       "Write N copy drills (JSONL like demos: the assistant "
                                       "repeats the user's text, numbers joined by + - *), the "
                                       "first warm-up stage of a fresh tiny model: they teach the "
                                       "in-context copying tool calls need (docs/sft.md)");
  drills->add_option("--n", dr->count, "Number of drills")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  drills->add_option("--seed", dr->seed, "Seed of the drills")->capture_default_str();
  drills->add_option("--min-terms", dr->min_terms, "Fewest numbers in a drill text")
      ->capture_default_str();
  drills->add_option("--max-terms", dr->max_terms, "Most numbers in a drill text")
      ->capture_default_str();
  drills->add_option("--max-number", dr->max_number, "Numbers are uniform in [1, this]")
      ->capture_default_str();
  drills->add_option("--out", *drill_out, "Output file (default stdout)");
  drills->callback([dr, drill_out] {
    std::string text;
    for (const tasks::Demo& d : tasks::copy_drills(*dr))
      text += dump(tasks::demo_to_json(d)) + "\n";
    emit(*drill_out, text);
  });

  auto j = std::make_shared<JudgeArgs>();
  auto* judge =
      group->add_subcommand("judge",
                            "Print the reward of answers. Reads JSONL on stdin: {\"task\": TASK, "
                            "\"answer\": TEXT} or {\"task\", \"messages\": "
                            "[...]} or {\"task\", \"actions\": [\"Down\", ...]} (+ optional "
                            "\"env_seed\"); prints one JSON result per line");
  judge->add_option("--task", j->task, "Task kind when the task JSON has no env_type");
  judge->add_option("--task-json", j->task_json,
                    "One task as JSON (instead of stdin); needs --answer");
  judge->add_option("--answer", j->answer, "The answer text for --task-json")
      ->each([j](const std::string&) { j->has_answer = true; });
  judge->callback([j] { run_judge(*j); });

  auto c = std::make_shared<tasks::CorpusOptions>();
  auto out = std::make_shared<std::string>();
  auto* corpus = group->add_subcommand(
      "corpus", "Write tokenizer-training text: rendered demos of every built-in task");
  corpus->add_option("--calc", c->calc_episodes, "calc episodes")->capture_default_str();
  corpus->add_option("--countdown", c->countdown_episodes, "countdown episodes")
      ->capture_default_str();
  corpus->add_option("--frozenlake", c->frozenlake_episodes, "frozenlake episodes")
      ->capture_default_str();
  corpus->add_option("--seed", c->seed, "Seed")->capture_default_str();
  corpus->add_option("--out", *out, "Output file (default stdout)");
  corpus->callback([c, out] { emit(*out, tasks::tokenizer_corpus(*c)); });

  auto m = std::make_shared<MeasureArgs>();
  auto* measure =
      group->add_subcommand("measure", "Tokens per rendered demo episode with a tokenizer (JSON)");
  measure->add_option("--tokenizer", m->tokenizer, "Tokenizer directory")->required();
  measure->add_option("--task", m->task, "calc, countdown or frozenlake")->capture_default_str();
  measure->add_option("--n", m->n, "Episodes")->capture_default_str();
  measure->add_option("--seed", m->seed, "Seed")->capture_default_str();
  measure->add_option("--correct-ratio", m->correct_ratio, "Share of correct demos")
      ->capture_default_str();
  measure->callback([m] {
    const text::Tokenizer tok = text::Tokenizer::load(m->tokenizer);
    const std::vector<tasks::Task> ts = generate(m->task, m->n, m->seed, "val", "");
    const auto demos = tasks::generate_demos(
        tasks::builtin_task(m->task), ts,
        tasks::DemoOptions{.correct_ratio = m->correct_ratio, .error_mix = {}, .seed = m->seed});
    const tasks::EpisodeTokenStats s = tasks::measure_episode_tokens(tok, demos);
    OrderedJson j = {{"task", m->task},
                     {"episodes", s.episodes},
                     {"vocab_size", tok.vocab_size()},
                     {"mean_total", s.mean_total},
                     {"mean_prompt", s.mean_prompt},
                     {"mean_assistant", s.mean_assistant},
                     {"max_total", s.max_total}};
    std::cout << dump(j) << "\n";
  });
});

}  // namespace
}  // namespace ajet::cli
