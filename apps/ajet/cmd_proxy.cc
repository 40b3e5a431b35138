// `ajet proxy`: the live-traffic proxy (docs/proxy.md, src/proxy). An application points its
// OpenAI or Anthropic SDK at it; every request is answered N times by a training swarm front, a
// judge (a command or a model) scores the N answers, one goes back and the N train the policy as
// one GRPO group. Runs until SIGINT/SIGTERM/SIGHUP; prints one ready line on stdout once it serves
// ("ajet proxy ready: http://HOST:PORT …"; with --listen HOST:0 it names the bound port).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "command.h"
#include "common/error.h"
#include "common/fs.h"
#include "http/server.h"
#include "proxy/proxy.h"

namespace ajet::cli {
namespace {

struct ProxyArgs {
  std::string front = "http://127.0.0.1:10086";
  std::string listen = "127.0.0.1:8080";
  int n = 0;
  std::string return_policy = "best";
  std::string judge_command;
  std::string judge_url;
  std::string judge_swarm;
  std::string judge_key;
  std::string judge_model = "judge";
  std::string judge_template;
  std::string judge_mode = "pointwise";
  int judge_max_tokens = 256;
  double judge_timeout = 120;
  double claim_timeout = 600;
  double upstream_timeout = 600;
  double stream_heartbeat = 10;
  double discard_timeout = 900;
  size_t max_in_flight = 64;
  double max_body_mb = 16;
  std::string api_key;
  std::string front_inference_key;
  std::string admin_token;
  std::string model_name = "agentjet";
  int io_threads = 2;
};

std::pair<std::string, uint16_t> parse_listen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    invalid_argument("--listen must be HOST:PORT (e.g. 127.0.0.1:8080; port 0 picks a free one)");
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = -1;
  try {
    port = std::stoi(listen.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (port < 0 || port > 65535) invalid_argument("--listen: bad port in '" + listen + "'");
  return {host, static_cast<uint16_t>(port)};
}

proxy::JudgeMode parse_mode(const std::string& mode) {
  if (mode == "pointwise") return proxy::JudgeMode::kPointwise;
  if (mode == "listwise") return proxy::JudgeMode::kListwise;
  invalid_argument("--judge-mode must be pointwise or listwise, got '" + mode + "'");
}

std::chrono::milliseconds seconds(double s, const char* flag) {
  if (!(s > 0)) invalid_argument(std::string(flag) + " must be a positive number of seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// The judge the flags name: exactly one of a command, a URL or a swarm front.
std::unique_ptr<proxy::Judge> make_judge(const ProxyArgs& a) {
  const int kinds =
      int(!a.judge_command.empty()) + int(!a.judge_url.empty()) + int(!a.judge_swarm.empty());
  if (kinds != 1) {
    invalid_argument(
        "name exactly one judge: --judge-command CMD, --judge-url URL (an OpenAI-compatible "
        "judge model) or --judge-swarm URL (a judge model served by a swarm front)");
  }
  const proxy::JudgeMode mode = parse_mode(a.judge_mode);
  if (!a.judge_command.empty()) {
    if (!a.judge_template.empty()) invalid_argument("--judge-template is for a judge model");
    return proxy::make_command_judge(
        {a.judge_command, mode, seconds(a.judge_timeout, "--judge-timeout")});
  }
  proxy::ModelJudgeOptions o;
  o.url = a.judge_url;
  o.swarm_url = a.judge_swarm;
  o.key = a.judge_key;
  if (o.key.empty()) {
    if (const char* env = std::getenv("AJET_JUDGE_KEY"); env != nullptr) o.key = env;
  }
  o.model = a.judge_model;
  o.mode = mode;
  if (!a.judge_template.empty()) o.prompt_template = read_file(a.judge_template);
  o.max_tokens = a.judge_max_tokens;
  o.timeout = seconds(a.judge_timeout, "--judge-timeout");
  return proxy::make_model_judge(std::move(o));
}

void run_proxy(const ProxyArgs& a) {
  proxy::ProxyOptions o;
  o.front_url = a.front;
  o.group.n = a.n > 0 ? a.n : proxy::front_num_repeat(a.front);
  if (a.return_policy == "best") {
    o.group.policy = proxy::ReturnPolicy::kBest;
  } else if (a.return_policy == "first") {
    o.group.policy = proxy::ReturnPolicy::kFirst;
  } else {
    invalid_argument("--return must be best or first, got '" + a.return_policy + "'");
  }
  o.group.claim_timeout = seconds(a.claim_timeout, "--claim-timeout");
  o.group.upstream_timeout = seconds(a.upstream_timeout, "--upstream-timeout");
  o.group.discard_episode_timeout = a.discard_timeout;
  if (!(a.stream_heartbeat >= 0) || a.stream_heartbeat > 3600) {
    invalid_argument("--stream-heartbeat must be 0 (off) to 3600 seconds");
  }
  o.group.stream_heartbeat =
      std::chrono::milliseconds(static_cast<int64_t>(a.stream_heartbeat * 1000));
  o.max_in_flight = a.max_in_flight;
  if (!(a.max_body_mb > 0)) invalid_argument("--max-body-mb must be positive");
  o.max_body_bytes = static_cast<size_t>(a.max_body_mb * 1024 * 1024);
  o.front_inference_key = a.front_inference_key;
  if (o.front_inference_key.empty()) {
    if (const char* env = std::getenv("AJET_INFERENCE_KEY"); env != nullptr) {
      o.front_inference_key = env;
    }
  }
  o.api_key = a.api_key;
  if (o.api_key.empty()) {
    if (const char* env = std::getenv("AJET_PROXY_API_KEY"); env != nullptr) o.api_key = env;
  }
  o.admin_token = a.admin_token;
  o.model_name = a.model_name;
  const auto [host, port] = parse_listen(a.listen);

  std::unique_ptr<proxy::Judge> judge = make_judge(a);
  const std::string judge_text = judge->describe();
  proxy::Proxy proxy(o, std::move(judge));
  http::ServerOptions server_options;
  server_options.host = host;
  server_options.port = port;
  server_options.io_threads = a.io_threads;
  server_options.max_body_bytes = o.max_body_bytes;
  {
    http::HttpServer server(server_options, proxy.router());
    server.handle_signals();
    server.start();
    std::cout << "ajet proxy ready: http://" << server.host() << ":" << server.port() << " (port "
              << server.port() << ", front " << o.front_url << ", n " << o.group.n << ", return "
              << a.return_policy << ", judge " << judge_text << ")" << std::endl;
    server.wait();
  }
  std::cout << "ajet proxy: stopping: waiting for the groups in flight to end" << std::endl;
  proxy.drain();
  std::cout << "ajet proxy: stopped" << std::endl;
}

const CommandRegistration kProxy("proxy", [](CLI::App& app) {
  auto a = std::make_shared<ProxyArgs>();
  auto* cmd = app.add_subcommand(
      "proxy",
      "Train from live traffic: an OpenAI / Anthropic endpoint whose every request a swarm front "
      "answers N times, a judge scores, and the policy trains on (docs/proxy.md)");
  cmd->add_option("--front", a->front, "The training swarm front (ajet-swarm start)")
      ->capture_default_str();
  cmd->add_option("--listen", a->listen, "HOST:PORT to serve the application on (port 0: any)")
      ->capture_default_str();
  cmd->add_option("--n", a->n,
                  "Answers per request, the GRPO group size (0: the front's "
                  "ajet.rollout.num_repeat)")
      ->capture_default_str();
  cmd->add_option("--return", a->return_policy,
                  "Which answer the application gets: best (by the judge) or first (the first "
                  "ready; the judge runs after)")
      ->capture_default_str();
  cmd->add_option("--judge-command", a->judge_command,
                  "A judge command (sh -c): JSON {request, question, answers} on stdin, "
                  "{\"scores\": [...]} or {\"ranking\": [...]} on stdout");
  cmd->add_option("--judge-url", a->judge_url,
                  "An OpenAI-compatible judge model's base URL (http://host:port/v1)");
  cmd->add_option("--judge-swarm", a->judge_swarm,
                  "A swarm front that serves the judge model: one eval episode per judge call");
  cmd->add_option("--judge-key", a->judge_key,
                  "The judge model's API key (default $AJET_JUDGE_KEY)");
  cmd->add_option("--judge-model", a->judge_model, "The judge model's name")->capture_default_str();
  cmd->add_option("--judge-template", a->judge_template,
                  "A prompt template file: {{question}} and {{answer}} (pointwise) or "
                  "{{answers}}, {{n}} (listwise)");
  cmd->add_option("--judge-mode", a->judge_mode,
                  "pointwise (a score per answer) or listwise (a ranking, normalised to [-1, 1])")
      ->capture_default_str();
  cmd->add_option("--judge-max-tokens", a->judge_max_tokens, "The judge model's max_tokens")
      ->capture_default_str();
  cmd->add_option("--judge-timeout", a->judge_timeout, "Seconds one judge run may take")
      ->capture_default_str();
  cmd->add_option("--claim-timeout", a->claim_timeout,
                  "Seconds a request may wait for N free episodes (e.g. during a train step); "
                  "then 503")
      ->capture_default_str();
  cmd->add_option("--upstream-timeout", a->upstream_timeout,
                  "Seconds one episode's answer may take, retries of the front's 503 included")
      ->capture_default_str();
  cmd->add_option("--stream-heartbeat", a->stream_heartbeat,
                  "Seconds a streamed request may wait for its answer before its stream opens "
                  "with SSE comment lines, one per period, until the answer follows (0: off)")
      ->capture_default_str();
  cmd->add_option("--discard-timeout", a->discard_timeout,
                  "discard_episode_timeout of the claimed episodes (seconds)")
      ->capture_default_str();
  cmd->add_option("--max-in-flight", a->max_in_flight, "Application requests at once; more: 503")
      ->capture_default_str();
  cmd->add_option("--max-body-mb", a->max_body_mb, "Largest request body (413 above)")
      ->capture_default_str();
  cmd->add_option("--api-key", a->api_key,
                  "A key the application must send (Bearer or x-api-key; default "
                  "$AJET_PROXY_API_KEY; none: anyone who reaches the port)");
  cmd->add_option("--front-inference-key", a->front_inference_key,
                  "The front's inference key (ajet-swarm start --inference-key; default "
                  "$AJET_INFERENCE_KEY): POST /v1/messages/count_tokens is answered under it "
                  "(none: that route answers 404)");
  cmd->add_option("--admin-token", a->admin_token, "When set, GET /proxy/stats needs it");
  cmd->add_option("--model-name", a->model_name, "The model GET /v1/models lists")
      ->capture_default_str();
  cmd->add_option("--io-threads", a->io_threads, "HTTP I/O threads")->capture_default_str();
  cmd->callback([a] { run_proxy(*a); });
});

}  // namespace
}  // namespace ajet::cli
