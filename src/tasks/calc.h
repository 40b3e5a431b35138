// `calc`: arithmetic word problems (2-3 operands, + - *, normal precedence) solved with a
// `calculator` tool over several turns. The agent calls calculator({"expression": "37*4+15"}),
// reads the result from the tool message, and ends with a reply (no tool call) holding exactly one
// <answer>163</answer>. Reward 1 when that integer equals the true value, else 0. At most
// max_tool_calls (3) calls: the call that exceeds the limit gets an error result and ends the
// episode.
#pragma once

#include <string>
#include <string_view>

#include "tasks/builtin.h"

namespace ajet::tasks {

inline constexpr std::string_view kCalcSystemPrompt =
    "Use the calculator tool, then reply <answer>N</answer>.";
inline constexpr int64_t kCalcDefaultMaxToolCalls = 3;

// The OpenAI tool definition of the calculator (compact, to keep episodes short).
OrderedJson calculator_tool();

// Runs one tool call the way the calc agent does: the calculator's result text, or "error: ...".
// Arguments must be a JSON object with a string (or integer) "expression".
std::string execute_calculator_call(const text::ToolCall& call);

const BuiltinTask& calc_task();

}  // namespace ajet::tasks
