// HttpServer edge cases over raw sockets: HTTP/1.0, bad statuses, misbehaving body streams.
#include <gtest/gtest.h>

#include "http/client.h"
#include "http/response.h"
#include "http/router.h"
#include "http/server.h"
#include "http/stream.h"
#include "http_test_util.h"

namespace ajet::http {
namespace {

using testing::RawSocket;

// Hands out fixed chunks, then does what `ending` says.
class ScriptedStream : public BodyStream {
 public:
  enum class Ending { kEnd, kThrow, kDropDeliver };
  ScriptedStream(std::vector<std::string> chunks, Ending ending)
      : chunks_(std::move(chunks)), ending_(ending) {}
  void next(Deliver deliver) override {
    if (next_ < chunks_.size()) {
      deliver(chunks_[next_++]);
      return;
    }
    switch (ending_) {
      case Ending::kEnd: deliver(std::nullopt); return;
      case Ending::kThrow: throw std::runtime_error("producer broke");
      case Ending::kDropDeliver: return;  // `deliver` dies unused: the body ends
    }
  }

 private:
  std::vector<std::string> chunks_;
  size_t next_ = 0;
  Ending ending_;
};

class EdgeServer {
 public:
  EdgeServer() {
    Router router;
    router.get("/status", [](Request, Respond respond) { respond(text_response("fine")); });
    router.get("/bad_status", [](Request, Respond respond) {
      Response r;
      r.status = 1000;
      respond(std::move(r));
    });
    router.get("/no_content", [](Request, Respond respond) {
      Response r;
      r.status = 204;
      r.body = "ignored";
      respond(std::move(r));
    });
    auto scripted = [](ScriptedStream::Ending ending) {
      return [ending](Request, Respond respond) {
        Response r = sse_response(
            std::make_shared<ScriptedStream>(std::vector<std::string>{"a", "", "b"}, ending));
        r.body = "prefix;";
        respond(std::move(r));
      };
    };
    router.get("/stream_end", scripted(ScriptedStream::Ending::kEnd));
    router.get("/stream_throw", scripted(ScriptedStream::Ending::kThrow));
    router.get("/stream_drop", scripted(ScriptedStream::Ending::kDropDeliver));
    server_ = std::make_unique<HttpServer>(ServerOptions{}, std::move(router));
    server_->start();
  }
  uint16_t port() const { return server_->port(); }

 private:
  std::unique_ptr<HttpServer> server_;
};

TEST(HttpServerEdge, Http10ClosesUnlessAskedToKeepAlive) {
  EdgeServer server;
  RawSocket plain(server.port());
  plain.send("GET /status HTTP/1.0\r\n\r\n");
  std::string response = plain.read_response();
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
  EXPECT_NE(response.find("Connection: close"), std::string::npos) << response;
  EXPECT_TRUE(plain.wait_closed());

  RawSocket keep(server.port());
  for (int i = 0; i < 2; ++i) {
    keep.send("GET /status HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    response = keep.read_response();
    EXPECT_NE(response.find("Connection: keep-alive"), std::string::npos) << response;
    EXPECT_TRUE(response.ends_with("fine"));
  }
}

TEST(HttpServerEdge, InvalidStatusBecomes500AndNoContentHasNoBody) {
  EdgeServer server;
  RawSocket s(server.port());
  s.send("GET /bad_status HTTP/1.1\r\n\r\n");
  std::string response = s.read_response();
  EXPECT_TRUE(response.starts_with("HTTP/1.1 500")) << response;
  EXPECT_NE(response.find("invalid status 1000"), std::string::npos) << response;
  s.send("GET /no_content HTTP/1.1\r\n\r\nGET /status HTTP/1.1\r\n\r\n");
  std::string no_content = s.read_until("\r\n\r\n");
  EXPECT_TRUE(no_content.starts_with("HTTP/1.1 204")) << no_content;
  EXPECT_EQ(no_content.find("Content-Length"), std::string::npos) << no_content;
  std::string next =
      s.read_response();  // "ignored" was never sent: the next answer follows at once
  EXPECT_TRUE(next.starts_with("HTTP/1.1 200")) << next;
  EXPECT_TRUE(next.ends_with("fine")) << next;
}

TEST(HttpServerEdge, ChunkedBodyWithPrefixSkipsEmptyChunksAndEnds) {
  EdgeServer server;
  RawSocket s(server.port());
  s.send("GET /stream_end HTTP/1.1\r\n\r\n");
  std::string head = s.read_until("\r\n\r\n");
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
  EXPECT_EQ(head.find("Content-Length"), std::string::npos) << head;
  EXPECT_EQ(s.read_until("0\r\n\r\n"), "7\r\nprefix;\r\n1\r\na\r\n1\r\nb\r\n0\r\n\r\n");
  s.send("GET /status HTTP/1.1\r\n\r\n");  // the connection stays usable
  EXPECT_TRUE(s.read_response().ends_with("fine"));
}

TEST(HttpServerEdge, StreamThatThrowsCutsTheBodyShort) {
  EdgeServer server;
  RawSocket s(server.port());
  s.send("GET /stream_throw HTTP/1.1\r\n\r\n");
  std::string head = s.read_until("\r\n\r\n");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
  std::string rest = s.read_until("1\r\nb\r\n");
  EXPECT_FALSE(rest.empty());
  EXPECT_TRUE(s.wait_closed());  // closed without the final 0-chunk: the client sees a broken body
  HttpClient client("http://127.0.0.1:" + std::to_string(server.port()));
  EXPECT_THROW(client.request("GET", "/stream_throw"), Error);
  EXPECT_EQ(client.get("/status").body, "fine");
}

TEST(HttpServerEdge, DroppedDeliverEndsTheBody) {
  EdgeServer server;
  HttpClient client("http://127.0.0.1:" + std::to_string(server.port()));
  ClientResponse r = client.get("/stream_drop");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "prefix;ab");
}

TEST(HttpServerEdge, Http10StreamEndsAtClose) {
  EdgeServer server;
  RawSocket s(server.port());
  s.send("GET /stream_end HTTP/1.0\r\n\r\n");
  std::string head = s.read_until("\r\n\r\n");
  EXPECT_EQ(head.find("chunked"), std::string::npos) << head;
  EXPECT_NE(head.find("Connection: close"), std::string::npos) << head;
  EXPECT_EQ(s.read_until("ab"), "prefix;ab");
  EXPECT_TRUE(s.wait_closed());
}

}  // namespace
}  // namespace ajet::http
