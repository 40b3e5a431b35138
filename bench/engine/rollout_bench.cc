// Rollout throughput of the main command's RL workload (issue 19): calc episodes of the tiny model
// (scripts/run.sh's warmed-up exp/main/models/calc-sft by default, copied), generated
//   (a) by `ajet-engine serve` over its RPC, as the front uses it: one generate request per episode
//       turn, all episodes submitted at once, prefix caching off and on (two servers);
//   (b) by a Python loop over python3-torch written the way a user would
//   (bench/engine/rollout_ref.py:
//       HF-style Qwen2 forward, left-padded batch in lock-step, padded KV cache),
// on the same prompts (token ids rendered here with the model's chat template and tools, as the
// front renders them), the same sampling (temperature 1, the chat stop ids, max tokens per turn)
// and the same thread count, interleaved in rounds (each workload: engine without prefix caching,
// engine with it, then a Python process of its own whose warm-up is untimed). Episodes come in GRPO
// groups (each task repeated --group times, calc.yaml's num_repeat). Two workloads:
//   single  one assistant turn per episode;
//   multi   a second turn whose prompt is turn 1's prompt + completion + the tool result's
//   rendering
//           (the engine's client sends each episode's turn 2 as soon as its turn 1 is done, as an
//           agent does; the Python loop prefills the whole turn-2 batch again, see rollout_ref.py).
// Every (round, episodes, workload) uses its own tasks, so no run finds another run's prompts in
// the engine's cache; the shared system prompt and tools block stay cached across runs, as they do
// between the requests of one RL step. Prints generated tokens per second (stop id included) and
// the ratios, and appends the table to docs/benchmarks.md (--no-append skips that; --smoke runs a
// few episodes on a fresh model and never appends).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
#include "rpc/client.h"
#include "rpc/messages.h"
#include "rpc/serve_child.h"
#include "tasks/builtin.h"
#include "tasks/rng.h"
#include "tasks/task.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ajet::Json;
using ajet::bench::capture;

struct Args {
  std::string model;  // empty: exp/main/models/calc-sft when present, else a fresh tiny model
  std::vector<int> episodes = {64, 128};
  int group = 8;
  int rounds = 5;
  int max_tokens = 48;  // calc.yaml: rollout.max_response_length_in_one_turn
  int threads = 2;
  std::string python = "/usr/bin/python3";
  std::string note;  // appended to the docs paragraph (e.g. what the build is before or after)
  bool smoke = false;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

struct Episode {
  std::vector<int32_t> prompt;
  std::vector<int32_t>
      tool_suffix;  // what follows turn 1's end-of-turn id up to turn 2's generation prompt
};

struct Workload {
  std::string name;  // "single" or "multi"
  int episodes = 0;
  std::vector<Episode> items;
};

struct Measured {
  double seconds = 0;
  double busy = 0;  // the engine's busy_s (forward and sampling) over the run
  int64_t generated = 0;
  int64_t prompt_tokens = 0;
  double tokens_per_s() const { return seconds > 0 ? static_cast<double>(generated) / seconds : 0; }
};

// Prompt ids and the tool-result suffix of one calc task, rendered as the front renders chats: the
// task's messages and tools through the model's chat template, then the ids. The suffix comes from
// rendering a correct demo's first four messages (system, user, tool call, tool result) with the
// generation prompt: the text after the tool-call turn's "<|im_end|>".
Episode render_episode(const ajet::tasks::BuiltinTask& calc, const ajet::tasks::Task& task,
                       const ajet::text::Tokenizer& tokenizer, ajet::text::ChatFamily family,
                       uint64_t seed) {
  namespace text = ajet::text;
  Episode e;
  text::ChatRequest first{.messages = ajet::tasks::initial_messages(task),
                          .tools = ajet::tasks::task_tools(task)};
  const text::RenderOptions gen{.add_generation_prompt = true};
  for (int32_t id : text::tokenize_chat(tokenizer, text::render_chat(family, first, gen)).ids)
    e.prompt.push_back(id);
  ajet::tasks::Rng rng(seed);
  const ajet::tasks::Demo demo = calc.make_demo(task, "correct", rng);
  if (demo.messages.size() < 4 || demo.messages[2].tool_calls.empty()) {
    throw std::runtime_error("calc demo of " + task.task_id +
                             " has no tool call as its third message");
  }
  text::ChatRequest upto_tool{.messages = {demo.messages.begin(), demo.messages.begin() + 4},
                              .tools = demo.tools};
  const text::RenderedChat rendered = text::render_chat(family, upto_tool, gen);
  const text::ChatSpan* call = rendered.message_span(2);
  const std::string_view footer = rendered.footer(*call);
  const std::string_view eot = "<|im_end|>";
  if (call == nullptr || footer.substr(0, eot.size()) != eot) {
    throw std::runtime_error("the chat template's assistant turn does not end with <|im_end|>");
  }
  const std::string suffix = rendered.text.substr(call->body_end + eot.size());
  for (int32_t id : tokenizer.encode(suffix)) e.tool_suffix.push_back(id);
  return e;
}

// One workload through the engine: every episode's first request at once; a multi-turn episode
// sends its second request from the first one's final frame. Returns when every episode is
// finished.
Measured run_engine(ajet::rpc::Client& client, const Workload& w, const Args& args,
                    const std::vector<int32_t>& stops, int32_t end_of_turn) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    int remaining = 0;
    int64_t generated = 0;
    int64_t prompt_tokens = 0;
    std::vector<std::vector<int32_t>> completion;
    std::optional<std::string> error;
  };
  auto state = std::make_shared<State>();
  state->remaining = static_cast<int>(w.items.size());
  state->completion.resize(w.items.size());
  const bool multi = w.name == "multi";
  std::function<void(size_t, int)> submit;
  submit = [&, state](size_t e, int turn) {
    ajet::rpc::GenerateRequest r;
    r.prompt = w.items[e].prompt;
    if (turn == 2) {
      const auto& c =
          state->completion[e];  // written before turn 1's final frame; read on the same thread
      r.prompt.insert(r.prompt.end(), c.begin(), c.end());
      if (c.empty() || std::find(stops.begin(), stops.end(), c.back()) == stops.end())
        r.prompt.push_back(end_of_turn);
      r.prompt.insert(r.prompt.end(), w.items[e].tool_suffix.begin(), w.items[e].tool_suffix.end());
    }
    r.max_tokens = args.max_tokens;
    r.temperature = 1.0;
    r.stop_token_ids = stops;
    r.tag = "rollout-bench-" + std::to_string(e) + "-" + std::to_string(turn);
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->prompt_tokens += static_cast<int64_t>(r.prompt.size());
    }
    client.start(ajet::rpc::encode_generate_request(r),
                 [state, e, turn, multi, &submit](ajet::rpc::Frame&& frame) {
                   if (frame.kind == ajet::rpc::FrameKind::kReply) {
                     const ajet::rpc::TokensEvent ev = ajet::rpc::decode_tokens_event(frame);
                     std::lock_guard<std::mutex> lock(state->mu);
                     state->generated += static_cast<int64_t>(ev.token_ids.size());
                     if (turn == 1)
                       state->completion[e].insert(state->completion[e].end(), ev.token_ids.begin(),
                                                   ev.token_ids.end());
                     return;
                   }
                   if (frame.kind == ajet::rpc::FrameKind::kDone && turn == 1 && multi) {
                     submit(e, 2);
                     return;
                   }
                   std::lock_guard<std::mutex> lock(state->mu);
                   if (frame.kind == ajet::rpc::FrameKind::kError && !state->error) {
                     state->error = ajet::rpc::frame_error(frame).what();
                   }
                   if (--state->remaining == 0) state->cv.notify_all();
                 });
  };
  auto busy_s = [&client] {
    return client.call(ajet::rpc::make_status_request(), std::chrono::seconds(60))
        .done.body["engine"]["busy_s"]
        .get<double>();
  };
  const double busy0 = busy_s();
  const auto t0 = Clock::now();
  for (size_t e = 0; e < w.items.size(); ++e) submit(e, 1);
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->remaining == 0; });
  Measured m;
  m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  lock.unlock();
  m.busy = busy_s() - busy0;
  if (state->error) throw std::runtime_error("engine: " + *state->error);
  m.generated = state->generated;
  m.prompt_tokens = state->prompt_tokens;
  return m;
}

Json workload_json(const Workload& w) {
  Json prompts = Json::array(), suffixes = Json::array();
  for (const Episode& e : w.items) {
    prompts.push_back(e.prompt);
    suffixes.push_back(e.tool_suffix);
  }
  Json j = {{"name", w.name}, {"prompts", prompts}};
  if (w.name == "multi") j["tool_suffixes"] = suffixes;
  return j;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < 1) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw std::runtime_error(flag + ": '" + item + "' is not a positive integer");
    }
  }
  if (out.empty()) throw std::runtime_error(flag + " is empty");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  std::string episodes = "64,128";
  ajet::bench::BenchCli cli(
      "rollout_bench",
      "Rollout throughput of calc episodes: the engine over RPC (prefix caching off and on) "
      "against a Python KV-cache loop on python3-torch");
  CLI::App& app = cli.app();
  app.add_option("--model", args.model,
                 "Model directory (default exp/main/models/calc-sft, else a fresh tiny model)");
  app.add_option("--episodes", episodes,
                 "Comma-separated episodes per run, each a multiple of --group (default 64,128)");
  app.add_option("--group", args.group, "GRPO group size (default 8)")->check(CLI::Range(1, 4096));
  app.add_option("--rounds", args.rounds, "Timed rounds (default 5)")->check(CLI::Range(1, 1000));
  app.add_option("--max-tokens", args.max_tokens, "Tokens a turn at most (default 48)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--threads", args.threads, "Compute threads each side (default 2)")
      ->check(CLI::Range(1, 256));
  app.add_option("--python", args.python,
                 "The Python with torch for the reference loop (default /usr/bin/python3)");
  app.add_option("--note", args.note,
                 "Text added to the docs paragraph (what the build is before or after)");
  if (auto code = cli.parse(argc, argv)) return *code;
  args.smoke = cli.smoke();
  try {
    args.episodes = parse_int_list(episodes, "--episodes");
    for (int b : args.episodes) {
      if (b % args.group != 0) {
        throw std::runtime_error("--episodes " + std::to_string(b) +
                                 " is not a multiple of --group " + std::to_string(args.group));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rollout_bench: %s\nRun with --help for more information.\n", e.what());
    return 2;
  }
  if (args.smoke) {
    args.episodes = {8};
    args.group = 4;
    args.rounds = 1;
    args.max_tokens = 8;
  }
  ajet::set_log_level("warn");
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const fs::path engine_binary = self.parent_path() / "ajet-engine";
  const fs::path ajet_binary = self.parent_path() / "ajet";
  const fs::path ref_script = fs::path(AJET_SOURCE_DIR) / "bench/engine/rollout_ref.py";
  for (const fs::path& p : {engine_binary, ajet_binary}) {
    if (!fs::exists(p)) {
      std::fprintf(stderr, "rollout_bench: %s not found (build the ajet and ajet-engine targets)\n",
                   p.c_str());
      return 1;
    }
  }
  const fs::path dir =
      fs::temp_directory_path() / ("ajet_rollout_bench_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  int rc = 0;
  try {
    // The model: a copy (the bench never writes to the original), or a fresh one made as
    // scripts/run.sh makes it (calc corpus -> BPE tokenizer -> `ajet model init --preset tiny` with
    // calc's init flags).
    const fs::path model = dir / "model";
    std::string model_source = args.model;
    if (model_source.empty() && !args.smoke) {
      const fs::path main_model = fs::path(AJET_SOURCE_DIR) / "exp/main/models/calc-sft";
      if (fs::exists(main_model / "config.json")) model_source = main_model.string();
    }
    std::string model_label = model_source;
    if (model_label.rfind(AJET_SOURCE_DIR "/", 0) == 0)
      model_label = model_label.substr(std::strlen(AJET_SOURCE_DIR) + 1);
    if (!model_source.empty()) {
      if (!fs::exists(fs::path(model_source) / "config.json")) {
        throw std::runtime_error("--model " + model_source + ": no config.json there");
      }
      fs::copy(model_source, model, fs::copy_options::recursive);
    } else {
      const std::string a = quote(ajet_binary.string());
      capture(a + " tasks corpus --seed 1 --out " + quote((dir / "corpus.txt").string()) + " 2>&1");
      capture(a + " tokenizer train --corpus " + quote((dir / "corpus.txt").string()) +
              " --vocab-size 1024 --out " + quote((dir / "tokenizer").string()) + " 2>&1");
      capture(a + " model init --preset tiny --tokenizer " + quote((dir / "tokenizer").string()) +
              " --seed 1 --init-std 0.05 --scaled-residual-init --embed-std 0.3 --out " +
              quote(model.string()) + " 2>&1");
      model_label =
          "a fresh `ajet model init --preset tiny` (untrained: turns mostly run to max tokens)";
    }

    const ajet::text::Tokenizer tokenizer = ajet::text::Tokenizer::load(model);
    const ajet::text::ChatFamily family =
        ajet::text::detect_chat_family(ajet::text::load_chat_template(model)).family;
    const auto end_of_turn = tokenizer.token_to_id("<|im_end|>");
    if (!end_of_turn)
      throw std::runtime_error(model.string() + ": the tokenizer has no <|im_end|> token");
    std::vector<int32_t> stops = {
        static_cast<int32_t>(*end_of_turn)};  // as the front's chat_stop_ids
    if (auto eos = tokenizer.eos_id(); eos && *eos != *end_of_turn)
      stops.push_back(static_cast<int32_t>(*eos));

    // Tasks: one block of episodes/group problems per (round, episodes, workload), round 0 the
    // warm-up.
    const auto& calc = ajet::tasks::builtin_task("calc");
    int per_round = 0;
    for (int b : args.episodes) per_round += 2 * (b / args.group);
    ajet::tasks::GenerateOptions gen;
    gen.count = per_round * (args.rounds + 1);
    gen.seed = 19;
    const std::vector<ajet::tasks::Task> tasks = calc.generate(gen);
    size_t next_task = 0;
    auto make_workload = [&](const std::string& name, int episodes) {
      Workload w{.name = name, .episodes = episodes, .items = {}};
      for (int t = 0; t < episodes / args.group; ++t) {
        const ajet::tasks::Task& task = tasks.at(next_task);
        const Episode e = render_episode(calc, task, tokenizer, family, 1000 + next_task);
        ++next_task;
        for (int k = 0; k < args.group; ++k) w.items.push_back(e);
      }
      return w;
    };

    // What is measured: the commit and the uncommitted files of the inference path when the run
    // starts, and when ajet-engine was built.
    const std::string commit =
        trimmed(capture("git -C " + quote(AJET_SOURCE_DIR) + " rev-parse --short HEAD 2>&1"));
    const std::string dirty =
        trimmed(capture("git -C " + quote(AJET_SOURCE_DIR) +
                        " status --short -- src/infer src/engine src/rpc src/model "
                        "apps/ajet-engine 2>/dev/null | awk '{print $2}' | tr '\\n' ' '"));
    const std::string built =
        trimmed(capture("date -u -r " + quote(engine_binary.string()) + " +%H:%M"));
    // Engine servers with calc.yaml's settings (threads, KV cache, context), one without prefix
    // caching.
    const int max_running = *std::max_element(args.episodes.begin(), args.episodes.end());
    auto serve_command = [&](bool caching, const std::string& socket) {
      std::vector<std::string> c = {engine_binary.string(),
                                    "serve",
                                    "--model",
                                    model.string(),
                                    "--listen",
                                    "unix:" + (dir / socket).string(),
                                    "--threads",
                                    std::to_string(args.threads),
                                    "--kv-cache-mb",
                                    "256",
                                    "--max-model-len",
                                    "640",
                                    "--max-running",
                                    std::to_string(max_running)};
      if (!caching) c.push_back("--no-prefix-caching");
      return c;
    };
    ajet::rpc::ServeChild server_off(serve_command(false, "off.sock"), dir / "serve-off.log");
    ajet::rpc::ServeChild server_on(serve_command(true, "on.sock"), dir / "serve-on.log");
    server_off.wait_ready();
    server_on.wait_ready();
    ajet::rpc::Client client_off(server_off.address());
    ajet::rpc::Client client_on(server_on.address());
    client_off.connect();
    client_on.connect();

    // Results per (episodes, workload): tokens/s per round of each side, and their token counts.
    struct Cell {
      std::vector<double> py, off, on, off_ratio, on_ratio, off_busy, on_busy;  // per round
      int64_t py_tokens = 0, off_tokens = 0, on_tokens = 0, prompt_tokens = 0, runs = 0;
    };
    std::map<std::pair<int, std::string>, Cell> cells;
    std::string torch_version;
    for (int round = 0; round <= args.rounds; ++round) {
      for (int b : args.episodes) {
        for (const std::string name : {"single", "multi"}) {
          // The three sides back to back on the same workload, so that a burst of load elsewhere on
          // the machine hits one round's comparison rather than one side of every round.
          const Workload w = make_workload(name, b);
          const Measured off =
              run_engine(client_off, w, args, stops, static_cast<int32_t>(*end_of_turn));
          const Measured on =
              run_engine(client_on, w, args, stops, static_cast<int32_t>(*end_of_turn));
          if (round == 0) continue;  // the engines' warm-up; the Python process warms itself up
          Json spec = {{"model_dir", model.string()},
                       {"threads", args.threads},
                       {"max_tokens", args.max_tokens},
                       {"temperature", 1.0},
                       {"stop_ids", stops},
                       {"end_of_turn", *end_of_turn},
                       {"seed", round},
                       {"workloads", Json::array({workload_json(w)})}};
          const fs::path spec_path = dir / "spec.json";
          std::ofstream(spec_path) << spec.dump();
          const std::string out = capture(quote(args.python) + " " + quote(ref_script.string()) +
                                          " " + quote(spec_path.string()) + " 2>&1");
          const size_t at = out.rfind("{\"results\"");
          if (at == std::string::npos)
            throw std::runtime_error("rollout_ref.py printed no results:\n" + out);
          const Json py = ajet::parse_json(out.substr(at), "rollout_ref.py output");
          torch_version = py.value("torch", "");
          const Json& r = py["results"][0];
          const double py_seconds = r["seconds"].get<double>();
          const double py_tps = r["generated_tokens"].get<double>() / py_seconds;
          Cell& c = cells[{b, name}];
          c.py.push_back(py_tps);
          c.off.push_back(off.tokens_per_s());
          c.on.push_back(on.tokens_per_s());
          c.off_ratio.push_back(off.tokens_per_s() / py_tps);
          c.on_ratio.push_back(on.tokens_per_s() / py_tps);
          c.off_busy.push_back(off.busy / off.seconds);
          c.on_busy.push_back(on.busy / on.seconds);
          c.py_tokens += r["generated_tokens"].get<int64_t>();
          c.off_tokens += off.generated;
          c.on_tokens += on.generated;
          c.prompt_tokens += on.prompt_tokens;
          c.runs += 1;
          std::printf(
              "round %d, %d episodes, %s: python %.0f tok/s (%.2f s), engine off %.0f tok/s (%.2f "
              "s, busy "
              "%.2f s), on %.0f tok/s (%.2f s, busy %.2f s)\n",
              round, b, name.c_str(), py_tps, py_seconds, off.tokens_per_s(), off.seconds, off.busy,
              on.tokens_per_s(), on.seconds, on.busy);
          std::fflush(stdout);
        }
      }
      if (round == 0) std::printf("warm-up round done\n");
    }

    std::ostringstream table;
    table << "| episodes | workload | prompt tokens/episode | gen. tokens/episode py / off / on | "
             "Python tok/s "
             "| engine, no prefix caching tok/s | engine, prefix caching tok/s | no caching vs "
             "Python "
             "| **prefix caching vs Python** |\n"
          << "|---|---|---|---|---|---|---|---|---|\n";
    auto ratio = [](const std::vector<double>& v) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.2fx (%.2f-%.2f)", median(v),
                    *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
      return std::string(buf);
    };
    for (int b : args.episodes) {
      for (const std::string name : {"single", "multi"}) {
        const Cell& c = cells[{b, name}];
        const double per = static_cast<double>(std::max<int64_t>(1, c.runs * b));
        char row[512];
        std::snprintf(
            row, sizeof row,
            "| %d | %s | %.0f | %.1f / %.1f / %.1f | %.0f | %.0f | %.0f | %s | **%s** |\n", b,
            name == "single" ? "single turn" : "two turns (tool result)", c.prompt_tokens / per,
            c.py_tokens / per, c.off_tokens / per, c.on_tokens / per, median(c.py), median(c.off),
            median(c.on), ratio(c.off_ratio).c_str(), ratio(c.on_ratio).c_str());
        table << row;
      }
    }
    // How much of each engine run the engine spent computing (status busy_s: forward and sampling);
    // the rest is requests and tokens crossing the RPC, scheduling, and waiting for work.
    table << "\nEngine busy (forward and sampling, from `status`'s busy_s) as a share of each "
             "engine run's wall "
             "time, median over the rounds, no prefix caching / prefix caching:";
    for (int b : args.episodes) {
      for (const std::string name : {"single", "multi"}) {
        const Cell& c = cells[{b, name}];
        char part[160];
        std::snprintf(part, sizeof part, " %d %s %.0f %% / %.0f %%;", b,
                      name == "single" ? "single turn" : "two turns", 100 * median(c.off_busy),
                      100 * median(c.on_busy));
        table << part;
      }
    }
    table << "\n";
    const std::string load = ajet::bench::load_average_text();
    std::printf("\n%s", table.str().c_str());
    std::printf("commit %s%s, ajet-engine built %s UTC; load average %s\n", commit.c_str(),
                dirty.empty() ? "" : (" + uncommitted " + dirty).c_str(), built.c_str(),
                load.c_str());
    if (cli.append()) {
      std::ostringstream body;
      body << "calc episodes of `" << model_label << "` (copied), in GRPO groups of " << args.group
           << ", all episodes of a run submitted at once; temperature 1, stop at `<|im_end|>`, at "
              "most "
           << args.max_tokens << " tokens a turn, " << args.threads
           << " compute threads each side. Engine: `ajet-engine serve` (calc.yaml's KV "
           << "cache 256 MiB, max_model_len 640, max-running " << max_running
           << "), one generate request per turn over the Unix-socket RPC, prefix caching off and "
              "on. Python: "
           << "`bench/engine/rollout_ref.py` on python3-torch " << torch_version
           << " (HF-style Qwen2 forward, left-padded lock-step batch, padded KV cache; turn 2 "
              "prefills the whole "
           << "conversation again). Two turns: turn 2 = turn 1's prompt + completion + the "
              "rendered tool result. "
           << "Each of " << args.rounds
           << " rounds (after an untimed warm-up round) runs the three sides back to "
           << "back on each workload, every run on tasks of its own; tokens/s are medians over the "
              "rounds, the ratios "
           << "the median (min-max) of the rounds' ratios. Generated tokens include the stop id; "
              "prompt tokens count "
           << "both turns' prompts. Build: commit " << commit
           << (dirty.empty() ? "" : " + uncommitted " + dirty) << " (ajet-engine built " << built
           << " UTC); load average at the end " << load << "."
           << (args.note.empty() ? "" : " " + args.note) << "\n\n"
           << table.str();
      ajet::bench::append_to_benchmarks(
          "Rollout throughput: engine over RPC vs a Python KV-cache loop "
          "(bench/engine/rollout_bench)",
          body.str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rollout_bench: %s (engine logs: %s)\n", e.what(), dir.c_str());
    rc = 1;
  }
  if (rc == 0) fs::remove_all(dir);
  return rc;
}
