// A real server and a real client over a Unix socket and over TCP loopback, with the fake engine
// of fake_engine.h streaming behind the server. Synchronisation is by futures only.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>

#include "rpc/client.h"
#include "rpc/fake_engine.h"
#include "rpc/raw_peer.h"
#include "rpc/server.h"

namespace ajet::rpc {
namespace {

using namespace std::chrono_literals;
using testing::fake_logprob;
using testing::fake_raw_logprob;
using testing::fake_token;
using testing::FakeEngine;
using testing::kFakePolicyVersion;
using testing::RawPeer;

constexpr auto kWait = 30s;  // a safety net against hangs, never a synchronisation device

std::string unique_socket_path() {
  static std::atomic<int> counter{0};
  return (std::filesystem::temp_directory_path() /
          ("ajet-rpc-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".sock"))
      .string();
}

template <class T>
T get_or_fail(std::future<T>& f) {
  if (f.wait_for(kWait) != std::future_status::ready)
    throw std::runtime_error("timed out waiting for a future");
  return f.get();
}

// Everything one generate request received, assembled on the client's reader thread.
struct Collected {
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, std::vector<float>> logprobs, raw_logprobs, top_logprobs;
  std::map<int, std::vector<int64_t>> versions;
  std::map<int, std::vector<int32_t>> top_ids;
  std::map<int, FinishReason> finish;
  std::map<int, int64_t> completion_tokens;
  int events = 0;
  std::optional<GenerateDone> done;
  std::optional<Error> error;
  std::string decode_failure;
  std::promise<void> finished;
  std::promise<void> got_events;  // set when `events_wanted` events arrived
  int events_wanted = -1;
};

Client::ReplyCallback collector(std::shared_ptr<Collected> c,
                                std::vector<uint64_t>* arrival = nullptr) {
  return [c, arrival](Frame&& f) {
    if (arrival) arrival->push_back(f.id);  // reader thread only
    try {
      if (f.kind == FrameKind::kReply) {
        TokensEvent e = decode_tokens_event(f);
        auto append = [](auto& dst, const auto& src) {
          dst.insert(dst.end(), src.begin(), src.end());
        };
        append(c->tokens[e.sample], e.token_ids);
        append(c->logprobs[e.sample], e.logprobs);
        append(c->raw_logprobs[e.sample], e.raw_logprobs);
        append(c->versions[e.sample], e.policy_versions);
        append(c->top_ids[e.sample], e.top_ids);
        append(c->top_logprobs[e.sample], e.top_logprobs);
        if (e.finish_reason) {
          c->finish[e.sample] = *e.finish_reason;
          c->completion_tokens[e.sample] = e.completion_tokens;
        }
        if (++c->events == c->events_wanted) c->got_events.set_value();
        return;
      }
      if (f.kind == FrameKind::kDone) c->done = decode_generate_done(f);
      if (f.kind == FrameKind::kError) c->error = frame_error(f);
    } catch (const Error& e) {
      c->decode_failure = e.what();
    }
    c->finished.set_value();
  };
}

GenerateRequest request_for(int i) {
  GenerateRequest r;
  r.prompt = {i, i + 1, 2 * i};
  r.n = 1 + i % 3;
  r.max_tokens = 4 + i % 7;
  r.top_logprobs = i % 4;
  r.seed = i;
  r.tag = "req-" + std::to_string(i);
  return r;
}

void expect_generated(const Collected& c, const GenerateRequest& r, const std::string& what) {
  ASSERT_FALSE(c.error.has_value()) << what << ": " << c.error->what();
  ASSERT_EQ(c.decode_failure, "") << what;
  ASSERT_TRUE(c.done.has_value()) << what;
  int64_t total = 0;
  for (int s = 0; s < r.n; ++s) {
    std::vector<int32_t> want;
    std::vector<float> want_lp, want_raw;
    for (int t = 0; t < r.max_tokens; ++t) {
      want.push_back(fake_token(r.prompt, s, t));
      want_lp.push_back(fake_logprob(t));
      want_raw.push_back(fake_raw_logprob(t));
    }
    EXPECT_EQ(c.tokens.at(s), want) << what << " sample " << s;
    EXPECT_EQ(c.logprobs.at(s), want_lp) << what;
    EXPECT_EQ(c.raw_logprobs.at(s), want_raw) << what;
    EXPECT_EQ(c.versions.at(s), std::vector<int64_t>(r.max_tokens, kFakePolicyVersion)) << what;
    EXPECT_EQ(c.top_ids.at(s).size(), static_cast<size_t>(r.max_tokens * r.top_logprobs)) << what;
    for (size_t k = 0; k < c.top_ids.at(s).size(); ++k) {
      size_t t = k / r.top_logprobs, j = k % r.top_logprobs;
      EXPECT_EQ(c.top_ids.at(s)[k], (want[t] + 1 + static_cast<int32_t>(j)) % testing::kFakeVocab)
          << what;
    }
    EXPECT_EQ(c.finish.at(s), FinishReason::kLength) << what;
    EXPECT_EQ(c.completion_tokens.at(s), r.max_tokens) << what;
    total += r.max_tokens;
  }
  EXPECT_EQ(c.done->prompt_tokens, static_cast<int64_t>(r.prompt.size())) << what;
  EXPECT_EQ(c.done->completion_tokens, total) << what;
}

class Transport : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { start_server(); }

  void start_server(ServerOptions options = {}) {
    options.insecure_no_token = true;  // the tcp cases listen on loopback; auth_test.cc has tokens
    server_ = std::make_unique<Server>(engine_.router(), options);
    server_->listen(
        address_ == "" ? (GetParam() == "unix" ? "unix:" + unique_socket_path() : "tcp:127.0.0.1:0")
                       : address_);
    address_ = server_->address();
  }

  std::unique_ptr<Client> connected_client(ClientOptions options = {}) {
    auto c = std::make_unique<Client>(address_, options);
    c->connect();
    return c;
  }

  FakeEngine engine_;  // outlives the server (its router is the server's handler)
  std::string address_;
  std::unique_ptr<Server> server_;
};

TEST_P(Transport, ManyConcurrentStreamsInterleaveAndReassemble) {
  constexpr int kRequests = 40;
  engine_.set_gate(kRequests);  // the engine steps only once all 40 are in: replies must interleave
  auto client = connected_client();
  std::vector<uint64_t> arrival;  // request id of each frame, in arrival order (reader thread)
  std::vector<std::shared_ptr<Collected>> results;
  std::vector<uint64_t> ids;
  for (int i = 0; i < kRequests; ++i) {
    results.push_back(std::make_shared<Collected>());
    ids.push_back(client->start(encode_generate_request(request_for(i)),
                                collector(results.back(), &arrival)));
  }
  for (int i = 0; i < kRequests; ++i) {
    auto f = results[i]->finished.get_future();
    ASSERT_EQ(f.wait_for(kWait), std::future_status::ready) << "request " << i;
    expect_generated(*results[i], request_for(i), "request " + std::to_string(i));
  }
  EXPECT_EQ(client->in_flight(), 0u);
  // Interleaved: request 0's last frame arrived after the first frame of every other request.
  size_t last_of_first = 0;
  for (size_t k = 0; k < arrival.size(); ++k) {
    if (arrival[k] == ids[0]) last_of_first = k;
  }
  for (int i = 1; i < kRequests; ++i) {
    auto first = std::find(arrival.begin(), arrival.end(), ids[i]);
    ASSERT_NE(first, arrival.end());
    EXPECT_LT(static_cast<size_t>(first - arrival.begin()), last_of_first) << "request " << i;
  }
}

TEST_P(Transport, StopTokenEndsTheSample) {
  auto client = connected_client();
  GenerateRequest r = request_for(5);
  r.n = 1;
  r.max_tokens = 50;
  r.stop_token_ids = {fake_token(r.prompt, 0, 2)};
  auto c = std::make_shared<Collected>();
  client->start(encode_generate_request(r), collector(c));
  auto f = c->finished.get_future();
  get_or_fail(f);
  ASSERT_FALSE(c->error.has_value());
  EXPECT_EQ(c->finish.at(0), FinishReason::kStop);
  EXPECT_EQ(c->tokens.at(0).size(), 3u);  // the stop token itself is kept
  EXPECT_EQ(c->tokens.at(0).back(), r.stop_token_ids[0]);
}

TEST_P(Transport, ErrorsStayWithTheirRequest) {
  engine_.set_gate(4);  // the good requests are still streaming when the bad ones fail
  auto client = connected_client();
  std::vector<std::shared_ptr<Collected>> good;
  for (int i = 0; i < 4; ++i) {
    good.push_back(std::make_shared<Collected>());
    client->start(encode_generate_request(request_for(i)), collector(good.back()));
  }
  auto call_error = [&](Frame request) -> Error {
    try {
      client->call(std::move(request), kWait);
    } catch (const Error& e) {
      return e;
    }
    return Error(ErrorCode::kInternal, "no error");
  };
  GenerateRequest bad_token = request_for(1);
  bad_token.prompt[1] = 5000;
  Error e1 = call_error(encode_generate_request(bad_token));
  EXPECT_EQ(e1.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e1.what()).find("prompt[1] = 5000 is outside the vocabulary"),
            std::string::npos)
      << e1.what();
  GenerateRequest bad_param = request_for(2);
  bad_param.top_p = 0;
  Error e2 = call_error(encode_generate_request(bad_param));
  EXPECT_EQ(e2.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e2.what()).find("'top_p' must be in (0, 1]"), std::string::npos)
      << e2.what();
  Frame unknown;
  unknown.method = "fly";
  Error e3 = call_error(unknown);
  EXPECT_EQ(e3.code(), ErrorCode::kNotFound);
  EXPECT_NE(std::string(e3.what()).find(
                "unknown engine method 'fly' (this engine serves: big, drop, generate"),
            std::string::npos)
      << e3.what();
  Frame thrower;
  thrower.method = "throw";
  Error e4 = call_error(thrower);
  EXPECT_EQ(e4.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(std::string(e4.what()).find("the engine is not ready"), std::string::npos);
  Frame dropper;
  dropper.method = "drop";
  Error e5 = call_error(dropper);
  EXPECT_EQ(e5.code(), ErrorCode::kInternal);
  EXPECT_NE(std::string(e5.what()).find("without a final reply"), std::string::npos) << e5.what();

  for (int i = 0; i < 4; ++i) {
    auto f = good[i]->finished.get_future();
    get_or_fail(f);
    expect_generated(*good[i], request_for(i), "good request " + std::to_string(i));
  }
  EXPECT_TRUE(client->connected());
}

TEST_P(Transport, AbortFinishesAStreamingRequest) {
  auto client = connected_client();
  GenerateRequest r = request_for(3);
  r.n = 2;
  r.tag = "hold";  // streams 3 tokens per sample, then waits
  auto c = std::make_shared<Collected>();
  c->events_wanted = 2 * testing::kHoldAfterTokens;
  auto got = c->got_events.get_future();
  uint64_t id = client->start(encode_generate_request(r), collector(c));
  get_or_fail(got);
  EXPECT_TRUE(client->abort(id));
  auto f = c->finished.get_future();
  get_or_fail(f);
  ASSERT_FALSE(c->error.has_value());
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(c->finish.at(s), FinishReason::kAbort);
    EXPECT_EQ(c->tokens.at(s).size(), static_cast<size_t>(testing::kHoldAfterTokens));
  }
  EXPECT_EQ(c->done->completion_tokens, 2 * testing::kHoldAfterTokens);
  EXPECT_FALSE(client->abort(id));  // finished: nothing to abort
  EXPECT_EQ(engine_.aborts(), 1u);
}

TEST_P(Transport, StatusCallAndCallTimeout) {
  auto client = connected_client();
  auto status = client->call(make_status_request(), kWait);
  EXPECT_EQ(status.done.kind, FrameKind::kDone);
  EXPECT_EQ(status.done.body.at("policy_version"), kFakePolicyVersion);
  EXPECT_EQ(status.done.body.at("model").at("name"), "fake");

  GenerateRequest held = request_for(1);
  held.tag = "hold";  // never finishes on its own
  try {
    client->call(encode_generate_request(held), 50ms);
    FAIL() << "a held request returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("got no final reply within 50 ms; aborted"),
              std::string::npos)
        << e.what();
  }
  engine_.wait_aborts(1);  // the timed-out call was aborted on the engine
  EXPECT_EQ(client->in_flight(), 0u);
  EXPECT_EQ(client->call(make_status_request(), kWait).done.body.at("policy_version"),
            kFakePolicyVersion);
}

TEST_P(Transport, ServerLossFailsInFlightRequestsAndClientReconnects) {
  auto client = connected_client();
  std::vector<std::shared_ptr<Collected>> held;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    GenerateRequest r = request_for(i);
    r.n = 1;
    r.tag = "hold";
    held.push_back(std::make_shared<Collected>());
    held.back()->events_wanted = testing::kHoldAfterTokens;
    auto got = held.back()->got_events.get_future();
    ids.push_back(client->start(encode_generate_request(r), collector(held.back())));
    get_or_fail(got);
  }
  server_->stop();
  for (auto& c : held) {
    auto f = c->finished.get_future();
    get_or_fail(f);
    ASSERT_TRUE(c->error.has_value());
    EXPECT_EQ(c->error->code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(c->error->what()).find("engine connection lost"), std::string::npos)
        << c->error->what();
  }
  auto disconnects = engine_.wait_disconnects(1);
  EXPECT_EQ(disconnects[0], ids);  // the engine learns which requests to drop
  EXPECT_FALSE(client->connected());
  EXPECT_THROW(client->start(make_status_request(), [](Frame&&) {}), Error);

  start_server();  // same address again (stale socket file removed / port reused)
  client->connect();
  EXPECT_TRUE(client->connected());
  EXPECT_EQ(client->call(make_status_request(), kWait).done.body.at("policy_version"),
            kFakePolicyVersion);
}

TEST_P(Transport, ClientCloseTellsTheEngineWhichRequestsWereInFlight) {
  auto client = connected_client();
  std::vector<uint64_t> ids;
  std::vector<std::shared_ptr<Collected>> held;
  for (int i = 0; i < 2; ++i) {
    GenerateRequest r = request_for(i);
    r.tag = "hold";
    held.push_back(std::make_shared<Collected>());
    held.back()->events_wanted = r.n * testing::kHoldAfterTokens;
    auto got = held.back()->got_events.get_future();
    ids.push_back(client->start(encode_generate_request(r), collector(held.back())));
    get_or_fail(got);
  }
  client->close();
  for (auto& c : held) {
    auto f = c->finished.get_future();
    get_or_fail(f);
    ASSERT_TRUE(c->error.has_value());
    EXPECT_EQ(c->error->code(), ErrorCode::kUnavailable);
  }
  auto disconnects = engine_.wait_disconnects(1);
  EXPECT_EQ(disconnects[0], ids);
  EXPECT_EQ(server_->connection_count(), 0u);
}

TEST_P(Transport, GarbageAndBrokenPeersDoNotHurtTheServer) {
  {
    RawPeer garbage(address_);
    garbage.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    Frame close = garbage.read_close_frame();
    EXPECT_EQ(close.kind, FrameKind::kClose);
    EXPECT_NE(std::string(frame_error(close).what()).find("bad magic"), std::string::npos)
        << frame_error(close).what();
  }
  {
    RawPeer bad_json(address_);
    std::string header = "{oops";
    Frame probe = make_abort_frame(1);
    auto bytes = flatten(encode_frame(probe, {}));
    uint32_t hlen = static_cast<uint32_t>(header.size());
    std::memcpy(bytes.data() + 4, &hlen, 4);
    bytes.resize(kPrefixBytes);
    bad_json.send(bytes);
    bad_json.send(header);
    Frame close = bad_json.read_close_frame();
    EXPECT_EQ(frame_error(close).code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(frame_error(close).what()).find("header: invalid JSON"),
              std::string::npos);
  }
  {
    RawPeer wrong_kind(address_);  // a client must not send replies
    Frame reply;
    reply.kind = FrameKind::kReply;
    reply.id = 1;
    wrong_kind.send(flatten(encode_frame(reply, {})));
    EXPECT_NE(std::string(frame_error(wrong_kind.read_close_frame()).what())
                  .find("unexpected 'reply' frame"),
              std::string::npos);
  }
  {
    RawPeer duplicate(address_);
    GenerateRequest r = request_for(1);
    r.tag = "hold";
    Frame req = encode_generate_request(r);
    req.id = 9;
    auto bytes = flatten(encode_frame(req, {}));
    duplicate.send(bytes);
    duplicate.send(bytes);
    EXPECT_NE(std::string(frame_error(duplicate.read_close_frame()).what())
                  .find("request id 9 is already in flight"),
              std::string::npos);
  }
  {
    RawPeer truncated(address_);  // half a frame, then hang up
    Frame status = make_status_request();
    status.id = 1;
    auto bytes = flatten(encode_frame(status, {}));
    truncated.send(std::span(bytes.data(), bytes.size() / 2));
    truncated.shutdown_send();
    truncated.read_to_end();
  }
  auto client = connected_client();
  EXPECT_EQ(client->call(make_status_request(), kWait).done.body.at("policy_version"),
            kFakePolicyVersion);
}

TEST_P(Transport, OversizeFramesAreRefusedWithAMessage) {
  server_.reset();
  address_.clear();
  ServerOptions options;
  options.limits.max_payload_bytes = 1 << 20;
  start_server(options);
  {
    RawPeer huge(address_);
    Frame f = make_status_request();
    f.id = 1;
    auto bytes = flatten(encode_frame(f, {}));
    uint64_t plen = 2ull << 20;
    std::memcpy(bytes.data() + 8, &plen, 8);
    bytes.resize(kPrefixBytes);
    huge.send(bytes);
    Frame close = huge.read_close_frame();
    EXPECT_EQ(frame_error(close).code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(frame_error(close).what())
                  .find("payload of 2097152 bytes exceeds the limit of 1048576"),
              std::string::npos)
        << frame_error(close).what();
  }
  {
    // A client with bigger limits than the server: the server closes the connection, the request
    // fails with the server's reason.
    auto client = connected_client();
    GenerateRequest r = request_for(1);
    r.prompt.assign(300'000, 1);  // 1.2 MB of i32
    auto c = std::make_shared<Collected>();
    client->start(encode_generate_request(r), collector(c));
    auto f = c->finished.get_future();
    get_or_fail(f);
    ASSERT_TRUE(c->error.has_value());
    EXPECT_EQ(c->error->code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(c->error->what()).find("exceeds the limit of 1048576"), std::string::npos)
        << c->error->what();
  }
  {
    // The client refuses to send past its own limit; the connection stays usable.
    ClientOptions small;
    small.limits.max_payload_bytes = 1024;
    auto client = connected_client(small);
    GenerateRequest r = request_for(1);
    r.prompt.assign(1000, 1);
    try {
      client->start(encode_generate_request(r), [](Frame&&) {});
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
      EXPECT_NE(std::string(e.what()).find("engine request 'generate'"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(client->in_flight(), 0u);
    EXPECT_EQ(client->call(make_status_request(), kWait).done.body.at("policy_version"),
              kFakePolicyVersion);
    // A reply larger than the client accepts: the client drops the connection, the call fails.
    Frame big;
    big.method = "big";
    big.body = {{"bytes", 4096}};
    try {
      client->call(big, kWait);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
      EXPECT_NE(std::string(e.what()).find("max_payload_bytes"), std::string::npos) << e.what();
    }
  }
  {
    // A reply larger than the server may send becomes an error for that request only.
    auto client = connected_client();
    Frame big;
    big.method = "big";
    big.body = {{"bytes", 2 << 20}};
    try {
      client->call(big, kWait);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
      EXPECT_NE(std::string(e.what()).find("could not be sent"), std::string::npos) << e.what();
    }
    big.body = {{"bytes", 1000}};
    EXPECT_EQ(client->call(big, kWait).done.find_array("blob")->count, 1000u);
  }
}

TEST_P(Transport, ConnectionLimit) {
  server_.reset();
  address_.clear();
  ServerOptions options;
  options.max_connections = 1;
  start_server(options);
  auto first = connected_client();
  EXPECT_EQ(first->call(make_status_request(), kWait).done.body.at("policy_version"),
            kFakePolicyVersion);
  auto second = connected_client();  // the socket connects; the server then refuses it
  try {
    second->call(make_status_request(), kWait);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("too many connections to the engine (limit 1)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(first->call(make_status_request(), kWait).done.body.at("policy_version"),
            kFakePolicyVersion);
}

TEST_P(Transport, ConnectWithRetryWaitsForTheEngineToBoot) {
  server_.reset();  // the engine is "booting": nothing listens yet
  Client client(address_);
  try {
    client.connect();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("cannot connect to the engine at " + address_),
              std::string::npos)
        << e.what();
  }
  RetryPolicy quick;
  quick.timeout = 30ms;
  try {
    client.connect_with_retry(quick);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did not accept a connection within 30 ms"),
              std::string::npos)
        << e.what();
  }
  // The policy's `cancelled` hook runs after each failed attempt: start the server after the first.
  std::promise<void> first_failure;
  std::atomic<int> failures{0};
  RetryPolicy patient;
  patient.timeout = kWait;
  patient.cancelled = [&] {
    if (failures++ == 0) first_failure.set_value();
    return false;
  };
  auto connecting = std::async(std::launch::async, [&] { client.connect_with_retry(patient); });
  auto failed_once = first_failure.get_future();
  get_or_fail(failed_once);
  start_server();
  get_or_fail(connecting);
  EXPECT_GE(failures.load(), 1);
  EXPECT_EQ(client.call(make_status_request(), kWait).done.body.at("policy_version"),
            kFakePolicyVersion);
}

INSTANTIATE_TEST_SUITE_P(Rpc, Transport, ::testing::Values("unix", "tcp"),
                         [](const auto& info) { return info.param; });

// ---- Unix socket file handling --------------------------------------------------------------

TEST(UnixSocketFile, ModeStaleFileAndRefusals) {
  FakeEngine engine;
  std::string path = unique_socket_path();
  {
    // A stale socket file, as left by a killed engine.
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path.c_str(), sizeof(sa.sun_path) - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    ::close(fd);
    ASSERT_TRUE(std::filesystem::is_socket(path));
  }
  Server server(engine.router());
  server.listen("unix:" + path);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  Server second(engine.router());
  try {
    second.listen("unix:" + path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another server is already listening there"),
              std::string::npos)
        << e.what();
  }
  server.stop();
  EXPECT_FALSE(std::filesystem::exists(path));  // removed on stop

  std::string regular = unique_socket_path();
  { std::ofstream(regular) << "not a socket"; }
  Server third(engine.router());
  try {
    third.listen("unix:" + regular);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a socket exists there; refusing to replace it"),
              std::string::npos);
  }
  EXPECT_TRUE(std::filesystem::exists(regular));
  std::filesystem::remove(regular);
}

TEST(Address, ParsesAndRejects) {
  Address u = parse_address("unix:/run/ajet/engine.sock");
  EXPECT_EQ(u.kind, Address::Kind::kUnix);
  EXPECT_EQ(u.path, "/run/ajet/engine.sock");
  Address t = parse_address("tcp:127.0.0.1:7000");
  EXPECT_EQ(t.kind, Address::Kind::kTcp);
  EXPECT_EQ(t.host, "127.0.0.1");
  EXPECT_EQ(t.port, 7000);
  Address v6 = parse_address("tcp:[::1]:9");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(to_string(v6), "tcp:[::1]:9");
  for (const char* bad :
       {"", "udp:x:1", "unix:", "tcp:host", "tcp::80", "tcp:h:99999", "tcp:h:8x", "tcp:[::1:80"}) {
    EXPECT_THROW(parse_address(bad), Error) << bad;
  }
  EXPECT_THROW(parse_address("unix:/" + std::string(200, 'a')), Error);
}

}  // namespace
}  // namespace ajet::rpc
