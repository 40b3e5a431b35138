#include "tasks/expression.h"

#include <cstdlib>
#include <numeric>

namespace ajet::tasks {

namespace {

constexpr size_t kMaxLength = 256;
constexpr int kMaxDepth = 32;
constexpr size_t kMaxDigits = 18;

struct ExprError {
  std::string message;
  bool parse_error;  // false: the text parsed but the arithmetic failed
};

using i128 = __int128;

Rational make_rational(i128 num, i128 den) {
  if (den == 0) throw ExprError{"division by zero", false};
  if (den < 0) {
    num = -num;
    den = -den;
  }
  i128 a = num < 0 ? -num : num;
  i128 b = den;
  while (b != 0) {
    i128 t = a % b;
    a = b;
    b = t;
  }
  if (a > 1) {
    num /= a;
    den /= a;
  }
  constexpr i128 kMax = INT64_MAX;
  if (num > kMax || num < -kMax || den > kMax)
    throw ExprError{"number too large (overflow)", false};
  return Rational{static_cast<int64_t>(num), static_cast<int64_t>(den)};
}

Rational add(const Rational& a, const Rational& b, int sign) {
  return make_rational(static_cast<i128>(a.num) * b.den + sign * static_cast<i128>(b.num) * a.den,
                       static_cast<i128>(a.den) * b.den);
}
Rational mul(const Rational& a, const Rational& b) {
  return make_rational(static_cast<i128>(a.num) * b.num, static_cast<i128>(a.den) * b.den);
}
Rational div(const Rational& a, const Rational& b) {
  if (b.num == 0) throw ExprError{"division by zero", false};
  return make_rational(static_cast<i128>(a.num) * b.den, static_cast<i128>(a.den) * b.num);
}

// Parses the whole text first (so a syntax error anywhere wins over an arithmetic error) while
// evaluating; arithmetic errors are remembered and raised once parsing succeeded.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Rational parse_all() {
    Rational v = expr(0);
    skip_space();
    if (pos_ < text_.size()) fail_at("unexpected '" + std::string(1, text_[pos_]) + "'");
    return v;
  }
  std::vector<int64_t> numbers;
  std::optional<std::string> arithmetic_error;

 private:
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  [[noreturn]] void fail_at(const std::string& what) {
    throw ExprError{what + " at column " + std::to_string(pos_ + 1), true};
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // Runs an arithmetic step; after the first arithmetic error the value no longer matters.
  template <class F>
  Rational guarded(F&& f) {
    if (arithmetic_error) return Rational{};
    try {
      return f();
    } catch (const ExprError& e) {
      arithmetic_error = e.message;
      return Rational{};
    }
  }

  Rational expr(int depth) {
    Rational v = term(depth);
    while (true) {
      if (eat('+')) {
        Rational r = term(depth);
        v = guarded([&] { return add(v, r, 1); });
      } else if (eat('-')) {
        Rational r = term(depth);
        v = guarded([&] { return add(v, r, -1); });
      } else {
        return v;
      }
    }
  }
  Rational term(int depth) {
    Rational v = unary(depth);
    while (true) {
      if (eat('*')) {
        Rational r = unary(depth);
        v = guarded([&] { return mul(v, r); });
      } else if (eat('/')) {
        Rational r = unary(depth);
        v = guarded([&] { return div(v, r); });
      } else {
        return v;
      }
    }
  }
  Rational unary(int depth) {
    if (eat('-')) {
      if (depth >= kMaxDepth) fail_at("nested too deeply");
      Rational r = unary(depth + 1);
      return guarded([&] { return make_rational(-static_cast<i128>(r.num), r.den); });
    }
    return primary(depth);
  }
  Rational primary(int depth) {
    skip_space();
    if (pos_ >= text_.size()) fail_at("expected a number");
    char c = text_[pos_];
    if (c == '(') {
      if (depth >= kMaxDepth) fail_at("nested too deeply");
      ++pos_;
      Rational v = expr(depth + 1);
      if (!eat(')')) {
        skip_space();
        fail_at(pos_ < text_.size() ? "expected ')' but found '" + std::string(1, text_[pos_]) + "'"
                                    : "missing ')'");
      }
      return v;
    }
    if (c >= '0' && c <= '9') {
      size_t begin = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      if (pos_ - begin > kMaxDigits) {
        pos_ = begin;
        fail_at("number too long");
      }
      if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == ','))
        fail_at("only integers are allowed, found '" + std::string(1, text_[pos_]) + "'");
      int64_t n = std::strtoll(std::string(text_.substr(begin, pos_ - begin)).c_str(), nullptr, 10);
      numbers.push_back(n);
      return Rational{n, 1};
    }
    fail_at("expected a number, found '" + std::string(1, c) + "'");
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

std::string Rational::to_string() const {
  return den == 1 ? std::to_string(num) : std::to_string(num) + "/" + std::to_string(den);
}

Evaluation evaluate_expression(std::string_view text) {
  Evaluation out;
  if (text.size() > kMaxLength) {
    out.error = "expression too long (" + std::to_string(text.size()) + " bytes, at most " +
                std::to_string(kMaxLength) + ")";
    return out;
  }
  Parser parser(text);
  try {
    Rational v = parser.parse_all();
    out.parsed = true;
    out.numbers = std::move(parser.numbers);
    if (parser.arithmetic_error) {
      out.error = *parser.arithmetic_error;
      return out;
    }
    out.ok = true;
    out.value = v;
  } catch (const ExprError& e) {
    out.error = e.message;
  }
  return out;
}

std::string calculator(std::string_view expression) {
  Evaluation e = evaluate_expression(expression);
  if (!e.ok) return "error: " + e.error;
  if (!e.value.is_integer()) return "error: result is not an integer (" + e.value.to_string() + ")";
  return std::to_string(e.value.num);
}

std::optional<int64_t> parse_integer_literal(std::string_view text) {
  size_t i = 0;
  bool negative = false;
  if (!text.empty() && text[0] == '-') {
    negative = true;
    i = 1;
  }
  std::string_view digits = text.substr(i);
  if (digits.empty() || digits.size() > kMaxDigits) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  if (negative && digits == "0") return std::nullopt;  // "-0" is not canonical
  int64_t v = std::strtoll(std::string(digits).c_str(), nullptr, 10);
  return negative ? -v : v;
}

}  // namespace ajet::tasks
