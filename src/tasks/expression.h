// Safe arithmetic over integers with exact rational results: the `calculator` tool of the calc task
// and the equation checker of countdown. A hand-written recursive-descent parser (never eval, never
// a shell); every failure is a value naming what was wrong and where, never an exception or a
// crash.
//
// Grammar (whitespace anywhere between tokens):
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/') unary)*
//   unary   := '-' unary | primary
//   primary := integer | '(' expr ')'
// Normal precedence, left associative. Integers are decimal digits (at most 18). Limits: 256 bytes
// of text, 32 levels of nesting. Values are exact fractions of int64 (overflow is an error).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ajet::tasks {

// A reduced fraction num/den with den > 0.
struct Rational {
  int64_t num = 0;
  int64_t den = 1;
  bool is_integer() const { return den == 1; }
  std::string to_string() const;  // "7", "-7/2"
  friend bool operator==(const Rational&, const Rational&) = default;
};

struct Evaluation {
  bool ok = false;
  Rational value{};
  std::string error{};  // when !ok: e.g. "division by zero", "unexpected ')' at column 5"
  std::vector<int64_t> numbers{};  // the integer literals, in order of appearance (when parsed)
  bool parsed = false;  // the text is a well-formed expression (even if evaluation failed)
};

// Parses and evaluates exactly.
Evaluation evaluate_expression(std::string_view text);

// The calculator tool: the integer value as text ("163", "-12"), or "error: <reason>" (including a
// result that is not an integer: "error: result is not an integer (7/2)").
std::string calculator(std::string_view expression);

// A canonical integer literal: optional '-', digits without leading zeros ("0", "-12"); nullopt
// for anything else (including "+5", "1.0", "007", spaces). Used by judges to read final answers.
std::optional<int64_t> parse_integer_literal(std::string_view text);

}  // namespace ajet::tasks
