// The shared YAML reader (config/yaml_reader.h): each typed read accepting and refusing, the line
// in every message, the size, alias-expansion and depth limits, and only_keys' "did you mean".
#include "config/yaml_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "common/fs.h"
#include "support/scratch_dir.h"

namespace ajet::config::yaml_reader_test {
namespace {

using ::testing::HasSubstr;

// Runs `fn`, expects an Error(kInvalidArgument), returns its message.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

// Nine levels of nine aliases: ~600 bytes of YAML that name one string 9^9 (~387 million) times.
std::string alias_bomb(const std::string& holder) {
  std::string yaml = "defs:\n  a0: &a0 \"lol\"\n";
  for (int i = 1; i <= 9; ++i) {
    yaml += "  a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) yaml += std::string(j ? ", " : "") + "*a" + std::to_string(i - 1);
    yaml += "]\n";
  }
  return yaml + holder + ": {bomb: *a9}\n";
}

std::string nested(int levels) {
  std::string deep = "deep: ";
  for (int i = 0; i < levels; ++i) deep += "{a: ";
  return deep + "1" + std::string(levels, '}') + "\n";
}

// Line numbers below count from 1: a is line 1, b line 2, ...
const char* kDoc =
    "a: yes\n"
    "b: 1e3\n"
    "c: 1.5\n"
    "d: abc\n"
    "e: [1, 2, 30]\n"
    "f: '7'\n"
    "g: .inf\n"
    "h: {x: 1}\n"
    "i: Off\n"
    "j: +5\n";

class YamlReaderTest : public ::testing::Test {
 protected:
  const YAML::Node doc = load_yaml(kDoc, "t.yaml");
  YamlReader r{"t.yaml"};
};

TEST(YamlScalarRules, OneRuleForBooleansIntegersAndNumbers) {
  for (const char* t : {"true", "yes", "on", "True", "YES", "On"}) EXPECT_EQ(scalar_bool(t), true);
  for (const char* t : {"false", "no", "off", "FALSE"}) EXPECT_EQ(scalar_bool(t), false);
  EXPECT_EQ(scalar_bool("maybe"), std::nullopt);
  EXPECT_EQ(scalar_int("1e3"), 1000);
  EXPECT_EQ(scalar_int("16.0"), 16);
  EXPECT_EQ(scalar_int("+5"), 5);
  EXPECT_EQ(scalar_int("-7"), -7);
  EXPECT_EQ(scalar_int("1.5"), std::nullopt);
  EXPECT_EQ(scalar_int("abc"), std::nullopt);
  EXPECT_EQ(scalar_double("2.5e-3"), 2.5e-3);
  EXPECT_EQ(scalar_double("inf"), std::nullopt);
  EXPECT_EQ(scalar_double("1e999"), std::nullopt);
  EXPECT_EQ(scalar_double(""), std::nullopt);
}

TEST_F(YamlReaderTest, BooleansAcceptYesNoOnOffAndNameTheLineWhenRefused) {
  EXPECT_TRUE(r.boolean(doc["a"], "a"));
  EXPECT_FALSE(r.boolean(doc["i"], "i"));
  EXPECT_EQ(error_of([&] { r.boolean(doc["d"], "d"); }),
            "t.yaml:4: d: expected true or false, got 'abc'");
  EXPECT_EQ(error_of([&] { r.boolean(doc["h"], "h"); }),
            "t.yaml:8: h: expected true or false, got a mapping");
}

TEST_F(YamlReaderTest, IntegersAcceptIntegralNumbersAndCheckTheRange) {
  EXPECT_EQ(r.integer(doc["b"], "b"), 1000);
  EXPECT_EQ(r.integer(doc["j"], "j"), 5);
  EXPECT_EQ(error_of([&] { r.integer(doc["c"], "c"); }),
            "t.yaml:3: c: expected an integer, got '1.5'");
  EXPECT_EQ(error_of([&] { r.integer(doc["b"], "b", 1, 10); }),
            "t.yaml:2: b: must be between 1 and 10, got 1000");
  EXPECT_EQ(error_of([&] { r.integer(doc["h"], "h"); }),
            "t.yaml:8: h: expected an integer, got a mapping");
}

TEST_F(YamlReaderTest, NumbersMustBeFinite) {
  EXPECT_EQ(r.number(doc["c"], "c"), 1.5);
  EXPECT_EQ(r.number(doc["b"], "b"), 1000.0);
  EXPECT_EQ(error_of([&] { r.number(doc["d"], "d"); }),
            "t.yaml:4: d: expected a number, got 'abc'");
  EXPECT_EQ(error_of([&] { r.number(doc["g"], "g"); }),
            "t.yaml:7: g: expected a finite number, got '.inf'");
}

TEST_F(YamlReaderTest, TextAndTypedScalars) {
  EXPECT_EQ(r.text(doc["f"], "f"), "7");
  EXPECT_EQ(r.text(doc["c"], "c"), "1.5");
  EXPECT_EQ(error_of([&] { r.text(doc["e"], "e"); }), "t.yaml:5: e: expected text, got a list");
  EXPECT_EQ(r.scalar(doc["a"], "a"), Json(true));  // yes is a boolean, as in the config
  EXPECT_EQ(r.scalar(doc["i"], "i"), Json(false));
  EXPECT_EQ(r.scalar(doc["f"], "f"), Json("7"));  // quoted: text even though it looks like a number
  EXPECT_EQ(r.scalar(doc["j"], "j"), Json(5));
  EXPECT_TRUE(r.scalar(doc["j"], "j").is_number_integer());
  EXPECT_EQ(r.scalar(doc["c"], "c"), Json(1.5));
  EXPECT_EQ(r.scalar(doc["d"], "d"), Json("abc"));
  EXPECT_EQ(r.scalar(doc["g"], "g"), Json(".inf"));  // not a finite number: text
  EXPECT_THAT(error_of([&] { r.scalar(doc["h"], "h"); }),
              HasSubstr("t.yaml:8: h: expected a scalar (number, text or true/false)"));
}

TEST_F(YamlReaderTest, IntegerListsNameTheItem) {
  EXPECT_EQ(r.int_list(doc["e"], "e", 0, 100), (std::vector<int64_t>{1, 2, 30}));
  EXPECT_EQ(error_of([&] { r.int_list(doc["e"], "e", 0, 10); }),
            "t.yaml:5: e[2]: must be between 0 and 10, got 30");
  EXPECT_EQ(error_of([&] { r.int_list(doc["a"], "a", 0, 10); }),
            "t.yaml:1: a: expected a list of integers, got 'yes'");
}

TEST_F(YamlReaderTest, OnlyKeysSuggestsTheNearestKnownKey) {
  const YAML::Node m = load_yaml("top:\n  trials: 1\n  wall_secnods: 2\n", "m.yaml");
  EXPECT_NO_THROW(r.only_keys(doc, "", {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}));
  EXPECT_EQ(error_of([&] {
              r.only_keys(m["top"], "budget", {"trials", "wall_seconds"});
            }),
            "t.yaml:3: budget.wall_secnods: unknown key (did you mean 'wall_seconds'?)");
  EXPECT_EQ(error_of([&] {
              r.only_keys(m["top"], "", {"trials", "zzz"});
            }),
            "t.yaml:3: wall_secnods: unknown key (known: trials, zzz)");
  EXPECT_EQ(error_of([&] { r.only_keys(doc["a"], "a", {"x"}); }),
            "t.yaml:1: a: expected a mapping, got 'yes'");
}

TEST(YamlLoad, InvalidYamlNamesLineAndColumn) {
  EXPECT_THAT(error_of([] { load_yaml("a: 1\nb: [1, 2\n", "broken.yaml"); }),
              HasSubstr("broken.yaml:3:1: invalid YAML"));
}

TEST(YamlLoad, TextOverTheSizeLimitIsRefusedBeforeParsing) {
  const YamlLimits limits{1024, "a study file"};
  EXPECT_NO_THROW(load_yaml(std::string(1000, '#'), "s.yaml", limits));
  EXPECT_EQ(error_of([&] { load_yaml(std::string(1025, '#'), "s.yaml", limits); }),
            "s.yaml: a study file must be under 1 KiB (this one holds 1025 bytes)");
  test_support::ScratchDir dir;
  write_file_atomic(dir / "big.yaml", std::string(4096, '#'));
  EXPECT_EQ(error_of([&] { read_yaml_file(dir / "big.yaml", limits); }),
            (dir / "big.yaml").string() +
                ": a study file must be under 1 KiB (this one holds 4096 bytes)");
  write_file_atomic(dir / "small.yaml", "a: 1\n");
  EXPECT_EQ(read_yaml_file(dir / "small.yaml", limits), "a: 1\n");
}

TEST(YamlLoad, AliasBombsAndDeepNestingAreRefusedWhenExpandedAtLoad) {
  const std::string bomb = alias_bomb("holder");
  ASSERT_LT(bomb.size(), 700u);
  const YamlLimits limits{size_t(1) << 20, "a study file", size_t(1) << 20};
  const std::string msg = error_of([&] { load_yaml(bomb, "b.yaml", limits); });
  EXPECT_THAT(msg, HasSubstr("b.yaml:"));
  EXPECT_THAT(msg, HasSubstr("a study file expands to more than 1 MiB (YAML aliases"));
  EXPECT_THAT(
      error_of([] {
        load_yaml(nested(200), "d.yaml", {size_t(1) << 20, "a study file", size_t(1) << 20});
      }),
      HasSubstr("a study file nests deeper than 128 levels"));
  // Without the load-time check the document loads (a config's unread sections may hold anything).
  EXPECT_NO_THROW(load_yaml(bomb, "b.yaml"));
  // A few aliases are fine.
  EXPECT_NO_THROW(load_yaml("d: &c {k: 2}\nx: [*c, *c]\n", "ok.yaml", limits));
}

TEST(YamlToJson, ExpansionAndDepthAreBoundedNamingTheKeyAndLine) {
  const YamlReader r{"b.yaml"};
  const YAML::Node doc = load_yaml(alias_bomb("params"), "b.yaml");
  const std::string msg = error_of([&] { r.to_json(doc["params"], "task.params"); });
  EXPECT_THAT(msg, HasSubstr("b.yaml:"));
  EXPECT_THAT(msg, HasSubstr("task.params expands to more than 16 MiB"));
  const YAML::Node deep = load_yaml(nested(200), "d.yaml");
  EXPECT_THAT(error_of([&] { r.to_json(deep["deep"], "deep"); }),
              HasSubstr("b.yaml:1: deep nests deeper than 128 levels"));
  const YAML::Node ok = load_yaml("d: &c {k: 2, on: yes, q: '3'}\nx: [*c, ~, 1e3]\n", "ok.yaml");
  EXPECT_EQ(r.to_json(ok["x"], "x"),
            Json::parse(R"([{"k": 2, "on": true, "q": "3"}, null, 1000.0])"));
}

}  // namespace
}  // namespace ajet::config::yaml_reader_test
