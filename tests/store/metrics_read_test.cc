// The reads GET /metrics_history makes: every metric name with its point count and last step, and
// one series after a step, by step and then by insertion.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/encoding.h"
#include "store/store.h"

namespace ajet::store {
namespace {

namespace fs = std::filesystem;

class MetricsStoreTest : public ::testing::Test {
 protected:
  MetricsStoreTest()
      : dir_(fs::temp_directory_path() / ("ajet_metrics_read_test_" + new_uuid_hex())) {
    fs::create_directories(dir_);
    store_ = std::make_unique<Store>(dir_ / "s.db");
  }
  ~MetricsStoreTest() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  fs::path dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(MetricsStoreTest, NamesCountTheirPointsAndLastStep) {
  EXPECT_TRUE(store_->list_metric_names().empty());
  store_->put_metrics(3, {{"train/loss", 0.5}, {"rollout/reward_mean", 0.25}}, 10);
  store_->put_metrics(1, {{"train/loss", 0.75}}, 11);
  store_->put_metrics(7, {{"val/pass_at_4@calc", 0.5}}, 12).get();
  const std::vector<MetricSeriesInfo> names = store_->list_metric_names();
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0].name, "rollout/reward_mean");
  EXPECT_EQ(names[0].points, 1);
  EXPECT_EQ(names[0].last_step, 3);
  EXPECT_EQ(names[1].name, "train/loss");
  EXPECT_EQ(names[1].points, 2);
  EXPECT_EQ(names[1].last_step, 3);  // the largest step, not the last written
  EXPECT_EQ(names[2].name, "val/pass_at_4@calc");
  EXPECT_EQ(names[2].last_step, 7);
}

TEST_F(MetricsStoreTest, ASeriesAfterAStepIsOrderedByStepThenInsertion) {
  store_->put_metrics(2, {{"x", 20}}, 100);
  store_->put_metrics(1, {{"x", 10}}, 101);
  store_->put_metrics(2, {{"x", 21}}, 102);
  store_->put_metrics(0, {{"x", 0}, {"y", 5}}, 103).get();
  std::vector<MetricRow> all = store_->get_metrics_after("x", -1);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].step, 0);
  EXPECT_EQ(all[1].step, 1);
  EXPECT_EQ(all[2].value, 20);  // step 2, written first
  EXPECT_EQ(all[3].value, 21);
  EXPECT_EQ(all[3].created_at, 102);
  std::vector<MetricRow> later = store_->get_metrics_after("x", 1);
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[0].step, 2);
  EXPECT_TRUE(store_->get_metrics_after("x", 2).empty());
  EXPECT_TRUE(store_->get_metrics_after("no/such/name", -1).empty());
}

}  // namespace
}  // namespace ajet::store
