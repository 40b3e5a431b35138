#include "http_load.h"

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

namespace ajet::bench {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

tcp::endpoint loopback(uint16_t port) { return {asio::ip::address_v4::loopback(), port}; }

size_t complete_response(std::string_view data, bool& ok) {
  size_t head_end = data.find("\r\n\r\n");
  if (head_end == std::string_view::npos) return 0;
  std::string_view head = data.substr(0, head_end);
  ok = head.starts_with("HTTP/1.1 200");
  size_t at = head.find("Content-Length: ");
  if (at == std::string_view::npos) at = head.find("content-length: ");
  size_t length =
      at == std::string_view::npos ? 0 : std::strtoul(head.data() + at + 16, nullptr, 10);
  size_t total = head_end + 4 + length;
  return data.size() >= total ? total : 0;
}

namespace {

class LoadGenerator {
 public:
  LoadGenerator(uint16_t port, const std::string& path, int connections)
      : port_(port), request_("GET " + path + " HTTP/1.1\r\nHost: bench\r\n\r\n") {
    for (int i = 0; i < connections; ++i) conns_.push_back(std::make_unique<Conn>(ioc_));
  }

  LoadResult run(double seconds, double warmup) {
    int pending_connects = static_cast<int>(conns_.size());
    for (auto& c : conns_) {
      c->socket.async_connect(
          loopback(port_), [this, c = c.get(), &pending_connects, seconds, warmup](error_code ec) {
            if (ec) {
              ++errors_;
              c->dead = true;
            } else {
              c->socket.set_option(tcp::no_delay(true));
              ++connected_;
            }
            if (--pending_connects == 0) start(seconds, warmup);
          });
    }
    ioc_.run();
    LoadResult out;
    out.connections = connected_;
    out.requests = completed_;
    out.errors = errors_;
    out.seconds = std::chrono::duration<double>(end_ - begin_).count();
    if (!latencies_us_.empty()) {
      std::sort(latencies_us_.begin(), latencies_us_.end());
      out.p50_us = latencies_us_[latencies_us_.size() / 2];
      out.p99_us =
          latencies_us_[std::min(latencies_us_.size() - 1, latencies_us_.size() * 99 / 100)];
    }
    return out;
  }

 private:
  struct Conn {
    explicit Conn(asio::io_context& ioc) : socket(ioc) {}
    tcp::socket socket;
    std::array<char, 8192> buf;
    size_t have = 0;
    Clock::time_point sent;
    bool dead = false;
  };

  void start(double seconds, double warmup) {
    for (auto& c : conns_) {
      if (!c->dead) send(*c);
    }
    timer_.expires_after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup)));
    timer_.async_wait([this, seconds](error_code) {
      measuring_ = true;
      begin_ = Clock::now();
      latencies_us_.reserve(1 << 20);
      timer_.expires_after(
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
      timer_.async_wait([this](error_code) {
        end_ = Clock::now();
        measuring_ = false;
        stopping_ = true;
        for (auto& c : conns_) {
          error_code ignored;
          c->socket.close(ignored);
        }
      });
    });
  }

  void send(Conn& c) {
    c.sent = Clock::now();
    asio::async_write(c.socket, asio::buffer(request_), [this, &c](error_code ec, size_t) {
      if (ec) return fail(c);
      read(c);
    });
  }

  void read(Conn& c) {
    c.socket.async_read_some(
        asio::buffer(c.buf.data() + c.have, c.buf.size() - c.have),
        [this, &c](error_code ec, size_t n) {
          if (ec) return fail(c);
          c.have += n;
          bool ok = false;
          size_t len = complete_response(std::string_view(c.buf.data(), c.have), ok);
          if (len == 0) {
            if (c.have == c.buf.size()) return fail(c);
            return read(c);
          }
          std::memmove(c.buf.data(), c.buf.data() + len, c.have - len);
          c.have -= len;
          if (measuring_) {
            ++completed_;
            if (!ok) ++errors_;
            auto us = std::chrono::duration<double, std::micro>(Clock::now() - c.sent).count();
            latencies_us_.push_back(static_cast<float>(us));
          }
          if (!stopping_) send(c);
        });
  }

  void fail(Conn& c) {
    if (stopping_) return;
    ++errors_;
    c.dead = true;
  }

  asio::io_context ioc_{1};
  asio::steady_timer timer_{ioc_};
  uint16_t port_;
  std::string request_;
  std::vector<std::unique_ptr<Conn>> conns_;
  int connected_ = 0;
  uint64_t completed_ = 0;
  uint64_t errors_ = 0;
  bool measuring_ = false;
  bool stopping_ = false;
  Clock::time_point begin_, end_;
  std::vector<float> latencies_us_;
};

}  // namespace

LoadResult run_load(uint16_t port, const std::string& path, int connections, double seconds,
                    double warmup_seconds) {
  LoadGenerator generator(port, path, connections);
  return generator.run(seconds, warmup_seconds);
}

void hold_streams(uint16_t port, const std::string& path, int streams, int stop_fd,
                  const std::function<void(int ready, int failed)>& on_ready) {
  asio::io_context ioc{1};
  struct Stream {
    explicit Stream(asio::io_context& ioc) : socket(ioc) {}
    tcp::socket socket;
    std::string seen;
    std::array<char, 1024> buf;
  };
  std::vector<std::unique_ptr<Stream>> all;
  std::string request = "GET " + path + " HTTP/1.1\r\nHost: bench\r\n\r\n";
  int ready = 0;
  int failed = 0;
  auto settle = [&] {
    if (ready + failed == streams) on_ready(ready, failed);
  };
  std::function<void(Stream&)> read_first;
  read_first = [&](Stream& s) {
    s.socket.async_read_some(asio::buffer(s.buf), [&, sp = &s](error_code ec, size_t n) {
      if (ec) {
        ++failed;
        return settle();
      }
      sp->seen.append(sp->buf.data(), n);
      if (sp->seen.find("data:") != std::string::npos) {
        ++ready;
        sp->seen.clear();
        sp->seen.shrink_to_fit();
        return settle();
      }
      read_first(*sp);
    });
  };
  for (int i = 0; i < streams; ++i) {
    all.push_back(std::make_unique<Stream>(ioc));
    Stream& s = *all.back();
    s.socket.async_connect(loopback(port), [&, sp = &s](error_code ec) {
      if (ec) {
        ++failed;
        return settle();
      }
      asio::async_write(sp->socket, asio::buffer(request), [&, sp](error_code wec, size_t) {
        if (wec) {
          ++failed;
          return settle();
        }
        read_first(*sp);
      });
    });
  }
  asio::posix::stream_descriptor stop(ioc, ::dup(stop_fd));
  std::array<char, 16> sink;
  stop.async_read_some(asio::buffer(sink), [&](error_code, size_t) { ioc.stop(); });
  ioc.run();
}

struct RawResponder::Impl {
  struct Loop {
    asio::io_context ioc{1};
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
    std::thread thread;
  };

  class Session : public std::enable_shared_from_this<Session> {
   public:
    Session(tcp::socket socket, const std::string& response)
        : socket_(std::move(socket)), response_(response) {}
    void read() {
      socket_.async_read_some(
          asio::buffer(buf_.data() + have_, buf_.size() - have_),
          [self = shared_from_this()](error_code ec, size_t n) { self->on_read(ec, n); });
    }

   private:
    void on_read(error_code ec, size_t n) {
      if (ec) return;
      have_ += n;
      std::string_view data(buf_.data(), have_);
      out_.clear();
      size_t consumed = 0;
      for (size_t end; (end = data.find("\r\n\r\n", consumed)) != std::string_view::npos;) {
        out_ += response_;
        consumed = end + 4;
      }
      std::memmove(buf_.data(), buf_.data() + consumed, have_ - consumed);
      have_ -= consumed;
      if (have_ == buf_.size()) return;  // a header larger than the buffer: give up on this client
      if (out_.empty()) return read();
      asio::async_write(socket_, asio::buffer(out_),
                        [self = shared_from_this()](error_code wec, size_t) {
                          if (!wec) self->read();
                        });
    }

    tcp::socket socket_;
    const std::string& response_;
    std::array<char, 4096> buf_;
    size_t have_ = 0;
    std::string out_;
  };

  std::string response;
  std::vector<std::unique_ptr<Loop>> loops;
  std::optional<tcp::acceptor> acceptor;
  size_t next = 0;

  void accept() {
    Loop& target = *loops[next++ % loops.size()];
    acceptor->async_accept(target.ioc, [this](error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        socket.set_option(tcp::no_delay(true));
        std::make_shared<Session>(std::move(socket), response)->read();
      }
      accept();
    });
  }
};

RawResponder::RawResponder(int threads, std::string body) : impl_(std::make_unique<Impl>()) {
  impl_->response = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body;
  for (int i = 0; i < threads; ++i) {
    impl_->loops.push_back(std::make_unique<Impl::Loop>());
    impl_->loops.back()->guard.emplace(impl_->loops.back()->ioc.get_executor());
  }
  impl_->acceptor.emplace(impl_->loops.front()->ioc, loopback(0));
  impl_->acceptor->listen(asio::socket_base::max_listen_connections);
  impl_->accept();
  for (auto& loop : impl_->loops) {
    loop->thread = std::thread([l = loop.get()] { l->ioc.run(); });
  }
}

RawResponder::~RawResponder() {
  for (auto& loop : impl_->loops) {
    loop->guard.reset();
    loop->ioc.stop();
  }
  for (auto& loop : impl_->loops) loop->thread.join();
}

uint16_t RawResponder::port() const { return impl_->acceptor->local_endpoint().port(); }

}  // namespace ajet::bench
