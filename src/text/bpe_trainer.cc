#include "text/bpe_trainer.h"

#include <algorithm>
#include <array>
#include <optional>
#include <deque>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/log.h"
#include "text/added_tokens.h"
#include "text/byte_level.h"
#include "text/normalizer.h"
#include "text/pretokenizer.h"
#include "text/utf8.h"

namespace ajet::text {

// Qwen2.5-Instruct's chat template, verbatim (the tool-capable ChatML one: a <tools> block in the
// system turn, <tool_call> JSON in assistant turns, tool results as <tool_response> in a user
// turn). Kept byte-identical so src/text/chat_template.cc recognises its family from this string;
// change it only together with that detection.
const std::string_view kChatMlTemplate =
    R"TPL({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)TPL";

const std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using Pair = std::pair<int32_t, int32_t>;

uint64_t key_of(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Word {
  std::vector<int32_t> syms;
  int64_t count = 0;
};

// Max-heap entry: higher count first; equal counts go to the smaller (left, right) ids, as HF's
// BpeTrainer orders them, so the result never depends on hash-map order.
struct Candidate {
  int64_t count;
  int32_t left;
  int32_t right;
  bool operator<(const Candidate& o) const {
    if (count != o.count) return count < o.count;
    return std::tie(left, right) > std::tie(o.left, o.right);
  }
};

Json pre_tokenizer_spec() {
  Json split = {{"type", "Split"},
                {"pattern", {{"Regex", std::string(kQwen2Pattern)}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  Json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", false},
                     {"use_regex", false}};
  return Json{{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level})}};
}

// Word bytes -> occurrences, from the corpus with added tokens cut out (they are never merged
// into).
std::vector<std::pair<std::string, int64_t>> count_words(std::string_view corpus,
                                                         const std::deque<AddedToken>& added) {
  std::vector<const AddedToken*> ptrs;
  for (const AddedToken& a : added) ptrs.push_back(&a);
  AddedTokenMatcher matcher(ptrs);
  Normalizer nfc = Normalizer::from_json(Json{{"type", "NFC"}}, "bpe trainer");
  PreTokenizer pre = PreTokenizer::from_json(pre_tokenizer_spec(), "bpe trainer");

  std::unordered_map<std::string, int64_t> counts;
  std::vector<std::string_view> pieces;
  std::deque<std::string> arena;
  std::string storage;
  auto count_section = [&](std::string_view section) {
    pieces.clear();
    arena.clear();
    pre.split(nfc.apply(section, storage), pieces, arena);
    for (std::string_view p : pieces) ++counts[std::string(p)];
  };
  size_t pos = 0;
  while (pos < corpus.size()) {
    auto m = matcher.find(corpus, pos, true);
    size_t end = m ? m->begin : corpus.size();
    if (end > pos) count_section(corpus.substr(pos, end - pos));
    if (!m) break;
    pos = m->end;
  }
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

// The added tokens in id order (specials first) and their contents; throws for an empty or repeated
// one.
struct AddedTokens {
  std::deque<AddedToken> tokens;
  std::unordered_set<std::string> contents;
};

AddedTokens added_tokens(const BpeTrainerOptions& options) {
  AddedTokens out;
  auto add = [&](const std::string& content, bool special) {
    if (content.empty()) invalid_argument("bpe trainer: empty added token");
    if (!out.contents.insert(content).second)
      invalid_argument("bpe trainer: added token '" + content + "' given twice");
    AddedToken a;
    a.content = content;
    a.special = special;
    out.tokens.push_back(a);
  };
  for (const std::string& s : options.special_tokens) add(s, true);
  for (const std::string& s : options.added_tokens) add(s, false);
  return out;
}

// The model vocabulary being learned: pieces by id, and the byte alphabet's ids.
struct Vocab {
  std::vector<std::string> pieces;  // by id (byte-level strings)
  std::unordered_map<std::string, int32_t> piece_ids;
  std::array<int32_t, 256> byte_id{};  // byte -> id

  // Ids 0..255: the byte alphabet in GPT-2 order.
  static Vocab byte_alphabet() {
    Vocab v;
    for (size_t i = 0; i < 256; ++i) {
      uint8_t b = byte_level::alphabet_order()[i];
      v.byte_id[b] = static_cast<int32_t>(i);
      v.pieces.push_back(byte_level::byte_to_utf8(b));
      v.piece_ids.emplace(v.pieces.back(), static_cast<int32_t>(i));
    }
    return v;
  }

  // The id of the piece `left` + `right`: a new one, or the existing one when the same string was
  // reached by another split (HF reuses the id).
  int32_t add_merged_piece(int32_t left, int32_t right) {
    std::string merged_piece = pieces[left] + pieces[right];
    if (auto it = piece_ids.find(merged_piece); it != piece_ids.end()) return it->second;
    const auto id = static_cast<int32_t>(pieces.size());
    pieces.push_back(merged_piece);
    piece_ids.emplace(merged_piece, id);
    return id;
  }
};

// The corpus's words as byte-alphabet ids, in count_words' (sorted) order.
std::vector<Word> corpus_words(std::string_view corpus, const std::deque<AddedToken>& added,
                               const Vocab& vocab) {
  std::vector<Word> words;
  for (auto& [bytes, count] : count_words(corpus, added)) {
    Word w;
    w.count = count;
    for (char c : bytes) w.syms.push_back(vocab.byte_id[static_cast<uint8_t>(c)]);
    words.push_back(std::move(w));
  }
  return words;
}

// `syms` with every non-overlapping (left, right), scanned left to right, replaced by `merged`;
// nullopt when there is none.
std::optional<std::vector<int32_t>> merged_symbols(const std::vector<int32_t>& syms, int32_t left,
                                                   int32_t right, int32_t merged) {
  std::vector<int32_t> next;
  next.reserve(syms.size());
  bool hit = false;
  for (size_t i = 0; i < syms.size(); ++i) {
    if (i + 1 < syms.size() && syms[i] == left && syms[i + 1] == right) {
      next.push_back(merged);
      ++i;
      hit = true;
    } else {
      next.push_back(syms[i]);
    }
  }
  if (!hit) return std::nullopt;
  return next;
}

// Adjacent-pair counts over the words (weighted by word count), the words each pair occurs in, and
// a lazy max-heap of candidates: an entry is stale when its count differs from pair_count.
struct PairIndex {
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;  // word indices, ascending
  std::priority_queue<Candidate> heap;
  std::vector<uint32_t> last_touched;  // per word: the last merge index that rewrote it

  static PairIndex count(const std::vector<Word>& words) {
    PairIndex p;
    for (uint32_t wi = 0; wi < words.size(); ++wi) {
      const Word& w = words[wi];
      for (size_t i = 0; i + 1 < w.syms.size(); ++i)
        p.add(key_of(w.syms[i], w.syms[i + 1]), w.count, wi);
    }
    for (const auto& [k, c] : p.pair_count) p.push(k, c);
    p.last_touched.assign(words.size(), UINT32_MAX);
    return p;
  }

  // The most frequent pair with its current count; stale entries are requeued with their current
  // count (or dropped at 0). nullopt when no pair is left.
  std::optional<Candidate> pop_current() {
    while (!heap.empty()) {
      Candidate top = heap.top();
      heap.pop();
      int64_t actual = pair_count[key_of(top.left, top.right)];
      if (actual == top.count) return top;
      if (actual > 0) heap.push({actual, top.left, top.right});
    }
    return std::nullopt;
  }

  // Rewrites every word holding `pair` with `merged_id` (merge number `merge_index`), updates the
  // counts and locations of the pairs around it and queues the pairs it created.
  void apply(const Candidate& pair, int32_t merged_id, uint32_t merge_index,
             std::vector<Word>& words) {
    const uint64_t k = key_of(pair.left, pair.right);
    std::vector<uint64_t> grown;
    std::vector<uint32_t> affected = std::move(where[k]);
    where.erase(k);
    for (uint32_t wi : affected) {
      if (last_touched[wi] == merge_index) continue;
      last_touched[wi] = merge_index;
      Word& w = words[wi];
      std::optional<std::vector<int32_t>> next =
          merged_symbols(w.syms, pair.left, pair.right, merged_id);
      if (!next) continue;
      for (size_t i = 0; i + 1 < w.syms.size(); ++i)
        pair_count[key_of(w.syms[i], w.syms[i + 1])] -= w.count;
      w.syms = std::move(*next);
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
        uint64_t nk = key_of(w.syms[i], w.syms[i + 1]);
        add(nk, w.count, wi);
        grown.push_back(nk);
      }
    }
    std::sort(grown.begin(), grown.end());
    grown.erase(std::unique(grown.begin(), grown.end()), grown.end());
    for (uint64_t nk : grown) {
      int64_t c = pair_count[nk];
      if (c > 0) push(nk, c);
    }
  }

 private:
  void add(uint64_t k, int64_t count, uint32_t wi) {
    pair_count[k] += count;
    auto& list = where[k];
    if (list.empty() || list.back() != wi) list.push_back(wi);
  }
  void push(uint64_t k, int64_t count) {
    heap.push({count, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu)});
  }
};

// Gives the added tokens their ids, right after the model vocabulary.
void assign_added_ids(std::deque<AddedToken>& added, size_t model_vocab) {
  auto first_added_id = static_cast<int32_t>(model_vocab);
  for (size_t i = 0; i < added.size(); ++i) added[i].id = first_added_id + static_cast<int32_t>(i);
}

// tokenizer.json, laid out like Qwen's.
std::string tokenizer_json(const Vocab& vocab, const std::vector<Pair>& merges,
                           const std::deque<AddedToken>& added) {
  using OJson = nlohmann::ordered_json;
  const std::vector<std::string>& pieces = vocab.pieces;
  OJson added_json = OJson::array();
  for (const AddedToken& a : added) {
    added_json.push_back(OJson{{"id", a.id},
                               {"content", a.content},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", false},
                               {"special", a.special}});
  }
  OJson vocab_json = OJson::object();
  for (size_t i = 0; i < pieces.size(); ++i) vocab_json[pieces[i]] = static_cast<int32_t>(i);
  OJson merges_json = OJson::array();
  for (const auto& [a, b] : merges) merges_json.push_back(OJson::array({pieces[a], pieces[b]}));
  OJson byte_level = {{"type", "ByteLevel"},
                      {"add_prefix_space", false},
                      {"trim_offsets", false},
                      {"use_regex", false}};
  OJson tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added_json;
  tok["normalizer"] = {{"type", "NFC"}};
  tok["pre_tokenizer"] = OJson(pre_tokenizer_spec());
  tok["post_processor"] = byte_level;
  tok["decoder"] = byte_level;
  tok["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", ""},
                  {"end_of_word_suffix", ""},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", false},
                  {"vocab", vocab_json},
                  {"merges", merges_json}};
  return tok.dump(2) + "\n";
}

// tokenizer_config.json, with the fields transformers and the JS port read. Throws when the eos or
// pad token is not an added token.
std::string tokenizer_config_json(const AddedTokens& added, const BpeTrainerOptions& options) {
  using OJson = nlohmann::ordered_json;
  OJson decoder_map = OJson::object();
  std::vector<std::string> extra_special;
  for (const AddedToken& a : added.tokens) {
    decoder_map[std::to_string(a.id)] = {{"content", a.content}, {"lstrip", false},
                                         {"normalized", false},  {"rstrip", false},
                                         {"single_word", false}, {"special", a.special}};
    if (a.special && a.content != options.eos_token && a.content != options.pad_token) {
      extra_special.push_back(a.content);
    }
  }
  if (!added.contents.count(options.eos_token)) {
    invalid_argument("bpe trainer: eos token '" + options.eos_token + "' is not an added token");
  }
  if (!added.contents.count(options.pad_token)) {
    invalid_argument("bpe trainer: pad token '" + options.pad_token + "' is not an added token");
  }
  OJson cfg;
  cfg["add_bos_token"] = false;
  cfg["add_prefix_space"] = false;
  cfg["added_tokens_decoder"] = decoder_map;
  cfg["additional_special_tokens"] = extra_special;
  cfg["bos_token"] = nullptr;
  cfg["chat_template"] = std::string(kChatMlTemplate);
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["eos_token"] = options.eos_token;
  cfg["errors"] = "replace";
  cfg["model_max_length"] = 32768;
  cfg["pad_token"] = options.pad_token;
  cfg["split_special_tokens"] = false;
  cfg["tokenizer_class"] = "Qwen2Tokenizer";
  cfg["unk_token"] = nullptr;
  return cfg.dump(2) + "\n";
}

}  // namespace

// The phases: 1. added tokens and the vocab-size check; 2. the byte alphabet; 3. the corpus's words
// and their pair counts; 4. merges, most frequent pair first, until the vocab is full, the pairs
// run out or the best one is below min_frequency; 5. the two JSON files.
TrainedBpe train_bpe(std::string_view corpus_in, const BpeTrainerOptions& options) {
  std::string corpus = utf8::is_valid(corpus_in) ? std::string(corpus_in) : utf8::repair(corpus_in);
  // 1. Added tokens: ids after the model vocabulary, never merged into.
  AddedTokens added = added_tokens(options);
  if (options.vocab_size < 256 + added.tokens.size()) {
    invalid_argument("bpe trainer: vocab size " + std::to_string(options.vocab_size) +
                     " is below the minimum " + std::to_string(256 + added.tokens.size()) +
                     " (256 bytes + " + std::to_string(added.tokens.size()) + " added tokens)");
  }
  const size_t model_target = options.vocab_size - added.tokens.size();
  // 2. Ids 0..255: the byte alphabet.
  Vocab vocab = Vocab::byte_alphabet();
  // 3. Words and the counts of their adjacent pairs.
  std::vector<Word> words = corpus_words(corpus, added.tokens, vocab);
  PairIndex pairs = PairIndex::count(words);
  // 4. The merge loop.
  const auto min_count = static_cast<int64_t>(std::max<size_t>(options.min_frequency, 1));
  std::vector<Pair> merges;
  while (vocab.pieces.size() < model_target) {
    const std::optional<Candidate> best = pairs.pop_current();
    if (!best || best->count < min_count) break;
    const int32_t merged_id = vocab.add_merged_piece(best->left, best->right);
    const auto merge_index = static_cast<uint32_t>(merges.size());
    merges.emplace_back(best->left, best->right);
    pairs.apply(*best, merged_id, merge_index, words);
  }
  if (vocab.pieces.size() < model_target) {
    log().warn(
        "bpe trainer: corpus supports only {} model tokens ({} requested); vocab size will be {}",
        vocab.pieces.size(), model_target, vocab.pieces.size() + added.tokens.size());
  }
  // 5. The files.
  assign_added_ids(added.tokens, vocab.pieces.size());
  TrainedBpe out;
  out.tokenizer_json = tokenizer_json(vocab, merges, added.tokens);
  out.tokenizer_config_json = tokenizer_config_json(added, options);
  out.vocab_size = vocab.pieces.size() + added.tokens.size();
  out.merges = merges.size();
  return out;
}

void write_trained_bpe(const TrainedBpe& trained, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(ErrorCode::kIo, dir.string() + ": cannot create directory (" + ec.message() + ")");
  write_file_atomic(dir / "tokenizer.json", trained.tokenizer_json);
  write_file_atomic(dir / "tokenizer_config.json", trained.tokenizer_config_json);
}

}  // namespace ajet::text
