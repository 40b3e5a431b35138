// Issue 38 on the wire, against the real ajet-swarm with ajet-echo-engine: the episode commands are
// bound to the episode's key, a repeated end that differs answers 409, the public views hide other
// clients' ids, coordinator URLs are host:port on an allow-list (--peer), and a coordinator that
// never answers holds neither the work pool nor shutdown. Each test says what main did before.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <future>

#include "e2e_util.h"
#include "swarm/routes.h"
#include "swarm/work_pool.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class EpisodeCommandsTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> extra = {}, std::string token = "",
             const std::string& subdir = "server") {
    token_ = token;
    swarm_ = std::make_unique<SwarmProcess>(SwarmProcess::Options{
        dir_ / subdir, bin("ajet-echo-engine"), std::move(token), std::move(extra)});
    api_ = std::make_unique<Api>(swarm_->url());
    api_->boot(config_yaml(fixture(false).tokenizer), admin());
  }
  http::Headers admin() const {
    http::Headers h;
    if (!token_.empty()) h.add("Authorization", "Bearer " + token_);
    return h;
  }
  static http::Headers bearer(const std::string& key) {
    return http::Headers{{"Authorization", "Bearer " + key}};
  }
  static Json end_body(const std::string& client, const std::string& uuid, double reward,
                       const std::string& task = "t") {
    return Json{{"client_uuid", client},
                {"episode_uuid", uuid},
                {"task_id", task},
                {"workflow_output", {{"reward", reward}, {"metadata", {{"task_id", task}}}}}};
  }
  static Json prepare_body(const std::string& client, const std::string& uuid,
                           const std::string& coordinator_url, double prepare_timeout = 60) {
    Json body = end_body(client, uuid, 1);
    body["group"] = {{"group_id", "g-" + uuid},
                     {"coordinator_url", coordinator_url},
                     {"coordinator_episode_uuid", "coordinator-episode"},
                     {"coordinator_episode_key", "sk-ajet-the-coordinator-episodes-key"},
                     {"prepare_timeout", prepare_timeout}};
    return body;
  }

  ScratchDir dir_;
  std::string token_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

// Before: anyone who read a victim's ids from the public pool view ended its episode with reward
// 1e300, and the victim's own end then answered 200 as an idempotent repeat.
TEST_F(EpisodeCommandsTest, AStrangerCannotEndOrAbortAnotherClientsEpisode) {
  start();
  Json victim = api_->claim("victim");
  Json stranger = api_->claim("stranger");
  const std::string uuid = victim["episode_uuid"];

  auto no_key = api_->raw_post("/end_episode", end_body("victim", uuid, 1e300));
  EXPECT_EQ(no_key.status, 401) << no_key.body;
  EXPECT_THAT(no_key.body, HasSubstr("Authorization: Bearer <openai_api_key from claim_episode>"));
  EXPECT_THAT(no_key.body, HasSubstr("--allow-keyless-episode-commands"));
  auto wrong_key = api_->raw_post("/end_episode", end_body("victim", uuid, 1e300),
                                  bearer(stranger["openai_api_key"]));
  EXPECT_EQ(wrong_key.status, 401) << wrong_key.body;
  EXPECT_THAT(wrong_key.body, HasSubstr("not episode " + uuid));
  for (const char* path : {"/abort_episode", "/prepare_end_episode", "/commit_episode"}) {
    Json body = std::string(path) == "/prepare_end_episode" ? prepare_body("victim", uuid, "")
                                                            : end_body("victim", uuid, 0);
    auto r = api_->raw_post(path, body);
    EXPECT_EQ(r.status, 401) << path << ": " << r.body;
  }
  auto resolve =
      api_->raw_post("/resolve_episode_group", Json{{"group_id", "g"}, {"episode_uuid", uuid}});
  EXPECT_EQ(resolve.status, 401) << resolve.body;  // it would abort the episode
  EXPECT_TRUE(
      api_->post("/can_continue_episode", Json{{"client_uuid", "victim"}, {"episode_uuid", uuid}})
          .json()["can_continue"]);

  // The victim's own end (Api sends its key) is the one stored; a repeat that differs is 409.
  auto own = api_->post("/end_episode", end_body("victim", uuid, 0.5));
  ASSERT_EQ(own.status, 200) << own.body;
  EXPECT_EQ(api_->post("/end_episode", end_body("victim", uuid, 0.5)).status, 200);
  auto differs = api_->post("/end_episode", end_body("victim", uuid, 1e300));
  EXPECT_EQ(differs.status, 409) << differs.body;
  EXPECT_THAT(differs.body, HasSubstr("workflow_output.reward 1e+300 (ended with 0.5)"));
  auto other_task = api_->post("/end_episode", end_body("victim", uuid, 0.5, "other-task"));
  EXPECT_EQ(other_task.status, 409) << other_task.body;
  EXPECT_THAT(other_task.body, HasSubstr("task_id 'other-task'"));

  // After a restart the store row decides, with the same answers.
  swarm_->restart();
  api_ = std::make_unique<Api>(swarm_->url());
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.ROLLING"; }))
      << api_->status().dump();
  EXPECT_EQ(api_->post("/end_episode", end_body("victim", uuid, 0.5)).status, 200);
  EXPECT_EQ(api_->post("/end_episode", end_body("victim", uuid, 2)).status, 409);
}

// The admin token passes every episode; --allow-keyless-episode-commands lets upstream clients in.
TEST_F(EpisodeCommandsTest, TheAdminTokenAndTheCompatibilitySwitchPassWithoutAKey) {
  start({}, "admin-s3cret");
  Json a = api_->claim("c");
  EXPECT_EQ(api_->raw_post("/end_episode", end_body("c", a["episode_uuid"], 1), admin()).status,
            200);
  Json b = api_->claim("c");
  EXPECT_EQ(
      api_->raw_post("/end_episode", end_body("c", b["episode_uuid"], 1), bearer("not-the-token"))
          .status,
      401);

  swarm_.reset();
  start({"--allow-keyless-episode-commands"}, "", "keyless-server");
  Json c = api_->claim("upstream");
  auto keyless = api_->raw_post("/end_episode", end_body("upstream", c["episode_uuid"], 1));
  EXPECT_EQ(keyless.status, 200) << keyless.body;
  Json d = api_->claim("upstream");
  Json e = api_->claim("upstream");
  // A key that is sent must still be the episode's own.
  auto wrong = api_->raw_post("/end_episode", end_body("upstream", d["episode_uuid"], 1),
                              bearer(e["openai_api_key"]));
  EXPECT_EQ(wrong.status, 401) << wrong.body;
}

// Before: the public pool information and episode buffer listed every episode_uuid and client_uuid.
TEST_F(EpisodeCommandsTest, PublicViewsHideOtherClientsIds) {
  start({}, "admin-s3cret");
  Json mine = api_->claim("me");
  Json theirs = api_->claim("victim");
  const std::string my_uuid = mine["episode_uuid"], their_uuid = theirs["episode_uuid"];
  const std::string pool_path = "/get_current_batch_rollout_pool_information";

  Json stranger = api_->get(pool_path).json();
  const std::string shown =
      stranger.dump() + api_->post("/get_episode_buffer", Json::object()).body;
  EXPECT_THAT(shown, Not(HasSubstr(their_uuid)));
  EXPECT_THAT(shown, Not(HasSubstr(my_uuid)));
  EXPECT_THAT(shown, Not(HasSubstr("\"victim\"")));
  EXPECT_EQ(stranger["claimed_episodes"], 2);
  EXPECT_EQ(stranger["running_episode_details"].size(), 2u);

  Json own = api_->get(pool_path + "?client_uuid=me").json();
  EXPECT_EQ(own["running_episode_details"][my_uuid]["client_uuid"], "me");
  EXPECT_THAT(own.dump(), Not(HasSubstr(their_uuid)));
  Json buffer = api_->post("/get_episode_buffer", Json{{"client_uuid", "me"}}).json();
  EXPECT_THAT(buffer.dump(), HasSubstr(my_uuid));
  EXPECT_THAT(buffer.dump(), Not(HasSubstr(their_uuid)));

  Json all = api_->get(pool_path, admin()).json();
  EXPECT_TRUE(all["running_episode_details"].contains(their_uuid)) << all.dump();
  EXPECT_TRUE(all["running_episode_details"].contains(my_uuid));
}

// Before: discard_episode_timeout 1e12 was accepted, and one client could claim the whole pool.
TEST_F(EpisodeCommandsTest, ClaimsAreBoundedInTimeAndPerClient) {
  start({"--max-discard-episode-timeout", "600"});
  auto forever =
      api_->post("/claim_episode", Json{{"client_uuid", "c"}, {"discard_episode_timeout", 1e12}});
  EXPECT_EQ(forever.status, 400) << forever.body;
  EXPECT_THAT(forever.body, HasSubstr("discard_episode_timeout"));
  EXPECT_THAT(forever.body, HasSubstr("--max-discard-episode-timeout"));
  // The fixture's pool holds 8: one client gets half of it by default.
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(api_->claim("greedy")["success"].get<bool>()) << i;
  Json refused = api_->claim("greedy");
  EXPECT_FALSE(refused["success"].get<bool>());
  EXPECT_THAT(refused["fail_cause"].get<std::string>(),
              HasSubstr("No available episodes for this client"));
  EXPECT_THAT(refused["fail_cause"].get<std::string>(), HasSubstr("--max-claims-per-client"));
  EXPECT_TRUE(api_->claim("modest")["success"].get<bool>());
}

// Before: 8 MB of metadata was kept per episode until its batch trained.
TEST_F(EpisodeCommandsTest, EndMetadataAboveTheLimitIs413NamingFieldAndFlag) {
  start({"--max-episode-metadata-mb", "0.01"});
  Json claimed = api_->claim("c");
  Json body = end_body("c", claimed["episode_uuid"], 1);
  body["workflow_output"]["metadata"]["blob"] = std::string(20000, 'x');
  auto r = api_->post("/end_episode", body);
  EXPECT_EQ(r.status, 413) << r.body.substr(0, 300);
  EXPECT_THAT(r.body, HasSubstr("workflow_output.metadata"));
  EXPECT_THAT(r.body, HasSubstr("--max-episode-metadata-mb"));
  body["workflow_output"]["metadata"].erase("blob");
  body["workflow_output"]["log_metrics"] = {{"curve", std::vector<double>(5000, 0.5)}};
  r = api_->post("/end_episode", body);
  EXPECT_EQ(r.status, 413) << r.body.substr(0, 300);
  EXPECT_THAT(r.body, HasSubstr("workflow_output.log_metrics"));
  body["workflow_output"].erase("log_metrics");
  EXPECT_EQ(api_->post("/end_episode", body).status, 200);
}

// Before: CR/LF in coordinator_url went to the wire (request splitting), any path was POSTed to,
// and any host was dialled.
TEST_F(EpisodeCommandsTest, CoordinatorUrlsAreCheckedAndAllowListed) {
  ClosedPort peer, stranger;
  start({"--peer", peer.url()}, "admin-s3cret");
  int clients = 0;  // a client of its own for each claim: a client's share of the pool is 4 of 8
  auto prepare = [&](const std::string& url, const http::Headers& extra = {}) {
    const std::string client = "c" + std::to_string(++clients);
    Json claimed = api_->claim(client);
    return api_->post("/prepare_end_episode", prepare_body(client, claimed["episode_uuid"], url),
                      extra);
  };
  auto split = prepare(peer.url() + "\r\nX-Injected: 1");
  EXPECT_EQ(split.status, 400) << split.body;
  EXPECT_THAT(split.body, HasSubstr("coordinator_url"));
  auto path = prepare(peer.url() + "/stop_engine");
  EXPECT_EQ(path.status, 400) << path.body;
  EXPECT_THAT(path.body, HasSubstr("no path"));
  auto tls = prepare("https://127.0.0.1:443");
  EXPECT_EQ(tls.status, 400) << tls.body;
  EXPECT_THAT(tls.body, HasSubstr("https is not supported"));
  auto unlisted = prepare(stranger.url());
  EXPECT_EQ(unlisted.status, 403) << unlisted.body;
  EXPECT_THAT(unlisted.body, HasSubstr("--peer " + stranger.url()));
  EXPECT_THAT(unlisted.body, HasSubstr("allow-list"));
  EXPECT_EQ(prepare(peer.url()).status, 200);
  // The admin may name any coordinator: the Authorization header carries the admin token instead of
  // the episode's key.
  Json claimed = api_->claim("by-admin");
  auto by_admin =
      api_->raw_post("/prepare_end_episode",
                     prepare_body("by-admin", claimed["episode_uuid"], stranger.url()), admin());
  EXPECT_EQ(by_admin.status, 200) << by_admin.body;
}

// A coordinator that accepts and then answers one body byte at a time, for ever: a per-read timeout
// never fires. Counts the questions it got.
class Tarpit {
 public:
  Tarpit() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    socklen_t n = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~Tarpit() {
    stopping_ = true;
    acceptor_.join();
    for (auto& t : connections_) t.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int questions() const { return questions_; }

 private:
  void accept_loop() {
    while (!stopping_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      connections_.emplace_back([this, c] { trickle(c); });
    }
  }
  void trickle(int c) {
    char buf[4096];
    pollfd p{c, POLLIN, 0};
    if (::poll(&p, 1, 5000) > 0) ::recv(c, buf, sizeof buf, 0);  // the question
    ++questions_;
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n";
    bool alive = ::send(c, head.data(), head.size(), MSG_NOSIGNAL) > 0;
    while (alive && !stopping_) {
      std::this_thread::sleep_for(200ms);
      alive = ::send(c, " ", 1, MSG_NOSIGNAL) > 0;
    }
    ::close(c);
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> questions_{0};
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // only the acceptor adds; joined after it
};

// Before: four prepared episodes naming a tarpit held both work-pool threads (GET /episodes/{uuid},
// resolve_episode_group and stop_engine never answered) and SIGTERM no longer stopped the front;
// the public verbose log said what each coordinator answered.
TEST_F(EpisodeCommandsTest, ATarpitCoordinatorHoldsNeitherTheWorkPoolNorShutdown) {
  Tarpit tarpit;
  start({"--peer", tarpit.url()});
  std::vector<std::string> prepared;
  for (int i = 0; i < 4; ++i) {
    Json claimed = api_->claim("c");
    prepared.push_back(claimed["episode_uuid"]);
    auto r =
        api_->post("/prepare_end_episode", prepare_body("c", prepared.back(), tarpit.url(), 0.2));
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // Each prepared episode's question is in flight (the tarpit got it and trickles its answer).
  ASSERT_TRUE(eventually([&] { return tarpit.questions() >= 4; })) << tarpit.questions();

  http::ClientOptions patient;
  patient.timeout = 60s;  // generous: before the fix these never answered at all
  Api slow{swarm_->url()};
  slow.http = http::HttpClient(swarm_->url(), patient);
  auto doc = slow.get("/episodes/" + prepared[0]);
  EXPECT_EQ(doc.status, 200) << doc.body.substr(0, 300);
  Json other = api_->claim("c2");
  auto resolve = slow.post("/resolve_episode_group",
                           Json{{"group_id", "g"}, {"episode_uuid", other["episode_uuid"]}});
  EXPECT_EQ(resolve.status, 200) << resolve.body;
  EXPECT_EQ(resolve.json()["decision"], "aborted");

  // The public log says no decision came, not what the tarpit sent nor whether it was reachable.
  std::string logs;
  ASSERT_TRUE(eventually([&] {
    logs = api_->get("/get_verbose_logs").body;
    return logs.find("no decision from its coordinator yet") != std::string::npos;
  })) << logs;
  EXPECT_THAT(logs, Not(HasSubstr("unreachable")));
  EXPECT_THAT(logs, Not(HasSubstr("timed out")));
  EXPECT_THAT(logs, Not(HasSubstr("HTTP 200")));
  EXPECT_THAT(logs, Not(HasSubstr(tarpit.url())));

  auto stop = slow.post("/stop_engine", Json::object());
  EXPECT_EQ(stop.status, 200) << stop.body;
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.OFFLINE"; }));

  // SIGTERM stops the front: it abandons the questions in flight instead of waiting for them.
  const int status = swarm_->stop(SIGTERM, 120s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status << "\n"
                                                             << swarm_->output();
}

// The dispatch of command bodies: a small one is handled on the calling (I/O) thread, a larger one
// on the work pool. Before: every command body was parsed on an I/O thread (8 concurrent 14.7 MB
// claims stalled /health to 2.1 s).
TEST(CommandBodies, ALargeBodyIsHandledOnThePoolNotTheIoThread) {
  swarm::WorkPool pool(1, "test pool");
  auto handled_on = [&](size_t bytes) {
    std::promise<std::thread::id> where;
    http::Handler handler =
        swarm::command_handler(pool, [&](const http::Request& req, const http::Respond& respond) {
          EXPECT_EQ(req.body.size(), bytes);
          where.set_value(std::this_thread::get_id());
          respond(http::Response{});
        });
    http::Request req;
    req.body = std::string(bytes, ' ');
    handler(std::move(req), http::Respond::from([](http::Response) {}));
    return where.get_future().get();
  };
  EXPECT_EQ(handled_on(100), std::this_thread::get_id());
  EXPECT_EQ(handled_on(swarm::kInlineCommandBodyBytes), std::this_thread::get_id());
  EXPECT_NE(handled_on(swarm::kInlineCommandBodyBytes + 1), std::this_thread::get_id());
  EXPECT_NE(handled_on(14 << 20), std::this_thread::get_id());
}

}  // namespace
}  // namespace ajet::e2e
