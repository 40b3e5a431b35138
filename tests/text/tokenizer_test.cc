// Unit tests of the tokenizer's parts on small hand-made tokenizer.json files: byte-level mapping,
// UTF-8 repair, merges in both formats, merge order, added tokens and their flags, ignore_merges,
// the incremental decoder, NFC fast path, and errors for bad files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "text/bpe.h"
#include "text/byte_level.h"
#include "text/normalizer.h"
#include "text/pretokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace ajet::text {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kQwenRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A byte-level BPE tokenizer.json: ids 0..255 are the byte alphabet (GPT-2 order), then one id per
// merge result in order. `merges` are written as "a b" strings or ["a", "b"] pairs.
struct SmallSpec {
  std::vector<std::pair<std::string, std::string>> merges;  // in byte-level alphabet
  std::vector<std::string> extra_vocab;                     // tokens not produced by merges
  bool pair_format = false;
  bool ignore_merges = false;
  Json added_tokens = Json::array();
  Json normalizer = Json{{"type", "NFC"}};
};

Json byte_level_step() {
  return Json{{"type", "ByteLevel"},
              {"add_prefix_space", false},
              {"trim_offsets", false},
              {"use_regex", false}};
}

Json small_tokenizer(const SmallSpec& spec) {
  Json vocab = Json::object();
  int id = 0;
  for (uint8_t b : byte_level::alphabet_order()) vocab[byte_level::byte_to_utf8(b)] = id++;
  Json merges = Json::array();
  for (const auto& [a, b] : spec.merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
    merges.push_back(spec.pair_format ? Json::array({a, b}) : Json(a + " " + b));
  }
  for (const std::string& t : spec.extra_vocab) vocab[t] = id++;
  return Json{
      {"version", "1.0"},
      {"added_tokens", spec.added_tokens},
      {"normalizer", spec.normalizer},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", Json::array({Json{{"type", "Split"},
                                            {"pattern", {{"Regex", std::string(kQwenRegex)}}},
                                            {"behavior", "Isolated"},
                                            {"invert", false}},
                                       byte_level_step()})}}},
      {"decoder", byte_level_step()},
      {"model",
       {{"type", "BPE"},
        {"ignore_merges", spec.ignore_merges},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

Tokenizer make(const SmallSpec& spec) {
  return Tokenizer::from_json(small_tokenizer(spec).dump(), "small.json");
}

std::vector<std::string> pieces_of(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  std::vector<std::string> out;
  for (TokenId id : ids) out.push_back(tok.piece(id));
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// ---------------------------------------------------------------------------------------------

TEST(ByteLevel, MatchesGpt2Alphabet) {
  // GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 upwards.
  EXPECT_EQ(byte_level::byte_to_char('A'), U'A');
  EXPECT_EQ(byte_level::byte_to_char('!'), U'!');
  EXPECT_EQ(byte_level::byte_to_char(0xE9), U'\u00E9');
  EXPECT_EQ(byte_level::byte_to_char(0), U'\u0100');
  EXPECT_EQ(byte_level::byte_to_char('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(byte_level::byte_to_char(' '), U'\u0120');   // "Ġ"
  EXPECT_EQ(byte_level::byte_to_char(0x7F), U'\u0121');
  EXPECT_EQ(byte_level::byte_to_char(0xAD), U'\u0143');  // the last one
  EXPECT_EQ(byte_level::byte_to_utf8(' '), "\xC4\xA0");
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    char32_t c = byte_level::byte_to_char(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(c).second) << "byte " << b << " shares a character";
    EXPECT_EQ(byte_level::char_to_byte(c), std::optional<uint8_t>(static_cast<uint8_t>(b)));
  }
  EXPECT_FALSE(byte_level::char_to_byte(U' ').has_value());
  EXPECT_FALSE(byte_level::char_to_byte(U'\u4E2D').has_value());
  const auto& order = byte_level::alphabet_order();
  EXPECT_EQ(order[0], '!');
  EXPECT_EQ(order[93], '~');
  EXPECT_EQ(order[188], 0);  // 94 + 12 + 82 printable, then byte 0
  EXPECT_EQ(std::set<uint8_t>(order.begin(), order.end()).size(), 256u);
}

TEST(ByteLevel, EncodeDecodeRoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string enc = byte_level::encode(all);
  EXPECT_TRUE(utf8::is_valid(enc));
  EXPECT_EQ(byte_level::decode(enc), all);
  EXPECT_EQ(byte_level::encode("hi there\n"), "hi\xC4\xA0there\xC4\x8A");
  // A string with characters outside the alphabet decodes to its own bytes (HF's rule).
  EXPECT_EQ(byte_level::decode("<|im_end|>"), "<|im_end|>");
  EXPECT_EQ(byte_level::decode("a b"), "a b");
  EXPECT_FALSE(byte_level::decode_strict("a b").has_value());
}

TEST(Utf8, RepairReplacesMaximalSubparts) {
  // The example of Unicode 15 section 3.9 (U+FFFD substitution of maximal subparts).
  std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8::repair(in), "a" + r + r + r + "b" + r + "c" + r + r + "d");
  EXPECT_EQ(utf8::repair("\xED\xA0\x80"), r + r + r);  // a surrogate is three invalid bytes
  EXPECT_EQ(utf8::repair("\xC0\x80"), r + r);          // overlong
  EXPECT_EQ(utf8::repair("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(utf8::repair("ok \xF0\x9F\x98\x80"), "ok \xF0\x9F\x98\x80");
  EXPECT_EQ(utf8::repair("\xF0\x9F\x98"), r);
  EXPECT_TRUE(utf8::is_valid("plain ascii, long enough for the 8-byte path"));
  EXPECT_FALSE(utf8::is_valid("plain ascii, long enough for the 8-byte path\xFF"));
}

TEST(Utf8, CompletePrefixHoldsBackOnlyUnfinishedCharacters) {
  EXPECT_EQ(utf8::complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8::complete_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(utf8::complete_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(utf8::complete_prefix("\xE4\xB8"), 0u);
  EXPECT_EQ(utf8::complete_prefix("\xFF"), 1u);       // invalid: emit now (as U+FFFD)
  EXPECT_EQ(utf8::complete_prefix("\xE4\x41"), 2u);   // broken sequence then 'A'
  EXPECT_EQ(utf8::complete_prefix("a\xED\xA0"), 3u);  // ED A0 can never complete: emit both
}

// ---------------------------------------------------------------------------------------------

TEST(Merges, StringAndPairFormatsGiveTheSameTokens) {
  SmallSpec spec;
  spec.merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"\xC4\xA0", "w"}};
  Tokenizer strings = make(spec);
  spec.pair_format = true;
  Tokenizer pairs = make(spec);
  for (std::string_view text : {"hello", "hello world", "hell", "help", "oh hello, hello!"}) {
    EXPECT_EQ(strings.encode(text), pairs.encode(text)) << text;
  }
  EXPECT_EQ(pieces_of(strings, strings.encode("hello world")),
            (std::vector<std::string>{"hello", "\xC4\xA0w", "o", "r", "l", "d"}));
  EXPECT_EQ(strings.decode(strings.encode("hello world")), "hello world");
}

TEST(Merges, PairFormatAllowsSpacesInsideTokens) {
  // Pairs need no splitting, so a token with a literal space (not byte-level, but legal) works.
  SmallSpec spec;
  spec.pair_format = true;
  spec.merges = {{"a", "b"}};
  Json j = small_tokenizer(spec);
  j["model"]["vocab"]["x y"] = 9000;
  j["model"]["vocab"]["x yz"] = 9001;
  j["model"]["merges"].push_back(Json::array({"x y", "z"}));
  EXPECT_NO_THROW(Tokenizer::from_json(j.dump(), "pairs.json"));
}

TEST(Merges, RankDecidesAndTiesGoLeft) {
  SmallSpec ab_first;
  ab_first.merges = {{"a", "b"}, {"b", "c"}};
  Tokenizer t1 = make(ab_first);
  EXPECT_EQ(pieces_of(t1, t1.encode("abc")), (std::vector<std::string>{"ab", "c"}));
  SmallSpec bc_first;
  bc_first.merges = {{"b", "c"}, {"a", "b"}};
  Tokenizer t2 = make(bc_first);
  EXPECT_EQ(pieces_of(t2, t2.encode("abc")), (std::vector<std::string>{"a", "bc"}));
  SmallSpec aa;
  aa.merges = {{"a", "a"}};
  Tokenizer t3 = make(aa);
  EXPECT_EQ(pieces_of(t3, t3.encode("aaa")), (std::vector<std::string>{"aa", "a"}));
  EXPECT_EQ(pieces_of(t3, t3.encode("aaaaa")), (std::vector<std::string>{"aa", "aa", "a"}));
}

TEST(Merges, ScanAndHeapAlgorithmsAgree) {
  // Random merges over a 4-letter alphabet; every word must merge the same both ways.
  std::mt19937 rng(7);
  std::array<BpeId, 256> byte_ids;
  byte_ids.fill(-1);
  for (int b = 'a'; b <= 'd'; ++b) byte_ids[b] = b - 'a';
  std::vector<std::vector<BpeId>> tokens;  // not needed beyond ids
  std::vector<BpeModel::Merge> merges;
  BpeId next = 4;
  std::set<std::pair<BpeId, BpeId>> used;
  for (int i = 0; i < 60; ++i) {
    BpeId a = static_cast<BpeId>(rng() % next);
    BpeId b = static_cast<BpeId>(rng() % next);
    if (!used.insert({a, b}).second) continue;
    merges.push_back({a, b, next++});
  }
  BpeModel model(byte_ids, merges, false, {});
  for (int trial = 0; trial < 400; ++trial) {
    std::string word(1 + rng() % 300, 'a');
    for (char& c : word) c = static_cast<char>('a' + rng() % 4);
    auto scan = model.merge_word(word, false);
    auto heap = model.merge_word(word, true);
    ASSERT_EQ(scan, heap) << word;
    std::vector<BpeId> cached;
    model.encode_word(word, cached);
    ASSERT_EQ(cached, scan) << word;
  }
}

TEST(Merges, RepeatedPairTakesItsLastRank) {
  // HF and the JS port build their rank maps by insertion, so a repeated merge's last rank wins.
  SmallSpec spec;
  spec.merges = {{"b", "c"}, {"a", "b"}, {"b", "c"}};
  Tokenizer t = make(spec);
  EXPECT_EQ(pieces_of(t, t.encode("abc")), (std::vector<std::string>{"ab", "c"}));
}

// ---------------------------------------------------------------------------------------------

Json added(int id, std::string content, bool special, Json extra = Json::object()) {
  Json t = {{"id", id},        {"content", content},   {"special", special}, {"lstrip", false},
            {"rstrip", false}, {"single_word", false}, {"normalized", false}};
  for (auto& [k, v] : extra.items()) t[k] = v;
  return t;
}

TEST(AddedTokens, MatchedBeforeSplittingLongestFirst) {
  SmallSpec spec;
  spec.added_tokens = Json::array(
      {added(500, "<|end|>", true), added(501, "<a>", false), added(502, "<a><b>", false)});
  Tokenizer t = make(spec);
  EXPECT_EQ(t.encode("x<|end|>y"),
            (std::vector<TokenId>{*t.token_to_id("x"), 500, *t.token_to_id("y")}));
  EXPECT_EQ(t.encode("<a><b><a>"), (std::vector<TokenId>{502, 501}));
  EXPECT_EQ(t.encode("<|end|><|end|>"), (std::vector<TokenId>{500, 500}));
  // allow_special = false: the special token is text, the non-special one still matches.
  auto plain = t.encode("<|end|><a>", false);
  EXPECT_EQ(plain.back(), 501);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 500), 0);
  EXPECT_EQ(t.decode(plain), "<|end|><a>");
  EXPECT_TRUE(t.is_special(500));
  EXPECT_FALSE(t.is_special(501));
  EXPECT_EQ(t.decode(std::vector<TokenId>{500, 501}, /*skip_special=*/true), "<a>");
  EXPECT_EQ(t.vocab_size(), 503u);
  EXPECT_FALSE(t.valid_id(400));  // a gap between the model vocab and the added tokens
  EXPECT_TRUE(t.valid_id(502));
}

TEST(AddedTokens, LstripRstripAndSingleWord) {
  SmallSpec spec;
  spec.added_tokens = Json::array({added(600, "<L>", true, {{"lstrip", true}}),
                                   added(601, "<R>", true, {{"rstrip", true}}),
                                   added(602, "<W>", false, {{"single_word", true}})});
  Tokenizer t = make(spec);
  TokenId a = *t.token_to_id("a");
  EXPECT_EQ(t.encode("a  <L>a"), (std::vector<TokenId>{a, 600, a}));
  EXPECT_EQ(t.encode("a<R> \t a"), (std::vector<TokenId>{a, 601, a}));
  EXPECT_EQ(t.encode("a <W> a").at(2), 602);
  auto glued = t.encode("a<W>a");  // inside a word: not matched
  EXPECT_EQ(std::count(glued.begin(), glued.end(), 602), 0);
}

TEST(AddedTokens, NormalizedTokensMatchAfterNormalization) {
  // "é" as an added token: with normalized = true it also matches the NFD spelling.
  SmallSpec spec;
  spec.added_tokens = Json::array({added(700, "\xC3\xA9", false, {{"normalized", true}})});
  Tokenizer norm = make(spec);
  EXPECT_EQ(norm.encode("e\xCC\x81"), std::vector<TokenId>{700});
  spec.added_tokens = Json::array({added(700, "\xC3\xA9", false, {{"normalized", false}})});
  Tokenizer raw = make(spec);
  EXPECT_EQ(raw.encode("\xC3\xA9"), std::vector<TokenId>{700});
  EXPECT_NE(raw.encode("e\xCC\x81"), std::vector<TokenId>{700});
}

TEST(IgnoreMerges, WholeWordInVocabWinsOnlyWhenAsked) {
  SmallSpec spec;
  spec.merges = {{"a", "b"}};
  spec.extra_vocab = {"abc"};  // reachable only by a direct vocab lookup
  Tokenizer merging = make(spec);
  EXPECT_EQ(pieces_of(merging, merging.encode("abc")), (std::vector<std::string>{"ab", "c"}));
  spec.ignore_merges = true;
  Tokenizer direct = make(spec);
  EXPECT_EQ(pieces_of(direct, direct.encode("abc")), std::vector<std::string>{"abc"});
  EXPECT_EQ(pieces_of(direct, direct.encode("abcd")), (std::vector<std::string>{"ab", "c", "d"}));
}

// ---------------------------------------------------------------------------------------------

TEST(IncrementalDecoder, HoldsBackSplitCharacters) {
  SmallSpec spec;  // no merges: one token per byte, so multibyte characters always split
  spec.added_tokens = Json::array({added(300, "<s>", true)});
  Tokenizer t = make(spec);
  std::string text = "a\xF0\x9F\x98\x80\xC3\xA9z";  // a 😀 é z
  std::vector<TokenId> ids = t.encode(text);
  ASSERT_EQ(ids.size(), 8u);
  IncrementalDecoder dec(t);
  std::vector<std::string> outs;
  for (TokenId id : ids) outs.push_back(dec.push(id));
  EXPECT_EQ(outs,
            (std::vector<std::string>{"a", "", "", "", "\xF0\x9F\x98\x80", "", "\xC3\xA9", "z"}));
  EXPECT_EQ(dec.flush(), "");
  // Special tokens pass through, or vanish with skip_special.
  IncrementalDecoder keep(t);
  EXPECT_EQ(keep.push(300), "<s>");
  IncrementalDecoder skip(t, /*skip_special=*/true);
  EXPECT_EQ(skip.push(300), "");
  // A truncated character is flushed as U+FFFD; an impossible byte is replaced at once.
  IncrementalDecoder cut(t);
  EXPECT_EQ(cut.push(ids[1]), "");
  EXPECT_EQ(cut.push(ids[2]), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
  TokenId ff = *t.token_to_id(byte_level::byte_to_utf8(0xFF));
  IncrementalDecoder bad(t);
  EXPECT_EQ(bad.push(ff), "\xEF\xBF\xBD");
  EXPECT_EQ(t.decode(std::vector<TokenId>{ids[1], ids[2], ids[0]}),
            "\xEF\xBF\xBD"
            "a");
}

TEST(IncrementalDecoder, MatchesDecodeOnRandomStreams) {
  SmallSpec spec;
  spec.merges = {{"\xC3\x83", "\xC2\xA9"}};  // the bytes of "é" (C3 A9) in the byte-level alphabet
  Tokenizer t = make(spec);
  ASSERT_EQ(t.encode("\xC3\xA9").size(), 1u);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TokenId> ids(rng() % 12);
    for (TokenId& id : ids) id = static_cast<TokenId>(rng() % t.vocab_size());
    IncrementalDecoder dec(t);
    std::string s;
    for (TokenId id : ids) {
      std::string piece = dec.push(id);
      EXPECT_TRUE(utf8::is_valid(piece));
      s += piece;
    }
    s += dec.flush();
    EXPECT_EQ(s, t.decode(ids));
  }
}

// ---------------------------------------------------------------------------------------------

TEST(Encode, InvalidUtf8BecomesReplacementCharacters) {
  Tokenizer t = make(SmallSpec{});
  EXPECT_EQ(t.decode(t.encode("a\xFF"
                              "b")),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_TRUE(t.encode("").empty());
}

TEST(Encode, LongInputsDoNotFail) {
  SmallSpec spec;
  spec.merges = {{"\xC4\xA0", "\xC4\xA0"}, {"a", "a"}, {"aa", "aa"}};
  Tokenizer t = make(spec);
  for (std::string text : {std::string(200000, ' '), std::string(200000, 'a'),
                           std::string(100000, '7'), std::string(50000, '\n') + "x"}) {
    auto ids = t.encode(text);
    EXPECT_EQ(t.decode(ids), text);
  }
}

TEST(Encode, OutOfRangeIdsAreErrors) {
  Tokenizer t = make(SmallSpec{});
  EXPECT_THAT(error_of([&] { t.decode(std::vector<TokenId>{5, 99999}); }), HasSubstr("99999"));
  EXPECT_THAT(error_of([&] { t.piece(-1); }), HasSubstr("-1"));
  EXPECT_THROW(t.token_bytes(256), Error);
}

TEST(PreTokenizer, QwenPatternPieces) {
  PreTokenizer p = PreTokenizer::from_json(small_tokenizer(SmallSpec{})["pre_tokenizer"], "test");
  auto split = [&](std::string_view s) {
    std::vector<std::string_view> out;
    std::deque<std::string> arena;
    p.split(s, out, arena);
    return std::vector<std::string>(out.begin(), out.end());
  };
  EXPECT_EQ(split("Hello world's 123"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", "1", "2", "3"}));
  EXPECT_EQ(split("a  b\n\n  c"), (std::vector<std::string>{"a", " ", " b", "\n\n", " ", " c"}));
  EXPECT_EQ(split("x = f(y);\n"), (std::vector<std::string>{"x", " =", " f", "(y", ");\n"}));
  EXPECT_EQ(split("IT'S"), (std::vector<std::string>{"IT", "'S"}));
  // PCRE2's caseless mode would fold U+017F (long s) into 's'; HF and JS do not.
  EXPECT_EQ(split("'\xC5\xBFt"), std::vector<std::string>{"'\xC5\xBFt"});
}

TEST(PreTokenizer, CaselessGroupRewrite) {
  EXPECT_EQ(rewrite_caseless_groups("(?i:'s|'ll)|x"), "(?:'[sS]|'[lL][lL])|x");
  EXPECT_EQ(rewrite_caseless_groups("a(?i:[a-z]+)"), "a(?i:[a-z]+)");  // classes: left alone
  EXPECT_EQ(rewrite_caseless_groups("\\(?i:x)"), "\\(?i:x)");
}

TEST(PreTokenizer, SplitBehaviors) {
  auto run = [](const std::string& behavior, std::string_view text) {
    Json spec = {{"type", "Split"},
                 {"pattern", {{"String", "-"}}},
                 {"behavior", behavior},
                 {"invert", false}};
    PreTokenizer p = PreTokenizer::from_json(spec, "test");
    std::vector<std::string_view> out;
    std::deque<std::string> arena;
    p.split(text, out, arena);
    return std::vector<std::string>(out.begin(), out.end());
  };
  // The examples of HF's SplitDelimiterBehavior documentation.
  std::string_view text = "the-final--countdown";
  EXPECT_EQ(run("Removed", text), (std::vector<std::string>{"the", "final", "countdown"}));
  EXPECT_EQ(run("Isolated", text),
            (std::vector<std::string>{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(run("MergedWithPrevious", text),
            (std::vector<std::string>{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(run("MergedWithNext", text),
            (std::vector<std::string>{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(run("Contiguous", text),
            (std::vector<std::string>{"the", "-", "final", "--", "countdown"}));
}

TEST(PreTokenizer, ByteLevelPrefixSpaceAndGpt2Regex) {
  Json spec = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  PreTokenizer p = PreTokenizer::from_json(spec, "test");
  EXPECT_TRUE(p.byte_level());
  std::vector<std::string_view> out;
  std::deque<std::string> arena;
  p.split("Hello  world", out, arena);
  EXPECT_EQ(std::vector<std::string>(out.begin(), out.end()),
            (std::vector<std::string>{" Hello", " ", " world"}));
}

// ---------------------------------------------------------------------------------------------

TEST(Nfc, InertCodePointsAreUnchangedByNfc) {
  // Every code point the fast path skips must be NFC-stable on its own...
  size_t inert = 0;
  for (char32_t cp = 0x300; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if (!nfc_inert(cp)) continue;
    ++inert;
    std::string s;
    utf8::append(s, cp);
    ASSERT_EQ(nfc_reference(s), s) << "U+" << std::hex << static_cast<uint32_t>(cp);
  }
  EXPECT_GT(inert, 100000u);
  EXPECT_FALSE(nfc_inert(0x301));   // combining acute
  EXPECT_FALSE(nfc_inert(0x11A8));  // trailing jamo
  EXPECT_FALSE(nfc_inert(0x212B));  // angstrom sign -> U+00C5
  EXPECT_TRUE(nfc_inert(0x4E2D));
  EXPECT_TRUE(nfc_inert(0xAC00));
  EXPECT_TRUE(nfc_inert(0x304C));  // が: decomposes but recomposes
}

TEST(Nfc, FastPathAgreesWithUtf8procOnMixedStrings) {
  // ...and any mixture with tricky neighbours must normalize exactly like utf8proc does.
  std::vector<char32_t> pool = {'a',    'e',    'K',    ' ',    0xE9,    0x301,  0x323,  0x302,
                                0x304B, 0x3099, 0x304C, 0x1100, 0x1161,  0x11A8, 0xAC00, 0xAC01,
                                0x212B, 0x212A, 0xF900, 0x4E2D, 0x1F600, 0x0B47, 0x0B3E, 0x0DD9,
                                0x0DCF, 0xFB01, 0x0F73, 0x0344, 0x1E9B,  0x0915, 0x093C};
  Normalizer nfc = Normalizer::from_json(Json{{"type", "NFC"}}, "test");
  std::mt19937 rng(3);
  for (int trial = 0; trial < 5000; ++trial) {
    std::string s;
    size_t n = 1 + rng() % 6;
    for (size_t i = 0; i < n; ++i) utf8::append(s, pool[rng() % pool.size()]);
    std::string storage;
    ASSERT_EQ(std::string(nfc.apply(s, storage)), nfc_reference(s)) << s;
  }
}

// ---------------------------------------------------------------------------------------------

TEST(BadFiles, TruncatedJson) {
  std::string text = small_tokenizer(SmallSpec{}).dump();
  std::string msg = error_of(
      [&] { Tokenizer::from_json(text.substr(0, text.size() / 2), "models/x/tokenizer.json"); });
  EXPECT_THAT(msg, HasSubstr("models/x/tokenizer.json"));
  EXPECT_THAT(msg, HasSubstr("invalid JSON"));
}

// tokenizer.json is read by a reader of its own (the vocabulary is never built as JSON); it had no
// depth limit, and what it built of the rest was walked recursively later.
TEST(BadFiles, NestingPastTheLimitIsRefusedNamingWhere) {
  Json j = small_tokenizer(SmallSpec{});
  std::string text = j.dump();
  text.insert(text.size() - 1, R"(, "extra": )" + std::string(5000, '[') + std::string(5000, ']'));
  std::string msg = error_of([&] { Tokenizer::from_json(text, "models/x/tokenizer.json"); });
  EXPECT_THAT(msg, HasSubstr("models/x/tokenizer.json: invalid JSON at extra[0][0]"));
  EXPECT_THAT(msg, HasSubstr("nested deeper than 128 levels"));
}

TEST(BadFiles, UnsupportedModelTypes) {
  for (std::string type : {"WordPiece", "Unigram", "WordLevel"}) {
    Json j = small_tokenizer(SmallSpec{});
    j["model"]["type"] = type;
    std::string msg = error_of([&] { Tokenizer::from_json(j.dump(), "bert/tokenizer.json"); });
    EXPECT_THAT(msg, HasSubstr("bert/tokenizer.json"));
    EXPECT_THAT(msg, HasSubstr("unsupported model type '" + type + "'"));
  }
}

TEST(BadFiles, MergeNamingUnknownToken) {
  Json j = small_tokenizer(SmallSpec{});
  j["model"]["merges"] = Json::array({"a b", "zz q"});
  std::string msg = error_of([&] { Tokenizer::from_json(j.dump(), "m.json"); });
  EXPECT_THAT(msg, HasSubstr("m.json"));
  EXPECT_THAT(msg, HasSubstr("merges[0]"));  // "ab" itself is missing from the vocab
  EXPECT_THAT(msg, HasSubstr("'ab' which is not in the vocab"));
  j["model"]["vocab"]["ab"] = 400;
  msg = error_of([&] { Tokenizer::from_json(j.dump(), "m.json"); });
  EXPECT_THAT(msg, HasSubstr("merges[1]"));
  EXPECT_THAT(msg, HasSubstr("'zz' which is not in the vocab"));
}

TEST(BadFiles, MalformedPieces) {
  auto expect = [](Json j, const std::string& problem) {
    std::string msg = error_of([&] { Tokenizer::from_json(j.dump(), "bad.json"); });
    EXPECT_THAT(msg, HasSubstr("bad.json")) << problem;
    EXPECT_THAT(msg, HasSubstr(problem));
  };
  Json base = small_tokenizer(SmallSpec{});
  Json j = base;
  j.erase("model");
  expect(j, "missing required field 'model'");
  j = base;
  j["model"].erase("vocab");
  expect(j, "missing required field 'vocab'");
  j = base;
  j["model"]["merges"] = Json::array({"ab"});
  expect(j, "not of the form \"a b\"");
  j = base;
  j["model"]["merges"] = Json::array({Json::array({"a"})});
  expect(j, "merges[0] must be");
  j = base;
  j["model"]["vocab"]["x"] = -3;
  expect(j, "model.vocab['x']");
  j = base;
  j["model"]["vocab"]["x"] = 4000000000LL;
  expect(j, "model.vocab['x']");
  j = base;
  j["added_tokens"] = Json::array({Json{{"content", "<x>"}}});
  expect(j, "added_tokens[0]: missing required field 'id'");
  j = base;
  j["pre_tokenizer"] = Json{{"type", "Whitespace"}};
  expect(j, "unsupported pre-tokenizer type 'Whitespace'");
  j = base;
  j["pre_tokenizer"] =
      Json{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
  expect(j, "no ByteLevel step");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect(j, "bad regex");
  j = base;
  j["normalizer"] = Json{{"type", "Replace"}};
  expect(j, "unsupported normalizer type 'Replace'");
  j = base;
  j["model"]["vocab"]["dup"] = 5;
  expect(j, "to id 5");
  expect(Json::array(), "expected a JSON object");
}

// A checkpoint's embedding rows padded past the tokenizer: the model may emit those ids; they
// decode to nothing, as in HF, instead of failing the request that sampled one.
TEST(Encode, IdsPaddedToTheModelVocabDecodeToNothing) {
  Tokenizer t = make(SmallSpec{});
  const size_t n = t.vocab_size();
  const TokenId pad = static_cast<TokenId>(n) + 3;
  EXPECT_THROW(t.token_bytes(pad), Error);
  t.pad_to_model_vocab(n - 1);  // smaller: nothing changes
  EXPECT_EQ(t.vocab_size(), n);
  t.pad_to_model_vocab(n + 8);
  EXPECT_EQ(t.vocab_size(), n + 8);
  EXPECT_TRUE(t.valid_id(pad));
  EXPECT_FALSE(t.is_special(pad));
  EXPECT_EQ(t.token_bytes(pad), "");
  EXPECT_EQ(t.decode(std::vector<TokenId>{pad, 0, pad}), t.decode(std::vector<TokenId>{0}));
  IncrementalDecoder dec(t, /*skip_special=*/true);
  EXPECT_EQ(dec.push(pad) + dec.flush(), "");
  EXPECT_THROW(t.token_bytes(static_cast<TokenId>(n) + 8), Error);
}

TEST(BadFiles, LoadNamesTheFiles) {
  auto dir =
      std::filesystem::temp_directory_path() / ("ajet_tok_bad_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string msg = error_of([&] { Tokenizer::load(dir); });
  EXPECT_THAT(msg, HasSubstr((dir / "tokenizer.json").string()));
  write_file_atomic(dir / "tokenizer.json", small_tokenizer(SmallSpec{}).dump());
  write_file_atomic(dir / "tokenizer_config.json", "{\"eos_token\": 5}");
  msg = error_of([&] { Tokenizer::load(dir); });
  EXPECT_THAT(msg, HasSubstr((dir / "tokenizer_config.json").string()));
  EXPECT_THAT(msg, HasSubstr("eos_token"));
  write_file_atomic(dir / "tokenizer_config.json", "{\"eos_token\": ");
  msg = error_of([&] { Tokenizer::load(dir); });
  EXPECT_THAT(msg, HasSubstr("tokenizer_config.json: invalid JSON"));
  std::filesystem::remove_all(dir);
}

TEST(Config, SpecialTokenFormsAndNamedTemplates) {
  TokenizerConfig c = parse_tokenizer_config(
      R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null,
          "add_bos_token": true,
          "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})",
      "cfg.json");
  EXPECT_EQ(c.bos_token.value_or(""), "<s>");
  EXPECT_EQ(c.eos_token.value_or(""), "</s>");
  EXPECT_FALSE(c.pad_token.has_value());
  EXPECT_TRUE(c.add_bos_token);
  EXPECT_EQ(c.chat_template, "D");
  c = parse_tokenizer_config(R"({"chat_template": [{"name": "rag", "template": "R"}]})",
                             "cfg.json");
  EXPECT_EQ(c.chat_template, "R");
  EXPECT_THAT(error_of([] { parse_tokenizer_config(R"({"chat_template": 3})", "cfg.json"); }),
              HasSubstr("cfg.json: field 'chat_template'"));
}

TEST(Config, LoadFromDirectoryAndFile) {
  auto dir =
      std::filesystem::temp_directory_path() / ("ajet_tok_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  SmallSpec spec;
  spec.added_tokens =
      Json::array({added(300, "<|im_end|>", true), added(301, "<|endoftext|>", true)});
  write_file_atomic(dir / "tokenizer.json", small_tokenizer(spec).dump());
  write_file_atomic(
      dir / "tokenizer_config.json",
      R"({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": "X"})");
  for (auto path : {dir, dir / "tokenizer.json"}) {
    Tokenizer t = Tokenizer::load(path);
    EXPECT_EQ(t.config().chat_template, "X");
    EXPECT_EQ(t.eos_id(), std::optional<TokenId>(300));
    EXPECT_EQ(t.pad_id(), std::optional<TokenId>(301));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ajet::text
