// ajet.deterministic end to end (docs/determinism.md): the real ajet, ajet-swarm and ajet-engine
// run the same short torch-backbone calc run twice, each in its own directory with its own fresh
// front and engine, and the two runs must agree byte for byte: every metrics.jsonl record once the
// wall-clock fields (names ending in `_s` or `seconds`) are taken out, and every file of the final
// checkpoint (weights, optimizer moments, trainer state with its RNG). The rollouts run 4 episodes
// at once on 2 engine threads, so which requests share an engine step, which prefixes are cached
// and the order episodes end in all vary from run to run; the run must not depend on any of it.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "classic_fixture.h"
#include "common/fs.h"
#include "common/json.h"
#include "e2e/e2e_util.h"

namespace ajet::classic {
namespace {

namespace fs = std::filesystem;
using e2e::Captured;
using e2e::shell_quote;

// The record without its wall-clock fields.
Json without_clock(const Json& j) {
  if (j.is_array()) {
    Json out = Json::array();
    for (const Json& v : j) out.push_back(without_clock(v));
    return out;
  }
  if (!j.is_object()) return j;
  Json out = Json::object();
  for (const auto& [k, v] : j.items()) {
    const bool clock = (k.size() > 2 && k.compare(k.size() - 2, 2, "_s") == 0) ||
                       (k.size() >= 7 && k.compare(k.size() - 7, 7, "seconds") == 0);
    if (!clock) out[k] = without_clock(v);
  }
  return out;
}

void check_two_runs(const std::string& extra);

struct DetRun {
  Captured out;
  std::vector<std::string> records;          // metrics.jsonl, wall-clock fields removed
  std::map<std::string, std::string> files;  // the checkpoint: relative path → bytes
};

DetRun run_once(const fs::path& dir, const std::string& yaml) {
  write_file_atomic(dir / "det.yaml", yaml);
  DetRun run;
  run.out = run_ajet("--conf " + shell_quote((dir / "det.yaml").string()) + " --exp-dir " +
                     shell_quote((dir / "exps").string()));
  if (run.out.status != 0) return run;
  for (const Json& r : read_jsonl(dir / "exps" / "run" / "metrics.jsonl"))
    run.records.push_back(without_clock(r).dump());
  const fs::path ckpt = dir / "exps" / "run" / "saved_checkpoints";
  if (fs::exists(ckpt)) {
    for (const auto& e : fs::recursive_directory_iterator(ckpt)) {
      if (e.is_regular_file())
        run.files[fs::relative(e.path(), ckpt).string()] = read_file(e.path());
    }
  }
  return run;
}

// `auto` (the default) turns it on for this float32 CPU engine of a small model; `true` forces it.
TEST(Determinism, TwoRunsOfOneConfigGiveTheSameMetricsAndCheckpoint) {
  for (const std::string mode : {"auto", "true"}) {
    SCOPED_TRACE("ajet.deterministic: " + mode);
    check_two_runs(mode == "auto" ? "" : "  deterministic: " + mode + "\n");
  }
}

// Through the swarm: the same launcher driving a front started on its own (`ajet --swarm-url`, the
// built-in agents as swarm clients) gives the records of the run whose front it started.
TEST(Determinism, ARunThroughARunningFrontGivesTheSameRecords) {
  const fs::path model = micro_model();
  std::string yaml = classic_yaml(model);
  yaml.replace(yaml.find("backbone: debug"), 15, "backbone: torch");
  yaml.replace(yaml.find("threads: 1"), 10, "threads: 2");
  e2e::ScratchDir classic_dir, swarm_dir;
  const DetRun classic = run_once(classic_dir.path(), yaml);
  ASSERT_EQ(classic.out.status, 0) << classic.out.out;
  e2e::SwarmProcess front(e2e::SwarmProcess::Options{swarm_dir / "front", {}, "", {}});
  ASSERT_FALSE(front.url().empty());
  write_file_atomic(swarm_dir / "det.yaml", yaml);
  Captured swarm =
      run_ajet("--conf " + shell_quote((swarm_dir / "det.yaml").string()) + " --exp-dir " +
               shell_quote((swarm_dir / "exps").string()) + " --swarm-url " + front.url());
  ASSERT_EQ(swarm.status, 0) << swarm.out;
  std::vector<std::string> records;
  for (const Json& r : read_jsonl(swarm_dir / "exps" / "run" / "metrics.jsonl"))
    records.push_back(without_clock(r).dump());
  ASSERT_EQ(records.size(), classic.records.size());
  int train = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i], classic.records[i]) << "metrics.jsonl record " << i;
    train += Json::parse(records[i])["kind"] == "train";
  }
  EXPECT_EQ(train, 2);
}

void check_two_runs(const std::string& extra) {
  const fs::path model = micro_model();
  std::string yaml = classic_yaml(model, extra);
  yaml.replace(yaml.find("backbone: debug"), 15, "backbone: torch");
  yaml.replace(yaml.find("total_training_steps: 2"), 23, "total_training_steps: 3");
  yaml.replace(yaml.find("test_freq: 1"), 12, "test_freq: 3");
  yaml.replace(yaml.find("threads: 1"), 10, "threads: 2");
  yaml.replace(yaml.find("  trainer_common:\n"), 18,
               "  trainer_common:\n    mini_batch_num: 2\n    save_freq: 3\n");
  e2e::ScratchDir first_dir, second_dir;
  const DetRun first = run_once(first_dir.path(), yaml);
  ASSERT_EQ(first.out.status, 0) << first.out.out;
  const DetRun second = run_once(second_dir.path(), yaml);
  ASSERT_EQ(second.out.status, 0) << second.out.out;
  const std::string engine_log = read_file(first_dir / "exps" / "run" / "engine.log");
  EXPECT_NE(engine_log.find("batch-invariant kernels"), std::string::npos) << engine_log;

  // The run trained and validated: 3 train records with a loss, validations before and after.
  int train = 0, validation = 0;
  for (const std::string& r : first.records) {
    const Json j = Json::parse(r);
    if (j["kind"] == "train") {
      train += 1;
      EXPECT_TRUE(j["trainer"].contains("grad_norm")) << r;
    }
    validation += j["kind"] == "validation";
  }
  EXPECT_EQ(train, 3) << first.out.out;
  EXPECT_EQ(validation, 2) << first.out.out;

  ASSERT_EQ(first.records.size(), second.records.size());
  for (size_t i = 0; i < first.records.size(); ++i)
    EXPECT_EQ(first.records[i], second.records[i]) << "metrics.jsonl record " << i;
  ASSERT_FALSE(first.files.empty()) << "no checkpoint written\n" << first.out.out;
  EXPECT_TRUE(first.files.count("global_step_3/model/model.safetensors")) << first.out.out;
  EXPECT_TRUE(first.files.count("global_step_3/optimizer.safetensors")) << first.out.out;
  ASSERT_EQ(first.files.size(), second.files.size());
  for (const auto& [path, bytes] : first.files) {
    auto other = second.files.find(path);
    ASSERT_NE(other, second.files.end()) << path;
    EXPECT_TRUE(bytes == other->second) << path << " differs between the two runs";
  }
}

}  // namespace
}  // namespace ajet::classic

namespace ajet::classic {
namespace {

// ajet.trainer_common.record_rollouts and `ajet replay`: the record of a run trains again, without
// an engine or clients, to the run's losses, gradient norms and weights, bit for bit; a record
// that no longer matches its run is reported step by step, and with --expect-identical fails.
TEST(Replay, ARecordedRunTrainsAgainToTheSameBits) {
  const fs::path model = micro_model();
  std::string yaml = classic_yaml(model);
  yaml.replace(yaml.find("backbone: debug"), 15, "backbone: torch");
  yaml.replace(yaml.find("total_training_steps: 2"), 23, "total_training_steps: 3");
  yaml.replace(yaml.find("test_freq: 1"), 12, "test_freq: 0");
  yaml.replace(yaml.find("val_before_train: true"), 22, "val_before_train: false");
  yaml.replace(yaml.find("  trainer_common:\n"), 18,
               "  trainer_common:\n    save_freq: 3\n    record_rollouts: true\n");
  e2e::ScratchDir dir;
  write_file_atomic(dir / "rec.yaml", yaml);
  Captured run = run_ajet("--conf " + shell_quote((dir / "rec.yaml").string()) + " --exp-dir " +
                          shell_quote((dir / "exps").string()));
  ASSERT_EQ(run.status, 0) << run.out;
  const fs::path exp = dir / "exps" / "run";
  for (const char* f : {"record.json", "step_000001.batch", "step_000003.json"})
    EXPECT_TRUE(fs::exists(exp / "rollouts" / f)) << f;

  Captured replay = run_ajet("replay " + shell_quote(exp.string()) + " --expect-identical --out " +
                             shell_quote((dir / "replay").string()));
  ASSERT_EQ(replay.status, 0) << replay.out;
  EXPECT_NE(replay.out.find("3 of 3 steps the same bits as the run"), std::string::npos)
      << replay.out;
  for (const char* f : {"model/model.safetensors", "optimizer.safetensors"}) {
    EXPECT_TRUE(read_file(dir / "replay" / "global_step_3" / f) ==
                read_file(exp / "saved_checkpoints" / "global_step_3" / f))
        << f << " differs from the run's";
  }
  EXPECT_EQ(read_jsonl(dir / "replay" / "replay.jsonl").size(), 3u);

  // A record whose second step no longer matches its run: that step is reported, the others not.
  const fs::path step2 = exp / "rollouts" / "step_000002.json";
  Json j = Json::parse(read_file(step2));
  j["reply"]["loss"] = j["reply"]["loss"].get<double>() + 1.0;
  write_file_atomic(step2, j.dump());
  Captured changed = run_ajet("replay " + shell_quote(exp.string()));
  ASSERT_EQ(changed.status, 0) << changed.out;
  EXPECT_NE(changed.out.find("2 of 3 steps the same bits"), std::string::npos) << changed.out;
  EXPECT_NE(changed.out.find("DIFFERENT"), std::string::npos) << changed.out;
  Captured strict = run_ajet("replay " + shell_quote(exp.string()) + " --expect-identical");
  EXPECT_NE(strict.status, 0) << strict.out;
  EXPECT_NE(strict.out.find("1 of 3 steps differ from the run"), std::string::npos) << strict.out;

  // Not a record: the error says what is missing and how a run makes one.
  Captured none = run_ajet("replay " + shell_quote(dir.path().string()));
  EXPECT_NE(none.status, 0);
  EXPECT_NE(none.out.find("no record.json"), std::string::npos) << none.out;
  EXPECT_NE(none.out.find("record_rollouts"), std::string::npos) << none.out;
}

}  // namespace
}  // namespace ajet::classic
