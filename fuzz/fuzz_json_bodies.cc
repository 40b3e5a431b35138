// fuzz-sources: src/episodes/commands.cc src/http/response.cc src/http/message.cc src/openai/openai_params.cc src/openai/anthropic_messages.cc src/openai/openai_responses.cc src/openai/openai_format.cc
// libFuzzer target: arbitrary bytes as a JSON body the front accepts (docs/protocol.md): parsed
// with the nesting limit every body gets (common/json.h), then read as each command (claim, end,
// abort, can_continue, agree, prepare, resolve), as an OpenAI chat request and its sampling fields,
// as a completion request, and as Anthropic Messages and OpenAI Responses bodies. Only ajet::Error
// may come out (the front answers it with a 4xx naming the field); a parsed value must dump and
// parse back to itself, which is where deep nesting used to overflow the stack.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/error.h"
#include "common/json.h"
#include "episodes/commands.h"
#include "openai/anthropic_messages.h"
#include "openai/openai_params.h"
#include "openai/openai_responses.h"
#include "text/messages.h"

namespace {

template <class Fn>
void refused_or_read(Fn fn) {
  try {
    fn();
  } catch (const ajet::Error& e) {
    if (std::string_view(e.what()).empty()) std::abort();  // every refusal says why
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ajet::Json;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<Json> body;
  refused_or_read([&] { body = ajet::parse_json(text, "request body"); });
  if (!body) return 0;
  const std::string dumped = body->dump();
  if (ajet::parse_json(dumped, "dump") != *body) std::abort();
  if (body->is_object()) {
    namespace episodes = ajet::episodes;
    refused_or_read([&] { episodes::ClaimRequest::from_json(*body); });
    refused_or_read([&] { episodes::EndRequest::from_json(*body); });
    refused_or_read([&] { episodes::AbortRequest::from_json(*body); });
    refused_or_read([&] { episodes::EpisodeRef::from_json(*body); });
    refused_or_read([&] { episodes::AgreeRequest::from_json(*body); });
    refused_or_read([&] { episodes::PrepareRequest::from_json(*body); });
    refused_or_read([&] { episodes::ResolveRequest::from_json(*body); });
  }
  std::optional<ajet::text::OrderedJson> ordered;
  refused_or_read([&] { ordered = ajet::parse_ordered_json(text, "request body"); });
  if (!ordered) return 0;
  refused_or_read([&] { ajet::text::parse_chat_request(*ordered); });
  refused_or_read([&] { ajet::openai::parse_chat_params(*ordered); });
  refused_or_read([&] { ajet::openai::parse_completion_params(*ordered); });
  refused_or_read([&] { ajet::openai::parse_completion_prompt(*ordered); });
  refused_or_read([&] { ajet::openai::anthropic_to_chat_body(*ordered); });
  refused_or_read([&] { ajet::openai::responses_to_chat_body(*ordered); });
  return 0;
}
