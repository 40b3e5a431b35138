// HttpServer end to end on loopback: the C++ HttpClient and raw sockets against a real server.
// Every wait is on a condition (an event, a closed socket), never on elapsed time.
#include <gtest/gtest.h>

#include <csignal>

#include "http/client.h"
#include "http_test_util.h"
#include "test_server.h"

namespace ajet::http {
namespace {

using testing::RawSocket;
using testing::TestServer;

TEST(HttpServer, KeepAliveReusesOneConnection) {
  TestServer ts;
  HttpClient client(ts.url());
  for (int i = 0; i < 20; ++i) {
    ClientResponse r = client.get("/get_engine_status");
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.json()["engine_status"], "ENGINE.ROLLING");
    EXPECT_EQ(r.headers.get("Content-Type").value(), "application/json");
  }
  EXPECT_EQ(client.connections_opened(), 1u);
  EXPECT_EQ(ts.server().stats().connections_accepted, 1u);
  EXPECT_EQ(ts.server().stats().requests, 20u);
}

TEST(HttpServer, PostBodyHeadersAndRemoteAddressReachTheHandler) {
  TestServer ts;
  HttpClient client(ts.url());
  ClientResponse r = client.request("POST", "/echo", {{"X-Test", "hello"}}, "payload \x01\x02");
  ASSERT_EQ(r.status, 200);
  Json j = r.json();
  EXPECT_EQ(j["body"], "payload \x01\x02");
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["x_test"], "hello");
  EXPECT_TRUE(j["remote"].get<std::string>().starts_with("127.0.0.1:"));
}

// Bodies larger than socket buffers: the incremental body read, and a response written while the
// client is not reading yet (the server's socket fills up, so the write has to wait for it).
TEST(HttpServer, LargeBodiesBothWays) {
  TestServer ts;
  HttpClient client(ts.url());
  std::string upload(4 << 20, '\0');
  size_t sum = 0;
  for (size_t i = 0; i < upload.size(); ++i) {
    upload[i] = static_cast<char>(i % 251);
    sum += static_cast<unsigned char>(upload[i]);
  }
  Json got = client.request("POST", "/length", {}, upload).json();
  EXPECT_EQ(got["length"], upload.size());
  EXPECT_EQ(got["byte_sum"], sum);

  constexpr size_t kBig = 16 << 20;  // more than loopback socket buffers hold (~10 MiB)
  RawSocket s(ts.port());
  s.send("GET /big?n=" + std::to_string(kBig) + " HTTP/1.1\r\nHost: x\r\n\r\n");
  s.send("GET /get_engine_status HTTP/1.1\r\nHost: x\r\n\r\n");  // pipelined behind it
  std::string big = s.read_response();
  ASSERT_TRUE(big.starts_with("HTTP/1.1 200")) << big.substr(0, 200);
  std::string body = big.substr(big.find("\r\n\r\n") + 4);
  ASSERT_EQ(body.size(), kBig);
  EXPECT_EQ(body[4096 * 27], 'b');
  EXPECT_TRUE(s.read_response().starts_with("HTTP/1.1 200"));
}

TEST(HttpServer, OversizedBodyIs413NamingTheLimit) {
  ServerOptions options;
  options.max_body_bytes = 1024;
  TestServer ts(options);
  HttpClient client(ts.url());
  EXPECT_EQ(client.request("POST", "/echo", {}, std::string(1024, 'a')).status, 200);
  for (size_t size : {size_t(1025), size_t(1) << 20}) {
    ClientResponse r = client.request("POST", "/echo", {}, std::string(size, 'a'));
    ASSERT_EQ(r.status, 413) << size;
    Json j = r.json();
    EXPECT_NE(j["error"]["message"].get<std::string>().find("1024"), std::string::npos) << r.body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find("max_body_bytes"), std::string::npos);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(r.headers.get("Connection").value(), "close");
  }
  // The server keeps serving (on a new connection).
  EXPECT_EQ(client.get("/get_engine_status").status, 200);
}

TEST(HttpServer, OversizedChunkedBodyIs413) {
  ServerOptions options;
  options.max_body_bytes = 16;
  TestServer ts(options);
  RawSocket s(ts.port());
  s.send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
      "chunked\r\n\r\n10\r\n0123456789abcdef\r\n1\r\nz\r\n0\r\n\r\n");
  std::string response = s.read_response();
  EXPECT_TRUE(response.starts_with("HTTP/1.1 413")) << response;
  EXPECT_NE(response.find("16 bytes"), std::string::npos) << response;
}

TEST(HttpServer, OversizedHeaderIs413NamingTheLimit) {
  ServerOptions options;
  options.max_header_bytes = 2048;
  TestServer ts(options);
  HttpClient client(ts.url());
  ClientResponse r =
      client.request("GET", "/get_engine_status", {{"X-Big", std::string(4000, 'h')}});
  ASSERT_EQ(r.status, 413);
  std::string message = r.json()["error"]["message"];
  EXPECT_NE(message.find("2048"), std::string::npos) << message;
  EXPECT_NE(message.find("max_header_bytes"), std::string::npos) << message;
  EXPECT_EQ(client.get("/get_engine_status").status, 200);
}

TEST(HttpServer, ExpectContinueIsAnsweredBeforeTheBodyIsSent) {
  ServerOptions options;
  options.max_body_bytes = 100;
  TestServer ts(options);
  {
    RawSocket s(ts.port());
    s.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    EXPECT_EQ(s.read_until("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
    s.send("hello");
    std::string response = s.read_response();
    EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
    EXPECT_NE(response.find("\"body\":\"hello\""), std::string::npos) << response;
  }
  {
    // Over the limit: the 413 comes at once, without the body ever being sent.
    RawSocket s(ts.port());
    s.send(
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n");
    std::string response = s.read_response();
    EXPECT_TRUE(response.starts_with("HTTP/1.1 413")) << response;
    EXPECT_NE(response.find("100 bytes"), std::string::npos) << response;
  }
}

TEST(HttpServer, MalformedRequestsGet400AndTheServerKeepsServing) {
  TestServer ts;
  for (const char* garbage : {"NOT AN HTTP REQUEST\r\n\r\n", "GET / HTTP/7.2\r\n\r\n",
                              "GET / HTTP/1.1\r\nNo colon here\r\n\r\n",
                              "POST /echo HTTP/1.1\r\nContent-Length: nope\r\n\r\n"}) {
    RawSocket s(ts.port());
    s.send(garbage);
    std::string response = s.read_response();
    EXPECT_TRUE(response.starts_with("HTTP/1.1 400")) << garbage << " → " << response;
    EXPECT_NE(response.find("\"type\":\"invalid_request_error\""), std::string::npos) << response;
    EXPECT_TRUE(s.wait_closed());
  }
  HttpClient client(ts.url());
  EXPECT_EQ(client.get("/get_engine_status").status, 200);
}

TEST(HttpServer, UnknownPathAndWrongMethodHaveTheErrorShape) {
  TestServer ts;
  HttpClient client(ts.url());
  ClientResponse missing = client.get("/v1/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.json()["error"]["type"], "not_found_error");
  ClientResponse wrong = client.request("DELETE", "/get_engine_status");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.json()["error"]["code"], "method_not_allowed");
  EXPECT_EQ(wrong.headers.get("Allow").value(), "GET");
  EXPECT_EQ(client.connections_opened(), 1u);  // error answers keep the connection
}

TEST(HttpServer, PathParameters) {
  TestServer ts;
  HttpClient client(ts.url());
  EXPECT_EQ(client.get("/episodes/3f2a-77").json()["episode_uuid"], "3f2a-77");
}

// Request smuggling through Transfer-Encoding (RFC 9112 6.1, 6.3): a final coding other than
// chunked, an unknown coding, TE beside Content-Length or in HTTP/1.0 gets 400 / 501 and the
// connection closes, so the bytes after the header are never answered as a second request.
TEST(HttpServer, TransferEncodingThatIsNotFinallyChunkedIsRefusedAndTheConnectionCloses) {
  TestServer ts;
  const std::string smuggled = "GET /episodes/smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  struct Case {
    std::string head;
    std::string status;
    std::string names;  // what the message must contain: the header at fault
  };
  // Transfer-Encoding beside Content-Length is caught by Beast's parser, which names the header it
  // read second.
  for (const Case& c : std::vector<Case>{
           {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n", "400",
            "Transfer-Encoding '"},
           {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n", "501",
            "Transfer-Encoding '"},
           {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "400",
            "Transfer-Encoding '"},
           {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            "501", "Transfer-Encoding '"},
           {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ,\r\n\r\n", "400",
            "Transfer-Encoding '"},
           {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: "
            "5\r\n\r\n0\r\n\r\n",
            "400", "bad Content-Length"},
           {"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: "
            "chunked\r\n\r\n0\r\n\r\n",
            "400", "Transfer-Encoding"},
           {"POST /echo HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400",
            "Transfer-Encoding '"}}) {
    RawSocket s(ts.port());
    s.send(c.head + smuggled);
    std::string response = s.read_response();
    EXPECT_TRUE(response.starts_with("HTTP/1.1 " + c.status)) << c.head << " → " << response;
    EXPECT_NE(response.find(c.names), std::string::npos) << c.head << " → " << response;
    EXPECT_EQ(response.find("smuggled"), std::string::npos) << response;
    EXPECT_TRUE(s.wait_closed()) << c.head;
  }
  // A proper chunked body still works.
  RawSocket s(ts.port());
  s.send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
      "chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  std::string response = s.read_response();
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
  EXPECT_NE(response.find("hello"), std::string::npos) << response;
}

TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  TestServer ts;
  RawSocket s(ts.port());
  std::string batch;
  for (int i = 1; i <= 3; ++i)
    batch += "GET /episodes/e" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n";
  batch += "GET /later?id=4 HTTP/1.1\r\nHost: x\r\n\r\n";
  batch += "GET /episodes/e5 HTTP/1.1\r\nHost: x\r\n\r\n";
  s.send(batch);
  for (int i = 1; i <= 5; ++i) {
    std::string response = s.read_response();
    ASSERT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
    std::string want = i == 4 ? "\"id\":\"4\"" : "\"episode_uuid\":\"e" + std::to_string(i) + "\"";
    EXPECT_NE(response.find(want), std::string::npos) << i << ": " << response;
  }
}

TEST(HttpServer, HandlerMayRespondLaterFromAnotherThread) {
  TestServer ts;
  HttpClient client(ts.url());
  for (int i = 0; i < 50; ++i) {
    Json j = client.get("/later?id=" + std::to_string(i)).json();
    EXPECT_EQ(j["id"], std::to_string(i));
    EXPECT_EQ(j["thread"], "responder");
  }
  EXPECT_EQ(client.connections_opened(), 1u);
}

TEST(HttpServer, ThrowingOrSilentHandlersGetErrorsAndTheConnectionSurvives) {
  TestServer ts;
  HttpClient client(ts.url());
  ClientResponse thrown = client.get("/throw");
  EXPECT_EQ(thrown.status, 500);
  EXPECT_NE(thrown.json()["error"]["message"].get<std::string>().find("handler exploded"),
            std::string::npos);
  EXPECT_EQ(thrown.json()["error"]["type"], "server_error");
  ClientResponse ajet_error = client.get("/throw_ajet");
  EXPECT_EQ(ajet_error.status, 404);
  EXPECT_EQ(ajet_error.json()["error"]["code"], "not_found");
  ClientResponse dropped = client.get("/drop");
  EXPECT_EQ(dropped.status, 500);
  EXPECT_EQ(dropped.json()["error"]["code"], "no_response");
  EXPECT_EQ(client.get("/get_engine_status").status, 200);
  EXPECT_EQ(client.connections_opened(), 1u);
}

// The producer pushes event k+1 only after the client acknowledged event k, so the stream can only
// complete if every event reached the client while the stream was still open.
TEST(HttpServer, SseEventsArriveWhileTheStreamIsStillOpen) {
  TestServer ts;
  testing::Shared& shared = ts.shared();
  constexpr int kEvents = 5;
  std::mutex mu;
  std::condition_variable cv;
  int acked = -1;
  bool producer_ok = true;
  std::thread producer([&] {
    if (!shared.wait_for([&] { return !shared.streams.empty(); })) {
      producer_ok = false;
      return;
    }
    std::shared_ptr<ChannelStream> stream = shared.streams.front();
    for (int k = 1; k <= kEvents; ++k) {
      std::unique_lock lock(mu);
      if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return acked >= k - 1; }))
        producer_ok = false;
      lock.unlock();
      if (k < kEvents) stream->push(sse_event(std::to_string(k)));
    }
    stream->close();
  });
  HttpClient client(ts.url());
  std::vector<std::string> got;
  ClientResponse r = client.stream("GET", "/stream?first=0", {}, {}, [&](const SseEvent& e) {
    got.push_back(e.data);
    std::lock_guard lock(mu);
    acked = std::stoi(e.data);
    cv.notify_all();
    return true;
  });
  producer.join();
  EXPECT_TRUE(producer_ok) << "an event did not reach the client before the next was produced";
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.get("Content-Type").value(), "text/event-stream");
  EXPECT_EQ(r.headers.get("Transfer-Encoding").value(), "chunked");
  EXPECT_EQ(got, (std::vector<std::string>{"0", "1", "2", "3", "4"}));
  // The connection is reusable after a finished stream.
  EXPECT_EQ(client.get("/get_engine_status").status, 200);
  EXPECT_EQ(client.connections_opened(), 1u);
}

// An event that never ends (a server or proxy gone wrong) is held only up to max_response_bytes.
TEST(HttpClient, AnEventLongerThanTheResponseLimitIsRefused) {
  TestServer ts;
  testing::Shared& shared = ts.shared();
  std::thread producer([&] {
    ASSERT_TRUE(shared.wait_for([&] { return !shared.streams.empty(); }));
    shared.streams.front()->push("data: " + std::string(300, 'x'));  // no line end, no blank line
    shared.streams.front()->close();  // without the limit, the call would simply return
  });
  ClientOptions options;
  options.max_response_bytes = 100;
  HttpClient client(ts.url(), options);
  std::vector<std::string> got;
  try {
    client.stream("GET", "/stream?first=ok", {}, {}, [&](const SseEvent& e) {
      got.push_back(e.data);
      return true;
    });
    ADD_FAILURE() << "a 300-byte event passed a 100-byte limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("max_response_bytes (100)"), std::string::npos)
        << e.what();
  }
  producer.join();
  EXPECT_EQ(got, (std::vector<std::string>{"ok"}));         // events under the limit arrive as ever
  EXPECT_EQ(client.get("/get_engine_status").status, 200);  // usable afterwards
}

TEST(HttpServer, ClientLeavingMidStreamCancelsTheStream) {
  TestServer ts;
  testing::Shared& shared = ts.shared();
  HttpClient client(ts.url());
  int events = 0;
  client.stream("GET", "/stream?first=hello", {}, {}, [&](const SseEvent& e) {
    EXPECT_EQ(e.data, "hello");
    ++events;
    return false;  // hang up
  });
  EXPECT_EQ(events, 1);
  EXPECT_TRUE(shared.wait_for([&] { return shared.cancelled_streams == 1; }));
  EXPECT_FALSE(shared.streams.front()->push("after"));
  EXPECT_EQ(client.get("/get_engine_status").status, 200);
}

TEST(HttpServer, GracefulStopLetsTheInFlightRequestFinish) {
  TestServer ts;
  testing::Shared& shared = ts.shared();
  RawSocket idle(ts.port());
  idle.send("GET /get_engine_status HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(idle.read_response().starts_with("HTTP/1.1 200"));

  std::promise<ClientResponse> held_response;
  std::thread requester([&] {
    HttpClient client(ts.url());
    try {
      held_response.set_value(client.get("/hold"));
    } catch (...) {
      held_response.set_exception(std::current_exception());
    }
  });
  ASSERT_TRUE(shared.wait_for([&] { return !shared.held.empty(); }));

  ts.server().stop();
  EXPECT_TRUE(idle.wait_closed());  // an idle keep-alive connection closes at once
  HttpClient late(ts.url());
  try {
    late.get("/get_engine_status");
    ADD_FAILURE() << "a connection was accepted after stop()";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
  }

  Respond respond;
  {
    std::lock_guard lock(shared.mu);
    respond = shared.held.front();
  }
  respond(json_response({{"finished", true}}));
  ClientResponse r = held_response.get_future().get();
  requester.join();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["finished"], true);
  EXPECT_EQ(r.headers.get("Connection").value(), "close");
  ts.server().wait();
  EXPECT_EQ(ts.server().stats().connections_open, 0u);
}

TEST(HttpServer, StopClosesWhatIsLeftAfterTheGracePeriod) {
  ServerOptions options;
  options.shutdown_grace = std::chrono::milliseconds(100);
  TestServer ts(options);
  testing::Shared& shared = ts.shared();
  RawSocket held(ts.port());
  held.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  RawSocket streaming(ts.port());
  streaming.send("GET /stream?first=x HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_FALSE(streaming.read_until("data: x\n\n").empty());
  ASSERT_TRUE(shared.wait_for([&] { return !shared.held.empty() && !shared.streams.empty(); }));

  ts.server().stop();
  ts.server().wait();  // returns once the grace period closed both
  EXPECT_TRUE(held.wait_closed());
  EXPECT_TRUE(streaming.wait_closed());
  EXPECT_EQ(shared.cancelled_streams, 1);
  std::lock_guard lock(shared.mu);
  // The handler may still answer; the answer is taken and dropped, since its connection is gone.
  EXPECT_TRUE(shared.held.front()(json_response({{"too", "late"}})));
}

TEST(HttpServer, SilentClientIsClosedAfterTheIdleTimeout) {
  ServerOptions options;
  options.idle_timeout = std::chrono::milliseconds(100);
  TestServer ts(options);
  RawSocket silent(ts.port());
  EXPECT_TRUE(silent.wait_closed());
}

TEST(HttpServer, SlowHeaderAndSlowBodyAreClosed) {
  ServerOptions options;
  options.read_header_timeout = std::chrono::milliseconds(100);
  options.read_body_timeout = std::chrono::milliseconds(100);
  TestServer ts(options);
  RawSocket slow_header(ts.port());
  slow_header.send("GET /get_engine_status HTTP/1.1\r\nHost: x\r\n");
  EXPECT_TRUE(slow_header.wait_closed());
  RawSocket slow_body(ts.port());
  slow_body.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten..");
  EXPECT_TRUE(slow_body.wait_closed());
  EXPECT_EQ(ts.server().stats().requests, 0u);
}

TEST(HttpServer, ManyThreadsManyRequests) {
  TestServer ts;
  constexpr int kThreads = 8;
  constexpr int kRequests = 100;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      HttpClient client(ts.url());
      for (int i = 0; i < kRequests; ++i) {
        std::string id = std::to_string(t) + "-" + std::to_string(i);
        if (i % 2 == 0) {
          ClientResponse r = client.request("POST", "/echo", {}, id);
          if (r.status == 200 && r.json()["body"] == id) ++ok;
        } else {
          ClientResponse r = client.get("/later?id=" + id);
          if (r.status == 200 && r.json()["id"] == id) ++ok;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads * kRequests);
  EXPECT_EQ(ts.server().stats().requests, uint64_t(kThreads * kRequests));
  EXPECT_EQ(ts.server().stats().connections_accepted, uint64_t(kThreads));
}

TEST(HttpServer, SigtermStopsAServerThatHandlesSignals) {
  HttpServer server({}, [](Request, Respond respond) { respond(text_response("ok")); });
  server.handle_signals();
  server.start();
  HttpClient client("http://127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(client.get("/").status, 200);
  client.close();
  ::kill(::getpid(), SIGTERM);
  server.wait();  // returns only because the signal stopped the server
  EXPECT_EQ(server.stats().connections_open, 0u);
}

TEST(HttpServer, BindFailureNamesTheAddress) {
  TestServer ts;
  ServerOptions options;
  options.port = ts.port();
  try {
    HttpServer clash(options, [](Request, Respond) {});
    ADD_FAILURE() << "bound a port that is in use";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(ts.port())),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ajet::http
