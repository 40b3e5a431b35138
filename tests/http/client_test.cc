// HttpClient against real sockets: URL handling, errors that name host:port, timeouts, reconnecting
// after the server closed an idle keep-alive connection.
#include <gtest/gtest.h>

#include <thread>

#include "http/client.h"
#include "http_test_util.h"
#include "test_server.h"

namespace ajet::http {
namespace {

using testing::TestServer;

// A port with nothing listening on it: bound once by us, then released.
uint16_t unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(HttpParseUrl, Forms) {
  Url a = parse_url("http://127.0.0.1:10086/v1/chat/completions?x=1");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 10086);
  EXPECT_EQ(a.target, "/v1/chat/completions?x=1");
  Url b = parse_url("localhost:8080");
  EXPECT_EQ(b.host, "localhost");
  EXPECT_EQ(b.target, "/");
  Url c = parse_url("http://[::1]:9/x");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 9);
  EXPECT_EQ(parse_url("http://example.org").port, 80);
  EXPECT_THROW(parse_url("https://example.org"), Error);
  EXPECT_THROW(parse_url("ftp://example.org"), Error);
  EXPECT_THROW(parse_url("http://:80/"), Error);
  EXPECT_THROW(parse_url("http://h:99999/"), Error);
}

TEST(HttpClient, RefusedConnectionIsUnavailableNamingHostAndPort) {
  uint16_t port = unused_port();
  HttpClient client("http://127.0.0.1:" + std::to_string(port));
  try {
    client.get("/health");
    FAIL() << "connected to a port nobody listens on";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
}

TEST(HttpClient, SilentServerTimesOut) {
  // A listening socket that never accepts: the kernel completes the handshake, nobody answers.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  uint16_t port = ntohs(addr.sin_port);
  ClientOptions options;
  options.timeout = std::chrono::milliseconds(100);
  HttpClient client("http://127.0.0.1:" + std::to_string(port), options);
  try {
    client.get("/health");
    ADD_FAILURE() << "got an answer from a server that never answers";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(":" + std::to_string(port)), std::string::npos)
        << e.what();
  }
  ::close(fd);
}

TEST(HttpClient, ReconnectsAfterTheServerClosedAnIdleConnection) {
  ServerOptions options;
  options.idle_timeout = std::chrono::milliseconds(50);
  TestServer ts(options);
  HttpClient client(ts.url());
  ASSERT_EQ(client.get("/get_engine_status").status, 200);
  // Wait (on the server's own count, not a clock) until it has closed the idle connection.
  for (int i = 0; i < 30000 && ts.server().stats().connections_open != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(ts.server().stats().connections_open, 0u);
  EXPECT_EQ(client.get("/get_engine_status").status, 200);
  EXPECT_EQ(client.connections_opened(), 2u);
}

TEST(HttpClient, BasePrefixAndFullUrls) {
  TestServer a;
  TestServer b;
  HttpClient client(a.url("/episodes/"));
  EXPECT_EQ(client.get("/abc").json()["episode_uuid"], "abc");  // "/episodes" + "/abc"
  EXPECT_EQ(client.get(b.url("/episodes/xyz")).json()["episode_uuid"], "xyz");
  EXPECT_EQ(b.server().stats().requests, 1u);
  EXPECT_EQ(client.get("/again").json()["episode_uuid"], "again");
  EXPECT_EQ(a.server().stats().requests, 2u);
}

TEST(HttpClient, PostJsonAndResponseLimit) {
  TestServer ts;
  HttpClient client(ts.url());
  Json sent = {{"client_uuid", "c1"}, {"n", 3}};
  Json echoed = client.post_json("/echo", sent).json();
  EXPECT_EQ(Json::parse(echoed["body"].get<std::string>()), sent);

  ClientOptions options;
  options.max_response_bytes = 100;
  HttpClient small(ts.url(), options);
  try {
    small.get("/big");
    ADD_FAILURE() << "a 1000-byte body passed a 100-byte limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos);
  }
  EXPECT_EQ(small.get("/get_engine_status").status, 200);  // usable afterwards
}

TEST(HttpClient, StreamOfANonSseResponseReturnsTheBody) {
  TestServer ts;
  HttpClient client(ts.url());
  int events = 0;
  ClientResponse r =
      client.stream("GET", "/nope", {}, {}, [&](const SseEvent&) { return ++events > 0; });
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(events, 0);
  EXPECT_EQ(r.json()["error"]["type"], "not_found_error");
}

TEST(HttpClient, JsonOfANonJsonBodyNamesTheStatus) {
  ClientResponse r;
  r.status = 502;
  r.body = "<html>bad gateway</html>";
  try {
    r.json();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("502"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ajet::http
