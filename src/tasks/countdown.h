// `countdown`: combine the given numbers (3-4 of them) with + - * / and brackets, each exactly
// once, to reach a target. One turn: the reply holds exactly one <answer>EXPR</answer> (an optional
// "= N" after the expression is allowed and ignored). Reward 1 when the expression uses the numbers
// exactly (as a multiset) and its exact rational value equals the target; 0.1 when it is only
// well-formed (parses, but wrong numbers, wrong value or a division by zero); 0 otherwise (no or
// several answers, unparseable text). The generator guarantees a solution (metadata.solution).
#pragma once

#include <string_view>

#include "tasks/builtin.h"

namespace ajet::tasks {

inline constexpr std::string_view kCountdownSystemPrompt =
    "Use each number once with + - * / and brackets to make the target. Reply "
    "<answer>expression</answer>.";

const BuiltinTask& countdown_task();

}  // namespace ajet::tasks
