// HttpServer's defences against expensive clients, over real sockets: checks made from a request's
// head before its body is read (credentials, per-route body limits, the body-memory budget),
// hang-ups that cancel the request in flight, streams whose reader stopped reading, and the
// connection cap.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "http/client.h"
#include "http/response.h"
#include "http/router.h"
#include "http/server.h"
#include "http/stream.h"
#include "http_test_util.h"

namespace ajet::http {
namespace {

using testing::RawSocket;
using namespace std::chrono_literals;

// Polls `done` until it holds or 30 s pass (a broken server fails instead of hanging).
bool within_30s(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

std::string limit_post_head(std::string_view path, size_t content_length,
                            std::string_view extra = "") {
  return "POST " + std::string(path) +
         " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(content_length) + "\r\n" +
         std::string(extra) + "\r\n";
}

// What the routes of LimitServer hand to the test.
struct LimitSeen {
  std::mutex mu;
  std::vector<Respond> held;  // /hold: answered by the test
  std::vector<std::shared_ptr<CancelSignal>> cancels;
  std::shared_ptr<ChannelStream> stream;  // /flood
  std::atomic<int> handled{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> stream_cancelled{0};
};

class LimitServer {
 public:
  explicit LimitServer(ServerOptions options = {}, size_t backlog = 256 << 10)
      : seen_(std::make_shared<LimitSeen>()) {
    auto seen = seen_;
    Router router;
    RouteOptions keyed;
    keyed.check_head = [](const RequestHead& head) -> std::optional<Response> {
      if (head.headers.get_or("x-key", "") == "open sesame") return std::nullopt;
      return error_response(401, "send x-key", "authentication_error", "unauthenticated");
    };
    router.post(
        "/keyed",
        [seen](Request req, Respond respond) {
          ++seen->handled;
          respond(json_response({{"length", req.body.size()}}));
        },
        keyed);
    router.get(
        "/keyed_get", [](Request, Respond respond) { respond(text_response("in")); }, keyed);
    RouteOptions small;
    small.max_body_bytes = 1024;
    small.limit_name = "--small-mb";
    small.error_shape = [](int status, const std::string& message, const std::string& code) {
      return json_response({{"shaped", true}, {"message", message}, {"code", code}}, status);
    };
    router.post(
        "/small",
        [seen](Request req, Respond respond) {
          ++seen->handled;
          respond(json_response({{"length", req.body.size()}}));
        },
        small);
    router.get("/health", [](Request, Respond respond) { respond(text_response("ok")); });
    auto hold = [seen](Request req, Respond respond) {
      std::lock_guard lock(seen->mu);
      req.cancel->on_cancel([seen] { ++seen->cancelled; });
      seen->cancels.push_back(req.cancel);
      seen->held.push_back(std::move(respond));
    };
    router.get("/hold", hold);
    router.post("/hold", hold);
    router.get("/flood", [seen, backlog](Request, Respond respond) {
      auto stream = std::make_shared<ChannelStream>(0, backlog);
      stream->on_cancel([weak = std::weak_ptr<LimitSeen>(seen)] {
        if (auto s = weak.lock()) ++s->stream_cancelled;
      });
      {
        std::lock_guard lock(seen->mu);
        seen->stream = stream;
      }
      respond(sse_response(stream));
    });
    options.max_body_bytes = 64 << 20;  // the server's own limit would read a 60 MB upload whole
    server_ = std::make_unique<HttpServer>(options, std::move(router));
    server_->start();
  }
  ~LimitServer() {
    {
      std::lock_guard lock(seen_->mu);
      for (Respond& r : seen_->held) r(text_response("late"));
      seen_->held.clear();
    }
    server_.reset();
  }
  uint16_t port() const { return server_->port(); }
  HttpServer& server() { return *server_; }
  LimitSeen& seen() { return *seen_; }
  size_t held() {
    std::lock_guard lock(seen_->mu);
    return seen_->held.size();
  }
  void answer_held(size_t i) {
    std::lock_guard lock(seen_->mu);
    seen_->held[i](text_response("done"));
  }

 private:
  std::shared_ptr<LimitSeen> seen_;
  std::unique_ptr<HttpServer> server_;
};

// Before, the credential was checked after the whole body was in memory: a 60 MB upload without it
// was read to its end (and held) before the 401.
TEST(HttpServerHead, ARequestRefusedFromItsHeadIsAnsweredBeforeItsBodyIsSent) {
  LimitServer ls;
  RawSocket s(ls.port());
  s.send(limit_post_head("/keyed", 60 << 20));
  s.send(std::string(1 << 20, 'b'));  // 1 MB of the 60: the answer cannot wait for the rest
  std::string response = s.read_response();
  ASSERT_TRUE(response.starts_with("HTTP/1.1 401")) << response.substr(0, 300);
  EXPECT_NE(response.find("send x-key"), std::string::npos) << response;
  EXPECT_NE(response.find("Connection: close"), std::string::npos) << response;
  EXPECT_EQ(ls.seen().handled.load(), 0);
  ServerStats stats = ls.server().stats();
  EXPECT_EQ(stats.answered_at_head, 1u);
  EXPECT_EQ(stats.body_bytes_read, 0u) << "the refused body was kept";
  EXPECT_EQ(stats.requests, 0u);

  // With the key, the same route reads its body.
  HttpClient client("http://127.0.0.1:" + std::to_string(ls.port()));
  ClientResponse ok =
      client.request("POST", "/keyed", {{"x-key", "open sesame"}}, std::string(5000, 'k'));
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.json()["length"], 5000);
  EXPECT_EQ(ls.server().stats().body_bytes_read, 5000u);
}

// Before, the server answered 100 Continue first and asked for the body it was going to refuse.
TEST(HttpServerHead, ExpectContinueIsNotAnsweredForARefusedHead) {
  LimitServer ls;
  RawSocket s(ls.port());
  s.send(limit_post_head("/keyed", 4096, "Expect: 100-continue\r\n"));
  std::string response = s.read_response();
  EXPECT_TRUE(response.starts_with("HTTP/1.1 401")) << response;
}

TEST(HttpServerHead, ARefusedHeadWithoutABodyKeepsTheConnection) {
  LimitServer ls;
  RawSocket s(ls.port());
  s.send("GET /keyed_get HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(s.read_response().starts_with("HTTP/1.1 401"));
  s.send("GET /keyed_get HTTP/1.1\r\nHost: x\r\nx-key: open sesame\r\n\r\n");
  EXPECT_TRUE(s.read_response().starts_with("HTTP/1.1 200"));
}

// Before, a request to no route was read whole (up to max_body_bytes) before its 404.
TEST(HttpServerHead, UnknownPathsAndMethodsAreAnsweredFromTheHead) {
  LimitServer ls;
  {
    RawSocket s(ls.port());
    s.send(limit_post_head("/nowhere", 60 << 20));
    std::string response = s.read_response();
    EXPECT_TRUE(response.starts_with("HTTP/1.1 404")) << response;
  }
  {
    RawSocket s(ls.port());
    s.send(limit_post_head("/health", 60 << 20));
    std::string response = s.read_response();
    EXPECT_TRUE(response.starts_with("HTTP/1.1 405")) << response;
    EXPECT_NE(response.find("Allow: GET"), std::string::npos) << response;
  }
  EXPECT_EQ(ls.server().stats().body_bytes_read, 0u);
}

// Before, a route had only the server-wide limit.
TEST(HttpServerHead, ARoutesOwnBodyLimitIsCheckedFromContentLengthAndWhileChunksArrive) {
  LimitServer ls;
  {
    RawSocket s(ls.port());
    s.send(limit_post_head("/small", 2000));  // no body sent: the 413 comes from the head
    std::string response = s.read_response();
    ASSERT_TRUE(response.starts_with("HTTP/1.1 413")) << response;
    Json body = Json::parse(response.substr(response.find("\r\n\r\n") + 4));
    EXPECT_EQ(body["shaped"], true) << body.dump();  // the route's own error shape
    EXPECT_EQ(body["code"], "request_too_large");
    const std::string message = body["message"];
    EXPECT_NE(message.find("2000 bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("1024 bytes (1 KiB; --small-mb)"), std::string::npos) << message;
  }
  {
    RawSocket s(ls.port());
    std::string chunked = "POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 3; ++i) chunked += "200\r\n" + std::string(512, 'c') + "\r\n";
    s.send(chunked + "0\r\n\r\n");
    std::string response = s.read_response();
    ASSERT_TRUE(response.starts_with("HTTP/1.1 413")) << response;
    EXPECT_NE(response.find("--small-mb"), std::string::npos) << response;
  }
  HttpClient client("http://127.0.0.1:" + std::to_string(ls.port()));
  EXPECT_EQ(client.request("POST", "/small", {}, std::string(1024, 'a')).status, 200);
  EXPECT_EQ(ls.seen().handled.load(), 1);
}

// Before, any number of bodies could be in memory at once, each up to max_body_bytes.
TEST(HttpServerHead, BodiesBeyondTheMemoryBudgetGet503BeforeTheyAreRead) {
  ServerOptions options;
  options.max_body_memory_bytes = 1 << 20;
  options.body_memory_name = "--budget";
  LimitServer ls(options);
  RawSocket first(ls.port());  // holds 800 KB of the budget until it is answered
  first.send(limit_post_head("/hold", 800 << 10) + std::string(800 << 10, 'h'));
  ASSERT_TRUE(within_30s([&] { return ls.held() == 1; }));
  EXPECT_EQ(ls.server().stats().body_bytes_held, 800u << 10);

  RawSocket second(ls.port());
  second.send(limit_post_head("/small", 1000) +
              std::string(1000, 's'));  // fits its route, not the budget
  EXPECT_TRUE(second.read_response().starts_with("HTTP/1.1 200"));  // 1000 bytes fit what is left
  RawSocket third(ls.port());
  third.send(limit_post_head("/hold", 300 << 10));
  std::string refused = third.read_response();
  ASSERT_TRUE(refused.starts_with("HTTP/1.1 503")) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos) << refused;
  EXPECT_NE(refused.find("--budget"), std::string::npos) << refused;

  // A chunked body counts as it arrives.
  RawSocket chunked(ls.port());
  std::string body = "POST /hold HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 5; ++i)
    body += "10000\r\n" + std::string(0x10000, 'c') + "\r\n";  // 5 × 64 KiB
  chunked.send(body + "0\r\n\r\n");
  EXPECT_TRUE(chunked.read_response().starts_with("HTTP/1.1 503"));

  ls.answer_held(0);  // the first request's answer releases its bytes
  EXPECT_TRUE(first.read_response().starts_with("HTTP/1.1 200"));
  EXPECT_TRUE(within_30s([&] { return ls.server().stats().body_bytes_held == 0; }));
  RawSocket again(ls.port());
  again.send(limit_post_head("/hold", 300 << 10) + std::string(300 << 10, 'a'));
  EXPECT_TRUE(within_30s([&] { return ls.held() == 2; }));
}

// Before, a client that hung up while its request was handled went unnoticed until the handler
// answered: the work it had asked for ran to its end for nobody.
TEST(HttpServerCancel, AHangUpWhileTheRequestIsHandledFiresItsCancelSignal) {
  LimitServer ls;
  auto s = std::make_unique<RawSocket>(ls.port());
  s->send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(within_30s([&] { return ls.held() == 1; }));
  EXPECT_EQ(ls.seen().cancelled.load(), 0);
  s.reset();  // hang up
  ASSERT_TRUE(within_30s([&] { return ls.seen().cancelled.load() == 1; }));
  EXPECT_TRUE(ls.seen().cancels[0]->cancelled());
  // A request answered normally is never cancelled, and pipelined requests are still served.
  RawSocket p(ls.port());
  p.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(within_30s([&] { return ls.held() == 2; }));
  ls.answer_held(1);
  EXPECT_TRUE(p.read_response().starts_with("HTTP/1.1 200"));
  std::string second = p.read_response();
  EXPECT_TRUE(second.starts_with("HTTP/1.1 200")) << second;
  EXPECT_NE(second.find("ok"), std::string::npos);
  EXPECT_FALSE(ls.seen().cancels[1]->cancelled());
  EXPECT_EQ(ls.seen().cancelled.load(), 1);
}

// Before, a stream whose client stopped reading queued whatever its producer pushed.
TEST(HttpServerCancel, AStreamWhoseReaderStopsReadingIsCancelledAfterItsBacklog) {
  constexpr size_t kBacklog = 256 << 10;
  LimitServer ls({}, kBacklog);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);  // before connect: a small window
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(ls.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string request = "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), ssize_t(request.size()));
  std::shared_ptr<ChannelStream> stream;
  ASSERT_TRUE(within_30s([&] {
    std::lock_guard lock(ls.seen().mu);
    stream = ls.seen().stream;
    return stream != nullptr;
  }));
  // The client reads nothing: pushes go to the socket buffers, then to the queue, until the bound.
  const std::string chunk(1024, 'x');
  size_t pushed = 0;
  bool refused = false;
  while (pushed < (size_t(256) << 20)) {
    if (!stream->push(chunk)) {
      refused = true;
      break;
    }
    pushed += chunk.size();
    if (stream->queued_bytes() > 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  EXPECT_TRUE(refused) << pushed << " bytes pushed and never refused";
  EXPECT_TRUE(stream->overflowed());
  EXPECT_TRUE(stream->cancelled());
  EXPECT_EQ(ls.seen().stream_cancelled.load(), 1);
  EXPECT_LE(stream->queued_bytes(), kBacklog);
  ::close(fd);
}

std::unique_ptr<RawSocket> limit_idle_connection(uint16_t port) {
  auto s = std::make_unique<RawSocket>(port);
  s->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(s->read_response().starts_with("HTTP/1.1 200"));
  return s;
}

// Before, connections were accepted until the descriptors ran out: /health then failed until idle
// connections timed out (60 s), and an attacker could keep it so.
TEST(HttpServerCap, AtTheCapTheOldestIdleConnectionMakesRoom) {
  ServerOptions options;
  options.io_threads = 1;
  options.max_connections = 16;
  LimitServer ls(options);
  EXPECT_EQ(ls.server().stats().max_connections, 16u);
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(limit_idle_connection(ls.port()));
  RawSocket fresh(ls.port());
  fresh.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(fresh.read_response().starts_with("HTTP/1.1 200"));
  EXPECT_TRUE(idle[0]->wait_closed()) << "the oldest idle connection stays open";
  EXPECT_EQ(ls.server().stats().connections_shed, 1u);
  // The others were kept: the next oldest still serves.
  idle[1]->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(idle[1]->read_response().starts_with("HTTP/1.1 200"));
}

TEST(HttpServerCap, ASlowHeaderGoesWhenNoneIsIdleAndWithNothingToShedTheNewcomerGets503) {
  ServerOptions options;
  options.io_threads = 1;
  options.max_connections = 2;
  LimitServer ls(options);
  RawSocket busy(ls.port());
  busy.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(within_30s([&] { return ls.held() == 1; }));
  RawSocket slow(ls.port());
  slow.send("GET /health HTTP/1.1\r\n");  // a header that never ends
  ASSERT_TRUE(within_30s([&] { return ls.server().stats().connections_open == 2; }));
  // Whether the server has read the partial header yet or not, `slow` is the one that can go.

  RawSocket second(ls.port());
  second.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(within_30s([&] { return ls.held() == 2; }));
  EXPECT_TRUE(slow.wait_closed()) << "the connection reading its header was kept";
  EXPECT_EQ(ls.server().stats().connections_shed, 1u);

  RawSocket refused(ls.port());  // both connections are busy: nothing to shed
  std::string response = refused.read_response();
  ASSERT_TRUE(response.starts_with("HTTP/1.1 503")) << response;
  EXPECT_NE(response.find("Retry-After: 1"), std::string::npos) << response;
  EXPECT_NE(response.find("max_connections"), std::string::npos) << response;
  EXPECT_EQ(ls.server().stats().connections_refused, 1u);
  ls.answer_held(0);
  EXPECT_TRUE(busy.read_response().starts_with("HTTP/1.1 200"));
}

TEST(HttpServerCap, TheDefaultCapStaysBelowTheDescriptorLimit) {
  const size_t cap = default_max_connections();
  EXPECT_GE(cap, 1u);
  EXPECT_LE(cap, 16384u);
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur != RLIM_INFINITY) {
    EXPECT_LT(cap, limit.rlim_cur);
  }
}

}  // namespace
}  // namespace ajet::http
