// A real HttpServer on a loopback ephemeral port with the routes the HTTP tests exercise, plus the
// shared state those routes expose to the test (held responders, streams, an async responder).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "http/response.h"
#include "http/router.h"
#include "http/server.h"
#include "http/stream.h"

namespace ajet::http::testing {

// Answers queued requests from its own thread: the "respond later, from another thread" case.
class LaterResponder {
 public:
  LaterResponder() : thread_([this] { loop(); }) {}
  ~LaterResponder() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void enqueue(Request request, Respond respond) {
    {
      std::lock_guard lock(mu_);
      queue_.emplace_back(std::move(request), std::move(respond));
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return done_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto [request, respond] = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      respond(
          json_response({{"later", true}, {"id", request.query["id"]}, {"thread", "responder"}}));
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Request, Respond>> queue_;
  bool done_ = false;
  std::thread thread_;
};

// What the /hold and /stream routes hand to the test.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Respond> held;                            // /hold: never answered by the route itself
  std::vector<std::shared_ptr<ChannelStream>> streams;  // /stream: fed by the test
  int cancelled_streams = 0;

  template <class Pred>
  bool wait_for(Pred pred) {  // bounded only so that a broken server fails instead of hanging
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), pred);
  }
};

class TestServer {
 public:
  explicit TestServer(ServerOptions options = {}) : shared_(std::make_shared<Shared>()) {
    Router router;
    auto shared = shared_;
    LaterResponder* later = &later_;
    router.get("/get_engine_status", [](Request, Respond respond) {
      respond(json_response(
          {{"engine_status", "ENGINE.ROLLING"}, {"engine_status_detail", ""}, {"global_step", 3}}));
    });
    router.post("/echo", [](Request req, Respond respond) {
      respond(json_response({{"body", req.body},
                             {"method", req.method},
                             {"x_test", req.headers.get_or("x-test", "")},
                             {"remote", req.remote_address}}));
    });
    router.get("/episodes/{episode_uuid}", [](Request req, Respond respond) {
      respond(json_response({{"episode_uuid", req.path_params.at("episode_uuid")}}));
    });
    router.get("/later", [later](Request req, Respond respond) {
      later->enqueue(std::move(req), std::move(respond));
    });
    router.get("/throw",
               [](Request, Respond) -> void { throw std::runtime_error("handler exploded"); });
    router.get("/throw_ajet", [](Request, Respond) -> void {
      fail(ErrorCode::kNotFound, "episode 'x' not found");
    });
    router.get("/drop", [](Request, Respond) {});
    router.get("/big", [](Request req, Respond respond) {
      size_t n = req.query.count("n") ? std::stoul(req.query["n"]) : 1000;
      std::string body(n, 'x');
      for (size_t i = 0; i < n; i += 4096) body[i] = static_cast<char>('a' + (i / 4096) % 26);
      respond(text_response(std::move(body)));
    });
    router.post("/length", [](Request req, Respond respond) {
      size_t sum = 0;
      for (unsigned char c : req.body) sum += c;
      respond(json_response({{"length", req.body.size()}, {"byte_sum", sum}}));
    });
    router.get("/hold", [shared](Request, Respond respond) {
      std::lock_guard lock(shared->mu);
      shared->held.push_back(std::move(respond));
      shared->cv.notify_all();
    });
    router.get("/stream", [shared](Request req, Respond respond) {
      auto stream = std::make_shared<ChannelStream>();
      stream->on_cancel([weak = std::weak_ptr<Shared>(shared)] {  // weak: `shared` owns the stream
        if (auto shared = weak.lock()) {
          std::lock_guard lock(shared->mu);
          ++shared->cancelled_streams;
          shared->cv.notify_all();
        }
      });
      if (req.query.count("first")) stream->push(sse_event(req.query["first"]));
      respond(sse_response(stream));
      std::lock_guard lock(shared->mu);
      shared->streams.push_back(stream);
      shared->cv.notify_all();
    });
    server_ = std::make_unique<HttpServer>(options, std::move(router));
    server_->start();
  }

  HttpServer& server() { return *server_; }
  Shared& shared() { return *shared_; }
  uint16_t port() const { return server_->port(); }
  std::string url(std::string_view path = "") const {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + std::string(path);
  }

 private:
  LaterResponder later_;  // outlives the server: late answers after stop are dropped safely
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace ajet::http::testing
