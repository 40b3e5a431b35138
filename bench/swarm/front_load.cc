#include "front_load.h"

#include <algorithm>
#include <array>
#include <functional>
#include <boost/asio.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string_view>

namespace ajet::bench {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

Clock::duration seconds_of(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

class RequestLoad {
 public:
  RequestLoad(uint16_t port, const std::vector<std::string>& requests, int connections)
      : port_(port), requests_(requests) {
    for (int i = 0; i < connections; ++i) {
      conns_.push_back(std::make_unique<Conn>(ioc_, &requests_[size_t(i) % requests_.size()]));
    }
  }

  LoadResult run(double seconds, double warmup) {
    int pending = int(conns_.size());
    for (auto& c : conns_) {
      c->socket.async_connect(loopback(port_),
                              [this, c = c.get(), &pending, seconds, warmup](error_code ec) {
                                if (ec) {
                                  ++errors_;
                                  c->dead = true;
                                } else {
                                  c->socket.set_option(tcp::no_delay(true));
                                  ++connected_;
                                }
                                if (--pending == 0) start(seconds, warmup);
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
    Conn(asio::io_context& ioc, const std::string* r) : socket(ioc), request(r) {}
    tcp::socket socket;
    const std::string* request;
    std::vector<char> buf = std::vector<char>(64 * 1024);
    size_t have = 0;
    Clock::time_point sent;
    bool dead = false;
  };

  void start(double seconds, double warmup) {
    for (auto& c : conns_) {
      if (!c->dead) send(*c);
    }
    timer_.expires_after(seconds_of(warmup));
    timer_.async_wait([this, seconds](error_code) {
      measuring_ = true;
      begin_ = Clock::now();
      timer_.expires_after(seconds_of(seconds));
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
    asio::async_write(c.socket, asio::buffer(*c.request), [this, &c](error_code ec, size_t) {
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
            latencies_us_.push_back(
                float(std::chrono::duration<double, std::micro>(Clock::now() - c.sent).count()));
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
  const std::vector<std::string>& requests_;
  std::vector<std::unique_ptr<Conn>> conns_;
  int connected_ = 0;
  uint64_t completed_ = 0, errors_ = 0;
  bool measuring_ = false, stopping_ = false;
  Clock::time_point begin_, end_;
  std::vector<float> latencies_us_;
};

}  // namespace

std::string raw_post(const std::string& path, const std::string& body,
                     const std::vector<std::string>& headers) {
  std::string r = "POST " + path + " HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n";
  for (const auto& h : headers) r += h + "\r\n";
  return r + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

LoadResult run_request_load(uint16_t port, const std::vector<std::string>& requests,
                            int connections, double seconds, double warmup_seconds) {
  RequestLoad load(port, requests, connections);
  return load.run(seconds, warmup_seconds);
}

void hold_request_streams(uint16_t port, const std::vector<std::string>& requests, int streams,
                          double settle_seconds,
                          const std::function<void(int ready, int failed)>& on_ready) {
  asio::io_context ioc{1};
  struct Stream {
    explicit Stream(asio::io_context& ioc) : socket(ioc) {}
    tcp::socket socket;
    std::string seen;
    std::array<char, 2048> buf;
  };
  std::vector<std::unique_ptr<Stream>> all;
  int ready = 0, failed = 0;
  bool reported = false;
  asio::steady_timer deadline(ioc);
  auto finish = [&] {
    if (reported) return;
    reported = true;
    deadline.cancel();
    on_ready(ready, failed);
    for (auto& s : all) {
      error_code ignored;
      s->socket.close(ignored);
    }
  };
  auto settle = [&] {
    if (ready + failed == streams) finish();
  };
  std::function<void(Stream&)> read_first = [&](Stream& s) {
    s.socket.async_read_some(asio::buffer(s.buf), [&, sp = &s](error_code ec, size_t n) {
      if (reported) return;
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
    const std::string& request = requests[size_t(i) % requests.size()];
    s.socket.async_connect(loopback(port), [&, sp = &s, req = &request](error_code ec) {
      if (ec) {
        ++failed;
        return settle();
      }
      asio::async_write(sp->socket, asio::buffer(*req), [&, sp](error_code wec, size_t) {
        if (wec) {
          ++failed;
          return settle();
        }
        read_first(*sp);
      });
    });
  }
  deadline.expires_after(seconds_of(settle_seconds));
  deadline.async_wait([&](error_code ec) {
    if (!ec) finish();
  });
  ioc.run();
}

}  // namespace ajet::bench
