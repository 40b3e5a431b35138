// ajet.trainer_common.logger (upstream's list or one name; the loggers this build lacks warn and
// drop, an unknown one is an error with a did-you-mean) and the two Markdown file keys, which
// upstream configs set and which used to be ignored.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "config/load.h"

namespace ajet::config {
namespace {

const char* kModel = "ajet:\n  model: {path: /m}\n";

LoadedConfig with_trainer(const std::string& trainer_common) {
  return parse_config(std::string(kModel) + "  trainer_common:\n" + trainer_common, "l.yaml");
}

std::string all_warnings(const LoadedConfig& loaded) {
  std::string out;
  for (const auto& w : loaded.warnings) out += w + "\n";
  return out;
}

std::string logger_error(const std::string& trainer_common) {
  try {
    with_trainer(trainer_common);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using Names = std::vector<std::string>;

TEST(LoggerConfig, DefaultListOneNameAndAList) {
  EXPECT_EQ(parse_config(kModel, "l.yaml").config.trainer_common.logger,
            (Names{"console", "jsonl", "tensorboard"}));
  LoadedConfig one = with_trainer("    logger: tensorboard\n");
  EXPECT_EQ(one.config.trainer_common.logger, Names{"tensorboard"});
  EXPECT_TRUE(one.warnings.empty()) << all_warnings(one);
  EXPECT_EQ(with_trainer("    logger: [console, jsonl]\n").config.trainer_common.logger,
            (Names{"console", "jsonl"}));
  EXPECT_TRUE(
      with_trainer("    logger: []\n").config.trainer_common.logger.empty());  // everything off
  const Config c = with_trainer("    logger: [jsonl]\n").config;
  EXPECT_TRUE(logger_enabled(c, "jsonl"));
  EXPECT_FALSE(logger_enabled(c, "tensorboard"));
  EXPECT_FALSE(logger_enabled(c, "console"));
}

TEST(LoggerConfig, UpstreamsLoggersWarnByNameAndAreDropped) {
  LoadedConfig mixed = with_trainer("    logger: [console, swanlab, wandb]\n");
  EXPECT_EQ(mixed.config.trainer_common.logger, Names{"console"});
  const std::string w = all_warnings(mixed);
  EXPECT_NE(w.find("ajet.trainer_common.logger: swanlab, wandb not available here; ignored"),
            std::string::npos)
      << w;
  // Only upstream's: the default stands in, so an upstream config still gets curves.
  LoadedConfig only = with_trainer("    logger: swanlab\n");
  EXPECT_EQ(only.config.trainer_common.logger, (Names{"console", "jsonl", "tensorboard"}));
  EXPECT_NE(all_warnings(only).find("(using the default: console, jsonl, tensorboard)"),
            std::string::npos)
      << all_warnings(only);
  EXPECT_EQ(with_trainer("    logger: [mlflow, tensorboard]\n").config.trainer_common.logger,
            Names{"tensorboard"});
}

TEST(LoggerConfig, AnUnknownLoggerIsAnErrorWithADidYouMean) {
  const std::string typo = logger_error("    logger: [console, tensorbord]\n");
  EXPECT_NE(typo.find("ajet.trainer_common.logger: unknown logger 'tensorbord'"), std::string::npos)
      << typo;
  EXPECT_NE(typo.find("did you mean 'tensorboard'?"), std::string::npos) << typo;
  EXPECT_NE(typo.find("l.yaml"), std::string::npos) << typo;
  const std::string far = logger_error("    logger: [carrier_pigeon]\n");
  EXPECT_NE(far.find("unknown logger 'carrier_pigeon' (known: console, jsonl, tensorboard)"),
            std::string::npos)
      << far;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_NE(logger_error("    logger: {a: 1}\n")
                .find("ajet.trainer_common.logger must be a list of strings"),
            std::string::npos);
}

TEST(LoggerConfig, MarkdownPathsAreReadAndRoundTrip) {
  LoadedConfig loaded = with_trainer(
      "    val_print_to_markdown_file_path: results/val.md\n"
      "    train_print_to_markdown_file_path: /abs/train.md\n"
      "    logger: [tensorboard]\n");
  EXPECT_TRUE(loaded.warnings.empty()) << all_warnings(loaded);  // no longer "ignored"
  const TrainerCommonConfig& tc = loaded.config.trainer_common;
  EXPECT_EQ(tc.val_print_to_markdown_file_path, "results/val.md");
  EXPECT_EQ(tc.train_print_to_markdown_file_path, "/abs/train.md");
  // What a front is synced: the dumped YAML reads back the same.
  const Config again = parse_config(to_yaml(loaded.config), "dump.yaml").config;
  EXPECT_EQ(to_json(again), to_json(loaded.config));
  EXPECT_FALSE(parse_config(kModel, "l.yaml")
                   .config.trainer_common.val_print_to_markdown_file_path.has_value());
}

TEST(LoggerConfig, ASetOverrideTakesOneNameOrAList) {
  Config c = parse_config(kModel, "l.yaml").config;
  set_config_value(c, "trainer_common.logger", "console");
  EXPECT_EQ(c.trainer_common.logger, Names{"console"});
  set_config_value(c, "trainer_common.logger", "[jsonl, tensorboard]");
  EXPECT_EQ(c.trainer_common.logger, (Names{"jsonl", "tensorboard"}));
  set_config_value(c, "trainer_common.logger", "[tensorbored]");
  try {
    validate(c, "--set");
    ADD_FAILURE() << "validate accepted an unknown logger";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'tensorboard'?"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ajet::config
