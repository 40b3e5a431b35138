// EngineSupervisor with engine replicas on other hosts (SupervisorOptions::remote_engines): no
// process of its own, a RemoteGroup watched from the supervisor thread. See remote_group.h.
#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "engine_control/remote_group.h"
#include "engine_control/supervisor.h"
#include "episodes/registry.h"
#include "episodes/verbose_log.h"

namespace ajet::engine_control {

namespace {

void require_remote(const RemoteGroup* remote) {
  if (remote == nullptr) {
    fail(ErrorCode::kFailedPrecondition,
         "this front starts its own engine processes; engine replicas on other hosts need "
         "ajet-swarm start --engine-at");
  }
}

}  // namespace

std::vector<std::shared_ptr<rpc::Client>> EngineSupervisor::train_ranks(bool after_failure) {
  if (!remote_) return rank_clients();
  return remote_->train_ranks(after_failure, latest_checkpoint_dir());
}

int64_t EngineSupervisor::group_version() const { return remote_ ? remote_->policy_version() : -1; }

void EngineSupervisor::note_step(int64_t policy_version, const std::string& weights_checksum) {
  if (!remote_) return;
  remote_->note_step(policy_version, weights_checksum);
  if (replicas_) publish_weights(fmt::format("step to policy_version {}", policy_version));
}

std::unique_lock<std::mutex> EngineSupervisor::hold_trainer() {
  return std::unique_lock<std::mutex>(trainer_mu_);
}

bool EngineSupervisor::publish_weights(const std::string& why) {
  // A replica that dies mid-push fails the push for all (the group breaks); it is out of the next
  // try once its connection closed, so the others do not wait a step for the weights.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt > 0) {
      const RemoteGroup::Counts c = replicas_->counts();
      if (c.members + c.standbys == 0) return false;
    }
    if (publish_once(why)) return true;
  }
  return false;
}

bool EngineSupervisor::publish_once(const std::string& why) {
  std::shared_ptr<rpc::Client> trainer = remote_->first();
  const std::string address = remote_->first_address();
  if (!trainer || address.empty()) return false;
  try {
    const Json r = replicas_->publish(trainer, address);
    int took = 0;
    double wait = 0;
    for (const Json& x : r["replicas"]) {
      took += x.value("ok", false) ? 1 : 0;
      wait = std::max(wait, x.value("swap_wait_s", 0.0));
    }
    const int64_t bytes = r.value("bytes", int64_t(0));
    verbose_.add(
        "engine",
        fmt::format("weight push {} ({}): policy_version {} to {} of {} inference "
                    "replica(s): {}; {:.2f} s, of it {:.2f} s waiting for calls in flight",
                    r.value("push_id", int64_t(0)), why, r.value("policy_version", int64_t(-1)),
                    took, r["replicas"].size(),
                    r.value("sent_frozen", false)
                        ? fmt::format("every parameter, {:.1f} MB", double(bytes) / 1e6)
                    : r.value("sent_trainable", false)
                        ? fmt::format("the trained parameters, {:.1f} MB", double(bytes) / 1e6)
                        : std::string("nothing sent (they held these weights)"),
                    r.value("wall_s", 0.0), wait));
    return took > 0;
  } catch (const Error& e) {
    log().warn("weight push ({}): {}", why, e.what());
    verbose_.add("engine", fmt::format("weight push ({}) failed: {}", why, e.what()));
    return false;
  }
}

void EngineSupervisor::add_engine(const std::string& address, bool trainer) {
  require_remote(remote_.get());
  if (trainer && !replicas_) {
    fail(ErrorCode::kFailedPrecondition,
         "this front trains on its serving engines (colocated); trainer ranks apart from them need "
         "ajet-swarm start --trainer-at");
  }
  (trainer || !replicas_ ? *remote_ : *replicas_).add(address);
  verbose_.add("engine", std::string(trainer ? "trainer rank " : "engine replica ") + address +
                             " registered");
}

void EngineSupervisor::remove_engine(const std::string& address) {
  require_remote(remote_.get());
  if (replicas_) {
    try {
      replicas_->remove(address);
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kNotFound) throw;
    }
  }
  remote_->remove(address);
}

Json EngineSupervisor::engines_json() const {
  require_remote(remote_.get());
  if (!replicas_) {
    Json out = remote_->json();
    out["mode"] = "colocated";
    return out;
  }
  Json out = replicas_->json();
  out["mode"] = "disaggregated";
  out["trainers"] = remote_->json();
  return out;
}

void EngineSupervisor::supervise_remote() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) {  // no process to report: start() answers at once
      started_->set_value(0);
      started_.reset();
    }
  }
  const auto heartbeat = std::chrono::milliseconds(250);
  bool ready = false;
  auto boot_deadline = std::chrono::steady_clock::now() + options_.boot_timeout;
  std::optional<std::chrono::steady_clock::time_point> first_seen;
  while (!stop_requested()) {
    remote_->check();
    if (replicas_) replicas_->check();
    const RemoteGroup::Counts counts = remote_->counts();
    const int connected = counts.members + counts.standbys;
    const auto now = std::chrono::steady_clock::now();
    if (!ready) {
      if (connected > 0 && !first_seen) first_seen = now;
      const bool gathered = connected > 0 && (connected == counts.registered ||
                                              now - *first_seen >= options_.gather_grace);
      // Disaggregated: ready once a replica serves the trainers' weights.
      RemoteGroup::Counts replica_counts;
      if (replicas_) replica_counts = replicas_->counts();
      const bool replica_up = !replicas_ || replica_counts.standbys + replica_counts.members > 0;
      if (gathered && replica_up) {
        try {
          auto hold = hold_trainer();
          const auto members = remote_->train_ranks(true, latest_checkpoint_dir());
          if (replicas_ && !publish_weights("the first push")) {
            fail(ErrorCode::kUnavailable, "no inference replica took the trainers' weights");
          }
          const int64_t version = remote_->policy_version();
          {
            std::lock_guard<std::mutex> lock(mu_);
            phase_ = Phase::kReady;
          }
          const std::string detail =
              replicas_
                  ? fmt::format(
                        "engine ready: {} trainer rank(s) and {} inference "
                        "replica(s) on other hosts, policy_version {}",
                        members.size(), replicas_->counts().members, version)
                  : fmt::format("engine ready: {} replica(s) on other hosts, policy_version {}",
                                members.size(), version);
          try {
            registry_.engine_ready(detail,
                                   version >= 0 ? std::optional<int64_t>(version) : std::nullopt);
          } catch (const Error& e) {
            log().info("engine replicas ready, but the registry moved on ({})", e.what());
          }
          verbose_.add("engine", detail);
          ready = true;
        } catch (const Error& e) {
          log().warn("forming the replica group: {}", e.what());
        }
      } else if (now > boot_deadline) {
        give_up(fmt::format("no engine replica answered within {} s (engines: {})",
                            options_.boot_timeout.count() / 1000, engines_json().dump()));
        return;
      }
    } else if (!remote_->has_members()) {
      // Every member is gone: the group's weights with them; the next group starts from the
      // newest checkpoint.
      {
        std::lock_guard<std::mutex> lock(mu_);
        phase_ = Phase::kBooting;
        restarts_ += 1;
      }
      const std::string detail =
          "every engine replica is gone; waiting for one to come back (it continues from the "
          "newest checkpoint)";
      try {
        registry_.engine_restarting(detail);
      } catch (const Error&) {
      }
      verbose_.add("engine", detail);
      ready = false;
      first_seen.reset();
      boot_deadline = now + options_.boot_timeout;
    } else if (replicas_ && replicas_->has_standbys()) {
      // A replica connected (or came back) between steps: it gets the weights now, unless a step
      // is training (its push after the step includes the replica).
      std::unique_lock<std::mutex> hold(trainer_mu_, std::try_to_lock);
      if (hold.owns_lock()) publish_weights("a replica connected");
    }
    if (!sleep_unless_stopped(heartbeat)) break;
  }
  set_phase(Phase::kStopping);
}

}  // namespace ajet::engine_control
