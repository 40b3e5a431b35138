// Engine replicas on other hosts (ajet-swarm start --engine-at, docs/cluster.md): a small cluster
// of network namespaces that the test builds and removes, even when it fails
// (scripts/netns_cluster.sh). Each engine replica runs in a namespace of its own ("host"), joined
// by a veth pair to a bridge in a "switch" namespace; the front and the test (the client) are in
// this process's namespace, joined to the switch by a veth of their own. Traffic between the front
// and the replicas, and the replicas' c10d group, crosses real interfaces; nothing reaches beyond
// the machine. Needs root and `ip`; skipped otherwise. The real ajet-swarm and ajet-engine
// binaries, a micro model, backbone torch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "common/subprocess.h"
#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

// scripts/netns_cluster.sh: `hosts` network namespaces on one bridge, and this namespace's veth
// into it; removed again by the destructor, also when the test fails. The name carries the pid so
// that concurrent runs do not meet.
class NetnsCluster {
 public:
  explicit NetnsCluster(int hosts) : name_("ajt" + std::to_string(::getpid())) {
    if (::geteuid() != 0) {
      why_ = "needs root (network namespaces)";
      return;
    }
    const Captured up =
        run_capture(script() + " up " + name_ + " " + std::to_string(hosts) + " 2>&1");
    prefix_ = up.out.substr(0, up.out.find_last_not_of("\n") + 1);
    if (up.status != 0) why_ = "scripts/netns_cluster.sh could not build the namespaces: " + up.out;
  }
  ~NetnsCluster() { run_capture(script() + " down " + name_ + " 2>&1"); }

  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  std::string ns(int i) const { return name_ + "-h" + std::to_string(i); }
  std::string ip(int i) const { return prefix_ + "." + std::to_string(11 + i); }
  // Host i's link goes down: it neither sends nor receives from now.
  void cut(int i) const {
    EXPECT_EQ(run_capture(script() + " link " + name_ + " " + std::to_string(i) + " down").status,
              0);
  }

 private:
  static std::string script() { return shell_quote(source("scripts/netns_cluster.sh").string()); }
  std::string name_, prefix_, why_;
};

// `ajet-engine serve --elastic` in namespace `ns` (empty: this one), listening on ip:0.
class ReplicaProcess {
 public:
  ReplicaProcess(const std::string& ns, const std::string& ip, const fs::path& conf,
                 const fs::path& model, const fs::path& token) {
    std::vector<std::string> argv;
    if (!ns.empty()) argv = {"ip", "netns", "exec", ns};
    for (const std::string& a :
         {bin("ajet-engine").string(), std::string("serve"), std::string("--elastic"),
          std::string("--conf"), conf.string(), std::string("--model"), model.string(),
          std::string("--listen"), "tcp:" + ip + ":0", std::string("--token-file"), token.string(),
          std::string("--threads"), std::string("1")}) {
      argv.push_back(a);
    }
    Subprocess proc = Subprocess::spawn(SpawnOptions{argv, {}, {}});
    pid_ = proc.pid();  // `ip netns exec` execs the engine: this is its pid
    reader_ = std::thread([this, p = std::make_shared<Subprocess>(std::move(proc))] {
      p->wait([this](std::string line) {
        std::lock_guard<std::mutex> lock(mu_);
        if (line.find("ajet-engine: ready on ") == 0) address_ = line.substr(22);
        output_ += line + "\n";
        cv_.notify_all();
      });
      std::lock_guard<std::mutex> lock(mu_);
      exited_ = true;
      cv_.notify_all();
    });
  }
  ~ReplicaProcess() {
    kill(SIGKILL);
    if (reader_.joinable()) reader_.join();
  }
  // The address from its ready line; "" when it exited or took longer than `timeout`.
  std::string address(std::chrono::milliseconds timeout = 120s) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !address_.empty() || exited_; });
    return address_;
  }
  void kill(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  std::string output() const {
    std::lock_guard<std::mutex> lock(mu_);
    return output_;
  }

 private:
  pid_t pid_ = -1;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string address_, output_;
  bool exited_ = false;
  std::thread reader_;
};

// The replicas' shared secret, written to dir/engine.token (mode 0600).
fs::path write_token(const fs::path& dir) {
  const fs::path token = dir / "engine.token";
  write_file_atomic(token, "a-test-secret-of-the-replicas\n");
  fs::permissions(token, fs::perms::owner_read | fs::perms::owner_write);
  return token;
}

// The test config with `backbone`, its checkpoints under dir/checkpoints.
std::string train_yaml(const fs::path& dir, const fs::path& model, const std::string& backbone) {
  std::string yaml = config_yaml(model, "  trainer_common:\n    checkpoint_base_dir: " +
                                            (dir / "checkpoints").string() + "\n");
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: " + backbone);
  return yaml;
}

// The engine entry of GET /engines with this address.
Json engine_entry(Api& api, const std::string& address) {
  const Json engines = api.get("/engines").json();
  for (const Json& e : engines.value("engines", Json::array()))
    if (e.value("address", "") == address) return e;
  return Json::object();
}

// One training step's worth of episodes (train_batch_size 2 × num_repeat 2), two calls each; their
// uuids are added to `uuids` when given.
void run_episodes(Api& api, int step, std::vector<std::string>* uuids = nullptr) {
  for (int i = 0; i < 4; ++i) {
    Json e = api.claim("client-net");
    ASSERT_EQ(e["success"], true) << e.dump();
    if (uuids) uuids->push_back(e["episode_uuid"].get<std::string>());
    for (int turn = 0; turn < 2; ++turn) {
      auto r = api.chat(e["openai_api_key"],
                        user_chat("Step " + std::to_string(step) + " episode " + std::to_string(i) +
                                      " turn " + std::to_string(turn),
                                  {{"max_tokens", 4}}));
      EXPECT_EQ(r.status, 200) << r.body;
    }
    const std::string task = "task-" + std::to_string(step) + "-" + std::to_string(i / 2);
    EXPECT_EQ(api.end("client-net", e["episode_uuid"], task, double(i % 2)).status, 200);
  }
}

TEST(RemoteReplicasTest, TrainAcrossNamespacesWhileAReplicaDiesAnotherJoinsAndALinkIsCut) {
  NetnsCluster cluster(3);
  if (!cluster.ok()) GTEST_SKIP() << cluster.why();
  ScratchDir dir;
  const fs::path model = fixture(true).model;
  const std::string yaml = train_yaml(dir.path(), model, "torch");
  const fs::path conf = dir / "train.yaml";
  write_file_atomic(conf, yaml);
  const fs::path token = write_token(dir.path());

  auto a = std::make_unique<ReplicaProcess>(cluster.ns(0), cluster.ip(0), conf, model, token);
  auto b = std::make_unique<ReplicaProcess>(cluster.ns(1), cluster.ip(1), conf, model, token);
  const std::string at_a = a->address(), at_b = b->address();
  ASSERT_FALSE(at_a.empty()) << a->output();
  ASSERT_FALSE(at_b.empty()) << b->output();
  EXPECT_THAT(at_a, HasSubstr(cluster.ip(0)));

  SwarmProcess swarm(SwarmProcess::Options{
      dir / "server",
      {},
      "",
      {"--engine-at", at_a, "--engine-at", at_b, "--engine-token-file", token.string()}});
  Api api(swarm.url());
  api.boot(yaml);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(engine_entry(api, at_a).value("state", ""), "member") << api.get("/engines").body;
  EXPECT_EQ(engine_entry(api, at_b).value("state", ""), "member") << api.get("/engines").body;

  // Step 1 on both replicas: calls routed to both, the same weights afterwards.
  run_episodes(api, 0);
  ASSERT_TRUE(eventually([&] { return api.status()["global_step"] == 1; }, 300s))
      << api.get("/get_verbose_logs").body;
  std::string metrics = api.get("/metrics").body;
  EXPECT_GT(sample_value(metrics, "ajet_replica_calls_total{replica=\"0\"}"), 0) << metrics;
  EXPECT_GT(sample_value(metrics, "ajet_replica_calls_total{replica=\"1\"}"), 0) << metrics;
  std::string logs = api.get("/get_verbose_logs").body;
  EXPECT_THAT(logs, HasSubstr("the 2 data-parallel ranks hold the same weights"));

  // Replica b is killed: no more calls to it; c, in the third namespace, joins.
  b->kill(SIGKILL);
  EXPECT_TRUE(eventually([&] { return engine_entry(api, at_b).value("state", "") == "gone"; }))
      << api.get("/engines").body;
  EXPECT_EQ(engine_entry(api, at_b).value("serving", true), false);
  auto c = std::make_unique<ReplicaProcess>(cluster.ns(2), cluster.ip(2), conf, model, token);
  const std::string at_c = c->address();
  ASSERT_FALSE(at_c.empty()) << c->output();
  auto added = api.post("/engines", Json{{"address", at_c}});
  ASSERT_EQ(added.status, 200) << added.body;
  EXPECT_EQ(api.post("/engines", Json{{"address", at_c}}).status, 400);  // already registered
  EXPECT_TRUE(eventually([&] { return engine_entry(api, at_c).value("state", "") == "standby"; }))
      << api.get("/engines").body;

  // Step 2: the group re-forms with a and c; c receives the weights.
  run_episodes(api, 1);
  ASSERT_TRUE(eventually([&] { return api.status()["global_step"] == 2; }, 300s))
      << api.get("/get_verbose_logs").body;
  const Json ea = engine_entry(api, at_a), ec = engine_entry(api, at_c);
  EXPECT_EQ(ec.value("state", ""), "member") << api.get("/engines").body;
  EXPECT_EQ(ec.value("weights_checksum", "x"), ea.value("weights_checksum", "y"));
  logs = api.get("/get_verbose_logs").body;
  EXPECT_THAT(logs, HasSubstr("2 member(s) [" + at_a + ", " + at_c +
                              "], policy_version 1, the same weights on every member"));
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("weights differ")));
  metrics = api.get("/metrics").body;
  EXPECT_EQ(sample_value(metrics, "ajet_replica_group_generation"), 2) << metrics;
  EXPECT_EQ(sample_value(metrics, "ajet_replica_lost_total{replica=\"1\"}"), 1) << metrics;
  EXPECT_EQ(sample_value(metrics, "ajet_replica_member{replica=\"1\"}"), 0) << metrics;
  EXPECT_EQ(sample_value(metrics, "ajet_replica_member{replica=\"2\"}"), 1) << metrics;

  // a's link is cut (no FIN, no RST: only the missing heartbeats tell): c trains alone.
  cluster.cut(0);
  EXPECT_TRUE(eventually([&] { return engine_entry(api, at_a).value("state", "") == "gone"; }))
      << api.get("/engines").body;
  run_episodes(api, 2);
  ASSERT_TRUE(eventually([&] { return api.status()["global_step"] == 3; }, 300s))
      << api.get("/get_verbose_logs").body;

  // Nothing acknowledged was lost: every batch handed to the trainer was trained.
  const Json status = api.status();
  int trained = 0;
  for (const Json& batch : status["recent_batches"]) {
    EXPECT_EQ(batch.value("trained", false), true) << batch.dump();
    trained += batch.value("trained", false) ? 1 : 0;
  }
  EXPECT_EQ(trained, 3) << status.dump();
}

// The replica endpoints answer bad input with errors that name it, and need the admin token; a
// front that starts its own engine has no replicas to list; --engine-at without a token is refused.
TEST(RemoteReplicasTest, TheReplicaEndpointsNameWhatIsWrong) {
  ScratchDir dir;
  {
    SwarmProcess local(SwarmProcess::Options{dir / "local", {}, "", {}});
    Api api(local.url());
    auto r = api.get("/engines");
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_THAT(r.body, HasSubstr("--engine-at"));
  }
  const fs::path token = write_token(dir.path());
  ClosedPort closed;  // a registered engine nobody answers at
  const std::string nobody = "tcp:127.0.0.1:" + closed.url().substr(closed.url().rfind(':') + 1);
  SwarmProcess swarm(
      SwarmProcess::Options{dir / "server",
                            {},
                            "admin-secret",
                            {"--engine-at", nobody, "--engine-token-file", token.string()}});
  Api api(swarm.url());
  const http::Headers admin{{"Authorization", "Bearer admin-secret"}};
  EXPECT_EQ(api.get("/engines").status, 401);
  EXPECT_EQ(api.post("/engines", Json{{"address", "tcp:127.0.0.1:1"}}).status, 401);
  const Json listed = api.get("/engines", admin).json();
  ASSERT_EQ(listed["engines"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["engines"][0]["address"], nobody);
  EXPECT_EQ(listed["engines"][0]["state"], "dialing");
  auto r = api.post("/engines", Json{{"address", "http://127.0.0.1:1"}}, admin);
  EXPECT_EQ(r.status, 400) << r.body;
  r = api.post("/engines", Json{{"address", nobody}}, admin);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("already registered"));
  r = api.post("/engines", Json{{"addr", nobody}}, admin);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("address"));
  r = api.post("/engines/remove", Json{{"address", "tcp:127.0.0.1:2"}}, admin);
  EXPECT_EQ(r.status, 404) << r.body;
  r = api.post("/engines/remove", Json{{"address", nobody}}, admin);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(api.get("/engines", admin).json()["engines"][0]["state"], "removed");

  // --engine-at needs the engines' token.
  Captured refused = run_capture(
      "env -u AJET_ENGINE_TOKEN " + shell_quote(bin("ajet-swarm").string()) + " start --port 0 " +
      "--exp-dir " + shell_quote((dir / "no-token").string()) + " --engine-at " + nobody + " 2>&1");
  EXPECT_NE(refused.status, 0);
  EXPECT_THAT(refused.out, HasSubstr("need their token"));
}

// Disaggregated training (--trainer-at): the trainer in one namespace never serves; the inference
// replicas in the others only serve, and after every step the trainer's weights are pushed to them
// (same checksum, the new policy version). A replica that connects mid-run is brought to the
// current weights at once, a killed one stops getting calls, every call samples from one policy
// version, and every acknowledged batch is trained.
TEST(RemoteReplicasTest, DisaggregatedTrainerPushesEveryStepToTheReplicas) {
  NetnsCluster cluster(3);
  if (!cluster.ok()) GTEST_SKIP() << cluster.why();
  ScratchDir dir;
  const fs::path model = fixture(true).model;
  const std::string yaml = train_yaml(dir.path(), model, "async");
  const fs::path conf = dir / "train.yaml";
  write_file_atomic(conf, yaml);
  const fs::path token = write_token(dir.path());

  auto trainer = std::make_unique<ReplicaProcess>(cluster.ns(0), cluster.ip(0), conf, model, token);
  auto a = std::make_unique<ReplicaProcess>(cluster.ns(1), cluster.ip(1), conf, model, token);
  const std::string at_t = trainer->address(), at_a = a->address();
  ASSERT_FALSE(at_t.empty()) << trainer->output();
  ASSERT_FALSE(at_a.empty()) << a->output();

  SwarmProcess swarm(SwarmProcess::Options{
      dir / "server",
      {},
      "",
      {"--trainer-at", at_t, "--engine-at", at_a, "--engine-token-file", token.string()}});
  Api api(swarm.url());
  api.boot(yaml);
  ASSERT_FALSE(HasFatalFailure());
  Json engines = api.get("/engines").json();
  EXPECT_EQ(engines.value("mode", ""), "disaggregated") << engines.dump();
  EXPECT_EQ(engine_entry(api, at_a).value("state", ""), "member") << engines.dump();
  ASSERT_EQ(engines["trainers"]["engines"].size(), 1u) << engines.dump();
  EXPECT_EQ(engines["trainers"]["engines"][0].value("state", ""), "member") << engines.dump();
  EXPECT_EQ(engines["trainers"]["engines"][0].value("serving", true), true);  // watched, not routed

  std::vector<std::string> uuids;
  run_episodes(api, 0, &uuids);
  ASSERT_TRUE(eventually([&] { return api.status()["global_step"] == 1; }, 300s))
      << api.get("/get_verbose_logs").body;
  auto trainer_checksum = [&] {
    return api.get("/engines").json()["trainers"]["engines"][0].value("weights_checksum", "t");
  };
  EXPECT_TRUE(eventually([&] { return engine_entry(api, at_a).value("policy_version", -1) == 1; }))
      << api.get("/engines").body;
  EXPECT_EQ(engine_entry(api, at_a).value("weights_checksum", "a"), trainer_checksum());
  std::string logs = api.get("/get_verbose_logs").body;
  EXPECT_THAT(logs, HasSubstr("policy_version 1 to 1 of 1 inference replica(s)"));
  std::string metrics = api.get("/metrics").body;
  EXPECT_EQ(sample_value(metrics, "ajet_replica_calls_total{replica=\"0\"}"), 8) << metrics;

  // Replica b connects mid-run: it gets the current weights without waiting for a step.
  auto b = std::make_unique<ReplicaProcess>(cluster.ns(2), cluster.ip(2), conf, model, token);
  const std::string at_b = b->address();
  ASSERT_FALSE(at_b.empty()) << b->output();
  auto added = api.post("/engines", Json{{"address", at_b}});
  ASSERT_EQ(added.status, 200) << added.body;
  EXPECT_TRUE(eventually([&] { return engine_entry(api, at_b).value("state", "") == "member"; }))
      << api.get("/engines").body;
  EXPECT_EQ(engine_entry(api, at_b).value("policy_version", -1), 1);
  EXPECT_EQ(engine_entry(api, at_b).value("weights_checksum", "b"), trainer_checksum());

  // a is killed: the calls go to b, and the next step reaches b.
  a->kill(SIGKILL);
  EXPECT_TRUE(eventually([&] { return engine_entry(api, at_a).value("state", "") == "gone"; }))
      << api.get("/engines").body;
  run_episodes(api, 1, &uuids);
  ASSERT_TRUE(eventually([&] { return api.status()["global_step"] == 2; }, 300s))
      << api.get("/get_verbose_logs").body;
  EXPECT_TRUE(eventually([&] { return engine_entry(api, at_b).value("policy_version", -1) == 2; }))
      << api.get("/engines").body;
  EXPECT_EQ(engine_entry(api, at_b).value("weights_checksum", "b"), trainer_checksum());

  // Every call sampled from one version; every batch was trained.
  int calls = 0;
  for (const std::string& uuid : uuids) {
    const Json doc = api.get("/episodes/" + uuid).json();
    for (const Json& call : doc.value("calls", Json::array())) {
      const Json v = call.value("policy_versions", Json::array());
      ASSERT_FALSE(v.empty()) << call.dump();
      for (const Json& x : v) EXPECT_EQ(x, v[0]) << "call " << calls << " of " << uuid;
      calls += 1;
    }
  }
  EXPECT_EQ(calls, 16);
  const Json status = api.status();
  int trained = 0;
  for (const Json& batch : status["recent_batches"]) trained += batch.value("trained", false);
  EXPECT_EQ(trained, 2) << status.dump();
}

// --trainer-at needs replicas to serve, and POST /engines with role "trainer" needs a
// disaggregated front.
TEST(RemoteReplicasTest, TrainerRanksNeedReplicasAndADisaggregatedFront) {
  ScratchDir dir;
  const fs::path token = write_token(dir.path());
  ClosedPort closed;
  const std::string nobody = "tcp:127.0.0.1:" + closed.url().substr(closed.url().rfind(':') + 1);
  Captured refused =
      run_capture(shell_quote(bin("ajet-swarm").string()) + " start --port 0 --exp-dir " +
                  shell_quote((dir / "alone").string()) + " --trainer-at " + nobody +
                  " --engine-token-file " + shell_quote(token.string()) + " 2>&1");
  EXPECT_NE(refused.status, 0);
  EXPECT_THAT(refused.out, HasSubstr("--engine-at"));

  SwarmProcess swarm(SwarmProcess::Options{
      dir / "server", {}, "", {"--engine-at", nobody, "--engine-token-file", token.string()}});
  Api api(swarm.url());
  auto r = api.post("/engines", Json{{"address", "tcp:127.0.0.1:3"}, {"role", "trainer"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("--trainer-at"));
  r = api.post("/engines", Json{{"address", "tcp:127.0.0.1:3"}, {"role", "driver"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("'role'"));
  EXPECT_EQ(api.get("/engines").json().value("mode", ""), "colocated");
}

}  // namespace
}  // namespace ajet::e2e
