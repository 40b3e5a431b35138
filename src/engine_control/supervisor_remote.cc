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
  if (remote_) remote_->note_step(policy_version, weights_checksum);
}

void EngineSupervisor::add_engine(const std::string& address) {
  require_remote(remote_.get());
  remote_->add(address);
  verbose_.add("engine", "engine replica " + address + " registered");
}

void EngineSupervisor::remove_engine(const std::string& address) {
  require_remote(remote_.get());
  remote_->remove(address);
}

Json EngineSupervisor::engines_json() const {
  require_remote(remote_.get());
  return remote_->json();
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
    const Json engines = remote_->json();
    int connected = 0, registered = 0;
    for (const Json& e : engines["engines"]) {
      const std::string state = e["state"].get<std::string>();
      if (state == "removed") continue;
      registered += 1;
      if (state == "member" || state == "standby") connected += 1;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!ready) {
      if (connected > 0 && !first_seen) first_seen = now;
      const bool gathered =
          connected > 0 && (connected == registered || now - *first_seen >= options_.gather_grace);
      if (gathered) {
        try {
          const auto members = remote_->train_ranks(true, latest_checkpoint_dir());
          const int64_t version = remote_->policy_version();
          {
            std::lock_guard<std::mutex> lock(mu_);
            phase_ = Phase::kReady;
          }
          const std::string detail =
              fmt::format("engine ready: {} replica(s) on other hosts, policy_version {}",
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
                            options_.boot_timeout.count() / 1000, engines["engines"].dump()));
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
    }
    if (!sleep_unless_stopped(heartbeat)) break;
  }
  set_phase(Phase::kStopping);
}

}  // namespace ajet::engine_control
