#include "client/connection_pool.h"

#include <exception>

namespace ajet::client {

ConnectionPool::ConnectionPool(std::string base_url, http::ClientOptions options, size_t max_idle)
    : base_url_(std::move(base_url)), options_(std::move(options)), max_idle_(max_idle) {
  http::parse_url(base_url_);  // a bad URL fails here, naming it, not on the first request
}

ConnectionPool::Lease::~Lease() {
  if (client_ && pool_ != nullptr && std::uncaught_exceptions() == 0)
    pool_->release(std::move(client_));
}

ConnectionPool::Lease ConnectionPool::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(c));
    }
  }
  return Lease(this, std::make_unique<http::HttpClient>(base_url_, options_));
}

void ConnectionPool::release(std::unique_ptr<http::HttpClient> client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(client));
}

void ConnectionPool::close_idle() {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.clear();
}

}  // namespace ajet::client
