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
