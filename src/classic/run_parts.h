// The parts of a classic run that its steps and validations share (launcher.cc wires them).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "classic/front_session.h"
#include "classic/launcher.h"
#include "classic/run_loop.h"
#include "classic/run_record.h"
#include "classic/run_tasks.h"
#include "classic/workflow.h"
#include "config/backbone.h"

namespace ajet::classic {

struct RunParts {
  const PreparedConfig& prepared;
  config::Backbone backbone;
  const std::atomic<bool>& stop;
  std::function<void(const std::string&)> say;
  FrontSession& front;
  RunRecord& record;
  RunTasks& tasks;
  Workflow& workflow;
  bool interactive = false;  // redraw the progress bar in place
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  int64_t start_global_step = 0;           // the global step before this run's step 1
  std::function<StepProgress()> progress;  // where the run stands (the run loop's estimate)
  int64_t steps_done = 0;                  // the newest step recorded

  const config::Config& config() const { return prepared.config; }
  client::SwarmClient& client() { return front.client(); }
};

}  // namespace ajet::classic
