// `ajet tokenize`, `ajet detokenize` and `ajet tokenizer train`: line-oriented tools for people
// debugging tokenization and chat templates, and the way to make a small model's own tokenizer.
// Each reads stdin line by line and writes one output line per input line, flushed, so they work
// in pipes and interactively.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "text/bpe_trainer.h"
#include "text/tokenizer.h"

namespace ajet::cli {
namespace {

void write_line(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string json_dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

struct TokenizeArgs {
  std::string dir;
  bool pieces = false;
  bool json_input = false;
  bool no_special = false;
};

void run_tokenize(const TokenizeArgs& args) {
  text::Tokenizer tok = text::Tokenizer::load(args.dir);
  std::string line;
  size_t line_no = 0;
  size_t bad = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    std::string text = line;
    if (args.json_input) {
      try {
        Json j = parse_json(line, "stdin line " + std::to_string(line_no));
        if (!j.is_string())
          invalid_argument("stdin line " + std::to_string(line_no) + ": expected a JSON string");
        text = j.get<std::string>();
      } catch (const Error& e) {
        std::fprintf(stderr, "ajet tokenize: %s\n", e.what());
        write_line("");
        ++bad;
        continue;
      }
    }
    std::vector<text::TokenId> ids = tok.encode(text, !args.no_special);
    if (!args.pieces) {
      write_line(json_dump(Json(ids)));
      continue;
    }
    Json pieces = Json::array();
    for (text::TokenId id : ids) pieces.push_back(tok.piece(id));
    write_line(json_dump(Json{{"ids", ids}, {"pieces", pieces}}));
  }
  if (bad > 0)
    fail(ErrorCode::kDataLoss, std::to_string(bad) + " of " + std::to_string(line_no) +
                                   " input lines were not JSON strings");
}

struct DetokenizeArgs {
  std::string dir;
  bool skip_special = false;
  bool json_output = false;
};

void run_detokenize(const DetokenizeArgs& args) {
  text::Tokenizer tok = text::Tokenizer::load(args.dir);
  std::string line;
  size_t line_no = 0;
  size_t bad = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    std::string where = "stdin line " + std::to_string(line_no);
    try {
      Json j = parse_json(line, where);
      if (!j.is_array())
        invalid_argument(where + ": expected a JSON array of token ids, got " +
                         std::string(json_type_name(j)));
      std::vector<text::TokenId> ids;
      for (size_t i = 0; i < j.size(); ++i) {
        const Json& v = j[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
            !tok.valid_id(static_cast<text::TokenId>(v.get<int64_t>())) ||
            v.get<int64_t>() > INT32_MAX) {
          invalid_argument(where + ": element " + std::to_string(i) + " (" + v.dump() +
                           ") is not a token id of this tokenizer (vocab size " +
                           std::to_string(tok.vocab_size()) + ")");
        }
        ids.push_back(static_cast<text::TokenId>(v.get<int64_t>()));
      }
      std::string text = tok.decode(ids, args.skip_special);
      write_line(args.json_output ? json_dump(Json(text)) : text);
    } catch (const Error& e) {
      std::fprintf(stderr, "ajet detokenize: %s\n", e.what());
      write_line("");
      ++bad;
    }
  }
  if (bad > 0)
    fail(ErrorCode::kDataLoss,
         std::to_string(bad) + " of " + std::to_string(line_no) + " input lines were bad");
}

struct TrainArgs {
  std::string corpus;
  size_t vocab_size = 0;
  std::string out;
  size_t min_frequency = 2;
  std::vector<std::string> special;
  bool no_tool_tokens = false;
};

void run_train(const TrainArgs& args) {
  text::BpeTrainerOptions opts;
  opts.vocab_size = args.vocab_size;
  opts.min_frequency = args.min_frequency;
  for (const std::string& s : args.special) opts.special_tokens.push_back(s);
  if (args.no_tool_tokens) opts.added_tokens.clear();
  std::string corpus = read_file(args.corpus);
  text::TrainedBpe trained = text::train_bpe(corpus, opts);
  text::write_trained_bpe(trained, args.out);
  std::printf(
      "wrote %s/tokenizer.json and tokenizer_config.json: %zu ids (%zu merges) from %zu bytes of "
      "corpus\n",
      args.out.c_str(), trained.vocab_size, trained.merges, corpus.size());
}

const CommandRegistration kTokenize("tokenize", [](CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd =
      app.add_subcommand("tokenize",
                         "Encode each line of stdin (without its newline) and print one JSON array "
                         "of token ids per line.\n"
                         "With --pieces each output line is {\"ids\": [...], \"pieces\": [...]}: "
                         "the pieces are vocabulary\n"
                         "strings in the byte-level alphabet (\"Ġ\" is a space, \"Ċ\" a newline).");
  cmd->add_option("--tokenizer", args->dir,
                  "Directory with tokenizer.json (and tokenizer_config.json), or the file")
      ->required();
  cmd->add_flag("--pieces", args->pieces,
                "Print {\"ids\", \"pieces\"} objects instead of bare id arrays");
  cmd->add_flag("--json", args->json_input,
                "Each input line is a JSON string (so text can hold newlines); bad lines are "
                "reported on stderr, "
                "printed as empty lines, and make the exit status 1");
  cmd->add_flag("--no-special", args->no_special,
                "Treat special-token text such as <|im_end|> as plain text");
  cmd->callback([args] { run_tokenize(*args); });
});

const CommandRegistration kDetokenize("detokenize", [](CLI::App& app) {
  auto args = std::make_shared<DetokenizeArgs>();
  auto* cmd = app.add_subcommand(
      "detokenize",
      "Decode each line of stdin (a JSON array of token ids) and print the text, one line per "
      "input line.\n"
      "A bad line (not a JSON array of valid ids) is reported on stderr with its line number and "
      "printed as\n"
      "an empty line; the others are still decoded, and the exit status is 1 if any line was bad.");
  cmd->add_option("--tokenizer", args->dir,
                  "Directory with tokenizer.json (and tokenizer_config.json), or the file")
      ->required();
  cmd->add_flag("--skip-special", args->skip_special,
                "Leave special tokens (e.g. <|im_end|>) out of the text");
  cmd->add_flag("--json", args->json_output, "Print each text as a JSON string (newlines escaped)");
  cmd->callback([args] { run_detokenize(*args); });
});

const CommandRegistration kTokenizer("tokenizer", [](CLI::App& app) {
  auto* group =
      app.add_subcommand("tokenizer", "Tokenizer tools (train a byte-level BPE vocabulary)");
  group->require_subcommand(1);
  auto args = std::make_shared<TrainArgs>();
  auto* train = group->add_subcommand(
      "train",
      "Learn a byte-level BPE vocabulary (Qwen2 pre-tokenizer, NFC) from a text file and write "
      "tokenizer.json and\n"
      "tokenizer_config.json (ChatML special tokens <|endoftext|> <|im_start|> <|im_end|>, "
      "tool-call markers,\n"
      "Qwen2.5 chat template) into --out. Deterministic for a given corpus and options.");
  train->add_option("--corpus", args->corpus, "UTF-8 text file to learn from")->required();
  train
      ->add_option("--vocab-size", args->vocab_size,
                   "Total ids including the 256 bytes and the added tokens")
      ->required()
      ->check(CLI::PositiveNumber);
  train->add_option("--out", args->out, "Output directory (created if missing)")->required();
  train
      ->add_option("--min-frequency", args->min_frequency,
                   "Never merge a pair seen fewer times than this")
      ->capture_default_str();
  train->add_option("--special", args->special,
                    "Extra special token (repeatable), added after the ChatML ones");
  train->add_flag("--no-tool-tokens", args->no_tool_tokens,
                  "Do not add <tool_call> </tool_call> <tool_response> </tool_response> as tokens");
  train->callback([args] { run_train(*args); });
});

}  // namespace
}  // namespace ajet::cli
