#include "swarm/metrics_sink.h"

#include <future>

#include "common/log.h"
#include "store/store.h"
#include "swarm/work_pool.h"

namespace ajet::swarm {

MetricsSink::MetricsSink(store::Store& store, std::function<Target()> target)
    : store_(store),
      target_(std::move(target)),
      thread_(std::make_unique<WorkPool>(1, "metrics sink")) {}

MetricsSink::~MetricsSink() { thread_.reset(); }

void MetricsSink::record(int64_t step, tfevents::Scalars values, double at,
                         std::function<void(std::exception_ptr)> done) {
  thread_->post([this, step, values = std::move(values), at, done = std::move(done)] {
    try {
      store_.put_metrics(step, values, at).get();
    } catch (...) {
      if (done) done(std::current_exception());
      return;
    }
    write_events(step, values, at);
    if (done) done(nullptr);
  });
}

void MetricsSink::to_tensorboard(int64_t step, tfevents::Scalars values, double at) {
  thread_->post([this, step, values = std::move(values), at] { write_events(step, values, at); });
}

void MetricsSink::flush() {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> written = done->get_future();
  thread_->post([done] { done->set_value(); });
  written.wait();
}

void MetricsSink::write_events(int64_t step, const tfevents::Scalars& values, double at) {
  if (values.empty()) return;
  const Target target = target_ ? target_() : Target{};
  if (!target.tensorboard || target.experiment_dir.empty()) return;
  const std::filesystem::path dir = target.experiment_dir / "tensorboard";
  try {
    if (!writer_ || dir != writer_dir_) {
      writer_.reset();
      writer_ = std::make_unique<tfevents::EventFileWriter>(dir, at);
      writer_dir_ = dir;
      log().info("metrics: TensorBoard events go to {}", writer_->path().string());
    }
    writer_->write_scalars(step, values, at);
  } catch (const std::exception& e) {
    writer_.reset();  // a file that failed once is opened again at the next write
    if (!warned_)
      log().warn("metrics: TensorBoard events not written ({}); the store keeps the numbers",
                 e.what());
    warned_ = true;
  }
}

}  // namespace ajet::swarm
