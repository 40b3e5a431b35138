// POST /ledger/draw and GET /ledger on the real ajet-swarm (echo engine): the admin token, each
// malformed draw refused with a message naming the field, and the rows and summary read back,
// a position drawn again counted as a redo.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

const char* kLedgerToken = "ledger-admin";

class LedgerApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), kLedgerToken, {}});
    api_ = std::make_unique<Api>(swarm_->url());
  }
  http::ClientResponse draw(const Json& body) { return api_->post("/ledger/draw", body, admin_); }
  std::string refusal(const Json& body) {
    http::ClientResponse r = draw(body);
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
    return r.json()["error"]["message"].get<std::string>();
  }
  ScratchDir dir_;
  http::Headers admin_{{"Authorization", std::string("Bearer ") + kLedgerToken}};
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

TEST_F(LedgerApiTest, DrawsAreCheckedRecordedAndReadBack) {
  const Json one{{"task_id", "t1"}, {"source", "tasks"}, {"seq", 0}};
  EXPECT_EQ(api_->post("/ledger/draw", Json{{"step", 1}, {"draws", Json::array({one})}}).status,
            401);
  EXPECT_EQ(api_->get("/ledger").status, 401);

  EXPECT_THAT(refusal(Json{{"draws", Json::array({one})}}), HasSubstr("'step' must be an integer"));
  EXPECT_THAT(refusal(Json{{"step", 0}, {"draws", Json::array({one})}}),
              HasSubstr("'step' must be an integer >= 1"));
  EXPECT_THAT(refusal(Json{{"step", 1}, {"draws", "t1"}}), HasSubstr("'draws' must be an array"));
  Json bad = one;
  bad["seq"] = -2;
  EXPECT_THAT(refusal(Json{{"step", 1}, {"draws", Json::array({one, bad})}}),
              HasSubstr("draws[1].'seq' must be an integer >= 0"));
  bad = one;
  bad.erase("task_id");
  EXPECT_THAT(refusal(Json{{"step", 1}, {"draws", Json::array({bad})}}),
              HasSubstr("draws[0].'task_id' must be a non-empty string"));

  const Json two{{"task_id", "t2"}, {"source", "tasks"}, {"seq", 1}};
  http::ClientResponse ok = draw(Json{{"step", 1}, {"draws", Json::array({one, two})}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.json()["recorded"], 2);
  ASSERT_EQ(draw(Json{{"step", 1}, {"draws", Json::array({one})}}).status, 200);  // again

  http::ClientResponse read = api_->get("/ledger?rows=1", admin_);
  ASSERT_EQ(read.status, 200) << read.body;
  const Json ledger = read.json();
  EXPECT_EQ(ledger["global_step"], 0);
  ASSERT_EQ(ledger["rows"].size(), 2u);
  EXPECT_EQ(ledger["rows"][0]["key"], "draw:tasks:0");
  EXPECT_EQ(ledger["rows"][0]["state"], "in_flight");
  EXPECT_EQ(ledger["rows"][0]["attempts"], 2);
  EXPECT_EQ(ledger["rows"][1]["task_id"], "t2");
  EXPECT_EQ(ledger["summary"]["in_flight"], 2);
  EXPECT_EQ(ledger["summary"]["redone"], 1);
  EXPECT_EQ(ledger["summary"]["skipped"], 0);  // drawn at step 1, the weights are at 0
  EXPECT_FALSE(api_->get("/ledger", admin_).json().contains("rows"));
}

}  // namespace
}  // namespace ajet::e2e
