// The calculator and the countdown equation checker: precedence, exact rationals, and errors that
// say what was wrong where, never a crash.
#include <gtest/gtest.h>

#include "tasks/expression.h"

namespace ajet::tasks {
namespace {

Rational value_of(const std::string& text) {
  Evaluation e = evaluate_expression(text);
  EXPECT_TRUE(e.ok) << text << ": " << e.error;
  return e.value;
}

TEST(Expression, NormalPrecedenceAndLeftAssociativity) {
  EXPECT_EQ(value_of("37*4+15"), (Rational{163, 1}));
  EXPECT_EQ(value_of("15+37*4"), (Rational{163, 1}));
  EXPECT_EQ(value_of("2+3*4-5"), (Rational{9, 1}));
  EXPECT_EQ(value_of("10-3-2"), (Rational{5, 1}));    // (10-3)-2, not 10-(3-2)
  EXPECT_EQ(value_of("100/10/5"), (Rational{2, 1}));  // (100/10)/5
  EXPECT_EQ(value_of("(2+3)*4"), (Rational{20, 1}));
  EXPECT_EQ(value_of(" ( 2 + 3 ) * ( 4 - 6 ) "), (Rational{-10, 1}));
  EXPECT_EQ(value_of("-3*-2"), (Rational{6, 1}));
  EXPECT_EQ(value_of("5-8"), (Rational{-3, 1}));
}

TEST(Expression, ExactRationals) {
  EXPECT_EQ(value_of("7/2"), (Rational{7, 2}));
  EXPECT_EQ(value_of("1/3+1/6"), (Rational{1, 2}));
  EXPECT_EQ(value_of("(1/3)*3"), (Rational{1, 1}));
  EXPECT_EQ(value_of("6/-4"), (Rational{-3, 2}));
  EXPECT_EQ((Rational{-3, 2}).to_string(), "-3/2");
}

TEST(Expression, NumbersAreRecordedInOrder) {
  Evaluation e = evaluate_expression("(3+5)*7-2");
  ASSERT_TRUE(e.ok);
  EXPECT_EQ(e.numbers, (std::vector<int64_t>{3, 5, 7, 2}));
}

TEST(Expression, SyntaxErrorsNameWhatAndWhere) {
  struct Case {
    std::string text;
    std::string error;
  };
  for (const Case& c :
       std::vector<Case>{{"", "expected a number at column 1"},
                         {"2+", "expected a number at column 3"},
                         {"2+*3", "expected a number, found '*' at column 3"},
                         {"(2+3", "missing ')' at column 5"},
                         {"2+3)", "unexpected ')' at column 4"},
                         {"2 x 3", "unexpected 'x' at column 3"},
                         {"1.5*2", "only integers are allowed, found '.' at column 2"},
                         {"import os", "expected a number, found 'i' at column 1"}}) {
    Evaluation e = evaluate_expression(c.text);
    EXPECT_FALSE(e.ok) << c.text;
    EXPECT_FALSE(e.parsed) << c.text;
    EXPECT_EQ(e.error, c.error) << c.text;
  }
}

TEST(Expression, ArithmeticErrorsKeepTheParse) {
  Evaluation e = evaluate_expression("5/(3-3)");
  EXPECT_FALSE(e.ok);
  EXPECT_TRUE(e.parsed);
  EXPECT_EQ(e.error, "division by zero");
  EXPECT_EQ(e.numbers, (std::vector<int64_t>{5, 3, 3}));

  Evaluation big = evaluate_expression("999999999999999999*999999999999999999");
  EXPECT_FALSE(big.ok);
  EXPECT_TRUE(big.parsed);
  EXPECT_EQ(big.error, "number too large (overflow)");
}

TEST(Expression, LimitsStopHostileInput) {
  EXPECT_EQ(evaluate_expression(std::string(300, '1')).error,
            "expression too long (300 bytes, at most 256)");
  EXPECT_EQ(evaluate_expression("1234567890123456789").error, "number too long at column 1");
  std::string deep = std::string(40, '(') + "1" + std::string(40, ')');
  EXPECT_NE(evaluate_expression(deep).error.find("nested too deeply"), std::string::npos);
  std::string minus = std::string(60, '-') + "1";
  EXPECT_NE(evaluate_expression(minus).error.find("nested too deeply"), std::string::npos);
  std::string ok = std::string(30, '(') + "1" + std::string(30, ')');
  EXPECT_TRUE(evaluate_expression(ok).ok);
}

TEST(Calculator, IntegersOrErrorStrings) {
  EXPECT_EQ(calculator("37*4+15"), "163");
  EXPECT_EQ(calculator("12-50"), "-38");
  EXPECT_EQ(calculator("8/2"), "4");
  EXPECT_EQ(calculator("7/2"), "error: result is not an integer (7/2)");
  EXPECT_EQ(calculator("1/0"), "error: division by zero");
  EXPECT_EQ(calculator("2+"), "error: expected a number at column 3");
}

TEST(IntegerLiteral, OnlyCanonicalIntegers) {
  EXPECT_EQ(parse_integer_literal("163"), 163);
  EXPECT_EQ(parse_integer_literal("-38"), -38);
  EXPECT_EQ(parse_integer_literal("0"), 0);
  for (std::string bad :
       {"", "-", "+5", "007", "-0", "1.0", " 5", "5 ", "1,000", "12a", "1234567890123456789"}) {
    EXPECT_FALSE(parse_integer_literal(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace ajet::tasks
