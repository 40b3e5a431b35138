// HttpServer: listening, I/O threads and shutdown. The connections themselves live in
// connection.cc; the shared internals and the threading model are described in server_internal.h.
#include "http/server.h"

#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <latch>

#include "common/error.h"
#include "common/log.h"
#include "http/server_internal.h"

namespace ajet::http {

using namespace detail;
using asio::ip::tcp;

namespace {
thread_local Worker* tl_worker = nullptr;  // the Worker whose io_context this thread runs
}  // namespace

struct HttpServer::Impl {
  Core core;
  std::vector<std::unique_ptr<Worker>> workers;
  std::optional<Acceptor> acceptor;
  std::optional<Timer> grace_timer;
  std::optional<SignalSet> signals;
  uint16_t port = 0;
  size_t next_worker = 0;

  enum class State { kCreated, kRunning, kStopping, kStopped };
  std::mutex state_mu;
  State state = State::kCreated;
  std::atomic<bool> drained{false};

  Worker& main() { return *workers.front(); }

  // Round-robin, skipping workers at their share of max_connections while another has room (the one
  // chosen at the cap sheds or refuses: admit()).
  Worker& pick_worker() {
    for (size_t i = 0; i < workers.size(); ++i) {
      Worker& w = *workers[(next_worker + i) % workers.size()];
      if (w.assigned.load(std::memory_order_relaxed) < core.worker_share) {
        next_worker += i + 1;
        return w;
      }
    }
    return *workers[next_worker++ % workers.size()];
  }

  Task<void> accept_loop() {
    for (;;) {
      Worker& worker = pick_worker();
      auto [ec, socket] = co_await acceptor->async_accept(worker.ioc, kNoThrow);
      if (core.stopping.load() || !acceptor->is_open()) co_return;
      if (ec) {
        log().warn("http: accept failed: {}", ec.message());
        if (ec == asio::error::no_descriptors || ec.value() == EMFILE || ec.value() == ENFILE) {
          // Out of file descriptors: back off instead of spinning on the same error.
          Timer pause(acceptor->get_executor(), std::chrono::milliseconds(50));
          co_await pause.async_wait(kNoThrow);
        }
        continue;
      }
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      core.accepted.fetch_add(1, std::memory_order_relaxed);
      core.live.fetch_add(1);
      worker.assigned.fetch_add(1, std::memory_order_relaxed);
      asio::post(worker.ioc,
                 [this, w = &worker, s = std::make_shared<Socket>(std::move(socket))]() mutable {
                   admit(core, *w, std::move(*s));
                 });
    }
  }

  // Worker 0's thread: the first half of stop(). `told`, when given, counts down once per worker
  // after that worker has told each of its connections.
  void begin_stop(std::shared_ptr<std::latch> told = nullptr) {
    error_code ec;
    acceptor->close(ec);
    core.stopping.store(true);
    for (auto& worker : workers) {
      asio::post(worker->ioc, [w = worker.get(), told] {
        w->stopping = true;
        std::vector<Connection*> connections(w->connections.begin(), w->connections.end());
        for (Connection* c : connections) c->on_stop();
        if (told) told->count_down();
      });
    }
    grace_timer.emplace(main().ioc.get_executor(), core.options.shutdown_grace);
    grace_timer->async_wait([this](error_code ec) {
      if (!ec) force_close_all();
    });
    if (core.live.load() == 0) on_drained();
  }

  void force_close_all() {
    for (auto& worker : workers) {
      asio::post(worker->ioc, [w = worker.get()] {
        std::vector<Connection*> connections(w->connections.begin(), w->connections.end());
        for (Connection* c : connections) c->force_close();
      });
    }
  }

  // Any thread, once: every connection is closed, so the I/O threads may run out of work and exit.
  void on_drained() {
    if (drained.exchange(true)) return;
    for (auto& worker : workers) {
      asio::post(worker->ioc, [this, w = worker.get()] {
        if (w == workers.front().get()) {
          if (grace_timer) grace_timer->cancel();
          if (signals) {
            error_code ec;
            signals->cancel(ec);
          }
        }
        w->guard.reset();
      });
    }
  }

  void wait_signal() {
    signals->async_wait([this](error_code ec, int signal_number) {
      if (ec || drained.load()) return;  // re-arming after the drain would keep worker 0 alive
      if (request_stop_state()) {
        log().info("http: signal {}: stopping (a second signal closes every connection)",
                   signal_number);
        begin_stop();
      } else {
        log().info("http: signal {}: closing every connection", signal_number);
        force_close_all();
      }
      wait_signal();
    });
  }

  // True when this call moved a running server to stopping.
  bool request_stop_state() {
    std::lock_guard lock(state_mu);
    if (state != State::kRunning) return false;
    state = State::kStopping;
    return true;
  }
};

size_t default_max_connections() {
  constexpr rlim_t kReserve = 64;  // the store, the engine's sockets, subprocess pipes, log files
  constexpr rlim_t kMost = 16384;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return size_t(kMost);
  if (limit.rlim_cur <= 2 * kReserve) return size_t(std::max<rlim_t>(limit.rlim_cur / 2, 1));
  return size_t(std::min(limit.rlim_cur - kReserve, kMost));
}

HttpServer::HttpServer(ServerOptions options, Router router)
    : HttpServer(std::move(options), std::make_shared<const Router>(std::move(router))) {}

HttpServer::HttpServer(ServerOptions options, std::shared_ptr<const Router> router)
    : HttpServer(
          std::move(options),
          [router](Request request, Respond respond) {
            (*router)(std::move(request), std::move(respond));
          },
          [router](const RequestHead& head) { return router->check_head(head); }) {}

HttpServer::HttpServer(ServerOptions options, Handler handler, HeadCheck check)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (!handler) invalid_argument("HttpServer needs a handler");
  if (options.io_threads < 1) invalid_argument("ServerOptions.io_threads must be >= 1");
  s.core.options = std::move(options);
  s.core.handler = std::move(handler);
  s.core.head_check = std::move(check);
  s.core.max_connections = s.core.options.max_connections > 0 ? s.core.options.max_connections
                                                              : default_max_connections();
  const size_t threads = size_t(s.core.options.io_threads);
  s.core.worker_share = std::max<size_t>((s.core.max_connections + threads - 1) / threads, 1);
  s.core.on_drained = [&s] { s.on_drained(); };
  for (int i = 0; i < s.core.options.io_threads; ++i) {
    s.workers.push_back(std::make_unique<Worker>());
    s.workers.back()->guard.emplace(s.workers.back()->ioc.get_executor());
  }
  const std::string& host = s.core.options.host;
  std::string where = host + ":" + std::to_string(s.core.options.port);
  try {
    asio::ip::basic_resolver<tcp, Executor> resolver(s.main().ioc.get_executor());
    auto results = resolver.resolve(host, std::to_string(s.core.options.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service);
    tcp::endpoint endpoint = results.begin()->endpoint();
    s.acceptor.emplace(s.main().ioc.get_executor());
    s.acceptor->open(endpoint.protocol());
    s.acceptor->set_option(asio::socket_base::reuse_address(true));
    s.acceptor->bind(endpoint);
    s.acceptor->listen(asio::socket_base::max_listen_connections);
    s.port = s.acceptor->local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    fail(ErrorCode::kIo, "http server cannot listen on " + where + ": " + e.code().message());
  }
}

HttpServer::~HttpServer() {
  stop();
  wait();
  for (auto& worker : impl_->workers) worker->gate->close();
  // Destroy asio objects while their io_contexts are alive, then the io_contexts.
  impl_->signals.reset();
  impl_->grace_timer.reset();
  impl_->acceptor.reset();
}

uint16_t HttpServer::port() const { return impl_->port; }
const std::string& HttpServer::host() const { return impl_->core.options.host; }

void HttpServer::handle_signals() {
  Impl& s = *impl_;
  std::lock_guard lock(s.state_mu);
  if (s.state != Impl::State::kCreated)
    fail(ErrorCode::kFailedPrecondition, "handle_signals() must come before start()");
  if (s.signals) return;
  s.signals.emplace(s.main().ioc.get_executor(), SIGINT, SIGTERM,
                    SIGHUP);  // a closed terminal stops it cleanly too
  s.wait_signal();
}

void HttpServer::start() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.state_mu);
    if (s.state != Impl::State::kCreated) return;
    s.state = Impl::State::kRunning;
  }
  asio::co_spawn(s.main().ioc, s.accept_loop(), asio::detached);
  for (auto& worker : s.workers) {
    worker->thread = std::thread([w = worker.get()] {
      tl_worker = w;
      for (;;) {
        try {
          w->ioc.run();
          break;
        } catch (const std::exception& e) {
          log().error("http: I/O thread caught: {}", e.what());
        }
      }
    });
  }
}

void HttpServer::run() {
  start();
  wait();
}

void HttpServer::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.state_mu);
    if (s.state == Impl::State::kCreated) {
      // Never started: nothing in flight, just release the port and let wait() return.
      s.state = Impl::State::kStopped;
      error_code ec;
      s.acceptor->close(ec);
      for (auto& worker : s.workers) worker->guard.reset();
      return;
    }
    if (s.state != Impl::State::kRunning) return;
    s.state = Impl::State::kStopping;
  }
  if (tl_worker == &s.main()) {
    s.begin_stop();
    return;
  }
  if (tl_worker) {  // another I/O thread: never wait on a peer event loop from inside one
    asio::post(s.main().ioc, [&s] { s.begin_stop(); });
    return;
  }
  auto told = std::make_shared<std::latch>(static_cast<std::ptrdiff_t>(s.workers.size()));
  asio::post(s.main().ioc, [&s, told] { s.begin_stop(told); });
  told->wait();
}

void HttpServer::wait() {
  Impl& s = *impl_;
  for (auto& worker : s.workers) {
    if (worker->thread.joinable()) worker->thread.join();
  }
  std::lock_guard lock(s.state_mu);
  if (s.state != Impl::State::kCreated) s.state = Impl::State::kStopped;
}

ServerStats HttpServer::stats() const {
  const Core& core = impl_->core;
  ServerStats out;
  out.connections_accepted = core.accepted.load();
  out.connections_open = static_cast<uint64_t>(std::max<int64_t>(core.live.load(), 0));
  out.connections_shed = core.shed.load();
  out.connections_refused = core.refused.load();
  out.max_connections = core.max_connections;
  out.requests = core.requests.load();
  out.answered_at_head = core.answered_at_head.load();
  out.body_bytes_read = core.body_bytes_read.load();
  out.body_bytes_held = core.body_bytes_held.load();
  return out;
}

}  // namespace ajet::http
