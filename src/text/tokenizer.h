// Hugging Face `tokenizer.json` byte-level BPE (GPT-2 / Qwen2 / Qwen3 family): encode, decode, and
// an incremental decoder for token streaming. Loading never crashes on a bad file: it throws
// ajet::Error naming the file and the problem.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ajet::text {

using TokenId = int32_t;

// What tokenizer_config.json says (all optional in the file).
struct TokenizerConfig {
  std::string chat_template;  // Jinja source, kept verbatim
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  bool add_bos_token = false;
};

// Parses tokenizer_config.json text: special tokens as strings or {"content": ...} objects, the
// chat template as a string or a list of {name, template} (the one named "default", else the
// first).
TokenizerConfig parse_tokenizer_config(std::string_view json_text, std::string_view source_name);

class Tokenizer {
 public:
  // `path` is a directory holding tokenizer.json (and optionally tokenizer_config.json), or the
  // tokenizer.json file itself.
  static Tokenizer load(const std::filesystem::path& path);
  // Parses tokenizer.json text; `source_name` is used in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view source_name);
  // Same, with a tokenizer_config.json already parsed (see parse_tokenizer_config).
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view source_name,
                             TokenizerConfig config);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Added/special tokens in the text are matched first (when allow_special), the rest is
  // normalised, pre-tokenized and BPE-merged exactly as the HF `tokenizers` library does.
  std::vector<TokenId> encode(std::string_view text, bool allow_special = true) const;
  // Concatenated bytes of the tokens, decoded as UTF-8 (invalid sequences become U+FFFD, like HF).
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;
  // The raw bytes a token stands for (no UTF-8 repair): the unit the incremental decoder works on.
  std::string token_bytes(TokenId id) const;
  // The vocabulary string (byte-level alphabet, e.g. "Ġthe").
  const std::string& piece(TokenId id) const;
  std::optional<TokenId> token_to_id(std::string_view piece) const;

  size_t vocab_size() const;  // max id + 1 over the model vocab and added tokens
  // Makes ids [vocab_size(), model_vocab_size) valid tokens without text. Checkpoints pad their
  // embedding rows past the tokenizer (Qwen2.5: 151,936 rows for 151,665 ids) and a model can
  // sample those ids (a random or barely trained one does); HF decodes them to "". A smaller size
  // is a no-op.
  void pad_to_model_vocab(size_t model_vocab_size);
  bool is_special(TokenId id) const;
  bool valid_id(TokenId id) const;  // in range and naming a token (vocab ids may have gaps)

  const TokenizerConfig& config() const;
  // Ids of the config's eos / pad tokens when they exist in the vocab.
  std::optional<TokenId> eos_id() const;
  std::optional<TokenId> pad_id() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of token ids into text pieces that are always complete UTF-8: bytes of a character
// split across tokens are held back until the character is complete.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  // Text that became complete with this token (possibly empty).
  std::string push(TokenId id);
  // Whatever is still held back, invalid bytes replaced by U+FFFD.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace ajet::text
