// Where the front's metrics go besides the registry's own store writes: POST /log_metrics into the
// store's `metrics` table, and every metrics write (those and the registry's batch numbers) into a
// TensorBoard event file, <experiment dir>/tensorboard/events.out.tfevents.<unix s>.<host>, when
// the synced config's ajet.trainer_common.logger holds `tensorboard` (the default; before any
// start_engine the server directory stands in for the experiment directory).
//
// Threads: record() and to_tensorboard() may be called from any thread and never block: the work
// runs in order on one thread of the sink's own. A file that cannot be written is logged, never
// fatal: the store holds the numbers.
#pragma once

#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/tfevents.h"

namespace ajet::store {
class Store;
}

namespace ajet::swarm {

class WorkPool;

class MetricsSink {
 public:
  // Where event files go now, asked at every write (the experiment directory changes with
  // start_engine); tensorboard false: none are written.
  struct Target {
    std::filesystem::path experiment_dir;
    bool tensorboard = true;
  };
  MetricsSink(store::Store& store, std::function<Target()> target);
  ~MetricsSink();  // writes what is queued
  MetricsSink(const MetricsSink&) = delete;
  MetricsSink& operator=(const MetricsSink&) = delete;

  // Into the store (`done` after its commit, with the store's error or nullptr) and TensorBoard.
  void record(int64_t step, tfevents::Scalars values, double at,
              std::function<void(std::exception_ptr)> done);
  // TensorBoard only (the registry queued the store write itself).
  void to_tensorboard(int64_t step, tfevents::Scalars values, double at);
  // Returns once everything queued before it is written and answered (the front calls it before its
  // HTTP server goes, so no /log_metrics answer outlives the server).
  void flush();

 private:
  void write_events(int64_t step, const tfevents::Scalars& values, double at);  // the sink's thread

  store::Store& store_;
  std::function<Target()> target_;
  std::unique_ptr<tfevents::EventFileWriter> writer_;  // the sink's thread only
  std::filesystem::path writer_dir_;
  bool warned_ = false;
  std::unique_ptr<WorkPool> thread_;  // last: joined first
};

}  // namespace ajet::swarm
