// A swarm client that dies mid-protocol, for the episode-group tests (multi_server_test.cc): it
// claims a group on two servers and SIGKILLs itself at a chosen point, printing the group's
// episodes first.
//   group_client_probe MODE COORDINATOR_URL PARTICIPANT_URL PREPARE_TIMEOUT
//   MODE: after-coordinator-commit | after-prepare
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "client/multi_episode.h"

int main(int argc, char** argv) {
  using namespace ajet::client;
  if (argc != 5) {
    std::cerr << "usage: group_client_probe MODE COORDINATOR_URL PARTICIPANT_URL PREPARE_TIMEOUT\n";
    return 2;
  }
  const std::string mode = argv[1];
  SwarmClient coordinator(argv[2]), participant(argv[3]);
  MultiEpisode group = MultiEpisode::begin({&coordinator, &participant});
  std::cout << "{\"coordinator\": \"" << group.episode(0).episode_uuid << "\", \"participant\": \""
            << group.episode(1).episode_uuid << "\"}" << std::endl;
  WorkflowOutput a, b;
  a.reward = 1;
  b.reward = 0.5;
  MultiEndOptions options;
  options.prepare_timeout = std::atof(argv[4]);
  if (mode == "after-coordinator-commit") {
    options.after_coordinator_commit = [] { std::raise(SIGKILL); };
    group.end("task-1", {a, b}, options);
  } else if (mode == "after-prepare") {
    GroupRole role;
    role.group_id = group.group_id();
    role.prepare_timeout = options.prepare_timeout;
    coordinator.prepare_end_episode("task-1", group.episode(0).episode_uuid, a, role);
    role.coordinator_url = coordinator.server_url();
    role.coordinator_episode_uuid = group.episode(0).episode_uuid;
    role.coordinator_episode_key = group.episode(0).api_key;
    participant.prepare_end_episode("task-1", group.episode(1).episode_uuid, b, role);
    std::raise(SIGKILL);
  }
  std::cerr << "unknown mode " << mode << "\n";
  return 2;
}
