#include "text/tokenizer.h"

#include <deque>
#include <unordered_map>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/byte_level.h"
#include "text/normalizer.h"
#include "text/pretokenizer.h"
#include "text/utf8.h"

namespace ajet::text {

namespace {

// Ids above this are rejected at load: a corrupt file must not make us allocate gigabytes.
constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

[[noreturn]] void bad_file(std::string_view source, const std::string& problem) {
  invalid_argument(std::string(source) + ": " + problem);
}

const Json& require(const Json& obj, std::string_view key, std::string_view source,
                    std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end())
    bad_file(source, std::string(where) + ": missing required field '" + std::string(key) + "'");
  return *it;
}

// A special token in tokenizer_config.json is a string, {"content": ...} (AddedToken), or null.
std::optional<std::string> config_token(const Json& cfg, std::string_view key,
                                        std::string_view source) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  bad_file(source, "field '" + std::string(key) +
                       "' must be a string, an object with a string 'content', or null");
}

// Parses tokenizer.json, streaming model.vocab and model.merges (some 300k entries in a Qwen file)
// straight into `vocab` / `merges` while building a DOM for everything else: about twice as fast as
// a full nlohmann DOM, which matters for every CLI call and engine start.
class TokenizerJsonSax final : public nlohmann::json_sax<Json> {
 public:
  TokenizerJsonSax(std::string_view source, std::unordered_map<std::string, TokenId>& vocab)
      : source_(source), vocab_(vocab) {}

  Json root;
  bool has_vocab = false;
  bool has_merges = false;
  std::vector<std::pair<std::string, std::string>> merges;
  int64_t max_vocab_id = -1;

  bool null() override { return scalar(Json()); }
  bool boolean(bool v) override { return scalar(Json(v)); }
  bool number_integer(Json::number_integer_t v) override {
    return mode_ == kVocab ? vocab_id(v) : scalar(Json(v));
  }
  bool number_unsigned(Json::number_unsigned_t v) override {
    return mode_ == kVocab
               ? vocab_id(v > static_cast<uint64_t>(kMaxTokenId) ? -1 : static_cast<int64_t>(v))
               : scalar(Json(v));
  }
  bool number_float(Json::number_float_t v, const std::string&) override { return scalar(Json(v)); }
  bool binary(Json::binary_t&) override { return scalar(Json()); }
  bool string(std::string& v) override {
    if (mode_ == kMerges) {
      size_t sp = v.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= v.size()) {
        bad_file(source_, "model.merges[" + std::to_string(merges.size()) + "] = \"" + v +
                              "\" is not of the form \"a b\"");
      }
      merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
      return true;
    }
    if (mode_ == kMergePair) {
      pair_.push_back(std::move(v));
      return true;
    }
    return scalar(Json(std::move(v)));
  }
  bool key(std::string& k) override {
    key_ = std::move(k);
    return true;
  }
  bool start_object(size_t) override {
    if (mode_ == kDom && stack_.size() == 2 && stack_[1] == model_ && key_ == "vocab") {
      mode_ = kVocab;
      has_vocab = true;
      return true;
    }
    if (mode_ != kDom) return scalar(Json());  // reports the misplaced object
    Json* obj = add(Json::object());
    if (stack_.size() == 1 && key_ == "model" && stack_[0] == &root) model_ = obj;
    stack_.push_back(obj);
    return true;
  }
  bool end_object() override {
    if (mode_ == kVocab) {
      mode_ = kDom;
    } else {
      stack_.pop_back();
    }
    return true;
  }
  bool start_array(size_t) override {
    if (mode_ == kDom && stack_.size() == 2 && stack_[1] == model_ && key_ == "merges") {
      mode_ = kMerges;
      has_merges = true;
      return true;
    }
    if (mode_ == kMerges) {
      mode_ = kMergePair;
      pair_.clear();
      return true;
    }
    if (mode_ != kDom) return scalar(Json());
    stack_.push_back(add(Json::array()));
    return true;
  }
  bool end_array() override {
    if (mode_ == kMergePair) {
      if (pair_.size() != 2) bad_merge();
      merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = kMerges;
    } else if (mode_ == kMerges) {
      mode_ = kDom;
    } else {
      stack_.pop_back();
    }
    return true;
  }
  // Not called: sax_parse_json reports syntax errors itself, naming where they are.
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) override {
    invalid_argument(std::string(source_) + ": invalid JSON: " + e.what());
  }

 private:
  enum Mode { kDom, kVocab, kMerges, kMergePair };

  [[noreturn]] void bad_merge() {
    bad_file(source_, "model.merges[" + std::to_string(merges.size()) +
                          "] must be a string \"a b\" or a pair [\"a\", \"b\"]");
  }
  bool vocab_id(int64_t id) {
    if (id < 0 || id > kMaxTokenId) {
      bad_file(source_, "model.vocab['" + key_ + "'] must be an integer id in [0, " +
                            std::to_string(kMaxTokenId) + "]");
    }
    vocab_.insert_or_assign(key_, static_cast<TokenId>(id));
    max_vocab_id = std::max(max_vocab_id, id);
    return true;
  }
  bool scalar(Json v) {
    if (mode_ == kVocab) {
      bad_file(source_, "model.vocab['" + key_ + "'] must be an integer id in [0, " +
                            std::to_string(kMaxTokenId) + "]");
    }
    if (mode_ == kMerges || mode_ == kMergePair) bad_merge();
    add(std::move(v));
    return true;
  }
  // Places a value in the innermost open container (or as the root). Pointers to open containers
  // stay valid: a container only grows while it is the innermost one.
  Json* add(Json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    Json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }

  std::string_view source_;
  std::unordered_map<std::string, TokenId>& vocab_;
  std::vector<Json*> stack_;
  Json* model_ = nullptr;
  std::string key_;
  Mode mode_ = kDom;
  std::vector<std::string> pair_;
};
}  // namespace

TokenizerConfig parse_tokenizer_config(std::string_view json_text, std::string_view source_name) {
  Json cfg = parse_json(json_text, source_name);
  if (!cfg.is_object()) bad_file(source_name, "expected a JSON object at top level");
  TokenizerConfig out;
  auto it = cfg.find("chat_template");
  if (it != cfg.end() && !it->is_null()) {
    if (it->is_string()) {
      out.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      // Named templates: [{"name": "default", "template": "..."}, {"name": "tool_use", ...}].
      const Json* chosen = nullptr;
      for (const Json& t : *it) {
        if (!t.is_object() || !t.contains("template") || !t["template"].is_string()) {
          bad_file(source_name,
                   "chat_template list entries must be objects with a string 'template'");
        }
        if (chosen == nullptr) chosen = &t;
        if (t.contains("name") && t["name"] == "default") chosen = &t;
      }
      if (chosen != nullptr) out.chat_template = (*chosen)["template"].get<std::string>();
    } else {
      bad_file(source_name, "field 'chat_template' must be a string or a list of {name, template}");
    }
  }
  out.bos_token = config_token(cfg, "bos_token", source_name);
  out.eos_token = config_token(cfg, "eos_token", source_name);
  out.pad_token = config_token(cfg, "pad_token", source_name);
  out.unk_token = config_token(cfg, "unk_token", source_name);
  auto add_bos = cfg.find("add_bos_token");
  if (add_bos != cfg.end() && !add_bos->is_null()) {
    if (!add_bos->is_boolean()) bad_file(source_name, "field 'add_bos_token' must be a boolean");
    out.add_bos_token = add_bos->get<bool>();
  }
  return out;
}

struct Tokenizer::Impl {
  std::string source;
  TokenizerConfig config;

  // Model vocabulary and added tokens; id_pieces[id] is empty for ids that name nothing.
  std::unordered_map<std::string, TokenId> vocab;  // piece -> id (model vocab only)
  std::vector<std::string> id_pieces;
  std::vector<std::string> id_bytes;
  std::vector<uint8_t> id_flags;  // kValid | kSpecial | kAdded
  static constexpr uint8_t kValid = 1, kSpecial = 2, kAdded = 4;

  std::deque<AddedToken> added;  // stable addresses for the matchers
  std::unordered_map<std::string, TokenId> added_by_content;
  AddedTokenMatcher raw_matcher;         // normalized == false: matched on the raw text
  AddedTokenMatcher normalized_matcher;  // normalized == true: matched after normalization

  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel bpe;

  void encode_model(std::string_view text, std::vector<TokenId>& out) const {
    // Per-thread scratch, reused across calls (encode_model never re-enters itself).
    thread_local std::vector<std::string_view> pieces;
    thread_local std::deque<std::string> arena;
    pieces.clear();
    arena.clear();
    pre_tokenizer.split(text, pieces, arena);
    for (std::string_view p : pieces) bpe.encode_word(p, out);
  }

  // Splits `text` on the matcher's tokens; `gap` handles the text between them.
  template <class Gap>
  void split_added(const AddedTokenMatcher& matcher, std::string_view text, bool allow_special,
                   std::vector<TokenId>& out, Gap&& gap) const {
    size_t pos = 0;
    while (pos <= text.size()) {
      auto m = matcher.find(text, pos, allow_special);
      size_t end = m ? m->begin : text.size();
      if (end > pos) gap(text.substr(pos, end - pos));
      if (!m) break;
      out.push_back(m->token->id);
      pos = m->end;
    }
  }

  void encode_section(std::string_view section, bool allow_special,
                      std::vector<TokenId>& out) const {
    std::string storage;
    std::string_view norm = normalizer.apply(section, storage);
    if (normalized_matcher.empty()) {
      encode_model(norm, out);
    } else {
      split_added(normalized_matcher, norm, allow_special, out,
                  [&](std::string_view gap) { encode_model(gap, out); });
    }
  }

  bool valid(TokenId id) const {
    return id >= 0 && static_cast<size_t>(id) < id_flags.size() && (id_flags[id] & kValid) != 0;
  }

  void check_id(TokenId id, std::string_view what) const {
    if (!valid(id)) {
      invalid_argument(std::string(what) + ": token id " + std::to_string(id) +
                       " is not in the vocabulary of " + source + " (size " +
                       std::to_string(id_flags.size()) + ")");
    }
  }
};

namespace {

std::deque<AddedToken> parse_added_tokens(const Json& root, std::string_view src) {
  std::deque<AddedToken> added;
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return added;
  if (!it->is_array()) bad_file(src, "'added_tokens' must be an array");
  size_t index = 0;
  for (const Json& t : *it) {
    std::string where = "added_tokens[" + std::to_string(index++) + "]";
    if (!t.is_object()) bad_file(src, where + " must be an object");
    const Json& id = require(t, "id", src, where);
    const Json& content = require(t, "content", src, where);
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId) {
      bad_file(src,
               where + ": 'id' must be an integer in [0, " + std::to_string(kMaxTokenId) + "]");
    }
    if (!content.is_string() || content.get<std::string>().empty()) {
      bad_file(src, where + ": 'content' must be a non-empty string");
    }
    AddedToken a;
    a.id = static_cast<TokenId>(id.get<int64_t>());
    a.content = content.get<std::string>();
    std::string ctx = std::string(src) + ": " + where;
    a.special = get_optional_bool(t, "special", ctx).value_or(false);
    a.lstrip = get_optional_bool(t, "lstrip", ctx).value_or(false);
    a.rstrip = get_optional_bool(t, "rstrip", ctx).value_or(false);
    a.single_word = get_optional_bool(t, "single_word", ctx).value_or(false);
    a.normalized = get_optional_bool(t, "normalized", ctx).value_or(!a.special);
    added.push_back(std::move(a));
  }
  return added;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view source_name) {
  return from_json(tokenizer_json, source_name, TokenizerConfig{});
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view src,
                               TokenizerConfig config) {
  auto impl = std::make_unique<Impl>();
  impl->source = std::string(src);
  impl->config = std::move(config);
  impl->vocab.reserve(1 << 17);
  TokenizerJsonSax sax(src, impl->vocab);
  sax_parse_json(tokenizer_json, src, sax);
  const Json& root = sax.root;
  if (!root.is_object()) bad_file(src, "expected a JSON object at top level");

  const Json& model = require(root, "model", src, "top level");
  if (!model.is_object()) bad_file(src, "'model' must be an object");
  std::string type = "BPE";
  if (auto t = model.find("type"); t != model.end()) {
    if (!t->is_string()) bad_file(src, "model.type must be a string");
    type = t->get<std::string>();
  }
  if (type != "BPE") {
    bad_file(src, "unsupported model type '" + type +
                      "': only byte-level BPE (GPT-2 / Qwen family) is supported");
  }
  if (auto d = model.find("dropout"); d != model.end() && !d->is_null()) {
    if (!d->is_number() || d->get<double>() != 0.0)
      bad_file(src, "model.dropout is not supported (must be null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto v = model.find(key);
    if (v != model.end() && !v->is_null() && !(v->is_string() && v->get<std::string>().empty())) {
      bad_file(src,
               std::string("model.") + key + " is not supported by byte-level BPE (must be empty)");
    }
  }
  bool ignore_merges = false;
  if (auto v = model.find("ignore_merges"); v != model.end() && !v->is_null()) {
    if (!v->is_boolean()) bad_file(src, "model.ignore_merges must be a boolean");
    ignore_merges = v->get<bool>();
  }

  // Vocabulary (already in impl->vocab).
  if (!sax.has_vocab) {
    if (model.contains("vocab")) bad_file(src, "model.vocab must be an object mapping token -> id");
    bad_file(src, "model: missing required field 'vocab'");
  }
  int64_t max_id = sax.max_vocab_id;
  impl->added = parse_added_tokens(root, src);
  for (const AddedToken& a : impl->added) max_id = std::max<int64_t>(max_id, a.id);

  size_t size = static_cast<size_t>(max_id + 1);
  impl->id_pieces.assign(size, std::string());
  impl->id_bytes.assign(size, std::string());
  impl->id_flags.assign(size, 0);
  for (const auto& [piece, id] : impl->vocab) {
    if (impl->id_flags[id] & Impl::kValid) {
      bad_file(src, "model.vocab maps both '" + impl->id_pieces[id] + "' and '" + piece +
                        "' to id " + std::to_string(id));
    }
    impl->id_flags[id] = Impl::kValid;
    impl->id_pieces[id] = piece;
    impl->id_bytes[id] = byte_level::decode(piece);
  }
  // Added tokens take precedence over the model vocab for an id they share (HF's id_to_token).
  std::vector<const AddedToken*> raw_tokens;
  std::vector<const AddedToken*> normalized_tokens;
  for (const AddedToken& a : impl->added) {
    impl->id_flags[a.id] = Impl::kValid | Impl::kAdded | (a.special ? Impl::kSpecial : 0);
    impl->id_pieces[a.id] = a.content;
    impl->id_bytes[a.id] = byte_level::decode(a.content);
    impl->added_by_content[a.content] = a.id;
    (a.normalized ? normalized_tokens : raw_tokens).push_back(&a);
  }
  impl->raw_matcher = AddedTokenMatcher(raw_tokens);
  impl->normalized_matcher = AddedTokenMatcher(normalized_tokens);

  // Merges: both sides and their concatenation must be in the vocab (HF refuses the file
  // otherwise).
  if (!sax.has_merges && model.contains("merges") && !model["merges"].is_null()) {
    bad_file(src, "model.merges must be an array");
  }
  std::vector<BpeModel::Merge> merges;
  merges.reserve(sax.merges.size());
  std::string joined;
  for (size_t index = 0; index < sax.merges.size(); ++index) {
    const auto& [a, b] = sax.merges[index];
    auto lookup = [&, index](const std::string& tok) {
      auto it = impl->vocab.find(tok);
      if (it == impl->vocab.end()) {
        bad_file(src, "model.merges[" + std::to_string(index) + "] (\"" + sax.merges[index].first +
                          "\", \"" + sax.merges[index].second + "\") names token '" + tok +
                          "' which is not in the vocab");
      }
      return it->second;
    };
    TokenId left = lookup(a);
    TokenId right = lookup(b);
    joined.assign(a).append(b);
    merges.push_back({left, right, lookup(joined)});
  }

  impl->normalizer = Normalizer::from_json(root.value("normalizer", Json()), src);
  impl->pre_tokenizer = PreTokenizer::from_json(root.value("pre_tokenizer", Json()), src);
  if (!impl->pre_tokenizer.byte_level()) {
    bad_file(src,
             "pre_tokenizer has no ByteLevel step: only byte-level BPE (GPT-2 / Qwen family) is "
             "supported");
  }

  std::array<BpeId, 256> byte_ids;
  for (int b = 0; b < 256; ++b) {
    auto it = impl->vocab.find(byte_level::byte_to_utf8(static_cast<uint8_t>(b)));
    byte_ids[b] = it == impl->vocab.end() ? -1 : it->second;
  }
  std::unordered_map<std::string, BpeId> whole_words;
  if (ignore_merges) {
    for (const auto& [piece, id] : impl->vocab) {
      if (auto bytes = byte_level::decode_strict(piece)) whole_words.emplace(*bytes, id);
    }
  }
  impl->bpe = BpeModel(byte_ids, merges, ignore_merges, std::move(whole_words));
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    fail(ErrorCode::kNotFound,
         path.string() +
             ": does not exist (expected a directory holding tokenizer.json, or the file)");
  }
  if (std::filesystem::is_directory(path, ec)) file = path / "tokenizer.json";
  std::string text = read_file(file);
  TokenizerConfig config;
  std::filesystem::path config_file = file.parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_file, ec)) {
    config = parse_tokenizer_config(read_file(config_file), config_file.string());
  }
  return from_json(text, file.string(), std::move(config));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    // Byte-level BPE could carry the raw bytes, but the regex needs characters; HF only accepts
    // strings and JS reads input with U+FFFD replacement, so we do the same.
    repaired = utf8::repair(text);
    text = repaired;
  }
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  if (impl_->raw_matcher.empty()) {
    impl_->encode_section(text, allow_special, out);
  } else {
    impl_->split_added(impl_->raw_matcher, text, allow_special, out, [&](std::string_view gap) {
      impl_->encode_section(gap, allow_special, out);
    });
  }
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string bytes;
  for (TokenId id : ids) {
    impl_->check_id(id, "decode");
    if (skip_special && (impl_->id_flags[id] & Impl::kSpecial)) continue;
    bytes += impl_->id_bytes[id];
  }
  if (utf8::is_valid(bytes)) return bytes;
  return utf8::repair(bytes);
}

std::string Tokenizer::token_bytes(TokenId id) const {
  impl_->check_id(id, "token_bytes");
  return impl_->id_bytes[id];
}

const std::string& Tokenizer::piece(TokenId id) const {
  impl_->check_id(id, "piece");
  return impl_->id_pieces[id];
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view piece) const {
  std::string key(piece);
  if (auto it = impl_->added_by_content.find(key); it != impl_->added_by_content.end())
    return it->second;
  if (auto it = impl_->vocab.find(key); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

size_t Tokenizer::vocab_size() const { return impl_->id_flags.size(); }

void Tokenizer::pad_to_model_vocab(size_t model_vocab_size) {
  if (model_vocab_size <= impl_->id_flags.size()) return;
  impl_->id_pieces.resize(model_vocab_size);
  impl_->id_bytes.resize(model_vocab_size);
  impl_->id_flags.resize(model_vocab_size, Impl::kValid);
}

bool Tokenizer::is_special(TokenId id) const {
  return impl_->valid(id) && (impl_->id_flags[id] & Impl::kSpecial);
}

bool Tokenizer::valid_id(TokenId id) const { return impl_->valid(id); }

const TokenizerConfig& Tokenizer::config() const { return impl_->config; }

std::optional<TokenId> Tokenizer::eos_id() const {
  if (!impl_->config.eos_token) return std::nullopt;
  return token_to_id(*impl_->config.eos_token);
}

std::optional<TokenId> Tokenizer::pad_id() const {
  if (!impl_->config.pad_token) return std::nullopt;
  return token_to_id(*impl_->config.pad_token);
}

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string IncrementalDecoder::push(TokenId id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  size_t ready = utf8::complete_prefix(pending_);
  if (ready == 0) return {};
  std::string out = utf8::repair(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out = utf8::repair(pending_);
  pending_.clear();
  return out;
}

}  // namespace ajet::text
