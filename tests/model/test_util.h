// Helpers for the model tests: scratch directories, a minimal byte-level tokenizer directory, and
// running a built binary. Light: no libtorch here, so the CLI test stays a cheap translation unit.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/run_command.h"
#include "support/scratch_dir.h"

namespace ajet::model::testing {

using ScratchDir = ajet::test_support::ScratchDir;

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// GPT-2's byte → printable-character map used by byte-level BPE vocabularies.
inline std::string byte_piece(int b) {
  auto printable = [](int c) {
    return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
  };
  int code = b;
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c) n += printable(c) ? 0 : 1;
    code = 256 + n;
  }
  std::string utf8;  // code < 0x800 always
  if (code < 0x80) {
    utf8 += static_cast<char>(code);
  } else {
    utf8 += static_cast<char>(0xC0 | (code >> 6));
    utf8 += static_cast<char>(0x80 | (code & 0x3F));
  }
  return utf8;
}

inline const std::vector<std::string>& special_tokens() {
  static const std::vector<std::string> s = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  return s;
}

// tokenizer.json (256 byte tokens, ids = byte values, then the special tokens, no merges) and a
// tokenizer_config.json naming <|im_end|> as eos. Vocab size 259.
inline void write_byte_tokenizer(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_piece(b)] = b;
  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < special_tokens().size(); ++i) {
    added.push_back({{"id", 256 + i},
                     {"content", special_tokens()[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  nlohmann::json byte_level = {{"type", "ByteLevel"},
                               {"add_prefix_space", false},
                               {"trim_offsets", true},
                               {"use_regex", true}};
  nlohmann::json tok = {{"version", "1.0"},
                        {"truncation", nullptr},
                        {"padding", nullptr},
                        {"added_tokens", added},
                        {"normalizer", nullptr},
                        {"pre_tokenizer", byte_level},
                        {"post_processor", nullptr},
                        {"decoder", byte_level},
                        {"model",
                         {{"type", "BPE"},
                          {"dropout", nullptr},
                          {"unk_token", nullptr},
                          {"continuing_subword_prefix", nullptr},
                          {"end_of_word_suffix", nullptr},
                          {"fuse_unk", false},
                          {"byte_fallback", false},
                          {"vocab", vocab},
                          {"merges", nlohmann::json::array()}}}};
  write_text(dir / "tokenizer.json", tok.dump(1));
  nlohmann::json config = {{"eos_token", "<|im_end|>"},
                           {"pad_token", "<|endoftext|>"},
                           {"bos_token", nullptr},
                           {"add_bos_token", false},
                           {"chat_template", ""}};
  write_text(dir / "tokenizer_config.json", config.dump(1));
}

using test_support::CommandResult;

// Runs a shell command line with stderr joined to stdout (`out`).
inline CommandResult run_command(const std::string& command) {
  return test_support::run_command(command + " 2>&1");
}

inline std::string quote(const std::filesystem::path& p) {
  std::string out = "'";
  out.append(p.string()).append("'");
  return out;
}

}  // namespace ajet::model::testing
