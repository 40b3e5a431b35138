// `ajet render-chat --tokenizer DIR [--generation-prompt] [--ids]`: reads an OpenAI-style chat
// request
// (`messages`, `tools`) as JSON on stdin and prints the prompt the model's chat template makes of
// it, or its token ids. For people debugging templates: --spans shows which bytes (and tokens) each
// message produced.
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "command.h"
#include "common/error.h"
#include "text/chat_template.h"
#include "text/messages.h"
#include "text/tokenizer.h"

namespace ajet::cli {
namespace {

struct RenderChatArgs {
  std::string tokenizer_dir;
  bool generation_prompt = false;
  bool ids = false;
  bool spans = false;
  bool no_thinking = false;
  std::string family;
};

std::string_view span_kind_name(text::SpanKind kind) {
  switch (kind) {
    case text::SpanKind::kPreamble: return "preamble";
    case text::SpanKind::kMessage: return "message";
    case text::SpanKind::kGenerationPrompt: return "generation_prompt";
  }
  return "unknown";
}

void run(const RenderChatArgs& args) {
  std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  const text::ChatRequest request = text::parse_chat_request(input, "stdin");

  text::ChatFamily family;
  if (!args.family.empty()) {
    auto f = text::family_from_name(args.family);
    if (!f)
      invalid_argument("--family must be qwen3, qwen3-thinking, qwen2.5 or chatml, got '" +
                       args.family + "'");
    family = *f;
  } else {
    family = text::detect_chat_family(text::load_chat_template(args.tokenizer_dir)).family;
  }
  text::RenderOptions options;
  options.add_generation_prompt = args.generation_prompt;
  if (args.no_thinking) options.enable_thinking = false;
  const text::RenderedChat rendered = text::render_chat(family, request, options);

  std::optional<text::TokenizedChat> tokens;
  if (args.ids) tokens = text::tokenize_chat(text::Tokenizer::load(args.tokenizer_dir), rendered);

  if (args.spans) {
    text::OrderedJson out = {{"family", text::family_name(family)}, {"text", rendered.text}};
    text::OrderedJson spans = text::OrderedJson::array();
    for (size_t i = 0; i < rendered.spans.size(); ++i) {
      const text::ChatSpan& s = rendered.spans[i];
      text::OrderedJson j = {{"kind", span_kind_name(s.kind)}, {"message_index", s.message_index},
                             {"bytes", {s.begin, s.end}},      {"header", rendered.header(s)},
                             {"body", rendered.body(s)},       {"footer", rendered.footer(s)}};
      if (tokens) {
        const text::TokenSpan& t = tokens->spans[i];
        j["tokens"] = {t.begin, t.end};
        j["body_tokens"] = {t.body_begin, t.body_end};
        j["exact"] = t.exact;
      }
      spans.push_back(std::move(j));
    }
    out["spans"] = std::move(spans);
    if (tokens) out["ids"] = tokens->ids;
    std::cout << out.dump(2, ' ', false, text::OrderedJson::error_handler_t::replace) << "\n";
  } else if (tokens) {
    std::cout << text::OrderedJson(tokens->ids).dump() << "\n";
  } else {
    std::cout << rendered.text;
  }
  std::cout.flush();
}

const CommandRegistration kRenderChat("render-chat", [](CLI::App& app) {
  auto args = std::make_shared<RenderChatArgs>();
  auto* cmd = app.add_subcommand(
      "render-chat",
      "Render an OpenAI-style chat request (JSON on stdin: messages, tools) with the model's "
      "chat template; print the text, or the token ids with --ids");
  cmd->add_option("--tokenizer", args->tokenizer_dir,
                  "Model or tokenizer directory (tokenizer_config.json with chat_template; "
                  "tokenizer.json for --ids)")
      ->required();
  cmd->add_flag("--generation-prompt", args->generation_prompt,
                "Append the assistant turn opener the model continues from");
  cmd->add_flag("--ids", args->ids, "Print the token ids (one JSON array) instead of the text");
  cmd->add_flag(
      "--spans", args->spans,
      "Print JSON: the text and each message's header/body/footer (and tokens with --ids)");
  cmd->add_flag("--no-thinking", args->no_thinking,
                "Render with enable_thinking=false (Qwen3: empty think block)");
  cmd->add_option(
      "--family", args->family,
      "Template family to use instead of detecting it: qwen3, qwen3-thinking, qwen2.5, chatml");
  cmd->callback([args] { run(*args); });
});

}  // namespace
}  // namespace ajet::cli
