// HttpServer against curl, an independent client, run as a subprocess.
#include <gtest/gtest.h>

#include "http_test_util.h"
#include "test_server.h"

namespace ajet::http {
namespace {

using testing::run_command;
using testing::TestServer;

#define REQUIRE_CURL()       \
  if (!testing::have_curl()) \
  GTEST_SKIP() << "curl is not installed (scripts/setup.sh installs it); SKIPPING"

// curl's body, then a line with the status code.
std::pair<std::string, int> curl(const std::string& args) {
  testing::CommandResult r = run_command("curl -sS -w '\\n%{http_code}' " + args + " 2>&1");
  size_t nl = r.out.rfind('\n');
  EXPECT_NE(nl, std::string::npos) << r.out;
  if (nl == std::string::npos) return {r.out, -1};
  return {r.out.substr(0, nl), std::atoi(r.out.c_str() + nl + 1)};
}

TEST(HttpCurl, KeepAliveAcrossUrlsOfOneInvocation) {
  REQUIRE_CURL();
  TestServer ts;
  std::string url = ts.url("/get_engine_status");
  testing::CommandResult r = run_command("curl -sS " + url + " " + url + " " + url);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(ts.server().stats().requests, 3u);
  EXPECT_EQ(ts.server().stats().connections_accepted, 1u);
}

TEST(HttpCurl, JsonPostAndPathParameters) {
  REQUIRE_CURL();
  TestServer ts;
  auto [body, status] =
      curl("-X POST -H 'Content-Type: application/json' -H 'X-Test: curl' --data '{\"a\":1}' " +
           ts.url("/echo"));
  ASSERT_EQ(status, 200) << body;
  Json j = Json::parse(body);
  EXPECT_EQ(j["body"], "{\"a\":1}");
  EXPECT_EQ(j["x_test"], "curl");
  auto [ep, ep_status] = curl(ts.url("/episodes/e-1"));
  EXPECT_EQ(ep_status, 200);
  EXPECT_EQ(Json::parse(ep)["episode_uuid"], "e-1");
}

TEST(HttpCurl, OversizedBodyIs413) {
  REQUIRE_CURL();
  ServerOptions options;
  options.max_body_bytes = 4096;
  TestServer ts(options);
  // Small enough that curl sends it at once, and big enough (2 MiB) that curl first asks
  // `Expect: 100-continue` and gets the 413 without sending the body.
  for (const char* size : {"5000", "2097152"}) {
    testing::CommandResult r = run_command(
        std::string("head -c ") + size +
        " /dev/zero | curl -sS -w '\\n%{http_code}' --data-binary @- " + ts.url("/echo") + " 2>&1");
    size_t nl = r.out.rfind('\n');
    ASSERT_NE(nl, std::string::npos) << r.out;
    std::string body = r.out.substr(0, nl);
    int status = std::atoi(r.out.c_str() + nl + 1);
    ASSERT_EQ(status, 413) << size << ": " << body;
    Json j = Json::parse(body);
    EXPECT_NE(j["error"]["message"].get<std::string>().find("4096"), std::string::npos) << body;
  }
}

TEST(HttpCurl, ErrorShapesAndHead) {
  REQUIRE_CURL();
  TestServer ts;
  auto [missing, missing_status] = curl(ts.url("/nope"));
  EXPECT_EQ(missing_status, 404);
  EXPECT_EQ(Json::parse(missing)["error"]["type"], "not_found_error");
  auto [wrong, wrong_status] = curl("-X PUT " + ts.url("/get_engine_status"));
  EXPECT_EQ(wrong_status, 405);
  EXPECT_EQ(Json::parse(wrong)["error"]["code"], "method_not_allowed");
  auto [thrown, thrown_status] = curl(ts.url("/throw"));
  EXPECT_EQ(thrown_status, 500);
  EXPECT_EQ(Json::parse(thrown)["error"]["type"], "server_error");

  auto [get_body, get_status] = curl(ts.url("/get_engine_status"));
  testing::CommandResult head =
      run_command("curl -sS -I " + ts.url("/get_engine_status") + " 2>&1");
  ASSERT_EQ(head.exit_code, 0) << head.out;
  EXPECT_TRUE(head.out.starts_with("HTTP/1.1 200")) << head.out;
  EXPECT_NE(head.out.find("Content-Length: " + std::to_string(get_body.size())), std::string::npos)
      << head.out;
}

// curl -N prints each event as it arrives; the producer pushes event k+1 only after this test read
// event k from curl's stdout, so the stream completes only if events are not held back.
TEST(HttpCurl, SseEventsArriveWhileTheStreamIsStillOpen) {
  REQUIRE_CURL();
  TestServer ts;
  testing::Shared& shared = ts.shared();
  FILE* pipe = ::popen(("curl -sSN " + ts.url("/stream?first=0") + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  ASSERT_TRUE(shared.wait_for([&] { return !shared.streams.empty(); }));
  std::shared_ptr<ChannelStream> stream = shared.streams.front();
  std::vector<std::string> got;
  char line[256];
  constexpr int kEvents = 4;
  while (std::fgets(line, sizeof line, pipe)) {
    std::string text(line);
    if (!text.starts_with("data: ")) continue;
    got.push_back(text.substr(6, text.size() - 7));
    int k = static_cast<int>(got.size());
    if (k < kEvents) {
      stream->push(sse_event(std::to_string(k)));
    } else {
      stream->close();
    }
  }
  int status = ::pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(got, (std::vector<std::string>{"0", "1", "2", "3"}));
}

}  // namespace
}  // namespace ajet::http
