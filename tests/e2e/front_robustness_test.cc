// The front against hostile requests and faults (docs/operations.md): the real ajet-swarm with
// ajet-echo-engine on loopback. Each hostile case gets a 4xx that names what is wrong and the front
// keeps serving: nothing a client sends may take it down. Restarts keep the protocol's answers.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/file.h>

#include <fstream>
#include <set>

#include "common/proc.h"
#include "e2e_util.h"
#include "http/http_test_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

class FrontRobustnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), "", {}});
    api_ = std::make_unique<Api>(swarm_->url());
    api_->boot(config_yaml(fixture(false).tokenizer));
  }
  http::ClientResponse post_raw(const std::string& path, const std::string& body,
                                http::Headers headers = {}) {
    headers.add("Content-Type", "application/json");
    return api_->http.request("POST", path, headers, body);
  }
  void expect_still_serving() {
    EXPECT_EQ(api_->get("/health").status, 200);
    EXPECT_EQ(api_->engine_status(), "ENGINE.ROLLING");
  }
  ScratchDir dir_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

std::string nested_objects(const std::string& key, int depth, const std::string& leaf = "1") {
  std::string out;
  for (int i = 0; i < depth; ++i) out += "{\"" + key + "\": ";
  return out + leaf + std::string(size_t(depth), '}');
}

// Before the fix, each of these bodies crashed the front with SIGSEGV: parsing survived, and the
// first walk of the accepted value (dump, copy, template) recursed once per level off the stack.
TEST_F(FrontRobustnessTest, DeeplyNestedBodiesAre400NamingTheFieldAndTheFrontLives) {
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  const std::string uuid = claim["episode_uuid"];

  const std::string chat =
      R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [)"
      R"({"type": "function", "function": {"name": "f", "parameters": )" +
      nested_objects("properties", 20000) + "}}]}";
  auto r = post_raw("/v1/chat/completions", chat, {{"Authorization", "Bearer " + key}});
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_THAT(r.body, HasSubstr("tools[0].function.parameters.properties"));
  EXPECT_THAT(r.body, HasSubstr("nested deeper than 128 levels"));
  expect_still_serving();

  const std::string head =
      R"({"client_uuid": "client-a", "episode_uuid": ")" + uuid + R"(", "task_id": "t", )";
  const http::Headers episode_auth{
      {"Authorization", "Bearer " + key}};  // episode commands need the key
  r = post_raw("/end_episode",
               head + R"("workflow_output": {"reward": 1, "metadata": )" +
                   nested_objects("m", 100000) + "}}",
               episode_auth);
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_THAT(r.body, HasSubstr("workflow_output.metadata.m.m"));
  expect_still_serving();

  r = post_raw("/end_episode",
               head + R"("workflow_output": {"reward": 1, "log_metrics": )" +
                   std::string(1000000, '[') + std::string(1000000, ']') + "}}",
               episode_auth);
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_THAT(r.body, HasSubstr("workflow_output.log_metrics[0][0]"));
  expect_still_serving();

  // The episode was not harmed: it still ends, with its reward stored.
  EXPECT_EQ(api_->end("client-a", uuid, "t", 1.0).status, 200);
}

// Issue 38: a tool call's arguments string holding JSON 70,000 levels deep (a 140 KB body) killed
// the front with SIGSEGV through both routes that take one: the body's own depth is fine, but the
// tracker's signature parsed the string without the limit and dump() recursed off the stack.
TEST_F(FrontRobustnessTest, ToolCallArgumentsNestedTooDeepAre400NamingTheFieldAndTheFrontLives) {
  const std::string key = api_->claim("client-a", "train")["openai_api_key"];
  const http::Headers auth{{"Authorization", "Bearer " + key}};
  const std::string deep = std::string(70000, '[') + std::string(70000, ']');

  const std::string chat = R"({"model": "m", "messages": [{"role": "user", "content": "hi"}, )"
                           R"({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", )"
                           R"("type": "function", "function": {"name": "f", "arguments": ")" +
                           deep +
                           R"("}}]}, )"
                           R"({"role": "tool", "tool_call_id": "c1", "content": "ok"}]})";
  auto r = post_raw("/v1/chat/completions", chat, auth);
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error") << r.body.substr(0, 300);
  EXPECT_THAT(r.body,
              HasSubstr("messages[1].tool_calls[0].function.arguments: invalid JSON at [0][0]"));
  EXPECT_THAT(r.body, HasSubstr("nested deeper than 128 levels"));
  expect_still_serving();

  const std::string responses =
      R"({"model": "m", "input": [{"role": "user", "content": "hi"}, )"
      R"({"type": "function_call", "call_id": "c1", "name": "f", "arguments": ")" +
      deep + R"("}, {"type": "function_call_output", "call_id": "c1", "output": "ok"}]})";
  r = post_raw("/v1/responses", responses, auth);
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error") << r.body.substr(0, 300);
  EXPECT_THAT(r.body, HasSubstr("input[1].arguments"));
  EXPECT_THAT(r.body, HasSubstr("nested deeper than 128 levels"));
  expect_still_serving();

  // Arguments that are not JSON at all are still the client's business: the call goes through.
  const std::string text_args =
      R"({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}, )"
      R"({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", )"
      R"("type": "function", "function": {"name": "f", "arguments": "[[[ not json"}}]}, )"
      R"({"role": "tool", "tool_call_id": "c1", "content": "ok"}]})";
  r = post_raw("/v1/chat/completions", text_args, auth);
  EXPECT_EQ(r.status, 200) << r.body.substr(0, 300);
}

// The OpenAI endpoint used to answer these with "request body is not valid JSON" and nothing more.
TEST_F(FrontRobustnessTest, UnparsableValuesOnTheOpenAiEndpointNameFieldAndPosition) {
  const std::string key = api_->claim("client-a", "eval")["openai_api_key"];
  const http::Headers auth{{"Authorization", "Bearer " + key}};
  const std::string messages = R"("messages": [{"role": "user", "content": "hi"}])";
  struct Case {
    std::string body;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"{" + messages + R"(, "temperature": 1e400})",
       "at temperature: number overflow parsing '1e400'"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xe9\"}]}",
       "at messages[0].content: parse error at line 1"},
      {R"({"messages": [{"role": "user", "content": "\udc00"}]})",
       "at messages[0].content: parse error at line 1"},
      {"{" + messages + R"(, "stop": [)", "at stop[0]: parse error at line 1"},
  };
  for (const Case& c : cases) {
    auto r = post_raw("/v1/chat/completions", c.body, auth);
    EXPECT_EQ(r.status, 400) << c.body;
    EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error") << r.body;
    EXPECT_THAT(r.json()["error"]["message"].get<std::string>(), HasSubstr(c.expect)) << c.body;
  }
  expect_still_serving();
}

int64_t rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

// A ~600-byte config whose aliases name one string ~387 million times grew the front by 2.1 GB. The
// swarm server reads no free-form mapping now (the task reader's params are the reader's, which it
// does not use), and wherever one is read the expansion stops at 16 MiB naming the key
// (ConfigErrors.AliasesThatExpandBeyondTheLimitAreRefusedNamingTheKey).
TEST_F(FrontRobustnessTest, YamlAliasBombsDoNotGrowTheFront) {
  ASSERT_EQ(api_->post("/stop_engine", Json::object()).status, 200);
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.OFFLINE"; }));
  std::string yaml = "unused:\n  a0: &a0 \"lol\"\n";
  for (int i = 1; i <= 9; ++i) {
    yaml += "  a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) yaml += std::string(j ? ", " : "") + "*a" + std::to_string(i - 1);
    yaml += "]\n";
  }
  yaml += config_yaml(fixture(false).tokenizer);
  for (const std::string& where :
       {std::string("  x_holder:\n    params: {bomb: *a9}\n"),
        std::string("  task_reader:\n    builtin:\n      params: {bomb: *a9}\n")}) {
    auto r = api_->post("/sync_train_config", Json{{"yaml_as_string", yaml + where}});
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_LT(rss_kib(swarm_->pid()), 256 * 1024) << "the front grew while reading the config";
  }
  EXPECT_EQ(api_->get("/health").status, 200);
}

// A repeat of a committed end_episode answered 200 while the front ran, and 400 "not found" after a
// restart, for an episode the store holds as finished.
TEST_F(FrontRobustnessTest, EndEpisodeAnswersTheSameAcrossARestart) {
  Json finished = api_->claim("client-a", "train");
  Json aborted = api_->claim("client-a", "train");
  ASSERT_EQ(api_->end("client-a", finished["episode_uuid"], "t", 1.0).status, 200);
  ASSERT_EQ(api_->post("/abort_episode",
                       Json{{"client_uuid", "client-a"}, {"episode_uuid", aborted["episode_uuid"]}})
                .status,
            200);
  auto answers = [&] {
    std::vector<int> out;
    out.push_back(api_->end("client-a", finished["episode_uuid"], "t", 1.0).status);
    out.push_back(api_->end("client-b", finished["episode_uuid"], "t", 1.0).status);
    auto r = api_->end("client-a", aborted["episode_uuid"], "t", 1.0);
    out.push_back(r.status);
    EXPECT_THAT(r.body, HasSubstr("not in claimed status"));
    out.push_back(api_->end("client-a", "0123456789abcdef0123456789abcdef", "t", 1.0).status);
    return out;
  };
  const std::vector<int> before = answers();
  // An unknown episode: nobody holds its key, so its end is a 401 (issue 38: episode commands need
  // it).
  EXPECT_EQ(before, (std::vector<int>{200, 404, 400, 401}));
  swarm_->restart();
  api_ = std::make_unique<Api>(swarm_->url());
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.ROLLING"; }))
      << api_->status().dump();
  EXPECT_EQ(answers(), before);
}

std::set<std::string> socket_inodes(pid_t pid) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:", 0) == 0) out.insert(target);
  }
  return out;
}

// The engine inherited the front's listening socket and client connections (a front restarted on
// its port once failed with "Address already in use"), and a SIGKILLed front left its /tmp
// directory. A front in a PID namespace that shares /tmp but not /proc (tests/docs runs the
// documents so) wrote a pid that names another live process here: its directory was kept forever
// (60 of them on the CI machine). The owner's lock on its owner file now decides, wherever the
// owner ran.
TEST_F(FrontRobustnessTest, TheEngineHoldsNoSocketOfTheFrontAndAKilledFrontsTmpDirIsRemoved) {
  const pid_t engine = pid_t(api_->engine_pid());
  ASSERT_GT(engine, 0);
  const std::set<std::string> front = socket_inodes(swarm_->pid());
  ASSERT_FALSE(front.empty());
  for (const std::string& s : socket_inodes(engine))
    EXPECT_EQ(front.count(s), 0u) << "the engine holds " << s;

  auto dirs_of = [](pid_t pid) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) {
      if (e.path().filename().string().rfind("ajet-swarm-", 0) != 0) continue;
      std::ifstream owner(e.path() / "owner");
      pid_t p = 0;
      if (owner >> p && p == pid) out.push_back(e.path());
    }
    return out;
  };
  const std::vector<fs::path> mine = dirs_of(swarm_->pid());
  ASSERT_EQ(mine.size(), 1u);
  swarm_->stop(SIGKILL);
  ASSERT_TRUE(fs::exists(mine[0]));  // nothing could clean up after a SIGKILL

  // Two directories whose owner files name this live test process, as a namespaced front's would
  // name some live process here; only the one whose lock is held belongs to a running front.
  const std::string me = std::to_string(::getpid());
  const std::vector<std::string> stat = proc_stat_fields(::getpid());
  ASSERT_GT(stat.size(), 19u);
  auto fake_dir = [&](const std::string& tag) {
    const fs::path d = fs::temp_directory_path() / ("ajet-swarm-test" + tag + me);
    fs::create_directories(d);
    std::ofstream(d / "owner") << me << ' ' << stat[22 - 3] << " locked\n";
    return d;
  };
  const fs::path orphan = fake_dir("orphan");
  const fs::path held = fake_dir("held");
  const int held_fd = ::open((held / "owner").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held_fd, 0);
  ASSERT_EQ(::flock(held_fd, LOCK_EX | LOCK_NB), 0);

  SwarmProcess next(SwarmProcess::Options{dir_ / "server2", bin("ajet-echo-engine"), "", {}});
  EXPECT_FALSE(fs::exists(mine[0]));
  EXPECT_FALSE(fs::exists(orphan))
      << "a directory whose owner's lock nobody holds is stale, whatever its pid names";
  EXPECT_TRUE(fs::exists(held))
      << "a directory whose owner file is locked belongs to a running front";
  ::close(held_fd);
  fs::remove_all(held);
  EXPECT_EQ(dirs_of(next.pid()).size(), 1u);  // the live front's own directory is kept
}

// Lines of the echo engine in the front's verbose log that end with `suffix` (" holding", "
// aborted").
size_t engine_lines(Api& api, const std::string& suffix) {
  size_t n = 0;
  const Json logs = api.get("/get_verbose_logs").json();
  for (const Json& e : logs["entries"]) {
    const std::string m = e.value("message", "");
    if (m.find("ajet-echo-engine") != std::string::npos && m.size() >= suffix.size() &&
        m.compare(m.size() - suffix.size(), suffix.size(), suffix) == 0) {
      ++n;
    }
  }
  return n;
}

std::string post_head(const std::string& path, size_t length, const std::string& extra = "") {
  return "POST " + path +
         " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(length) + "\r\n" + extra + "\r\n";
}

// Before, the admin token, the episode key and the JSON limit were checked once the whole body (up
// to 64 MiB) was in memory: 48 concurrent uploads cost 1.8 to 2.9 GB, and none was answered before
// its client had sent everything. Now each is answered from its header, after 256 KB of its 60 MB.
TEST_F(FrontRobustnessTest, UnauthenticatedUploadsAreRefusedFromTheirHeaders) {
  SwarmProcess guarded(
      SwarmProcess::Options{dir_ / "guarded", bin("ajet-echo-engine"), "s3cret", {}});
  const int64_t before = rss_kib(guarded.pid());
  struct Upload {
    std::string path;
    int status;
    std::string says;
  };
  const std::vector<Upload> kinds = {
      {"/v1/chat/completions", 401, "no key given"},
      {"/v1/messages", 401, "authentication_error"},
      {"/sync_train_code", 401, "needs the admin token"},
      {"/end_episode", 401, "needs the episode's key"},
  };
  constexpr size_t kDeclared = 60u << 20;
  const std::string part(256 << 10, '{');
  std::vector<std::thread> clients;
  std::mutex mu;
  std::vector<std::string> failures;
  for (int i = 0; i < 48; ++i) {
    clients.emplace_back([&, i] {
      const Upload& u = kinds[size_t(i) % kinds.size()];
      http::testing::RawSocket s(guarded.port());
      s.send(post_head(u.path, kDeclared));
      s.send(part);  // the answer cannot wait for the other 59.75 MB: they are never sent
      const std::string response = s.read_response();
      if (!response.starts_with("HTTP/1.1 " + std::to_string(u.status)) ||
          response.find(u.says) == std::string::npos) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(u.path + ": " + response.substr(0, 400));
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " wrong answers, e.g. " << failures.front();
  // Their bodies were never held: the front grew by far less than one of them.
  EXPECT_LT(rss_kib(guarded.pid()) - before, 32 * 1024) << "KiB grown by 48 refused uploads";
  Api api(guarded.url());
  EXPECT_EQ(api.get("/health").status, 200);
}

// Before, a non-streamed call whose client hung up generated to its end: eight clients that asked
// for n=32 and left kept the engine busy for nobody.
TEST_F(FrontRobustnessTest, ClientsThatHangUpOnNonStreamedCallsAbortTheirGeneration) {
  constexpr size_t kClients = 8;
  std::vector<std::unique_ptr<http::testing::RawSocket>> sockets;
  std::vector<std::string> keys;
  for (size_t i = 0; i < kClients; ++i) {
    const std::string key = api_->claim("client-" + std::to_string(i), "eval")["openai_api_key"];
    keys.push_back(key);
    const std::string body = user_chat("HOLD\nan answer nobody will read", {{"n", 32}}).dump();
    sockets.push_back(std::make_unique<http::testing::RawSocket>(swarm_->port()));
    sockets.back()->send(
        post_head("/v1/chat/completions", body.size(), "Authorization: Bearer " + key + "\r\n") +
        body);
  }
  // Every call reached the engine, which now waits with two tokens per sample out.
  ASSERT_TRUE(eventually([&] { return engine_lines(*api_, " holding") == kClients; }))
      << api_->get("/get_verbose_logs").body;
  EXPECT_EQ(engine_lines(*api_, " aborted"), 0u);
  sockets.clear();  // every client hangs up
  ASSERT_TRUE(eventually([&] { return engine_lines(*api_, " aborted") == kClients; }))
      << "the engine kept generating for clients that left: "
      << api_->get("/get_verbose_logs").body;
  // A small chat is answered as usual (its episode goes on: the calls that were cut recorded
  // nothing).
  auto r = api_->chat(keys.front(), user_chat("small"));
  EXPECT_EQ(r.status, 200) << r.body;
}

// Before, a streamed call whose reader stopped reading queued every token in the front (and the
// engine generated to the end): bounded in time by the write timeout only.
TEST_F(FrontRobustnessTest, AStreamWhoseReaderStopsReadingIsAbortedAfterItsBacklog) {
  SwarmProcess small(SwarmProcess::Options{
      dir_ / "small-backlog", bin("ajet-echo-engine"), "", {"--max-stream-backlog-mb", "0.0625"}});
  Api api(small.url());
  api.boot(config_yaml(fixture(false).tokenizer));
  const std::string key = api.claim("client-a", "eval")["openai_api_key"];
  const std::string body =
      user_chat("FLOOD\nthe same words again and again", {{"stream", true}}).dump();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int window = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &window,
               sizeof window);  // before connect: a small window
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(small.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string request =
      post_head("/v1/chat/completions", body.size(), "Authorization: Bearer " + key + "\r\n") +
      body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), ssize_t(request.size()));
  // Nothing is read from here on.
  EXPECT_TRUE(eventually([&] { return engine_lines(api, " aborted") == 1; }))
      << "the stream was not cancelled: " << api.get("/get_verbose_logs").body;
  ::close(fd);
  EXPECT_EQ(api.get("/health").status, 200);
}

// Before, the front accepted connections until its descriptors ran out, and /health then failed for
// the idle timeout (60 s), renewably.
TEST_F(FrontRobustnessTest, AtTheConnectionCapTheOldestIdleConnectionMakesRoom) {
  SwarmProcess capped(SwarmProcess::Options{dir_ / "capped",
                                            bin("ajet-echo-engine"),
                                            "",
                                            {"--max-connections", "16", "--io-threads", "1"}});
  std::vector<std::unique_ptr<http::testing::RawSocket>> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(std::make_unique<http::testing::RawSocket>(capped.port()));
    idle.back()->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_TRUE(idle.back()->read_response().starts_with("HTTP/1.1 200"));
  }
  http::testing::RawSocket fresh(capped.port());
  fresh.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(fresh.read_response().starts_with("HTTP/1.1 200"));
  EXPECT_TRUE(idle[0]->wait_closed()) << "the oldest idle connection was kept";
}

}  // namespace
}  // namespace ajet::e2e
