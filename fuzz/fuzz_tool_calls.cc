// libFuzzer target: arbitrary bytes as model output for the tool-call parser. It must never crash,
// and its report must stay consistent: issue ranges inside the input, ids from the given source,
// and every tool call's arguments a JSON object.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/json.h"
#include "text/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  int next = 0;
  for (bool reasoning : {true, false}) {
    ajet::text::ParseOptions options;
    options.parse_reasoning = reasoning;
    options.id_source = [&next] { return "call_" + std::to_string(next++); };
    const ajet::text::ParsedOutput out = ajet::text::parse_model_output(text, options);
    for (const ajet::text::ParseIssue& issue : out.issues) {
      if (issue.byte_begin > issue.byte_end || issue.byte_end > size || issue.reason.empty())
        std::abort();
    }
    for (const ajet::text::ToolCall& call : out.tool_calls) {
      if (call.name.empty() || call.arguments.empty() || call.arguments.front() != '{')
        std::abort();
      const auto arguments = ajet::try_parse_ordered_json(call.arguments);
      if (!arguments || !arguments->is_object()) std::abort();
    }
    if (out.tool_calls.empty() && !out.reasoning_content && out.content != text) std::abort();
    if (ajet::text::streamable_content_length(text) > size) std::abort();
  }
  return 0;
}
