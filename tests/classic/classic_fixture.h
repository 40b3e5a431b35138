// The classic tests' shared pieces: a JSONL reader and a tokenizer trained on the built-in tasks' text (`ajet tasks
// corpus`, 1024 ids asked), so a calc or frozenlake episode is a few hundred tokens; made once per
// build tree under <build>/classic_fixture and shared by the tests that need it.
#pragma once

#include <gtest/gtest.h>

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
    e2e::Captured r = e2e::run_capture(shell_quote(bin("ajet").string()) + " tasks corpus --out " +
                                       shell_quote((root / "corpus.txt").string()) + " && " +
                                       shell_quote(bin("ajet").string()) + " tokenizer train --corpus " +
                                       shell_quote((root / "corpus.txt").string()) + " --vocab-size 1024 --out " +
                                       shell_quote(out.string()));
    ASSERT_EQ(r.status, 0) << r.out;
  });
  return tok;
}

// A debug-backbone calc run of 2 steps on `model` (experiment "run"); `extra` adds YAML under `ajet:`.
inline std::string classic_yaml(const std::filesystem::path& model, const std::string& extra = "") {
  return "ajet:\n"
         "  experiment_name: run\n"
         "  backbone: debug\n"
         "  model:\n"
         "    path: " + model.string() + "\n"
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

// The micro model on the classic tokenizer; made once per build tree.
inline std::filesystem::path micro_model() {
  const std::filesystem::path tok = classic_tokenizer();
  const std::filesystem::path model = tok.parent_path() / "model-micro";
  e2e::make_once(model, [&](const std::filesystem::path& out) {
    e2e::Captured r = e2e::run_capture(e2e::shell_quote(e2e::bin("ajet-engine").string()) +
                                       " model init --preset micro --tokenizer " + e2e::shell_quote(tok.string()) +
                                       " --seed 7 --out " + e2e::shell_quote(out.string()));
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

}  // namespace ajet::classic
