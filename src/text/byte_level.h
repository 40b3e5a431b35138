// GPT-2's byte-level alphabet: every byte 0..255 stands for one printable code point, so any byte
// string is a string of "characters" BPE can merge. Shared by the tokenizer and the BPE trainer.
// Pure tables; never allocates after first use.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ajet::text::byte_level {

// The code point byte `b` is written as (GPT-2 `bytes_to_unicode`): printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in increasing byte order. E.g. ' ' -> 'Ġ' (U+0120).
char32_t byte_to_char(uint8_t b);
// Its UTF-8 encoding (1 or 2 bytes).
const std::string& byte_to_utf8(uint8_t b);
// The inverse; nullopt for code points outside the alphabet.
std::optional<uint8_t> char_to_byte(char32_t cp);

// The 256 bytes in the order GPT-2 lists them (the printable ranges first, then the rest); GPT-2
// and Qwen vocabularies give ids 0..255 to the alphabet in exactly this order, and so does our
// trainer.
const std::array<uint8_t, 256>& alphabet_order();

// Bytes -> alphabet string ("hi there" -> "hiĠthere").
std::string encode(std::string_view bytes);
// Alphabet string -> bytes, HF's rule: when every character is in the alphabet the result is the
// bytes they stand for; otherwise the string's own UTF-8 bytes (how HF decodes added tokens).
std::string decode(std::string_view piece);
// Like decode() but reports whether every character was in the alphabet.
std::optional<std::string> decode_strict(std::string_view piece);

}  // namespace ajet::text::byte_level
