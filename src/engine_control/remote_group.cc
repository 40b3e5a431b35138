#include "engine_control/remote_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "engine_control/fan_out.h"
#include "episodes/verbose_log.h"
#include "rpc/address.h"
#include "rpc/client.h"
#include "rpc/messages.h"

namespace ajet::engine_control {
namespace fs = std::filesystem;

namespace {

// What a dial thread leaves for the watch to pick up (the thread may outlive the group: it only
// touches this).
struct Dial {
  std::mutex mu;
  bool done = false;
  std::shared_ptr<rpc::Client> client;  // connected, or null
  std::string error;
};

}  // namespace

std::string engine_host(const std::string& address) {
  const rpc::Address a = rpc::parse_address(address);
  return a.kind == rpc::Address::Kind::kTcp ? a.host : std::string("127.0.0.1");
}

struct RemoteGroup::Engine {
  int slot = 0;
  std::string address;
  State state = State::kDialing;
  std::shared_ptr<rpc::Client> client;
  std::shared_ptr<Dial> dial;  // in progress
  std::chrono::steady_clock::time_point next_dial{};
  std::string last_error;
  int rank = -1;
  int missed = 0;  // heartbeats missed in a row
  bool serving = false;
  int64_t policy_version = -1;
  std::string checksum;
  int64_t lost = 0;    // times it was marked gone
  int64_t joined = 0;  // generations it joined
};

RemoteGroup::RemoteGroup(RemoteGroupOptions options, episodes::VerboseLog& verbose)
    : options_(std::move(options)), verbose_(verbose) {
  for (const std::string& a : options_.addresses) add(a);
}

RemoteGroup::~RemoteGroup() = default;

void RemoteGroup::add(const std::string& address) {
  const rpc::Address parsed = rpc::parse_address(address);  // throws kInvalidArgument
  const std::string canonical = rpc::to_string(parsed);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : engines_) {
    if (e->address != canonical) continue;
    if (e->state != State::kRemoved) {
      fail(ErrorCode::kFailedPrecondition, "engine " + canonical + " is already registered");
    }
    e->state = State::kDialing;  // registered again: same slot
    e->next_dial = {};
    return;
  }
  auto e = std::make_shared<Engine>();
  e->slot = int(engines_.size());
  e->address = canonical;
  engines_.push_back(e);
}

void RemoteGroup::remove(const std::string& address) {
  const std::string canonical = rpc::to_string(rpc::parse_address(address));
  std::shared_ptr<rpc::Client> closing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(engines_.begin(), engines_.end(), [&](const auto& e) {
      return e->address == canonical && e->state != State::kRemoved;
    });
    if (it == engines_.end())
      fail(ErrorCode::kNotFound, "no engine " + canonical + " is registered");
    Engine& e = **it;
    if (e.state == State::kMember) due_ = true;
    e.state = State::kRemoved;
    e.serving = false;
    e.rank = -1;
    closing = std::move(e.client);
  }
  verbose_.add("engine",
               fmt::format("engine replica {} removed: it gets no more calls", canonical));
  // Closed outside the lock (in-flight calls get their error through their callbacks).
  if (closing) closing->close();
}

void RemoteGroup::mark_gone(Engine& e, const std::string& why) {
  const bool member = e.state == State::kMember;
  e.state = State::kGone;
  e.serving = false;
  e.rank = -1;
  e.client.reset();
  e.last_error = why;
  e.lost += 1;
  e.next_dial = std::chrono::steady_clock::now() + options_.redial;
  if (member) due_ = true;
  log().warn("engine replica {} (slot {}) is gone: {}", e.address, e.slot, why);
  verbose_.add("engine", fmt::format("engine replica {} is gone ({}); its episodes move to another "
                                     "replica, and the group re-forms at the next step",
                                     e.address, why));
}

void RemoteGroup::check() {
  // 1. Heartbeats to every connected engine, all at once.
  struct Beat {
    std::shared_ptr<Engine> engine;
    std::shared_ptr<rpc::Client> client;
    uint64_t id = 0;
    bool answered = false;
    bool failed = false;
    Json body;
  };
  std::vector<Beat> beats;
  std::vector<std::shared_ptr<Engine>> to_dial;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : engines_) {
      if (e->state == State::kRemoved) continue;
      if (e->state == State::kMember || e->state == State::kStandby) {
        if (!e->client || !e->client->connected()) {
          mark_gone(*e, "its connection closed");
          continue;
        }
        beats.push_back(Beat{e, e->client});
      } else if (!e->dial && now >= e->next_dial) {
        to_dial.push_back(e);
      }
    }
  }
  auto mu = std::make_shared<std::mutex>();
  auto cv = std::make_shared<std::condition_variable>();
  auto results = std::make_shared<std::vector<std::pair<bool, Json>>>(beats.size());
  auto pending = std::make_shared<size_t>(beats.size());
  for (size_t i = 0; i < beats.size(); ++i) {
    try {
      beats[i].id = beats[i].client->start(rpc::make_status_request(), [=](rpc::Frame&& f) {
        if (f.kind != rpc::FrameKind::kDone && f.kind != rpc::FrameKind::kError) return;
        std::lock_guard<std::mutex> lock(*mu);
        (*results)[i] = {f.kind == rpc::FrameKind::kDone, std::move(f.body)};
        *pending -= 1;
        cv->notify_all();
      });
    } catch (const Error&) {
      std::lock_guard<std::mutex> lock(*mu);
      (*results)[i] = {false, Json()};
      *pending -= 1;
    }
  }
  {
    std::unique_lock<std::mutex> lock(*mu);
    cv->wait_for(lock, options_.heartbeat_timeout, [&] { return *pending == 0; });
    for (size_t i = 0; i < beats.size(); ++i) {
      // A missing answer counts as a miss; the request stays in flight and is aborted below.
      beats[i].answered = (*results)[i].first;
      beats[i].body = (*results)[i].second;
    }
  }
  for (auto& b : beats) {
    if (!b.answered && b.id != 0) b.client->abort(b.id);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& b : beats) {
      Engine& e = *b.engine;
      if (e.client != b.client || (e.state != State::kMember && e.state != State::kStandby))
        continue;
      if (b.answered) {
        e.missed = 0;
        if (e.state == State::kMember) e.serving = true;
        if (b.body.contains("policy_version") && b.body["policy_version"].is_number_integer())
          e.policy_version = b.body["policy_version"].get<int64_t>();
        continue;
      }
      e.missed += 1;
      e.serving = false;  // no calls while it does not answer
      if (e.missed >= 3) {
        mark_gone(e, fmt::format("no status answer within {} ms, three times in a row",
                                 options_.heartbeat_timeout.count()));
      }
    }
  }
  // 2. Dials, each on a thread of its own (a connect to a host behind a cut link blocks for long).
  for (auto& e : to_dial) {
    auto dial = std::make_shared<Dial>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      e->dial = dial;
    }
    rpc::ClientOptions copts;
    copts.token = options_.token;
    const std::string address = e->address;
    std::thread([dial, copts, address] {
      std::shared_ptr<rpc::Client> c;
      std::string error;
      try {
        c = std::make_shared<rpc::Client>(address, copts);
        c->connect();
        c->call(rpc::make_status_request(), std::chrono::seconds(10));
      } catch (const std::exception& ex) {
        c.reset();
        error = ex.what();
      }
      std::lock_guard<std::mutex> lock(dial->mu);
      dial->client = std::move(c);
      dial->error = std::move(error);
      dial->done = true;
    }).detach();
  }
  // 3. Finished dials: connected engines wait as standbys for the next step boundary.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : engines_) {
    if (!e->dial) continue;
    std::shared_ptr<rpc::Client> c;
    std::string error;
    {
      std::lock_guard<std::mutex> dl(e->dial->mu);
      if (!e->dial->done) continue;
      c = std::move(e->dial->client);
      error = std::move(e->dial->error);
    }
    e->dial.reset();
    if (e->state != State::kDialing && e->state != State::kGone) continue;  // removed meanwhile
    if (!c) {
      if (error != e->last_error) log().info("engine replica {}: {}", e->address, error);
      e->last_error = error;
      e->next_dial = std::chrono::steady_clock::now() + options_.redial;
      continue;
    }
    e->client = std::move(c);
    e->state = State::kStandby;
    e->missed = 0;
    e->last_error.clear();
    due_ = true;
    verbose_.add("engine", fmt::format("engine replica {} connected (slot {}); it joins the group "
                                       "at the next step boundary",
                                       e->address, e->slot));
  }
}

std::vector<std::shared_ptr<rpc::Client>> RemoteGroup::train_ranks(bool force,
                                                                   const fs::path& checkpoint) {
  std::lock_guard<std::mutex> forming(form_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!due_ && !force && generation_ > 0) {
      std::vector<std::pair<int, std::shared_ptr<rpc::Client>>> members;
      for (auto& e : engines_) {
        if (e->state == State::kMember) members.emplace_back(e->rank, e->client);
      }
      std::sort(members.begin(), members.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<std::shared_ptr<rpc::Client>> out;
      for (auto& [rank, c] : members) out.push_back(c);
      if (!out.empty()) return out;
    }
  }
  std::string last;
  for (int attempt = 0; attempt < 4; ++attempt) {
    try {
      return form(checkpoint);
    } catch (const Error& e) {
      last = e.what();
      log().warn("forming the engine group failed (attempt {}): {}", attempt + 1, last);
      verbose_.add("engine", "forming the replica group failed: " + last);
      if (e.code() != ErrorCode::kUnavailable) throw;
    }
  }
  fail(ErrorCode::kUnavailable, "the engine replica group could not be formed: " + last);
}

std::vector<std::shared_ptr<rpc::Client>> RemoteGroup::form(const fs::path& checkpoint) {
  const auto forming = std::chrono::steady_clock::now();
  // Candidates: members (they hold the newest weights) and standbys, each answering a status.
  struct Candidate {
    std::shared_ptr<Engine> engine;
    std::shared_ptr<rpc::Client> client;
    bool member = false;
    int64_t version = -1;
  };
  std::vector<Candidate> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : engines_) {
      if ((e->state == State::kMember || e->state == State::kStandby) && e->client)
        candidates.push_back(Candidate{e, e->client, e->state == State::kMember});
    }
  }
  std::vector<Candidate> live;
  for (auto& c : candidates) {
    try {
      rpc::Client::CallResult r =
          c.client->call(rpc::make_status_request(), std::chrono::seconds(5));
      c.version = r.done.body.value("policy_version", int64_t(-1));
      live.push_back(c);
    } catch (const std::exception& ex) {
      std::lock_guard<std::mutex> lock(mu_);
      if (c.engine->client == c.client) {
        mark_gone(*c.engine, ex.what());
      }
    }
  }
  if (live.empty()) fail(ErrorCode::kUnavailable, "no engine replica is connected");
  // Rank 0: the member with the newest weights; without members, the first standby, which loads
  // the newest checkpoint (the members' weights are gone).
  const bool any_member = std::any_of(live.begin(), live.end(), [](auto& c) { return c.member; });
  std::stable_sort(live.begin(), live.end(), [](const Candidate& a, const Candidate& b) {
    if (a.member != b.member) return a.member;
    if (a.member && a.version != b.version) return a.version > b.version;
    return a.engine->slot < b.engine->slot;
  });
  if (!any_member && !checkpoint.empty()) {
    rpc::Client::CallResult r = live[0].client->call(
        method_request(rpc::kMethodLoadCheckpoint, Json{{"dir", checkpoint.string()}}),
        options_.call_timeout);
    live[0].version = r.done.body.value("policy_version", live[0].version);
    verbose_.add("engine",
                 fmt::format("engine replica {} loaded checkpoint {} (policy_version {})",
                             live[0].engine->address, checkpoint.string(), live[0].version));
  }
  const int world = int(live.size());
  const int64_t version = live[0].version;
  int64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = ++generation_;
  }
  const double timeout_s = double(options_.group_timeout.count()) / 1000.0;
  uint16_t port = 0;
  if (world > 1) {
    rpc::Client::CallResult r = live[0].client->call(
        method_request(rpc::kMethodOpenGroup,
                       Json{{"generation", generation}, {"timeout_s", timeout_s}}),
        options_.call_timeout);
    port = uint16_t(r.done.body.value("port", 0));
  }
  const std::string master = engine_host(live[0].engine->address);
  std::vector<std::shared_ptr<rpc::Client>> clients;
  std::vector<rpc::Frame> joins;
  for (int r = 0; r < world; ++r) {
    clients.push_back(live[size_t(r)].client);
    joins.push_back(method_request(rpc::kMethodJoinGroup,
                                   Json{{"generation", generation},
                                        {"rank", r},
                                        {"world_size", world},
                                        {"master_addr", master},
                                        {"master_port", port},
                                        {"bind_addr", engine_host(live[size_t(r)].engine->address)},
                                        {"timeout_s", timeout_s},
                                        {"policy_version", version}}));
  }
  const std::vector<CallOutcome> outcomes =
      call_all(clients, std::move(joins), options_.call_timeout);
  std::vector<Json> replies(static_cast<size_t>(world));
  std::optional<Error> first;
  for (int r = 0; r < world; ++r) {
    const CallOutcome& o = outcomes[size_t(r)];
    if (o.ok) {
      replies[size_t(r)] = o.reply;
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!live[size_t(r)].client->connected() &&
        live[size_t(r)].engine->client == live[size_t(r)].client) {
      mark_gone(*live[size_t(r)].engine, o.error);
    }
    if (!first)
      first = Error(ErrorCode::kUnavailable,
                    fmt::format("join_group on {} (rank {} of {}): {}",
                                live[size_t(r)].engine->address, r, world, o.error));
  }
  if (first) {
    std::lock_guard<std::mutex> lock(mu_);
    due_ = true;
    throw *first;
  }
  double sync_s = 0;
  for (const Json& r : replies) sync_s = std::max(sync_s, r.value("sync_s", 0.0));
  const std::string checksum = replies[0].value("weights_checksum", std::string());
  bool same = true;
  for (const Json& r : replies)
    same = same && r.value("weights_checksum", std::string()) == checksum;
  std::vector<std::shared_ptr<rpc::Client>> out;
  std::string names;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : engines_) {
      if (e->state == State::kMember) {  // not re-joined: a member that was not live any more
        e->state = State::kStandby;
        e->serving = false;
        e->rank = -1;
      }
    }
    for (int r = 0; r < world; ++r) {
      Engine& e = *live[size_t(r)].engine;
      if (e.client != live[size_t(r)].client) continue;  // gone meanwhile
      e.state = State::kMember;
      e.rank = r;
      e.serving = true;
      e.missed = 0;
      e.joined += 1;
      e.policy_version = replies[size_t(r)].value("policy_version", version);
      e.checksum = replies[size_t(r)].value("weights_checksum", std::string());
      out.push_back(e.client);
      names += (r ? ", " : "") + e.address;
    }
    policy_version_ = replies[0].value("policy_version", version);
    due_ = false;
  }
  if (!same) {
    log().error("engine group generation {}: the members' weights differ after joining",
                generation);
  }
  verbose_.add(
      "engine",
      fmt::format("replica group generation {}: {} member(s) [{}], policy_version "
                  "{}, {} (weights_checksum {}); formed in {:.2f} s, {:.2f} s of it taking rank "
                  "0's state",
                  generation, world, names, policy_version_,
                  same ? "the same weights on every member" : "ERROR: the members' weights differ",
                  checksum, seconds_since(forming), sync_s));
  return out;
}

Json RemoteGroup::publish(const std::shared_ptr<rpc::Client>& trainer,
                          const std::string& trainer_address) {
  std::lock_guard<std::mutex> forming(form_mu_);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<Engine>> targets;
  std::vector<std::shared_ptr<rpc::Client>> clients;
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : engines_) {
      if ((e->state == State::kMember || e->state == State::kStandby) && e->client) {
        targets.push_back(e);
        clients.push_back(e->client);
      }
    }
    if (targets.empty())
      fail(ErrorCode::kFailedPrecondition, "no inference replica is connected to push weights to");
    id = ++generation_;
  }
  const double timeout_s = double(options_.group_timeout.count()) / 1000.0;
  const int world = int(targets.size()) + 1;
  const std::string master = engine_host(trainer_address);
  const uint16_t port =
      uint16_t(trainer
                   ->call(method_request(rpc::kMethodOpenPush,
                                         Json{{"push_id", id}, {"timeout_s", timeout_s}}),
                          options_.call_timeout)
                   .done.body.value("port", 0));
  std::vector<std::shared_ptr<rpc::Client>> ranks = {trainer};
  std::vector<std::string> hosts = {master};
  for (size_t i = 0; i < targets.size(); ++i) {
    ranks.push_back(clients[i]);
    hosts.push_back(engine_host(targets[i]->address));
  }
  std::vector<rpc::Frame> pushes;
  for (int r = 0; r < world; ++r) {
    pushes.push_back(method_request(rpc::kMethodPushWeights, Json{{"push_id", id},
                                                                  {"rank", r},
                                                                  {"world_size", world},
                                                                  {"master_addr", master},
                                                                  {"master_port", port},
                                                                  {"bind_addr", hosts[size_t(r)]},
                                                                  {"timeout_s", timeout_s}}));
  }
  const std::vector<CallOutcome> outcomes =
      call_all(ranks, std::move(pushes), options_.call_timeout);
  if (!outcomes[0].ok) {
    fail(ErrorCode::kUnavailable, fmt::format("weight push {}: the trainer {} failed: {}", id,
                                              trainer_address, outcomes[0].error));
  }
  Json reply = outcomes[0].reply;
  const int64_t version = reply.value("policy_version", int64_t(-1));
  const std::string checksum = reply.value("weights_checksum", std::string());
  Json replicas = Json::array();
  int took = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < targets.size(); ++i) {
      Engine& e = *targets[i];
      const CallOutcome& o = outcomes[i + 1];
      const std::string got = o.reply.value("weights_checksum", std::string());
      replicas.push_back(Json{{"address", e.address},
                              {"ok", o.ok && got == checksum},
                              {"swap_wait_s", o.reply.value("swap_wait_s", 0.0)},
                              {"error", o.error}});
      if (e.client != clients[i] || e.state == State::kRemoved) continue;  // changed meanwhile
      if (o.ok && got == checksum) {
        if (e.state != State::kMember) {
          e.joined += 1;
          verbose_.add("engine", fmt::format("inference replica {} holds the trainer's weights "
                                             "(policy_version {}); it serves from now",
                                             e.address, version));
        }
        e.state = State::kMember;
        e.serving = true;
        e.missed = 0;
        e.rank = took++;
        e.policy_version = o.reply.value("policy_version", version);
        e.checksum = got;
        continue;
      }
      const std::string why =
          o.ok ? fmt::format("its weights_checksum {} is not the trainer's {}", got, checksum)
               : o.error;
      if (!e.client->connected()) {
        mark_gone(e, why);
        continue;
      }
      // Connected but not in step: no calls until a push succeeds.
      e.state = State::kStandby;
      e.serving = false;
      e.rank = -1;
      e.last_error = why;
      verbose_.add("engine", fmt::format("weight push {} to inference replica {} failed ({}); it "
                                         "gets no calls until a push succeeds",
                                         id, e.address, why));
    }
    policy_version_ = version;
  }
  reply["replicas"] = replicas;
  reply["push_id"] = id;
  reply["wall_s"] = seconds_since(start);
  log().info("weight push {}: policy_version {} to {} of {} replica(s) in {:.2f} s", id, version,
             took, targets.size(), seconds_since(start));
  return reply;
}

RemoteGroup::Counts RemoteGroup::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counts c;
  for (const auto& e : engines_) {
    if (e->state == State::kRemoved) continue;
    c.registered += 1;
    if (e->state == State::kMember) c.members += 1;
    if (e->state == State::kStandby) c.standbys += 1;
  }
  return c;
}

bool RemoteGroup::has_standbys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(engines_.begin(), engines_.end(),
                     [](const auto& e) { return e->state == State::kStandby && e->client; });
}

std::string RemoteGroup::first_address() const {
  std::lock_guard<std::mutex> lock(mu_);
  const Engine* best = first_member();
  return best ? best->address : std::string();
}

const RemoteGroup::Engine* RemoteGroup::first_member() const {
  const Engine* best = nullptr;  // rank 0, or the lowest rank left when rank 0 is gone
  for (const auto& e : engines_) {
    if (e->state == State::kMember && e->client && (!best || e->rank < best->rank)) best = e.get();
  }
  return best;
}

std::vector<std::shared_ptr<rpc::Client>> RemoteGroup::serving() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<rpc::Client>> out;
  for (const auto& e : engines_) out.push_back(e->serving ? e->client : nullptr);
  return out;
}

std::shared_ptr<rpc::Client> RemoteGroup::first() const {
  std::lock_guard<std::mutex> lock(mu_);
  const Engine* best = first_member();
  return best ? best->client : nullptr;
}

bool RemoteGroup::has_members() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(engines_.begin(), engines_.end(),
                     [](const auto& e) { return e->state == State::kMember; });
}

int64_t RemoteGroup::policy_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_version_;
}

void RemoteGroup::note_step(int64_t policy_version, const std::string& weights_checksum) {
  std::lock_guard<std::mutex> lock(mu_);
  policy_version_ = policy_version;
  for (auto& e : engines_) {
    if (e->state != State::kMember) continue;
    e->policy_version = policy_version;
    if (!weights_checksum.empty()) e->checksum = weights_checksum;
  }
}

int64_t RemoteGroup::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

Json RemoteGroup::json() const {
  static constexpr const char* kStates[] = {"dialing", "standby", "member", "gone", "removed"};
  std::lock_guard<std::mutex> lock(mu_);
  Json engines = Json::array();
  for (const auto& e : engines_) {
    engines.push_back(Json{{"slot", e->slot},
                           {"address", e->address},
                           {"state", kStates[int(e->state)]},
                           {"serving", e->serving},
                           {"rank", e->rank},
                           {"policy_version", e->policy_version},
                           {"weights_checksum", e->checksum},
                           {"missed_heartbeats", e->missed},
                           {"lost", e->lost},
                           {"joined", e->joined},
                           {"last_error", e->last_error}});
  }
  return Json{
      {"generation", generation_}, {"policy_version", policy_version_}, {"engines", engines}};
}

}  // namespace ajet::engine_control
