// Learns a small byte-level BPE vocabulary from a text corpus (the same NFC normalizer and Qwen2
// pre-tokenizer regex the tokenizer uses) and writes it as a Hugging Face tokenizer.json plus a
// tokenizer_config.json with ChatML special tokens and chat template. Deterministic: the same
// corpus and options give byte-identical files. Never touches the network.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ajet::text {

// The chat template written into tokenizer_config.json (Qwen2.5's tool-capable ChatML template).
extern const std::string_view kChatMlTemplate;
// The Qwen2 / Qwen3 pre-tokenizer regex written into tokenizer.json.
extern const std::string_view kQwen2Pattern;

struct BpeTrainerOptions {
  // Total ids: byte alphabet (256) + learned merges + added tokens. At least 256 + added tokens.
  size_t vocab_size = 1024;
  // Added with special = true (skipped by decode(skip_special)); ids right after the model vocab.
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  // Added with special = false, as Qwen2.5 does for its tool-call markers; ids after the specials.
  std::vector<std::string> added_tokens = {"<tool_call>", "</tool_call>", "<tool_response>",
                                           "</tool_response>"};
  // A pair seen fewer times than this is never merged (training then stops early).
  size_t min_frequency = 2;
  std::string eos_token = "<|im_end|>";
  std::string pad_token = "<|endoftext|>";
};

struct TrainedBpe {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  size_t vocab_size =
      0;  // ids actually used (smaller than asked when the corpus runs out of pairs)
  size_t merges = 0;
};

// Throws Error(kInvalidArgument) for an impossible vocab size or empty token strings.
TrainedBpe train_bpe(std::string_view corpus, const BpeTrainerOptions& options);

// Writes tokenizer.json and tokenizer_config.json into `dir` (created if missing).
void write_trained_bpe(const TrainedBpe& trained, const std::filesystem::path& dir);

}  // namespace ajet::text
