// A pool of keep-alive HttpClients to one server, so one SwarmClient / ChatClient can be shared by
// many threads: each request borrows a connection (or makes one) and returns it afterwards.
// Never holds its lock while a request is in flight.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "http/client.h"

namespace ajet::client {

class ConnectionPool {
 public:
  ConnectionPool(std::string base_url, http::ClientOptions options, size_t max_idle = 16);

  // A borrowed client; back into the pool when destroyed (dropped instead after an exception, since
  // its connection may be half-used).
  class Lease {
   public:
    Lease(ConnectionPool* pool, std::unique_ptr<http::HttpClient> client)
        : pool_(pool), client_(std::move(client)) {}
    Lease(Lease&&) = default;
    ~Lease();
    http::HttpClient* operator->() { return client_.get(); }
    http::HttpClient& operator*() { return *client_; }
    void discard() { client_.reset(); }

   private:
    ConnectionPool* pool_;
    std::unique_ptr<http::HttpClient> client_;
  };

  Lease acquire();
  const std::string& base_url() const { return base_url_; }
  void close_idle();

 private:
  void release(std::unique_ptr<http::HttpClient> client);

  std::string base_url_;
  http::ClientOptions options_;
  size_t max_idle_;
  std::mutex mu_;
  std::vector<std::unique_ptr<http::HttpClient>> idle_;
};

}  // namespace ajet::client
