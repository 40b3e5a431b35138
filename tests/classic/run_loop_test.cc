// The run loop on its own: a fake step pipeline and a fake clock drive the recipe one tick at a
// time (validation schedule, the time budget, --resume's lost validation, settle, a stop request).
#include "classic/run_loop.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ajet::classic {
namespace {

// Each step takes `step_s` fake seconds, each validation `validation_s`; the log says what ran.
struct Fake : StepPipeline {
  double now = 0, step_s = 10, validation_s = 0;
  std::vector<std::string> log;
  std::atomic<bool>* stop_at_step = nullptr;
  int64_t stop_step = -1;
  void run_step(int64_t step) override {
    now += step_s;
    log.push_back("step " + std::to_string(step));
    if (step == stop_step && stop_at_step != nullptr) *stop_at_step = true;
  }
  void settle() override { log.push_back("settle"); }
  RunLoopHooks hooks(std::vector<int64_t> validated = {}) {
    return RunLoopHooks{
        [this](int64_t s) {
          now += validation_s;
          log.push_back("validate " + std::to_string(s));
        },
        [validated](int64_t s) {
          return std::find(validated.begin(), validated.end(), s) != validated.end();
        },
        [this](const std::string& line) { log.push_back("say: " + line.substr(0, 40)); },
        [this] { return now; }};
  }
};

std::vector<std::string> steps_and_validations(const std::vector<std::string>& log) {
  std::vector<std::string> out;
  for (const auto& l : log) {
    if (l.rfind("say", 0) != 0) out.push_back(l);
  }
  return out;
}

TEST(RunLoop, ValidatesBeforeEveryTestFreqStepsAndAfterTheLastThenSettles) {
  Fake f;
  std::atomic<bool> stop{false};
  RunLoop loop(RunPlan{1, 5, 2, true, std::nullopt}, f, f.hooks(), stop);
  int ticks = 0;
  while (loop.tick()) ++ticks;
  EXPECT_EQ(ticks, 5);  // the first validation, then one tick per step (the last one ends the run)
  EXPECT_EQ(steps_and_validations(f.log),
            (std::vector<std::string>{"validate 0", "step 1", "step 2", "settle", "validate 2",
                                      "step 3", "step 4", "settle", "validate 4", "step 5",
                                      "settle", "validate 5", "settle"}));
  EXPECT_EQ(loop.steps_done(), 5);
  EXPECT_FALSE(loop.out_of_time());
  EXPECT_FALSE(loop.tick());
}

TEST(RunLoop, StopsWhenTheNextStepWouldPassTheBudgetAndValidatesThere) {
  Fake f;  // 10 s a step; 35 s budget: after step 3 (30 s) another step would end at 40
  std::atomic<bool> stop{false};
  RunLoop loop(RunPlan{1, 100, 10, false, 35.0}, f, f.hooks(), stop);
  loop.run();
  EXPECT_EQ(
      steps_and_validations(f.log),
      (std::vector<std::string>{"step 1", "step 2", "step 3", "settle", "validate 3", "settle"}));
  EXPECT_TRUE(loop.out_of_time());
  EXPECT_EQ(loop.steps_done(), 3);
  bool said = false;
  for (const auto& l : f.log)
    said = said || l.find("stopping after step 3 of 100") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(RunLoop, ProgressShowsTheBudgetsEstimateAndTimeLeft) {
  Fake f;
  std::atomic<bool> stop{false};
  RunLoop plain(RunPlan{1, 400, 0, false, std::nullopt}, f, f.hooks(), stop);
  plain.tick();
  plain.tick();
  EXPECT_EQ(plain.progress().label(), "1/400");
  Fake g;  // 10 s a step, 600 s budget
  RunLoop timed(RunPlan{1, 400, 0, false, 600.0}, g, g.hooks(), stop);
  timed.tick();
  EXPECT_EQ(timed.progress().label(), "0/400 (10m00s left)");  // nothing measured yet
  timed.tick();
  timed.tick();  // two steps: 20 s gone, 580 s left, 58 more steps
  EXPECT_EQ(timed.progress().label(), "2/~60 (9m40s left)");
  // Asked during a step (its own line), the step counts at its time so far.
  struct Probe : Fake {
    RunLoop* loop = nullptr;
    std::string seen;
    void run_step(int64_t step) override {
      now += 5;
      seen = loop->progress().label();
      now += 5;
      log.push_back("step " + std::to_string(step));
    }
  } probe;
  RunLoop probed(RunPlan{1, 400, 0, false, 600.0}, probe, probe.hooks(), stop);
  probe.loop = &probed;
  probed.tick();
  probed.tick();
  EXPECT_EQ(probe.seen, "1/~120 (9m55s left)");  // step 1, 5 s in: 595 s left at 5 s a step
}

TEST(RunLoop, AResumedRunMakesUpTheValidationItLost) {
  Fake f;
  std::atomic<bool> stop{false};
  RunLoop lost(RunPlan{5, 6, 2, true, std::nullopt}, f, f.hooks({0, 2}),
               stop);  // stopped after step 4
  lost.run();
  EXPECT_EQ(steps_and_validations(f.log),
            (std::vector<std::string>{"validate 4", "step 5", "step 6", "settle", "validate 6",
                                      "settle"}));
  Fake g;
  RunLoop kept(RunPlan{5, 6, 2, true, std::nullopt}, g, g.hooks({0, 2, 4}), stop);
  kept.run();
  EXPECT_EQ(steps_and_validations(g.log),
            (std::vector<std::string>{"step 5", "step 6", "settle", "validate 6", "settle"}));
}

TEST(RunLoop, AStopRequestEndsTheRunWithoutSettlingOrValidating) {
  Fake f;
  std::atomic<bool> stop{false};
  f.stop_at_step = &stop;
  f.stop_step = 2;
  RunLoop loop(RunPlan{1, 10, 2, false, std::nullopt}, f, f.hooks(), stop);
  loop.run();
  EXPECT_EQ(steps_and_validations(f.log), (std::vector<std::string>{"step 1", "step 2"}));
  EXPECT_EQ(loop.steps_done(), 1);
}

}  // namespace
}  // namespace ajet::classic
