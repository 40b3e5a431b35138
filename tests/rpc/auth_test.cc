// The engine RPC handshake: a real server with a shared secret and real clients (rpc::Client and
// raw sockets) over a Unix socket and TCP loopback. The handler records every call, so "refused"
// also means "not executed". Synchronisation is by futures and condition variables only.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/log.h"
#include "rpc/client.h"
#include "rpc/messages.h"
#include "rpc/raw_peer.h"
#include "rpc/server.h"
#include "rpc/token.h"

// A namespace of its own: the rpc tests are compiled as one unity file.
namespace ajet::rpc::auth_test {
namespace {

using namespace std::chrono_literals;
using testing::RawPeer;

constexpr auto kWait = 30s;  // a safety net against hangs, never a synchronisation device
const std::string kToken = "s3cret-engine-token_0123456789+/=";

std::string unique_path(const std::string& suffix) {
  static std::atomic<int> counter{0};
  return (std::filesystem::temp_directory_path() /
          ("ajet-auth-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + suffix))
      .string();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Answers every request at once with {"method", "payload_bytes"}; records what it was asked.
class RecordingHandler : public Handler {
 public:
  void on_request(Frame request, std::shared_ptr<ReplySink> sink) override {
    {
      std::lock_guard lk(mu_);
      methods_.push_back(request.method);
    }
    Frame done;
    done.body = {{"method", request.method}, {"payload_bytes", request.payload.size()}};
    sink->done(std::move(done));
  }
  void on_abort(ConnectionId, uint64_t) override {
    std::lock_guard lk(mu_);
    ++aborts_;
  }
  void on_disconnect(ConnectionId, std::vector<uint64_t>) override {
    std::lock_guard lk(mu_);
    ++disconnects_;
    cv_.notify_all();
  }
  std::vector<std::string> methods() const {
    std::lock_guard lk(mu_);
    return methods_;
  }
  int aborts() const {
    std::lock_guard lk(mu_);
    return aborts_;
  }
  // Waits (at most kWait) until `n` connections have gone; false on timeout.
  bool wait_disconnects(int n) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, kWait, [&] { return disconnects_ >= n; });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> methods_;
  int aborts_ = 0;
  int disconnects_ = 0;
};

Frame request_frame(uint64_t id, const std::string& method) {
  Frame f;
  f.kind = FrameKind::kRequest;
  f.id = id;
  f.method = method;
  return f;
}

class Auth : public ::testing::TestWithParam<std::string> {
 protected:
  void start_server(ServerOptions options = {}) {
    if (options.token.empty()) options.token = kToken;
    server_ = std::make_unique<Server>(handler_, options);
    server_->listen(GetParam() == "unix" ? "unix:" + unique_path(".sock") : "tcp:127.0.0.1:0");
    address_ = server_->address();
  }
  ClientOptions with_token(const std::string& token) {
    ClientOptions o;
    o.token = token;
    return o;
  }

  RecordingHandler handler_;  // outlives the server
  std::unique_ptr<Server> server_;
  std::string address_;
};

TEST_P(Auth, RightTokenWorks) {
  start_server();
  Client client(address_, with_token(kToken));
  client.connect();
  EXPECT_EQ(client.call(make_status_request(), kWait).done.body.at("method"), "status");
  // After the handshake the full frame limits apply: a 1 MB request is far over the pre-auth cap.
  Frame big;
  big.method = "big";
  big.add_array("blob", std::vector<uint8_t>(1 << 20, 7));
  EXPECT_EQ(client.call(big, kWait).done.body.at("payload_bytes"), 1 << 20);
  EXPECT_EQ(handler_.methods(), (std::vector<std::string>{"status", "big"}));
  if (GetParam() == "unix") {
    // A token does not change the socket file's protection.
    struct stat st {};
    ASSERT_EQ(::stat(parse_address(address_).path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
}

TEST_P(Auth, RequestBeforeHelloIsRefusedAndNotExecuted) {
  start_server();
  {
    Client client(address_);  // no token: no hello
    client.connect();
    try {
      client.call(make_status_request(), kWait);
      FAIL() << "a request without a hello was answered";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnauthenticated) << e.what();
      EXPECT_TRUE(contains(e.what(), "must be a hello frame")) << e.what();
    }
  }
  {
    RawPeer raw(address_);
    raw.send_frame(request_frame(1, "train_step"));
    const std::vector<Frame> frames = raw.read_frames();  // until the server closes
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(frames[0].kind, FrameKind::kError);
    EXPECT_EQ(frames[0].id, 1u);
    EXPECT_EQ(frame_error(frames[0]).code(), ErrorCode::kUnauthenticated);
    EXPECT_EQ(frames[1].kind, FrameKind::kClose);
    EXPECT_TRUE(contains(frame_error(frames[1]).what(), "got a 'request' frame first"));
  }
  {
    RawPeer raw(address_);
    raw.send_frame(make_abort_frame(1));
    const Frame close = raw.read_close_frame();
    EXPECT_EQ(frame_error(close).code(), ErrorCode::kUnauthenticated);
  }
  EXPECT_TRUE(handler_.methods().empty());
  EXPECT_EQ(handler_.aborts(), 0);
}

TEST_P(Auth, WrongTokenIsRefusedAndClosed) {
  start_server();
  const std::string wrong = "not-the-token";
  Client client(address_, with_token(wrong));
  try {
    client.connect();
    FAIL() << "connected with a wrong token";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnauthenticated) << e.what();
    EXPECT_TRUE(contains(e.what(), "wrong engine token")) << e.what();
    EXPECT_FALSE(contains(e.what(), kToken)) << e.what();
    EXPECT_FALSE(contains(e.what(), wrong)) << e.what();
  }
  EXPECT_FALSE(client.connected());
  // connect_with_retry does not retry a refused token.
  RetryPolicy policy;
  policy.timeout = kWait;
  EXPECT_THROW(client.connect_with_retry(policy), Error);

  // Frames sent right behind a refused hello are not acted on either; the server hangs up.
  RawPeer raw(address_);
  std::vector<std::byte> bytes = flatten(encode_frame(make_hello_frame(wrong), {}));
  std::vector<std::byte> request = flatten(encode_frame(request_frame(1, "stop"), {}));
  bytes.insert(bytes.end(), request.begin(), request.end());
  raw.send(bytes);
  const std::vector<Frame> frames = raw.read_frames();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].kind, FrameKind::kClose);
  EXPECT_TRUE(contains(frame_error(frames[0]).what(), "wrong engine token"));
  // A hello without a token at all.
  RawPeer empty(address_);
  empty.send_frame(make_hello_frame(""));
  EXPECT_TRUE(contains(frame_error(empty.read_close_frame()).what(), "no string 'token'"));
  EXPECT_TRUE(handler_.methods().empty());
}

TEST_P(Auth, OversizeFrameBeforeHelloIsRefusedFromItsPrefix) {
  start_server();
  using Announced = std::pair<uint32_t, uint64_t>;  // header bytes, payload bytes
  for (const auto& [header, payload] : {Announced{64 << 10, 0}, Announced{200, 1}}) {
    RawPeer raw(address_);
    // Only the 16-byte prefix is sent: the answer cannot have waited for the announced bytes.
    std::vector<std::byte> prefix = flatten(encode_frame(make_hello_frame(kToken), {}));
    prefix.resize(kPrefixBytes);
    std::memcpy(prefix.data() + 4, &header, 4);
    std::memcpy(prefix.data() + 8, &payload, 8);
    raw.send(prefix);
    const Error e = frame_error(raw.read_close_frame());
    EXPECT_EQ(e.code(), ErrorCode::kUnauthenticated) << e.what();
    EXPECT_TRUE(contains(e.what(), "pre-authentication limits")) << e.what();
    EXPECT_TRUE(contains(e.what(), payload == 0 ? "limit of 4096 bytes" : "limit of 0 bytes"))
        << e.what();
  }
  // A client without a token whose first request is over the cap: the request fails as
  // unauthenticated (not as a retryable lost connection).
  Client client(address_);
  client.connect();
  Frame big;
  big.method = "big";
  big.add_array("blob", std::vector<uint8_t>(64, 7));
  try {
    client.call(big, kWait);
    FAIL() << "a request with a payload was answered before the hello";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnauthenticated) << e.what();
    EXPECT_TRUE(contains(e.what(), "requires a token")) << e.what();
  }
  EXPECT_TRUE(handler_.methods().empty());
}

TEST_P(Auth, DeadlineClosesASilentPeer) {
  ServerOptions options;
  options.auth_timeout = 200ms;
  start_server(options);
  const auto start = std::chrono::steady_clock::now();
  RawPeer silent(address_);
  // Blocks until the server closes (the peer's receive timeout, 30 s, is only a safety net).
  const Error e = frame_error(silent.read_close_frame());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_EQ(e.code(), ErrorCode::kUnauthenticated);
  EXPECT_TRUE(contains(e.what(), "no hello frame with the engine token within 200 ms")) << e.what();
  // An authenticated connection is not on a clock.
  Client client(address_, with_token(kToken));
  client.connect();
  RawPeer second_silent(address_);
  second_silent.read_close_frame();  // 200 ms later
  EXPECT_EQ(client.call(make_status_request(), kWait).done.body.at("method"), "status");
}

// Peers without the token hold at most max_unauthenticated connections: a newer one closes the
// oldest silent one, so the front (with the token) still gets in.
TEST_P(Auth, SilentPeersMakeRoomForNewConnections) {
  ServerOptions options;
  options.max_unauthenticated = 2;
  start_server(options);
  RawPeer a(address_), b(address_);
  RawPeer c(address_);  // a makes room
  const Error e = frame_error(a.read_close_frame());
  EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
  EXPECT_TRUE(contains(e.what(),
                       "to make room: too many connections waiting to authenticate "
                       "(limit 2)"))
      << e.what();
  Client client(address_, with_token(kToken));  // b makes room
  client.connect();
  EXPECT_EQ(client.call(make_status_request(), kWait).done.body.at("method"), "status");
  EXPECT_EQ(frame_error(b.read_close_frame()).code(), ErrorCode::kResourceExhausted);
}

TEST_P(Auth, RefusalsAreLoggedWithThePeerRateLimited) {
  std::ostringstream lines;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
  log().sinks().push_back(sink);
  ServerOptions options;
  options.refusal_log_period = std::chrono::hours(1);
  start_server(options);
  for (int i = 0; i < 3; ++i) {
    RawPeer raw(address_);
    raw.send_frame(make_hello_frame("wrong-" + std::to_string(i)));
    raw.read_close_frame();
  }
  // The line is written when the connection closes, before the handler hears of it.
  ASSERT_TRUE(handler_.wait_disconnects(3));
  auto& sinks = log().sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
  const std::string text = lines.str();
  const std::string marker = "before it authenticated";
  size_t refused = 0;
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 1))
    ++refused;
  EXPECT_EQ(refused, 1u) << text;  // the other two are held back for an hour
  EXPECT_TRUE(contains(text, "wrong engine token")) << text;
  EXPECT_TRUE(contains(text, GetParam() == "unix" ? "pid " + std::to_string(::getpid())
                                                  : std::string("(127.0.0.1:")))
      << text;
  EXPECT_FALSE(contains(text, "wrong-0")) << text;
}

INSTANTIATE_TEST_SUITE_P(Rpc, Auth, ::testing::Values("unix", "tcp"),
                         [](const auto& info) { return info.param; });

// ---- Without a token -------------------------------------------------------------------------

TEST(AuthListen, TcpNeedsATokenUnlessInsecureOnLoopback) {
  RecordingHandler handler;
  try {
    Server server(handler);
    server.listen("tcp:127.0.0.1:0");
    FAIL() << "listened on TCP without a token";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_TRUE(contains(e.what(), "head -c 32 /dev/urandom | base64 > engine.token")) << e.what();
  }
  ServerOptions insecure;
  insecure.insecure_no_token = true;
  try {
    Server server(handler, insecure);
    server.listen("tcp:0.0.0.0:0");
    FAIL() << "listened on every interface without a token";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "only accepted on a loopback address")) << e.what();
  }
  Server loopback(handler, insecure);
  loopback.listen("tcp:127.0.0.1:0");
  // A server without a token acknowledges a client's hello, so a client with a token works too.
  ClientOptions with_token;
  with_token.token = kToken;
  Client client(loopback.address(), with_token);
  client.connect();
  EXPECT_EQ(client.call(make_status_request(), kWait).done.body.at("method"), "status");
  Client plain(loopback.address());
  plain.connect();
  EXPECT_EQ(plain.call(make_status_request(), kWait).done.body.at("method"), "status");
  // A unix socket needs no token.
  Server unix_server(handler);
  unix_server.listen("unix:" + unique_path(".sock"));
}

// ---- Where the token comes from --------------------------------------------------------------

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  { std::ofstream(path, std::ios::binary) << text; }
  ::chmod(path.c_str(), mode);
}

TEST(TokenFile, ModeContentAndEnvironment) {
  const std::string path = unique_path(".token");
  write_file(path, kToken + "\n", 0600);
  EXPECT_EQ(read_token_file(path), kToken);  // the newline of `base64 > file` is dropped
  ::setenv(kTokenEnv, "from-env", 1);
  EXPECT_EQ(resolve_token(path), kToken);  // the file wins
  EXPECT_EQ(resolve_token(""), "from-env");
  ::setenv(kTokenEnv, "", 1);
  EXPECT_EQ(resolve_token(""), "");  // empty means none
  ::unsetenv(kTokenEnv);
  EXPECT_EQ(resolve_token(""), "");

  ::chmod(path.c_str(), 0644);
  try {
    read_token_file(path);
    FAIL() << "read a world-readable token file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPermissionDenied);
    EXPECT_TRUE(contains(e.what(), "has mode 0644")) << e.what();
    EXPECT_TRUE(contains(e.what(), "chmod 600 " + path)) << e.what();
    EXPECT_FALSE(contains(e.what(), kToken)) << e.what();
  }
  for (const std::string& bad : {std::string("\n"), std::string("two words"),
                                 std::string("\x01\xff\x80raw"), std::string(2000, 'a')}) {
    write_file(path, bad, 0600);
    EXPECT_THROW(read_token_file(path), Error) << bad;
  }
  std::filesystem::remove(path);
  EXPECT_THROW(read_token_file(path), Error);
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("127.0.0.2"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("example.com"));
}

}  // namespace
}  // namespace ajet::rpc::auth_test
