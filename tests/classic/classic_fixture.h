// The classic tests' shared pieces: a JSONL reader and a tokenizer trained on the built-in tasks'
// text (`ajet tasks corpus`, 1024 ids asked), so a calc or frozenlake episode is a few hundred
// tokens; made once per build tree under <build>/classic_fixture and shared by the tests that need
// it.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "common/fs.h"
#include "common/json.h"
#include "e2e/e2e_util.h"

namespace ajet::classic {

inline std::filesystem::path classic_tokenizer() {
  namespace fs = std::filesystem;
  using e2e::bin;
  using e2e::shell_quote;
  const fs::path root = fs::path(AJET_BINARY_DIR) / "classic_fixture";
  const fs::path tok = root / "tokenizer";
  e2e::make_once(tok, [&](const fs::path& out) {
    fs::create_directories(root);
    e2e::Captured r = e2e::run_capture(
        shell_quote(bin("ajet").string()) + " tasks corpus --out " +
        shell_quote((root / "corpus.txt").string()) + " && " + shell_quote(bin("ajet").string()) +
        " tokenizer train --corpus " + shell_quote((root / "corpus.txt").string()) +
        " --vocab-size 1024 --out " + shell_quote(out.string()));
    ASSERT_EQ(r.status, 0) << r.out;
  });
  return tok;
}

// A debug-backbone calc run of 2 steps on `model` (experiment "run"); `extra` adds YAML under
// `ajet:`.
inline std::string classic_yaml(const std::filesystem::path& model, const std::string& extra = "") {
  return "ajet:\n"
         "  experiment_name: run\n"
         "  backbone: debug\n"
         "  model:\n"
         "    path: " +
         model.string() +
         "\n"
         "  data:\n"
         "    max_prompt_length: 640\n"
         "    max_response_length: 384\n"
         "    train_batch_size: 2\n"
         "  rollout:\n"
         "    max_env_worker: 4\n"
         "    max_model_len: 1024\n"
         "    max_response_length_in_one_turn: 12\n"
         "    num_repeat: 2\n"
         "    temperature: 1.0\n"
         "  task_reader:\n"
         "    type: builtin\n"
         "    builtin:\n"
         "      generator: calc\n"
         "      num_training_tasks: 6\n"
         "      num_validation_tasks: 3\n"
         "      seed: 5\n"
         "  trainer_common:\n"
         "    total_training_steps: 2\n"
         "    test_freq: 1\n"
         "    val_pass_n: 2\n"
         "    val_before_train: true\n"
         "  engine:\n"
         "    threads: 1\n"
         "    kv_cache_memory_mb: 16\n" +
         extra;
}

// classic_yaml() made to run "forever" (100000 steps) on `backbone`, validating never.
inline std::string long_run_yaml(const std::filesystem::path& model,
                                 const std::string& backbone = "debug") {
  std::string yaml = classic_yaml(model);
  yaml.replace(yaml.find("total_training_steps: 2"), 23, "total_training_steps: 100000");
  yaml.replace(yaml.find("backbone: debug"), 15, "backbone: " + backbone);
  yaml.replace(yaml.find("val_before_train: true"), 22, "val_before_train: false");
  yaml.replace(yaml.find("test_freq: 1"), 12, "test_freq: 0");
  return yaml;
}

// The micro model on the classic tokenizer; made once per build tree.
inline std::filesystem::path micro_model() {
  const std::filesystem::path tok = classic_tokenizer();
  const std::filesystem::path model = tok.parent_path() / "model-micro";
  e2e::make_once(model, [&](const std::filesystem::path& out) {
    e2e::Captured r = e2e::run_capture(e2e::shell_quote(e2e::bin("ajet-engine").string()) +
                                       " model init --preset micro --tokenizer " +
                                       e2e::shell_quote(tok.string()) + " --seed 7 --out " +
                                       e2e::shell_quote(out.string()));
    ASSERT_EQ(r.status, 0) << r.out;
  });
  return model;
}

// `ajet ARGS` (already shell-quoted), stdout and stderr together.
inline e2e::Captured run_ajet(const std::string& args) {
  return e2e::run_capture(e2e::shell_quote(e2e::bin("ajet").string()) + " " + args);
}

// The records of a JSONL file (metrics.jsonl), blank lines skipped.
inline std::vector<Json> read_jsonl(const std::filesystem::path& path) {
  std::vector<Json> out;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(Json::parse(line));
  }
  return out;
}

// `ajet ARGS…` in the background, stdout and stderr into `out`.
inline pid_t spawn_ajet(const std::filesystem::path& out, std::vector<std::string> args,
                        const std::filesystem::path& cwd = {}) {
  args.insert(args.begin(), e2e::bin("ajet").string());
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    int fd = ::open(out.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// The exit status of `pid` once it exits (within `timeout`), or -1.
inline int wait_exit(pid_t pid, std::chrono::seconds timeout) {
  int status = -1;
  if (!e2e::eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout)) return -1;
  return status;
}

// metrics.jsonl holds a train record of step `step` or later.
inline bool has_train_step(const std::filesystem::path& metrics, int64_t step) {
  if (!std::filesystem::exists(metrics)) return false;
  for (const auto& line : read_jsonl(metrics)) {
    if (line.value("kind", "") == "train" && line.value("step", int64_t(0)) >= step) return true;
  }
  return false;
}

}  // namespace ajet::classic
