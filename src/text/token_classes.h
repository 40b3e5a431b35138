// What each vocabulary id is, for the engine's garbage and language-switch detectors
// (batching/madness.h): the script of its letters, or garbage. Decided from the token's bytes once
// per tokenizer; no libtorch.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

namespace ajet::text {

// The values of batching::TokenClass: 0 neutral (no letters: spaces, digits, punctuation, symbols,
// or bytes that are not whole UTF-8 characters), 1 Latin, 2 CJK (Han, kana, Hangul), 3 Cyrillic,
// 4 another script, 5 garbage (a control character other than tab and newlines, U+FFFD, or a
// special token that is not the end of a turn).
uint8_t classify_token_bytes(std::string_view bytes);

// By id, [0, tokenizer.vocab_size()); ids that name no token are neutral. Special tokens are
// garbage unless listed in `allowed` (the stop tokens: they end a reply rather than derail it).
std::vector<uint8_t> token_classes(const Tokenizer& tokenizer,
                                   const std::vector<TokenId>& allowed = {});

}  // namespace ajet::text
