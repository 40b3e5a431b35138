#include "proxy/proxy.h"

#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/prometheus_text.h"
#include "http/client.h"
#include "http/response.h"

namespace ajet::proxy {

namespace {

// The key an application sent: `Authorization: Bearer K` or Anthropic's `x-api-key: K`.
std::string sent_key(const http::Headers& headers) {
  if (std::optional<std::string_view> k = headers.get("x-api-key")) return std::string(*k);
  std::string auth = headers.get_or("Authorization", "");
  for (std::string_view prefix : {"Bearer ", "bearer ", "BEARER "}) {
    if (auth.rfind(prefix, 0) == 0) return auth.substr(prefix.size());
  }
  return auth;
}

// Constant-time comparison: a key is a secret.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % (b.empty() ? 1 : b.size())];
  return diff == 0 && !b.empty();
}

}  // namespace

Proxy::Proxy(ProxyOptions options, std::unique_ptr<Judge> judge)
    : options_(std::move(options)), judge_(std::move(judge)), front_(options_.front_url) {
  if (options_.group.n < 1) invalid_argument("--n must be at least 1");
  deps_.front = &front_;
  deps_.judge = judge_.get();
  deps_.stats = &stats_;
}

Proxy::~Proxy() { drain(); }

void Proxy::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return in_flight_ == 0; });
}

void Proxy::handle(Api api, http::Request request, http::Respond respond) {
  stats_.request(std::string(api_name(api)));
  if (!admit(api, respond)) return;
  // A thread per request: its work blocks (parsing a body of megabytes, claims, N upstream calls,
  // the judge), and the bound above keeps the number of threads in check.
  std::thread([this, api, request = std::move(request), respond = std::move(respond)]() mutable {
    std::optional<AppRequest> app;
    try {
      app = parse_app_request(api, request.headers, request.body);
    } catch (const Error& e) {
      stats_.answered(400);
      respond(api_error(api, 400, e.what(), "invalid_request"));
    }
    try {
      if (app) run_group(*app, request.body, options_.group, deps_, std::move(respond));
    } catch (const std::exception& e) {  // a bug: the dropped Respond answers 500
      log().error("ajet proxy: a request failed: {}", e.what());
    }
    release();
  }).detach();
}

bool Proxy::admit(Api api, const http::Respond& respond) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_ < options_.max_in_flight) {
      ++in_flight_;
      stats_.in_flight(1);
      return true;
    }
  }
  stats_.answered(503);
  respond(api_error(api, 503,
                    "the proxy has " + std::to_string(options_.max_in_flight) +
                        " requests in flight, its limit (ajet proxy --max-in-flight); retry "
                        "shortly"));
  return false;
}

void Proxy::release() {
  stats_.in_flight(-1);
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  idle_.notify_all();
}

void Proxy::count_tokens(http::Request request, http::Respond respond) {
  stats_.request("count_tokens");
  if (options_.front_inference_key.empty()) {
    stats_.answered(404);
    respond(api_error(Api::kMessages, 404,
                      "POST /v1/messages/count_tokens is served with the front's inference key: "
                      "start the front with ajet-swarm start --inference-key KEY and the proxy "
                      "with ajet proxy --front-inference-key KEY (or $AJET_INFERENCE_KEY)"));
    return;
  }
  if (!admit(Api::kMessages, respond)) return;
  // Counting renders the prompt with the front's tokenizer and chat template; it claims no
  // episode, so nothing is tracked or trained. The front's answer (its errors included, already
  // in Anthropic's shape) goes back as it came.
  std::thread([this, request = std::move(request), respond = std::move(respond)]() mutable {
    http::Response out;
    try {
      http::ClientOptions o;
      o.total_timeout = options_.count_tokens_timeout;
      http::HttpClient client(options_.front_url, o);
      http::Headers headers;
      headers.set("Content-Type", "application/json");
      headers.set("x-api-key", options_.front_inference_key);
      if (std::optional<std::string_view> v = request.headers.get("anthropic-version")) {
        headers.set("anthropic-version", std::string(*v));
      }
      http::ClientResponse r =
          client.request("POST", "/v1/messages/count_tokens", headers, request.body);
      if (r.status == 401) {
        out = api_error(Api::kMessages, 502,
                        "the front refused the proxy's inference key (ajet proxy "
                        "--front-inference-key must equal ajet-swarm start --inference-key)");
      } else {
        out.status = r.status;
        out.headers.set("Content-Type", "application/json");
        if (std::optional<std::string_view> v = r.headers.get("Retry-After")) {
          out.headers.set("Retry-After", std::string(*v));  // the front's 503
        }
        out.body = std::move(r.body);
      }
    } catch (const std::exception& e) {
      out = api_error(
          Api::kMessages, 502,
          "the front at " + options_.front_url + " did not count the tokens: " + e.what());
    }
    stats_.answered(out.status);
    respond(std::move(out));
    release();
  }).detach();
}

http::Router Proxy::router() {
  http::Router router;
  auto guard = [this](Api api) {
    http::RouteOptions o;
    o.max_body_bytes = options_.max_body_bytes;
    o.limit_name = "ajet proxy --max-body-mb";
    o.error_shape = [api](int status, const std::string& message, const std::string& code) {
      return api_error(api, status, message, code);
    };
    if (!options_.api_key.empty()) {
      o.check_head = [this, api](const http::RequestHead& head) -> std::optional<http::Response> {
        if (same_secret(sent_key(head.headers), options_.api_key)) return std::nullopt;
        return api_error(api, 401, "invalid API key: send the proxy's key (ajet proxy --api-key)");
      };
    }
    return o;
  };
  auto route = [this](Api api) {
    return [this, api](http::Request request, http::Respond respond) {
      handle(api, std::move(request), std::move(respond));
    };
  };
  router.post("/v1/chat/completions", route(Api::kChat), guard(Api::kChat));
  router.post("/v1/responses", route(Api::kResponses), guard(Api::kResponses));
  router.post("/v1/messages", route(Api::kMessages), guard(Api::kMessages));
  router.post(
      "/v1/messages/count_tokens",
      [this](http::Request request, http::Respond respond) {
        count_tokens(std::move(request), std::move(respond));
      },
      guard(Api::kMessages));
  router.get(
      "/v1/models",
      [this](http::Request, http::Respond respond) {
        respond(http::json_response({{"object", "list"},
                                     {"data", Json::array({{{"id", options_.model_name},
                                                            {"object", "model"},
                                                            {"created", 0},
                                                            {"owned_by", "agentjet"}}})}}));
      },
      guard(Api::kChat));
  http::RouteOptions admin;
  if (!options_.admin_token.empty()) {
    admin.check_head = [this](const http::RequestHead& head) -> std::optional<http::Response> {
      std::string auth = head.headers.get_or("Authorization", "");
      if (auth.rfind("Bearer ", 0) == 0 && same_secret(auth.substr(7), options_.admin_token)) {
        return std::nullopt;
      }
      return http::error_response(401,
                                  "GET /proxy/stats needs Authorization: Bearer <admin token>");
    };
  }
  router.get(
      "/proxy/stats",
      [this](http::Request, http::Respond respond) {
        Json body = stats_.to_json();
        body["front"] = options_.front_url;
        body["n"] = options_.group.n;
        body["return"] = options_.group.policy == ReturnPolicy::kBest ? "best" : "first";
        body["judge"] = judge_->describe();
        respond(http::json_response(body));
      },
      admin);
  router.get("/metrics", [this](http::Request, http::Respond respond) {
    respond(http::text_response(stats_.prometheus(), 200, prometheus::kContentType));
  });
  router.get("/health", [](http::Request, http::Respond respond) {
    respond(http::json_response({{"status", "ok"}}));
  });
  return router;
}

int front_num_repeat(const std::string& front_url) {
  http::ClientOptions o;
  o.total_timeout = std::chrono::seconds(10);
  http::HttpClient client(front_url, o);
  http::ClientResponse r = client.get("/get_current_batch_rollout_pool_information");
  if (r.status != 200) {
    fail(ErrorCode::kUnavailable, "the front at " + front_url + " answered HTTP " +
                                      std::to_string(r.status) + " to its pool information");
  }
  const Json info = r.json();
  const int n = static_cast<int>(info.value("task_expected_num_repeat", int64_t{0}));
  if (n < 1) fail(ErrorCode::kUnavailable, "the front at " + front_url + " names no num_repeat");
  return n;
}

}  // namespace ajet::proxy
