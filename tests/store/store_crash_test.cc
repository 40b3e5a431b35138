// SIGKILL safety: a child process writes episodes and acknowledges each one (its uuid on a pipe)
// only after the store says it is committed; the parent kills the child with SIGKILL at an
// arbitrary point, reopens the store and checks that every acknowledged episode is there with all
// its calls.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "common/encoding.h"
#include "store/store.h"

namespace ajet::store {
namespace {

namespace fs = std::filesystem;

constexpr int kCallsPerEpisode = 3;

CallRow make_call(const std::string& uuid, int episode, int index) {
  CallRow c;
  c.episode_uuid = uuid;
  c.call_index = index;
  c.agent_name = "a";
  c.request_json = "{\"n\":" + std::to_string(episode) + "}";
  for (int t = 0; t < 50 + index; ++t) c.prompt_ids.push_back(episode * 1000 + t);
  c.completion_ids = {episode, index, 7};
  c.logprobs = {-0.5f * index, -1.0f, -2.0f};
  c.policy_versions = {episode, episode, episode};
  c.finish_reason = "stop";
  return c;
}

// The child: writes episodes forever (until killed), with up to 32 in flight; acknowledges on
// commit.
[[noreturn]] void run_writer(const fs::path& path, int ack_fd) {
  try {
    Store store(path);
    std::atomic<int> in_flight{0};
    for (int i = 0; i < 1000000; ++i) {
      while (in_flight.load() >= 32) usleep(100);
      std::string uuid = "ep" + std::to_string(i);
      EpisodeRow row;
      row.uuid = uuid;
      row.client_uuid = "c";
      store.upsert_episode(row);
      for (int k = 0; k < kCallsPerEpisode; ++k) store.put_call(make_call(uuid, i, k));
      row.status = kEpisodeFinished;
      row.reward = i * 0.5;
      row.task_id = "t" + std::to_string(i % 7);
      row.ended_at = i;
      ++in_flight;
      store.upsert_episode(row, [&in_flight, ack_fd, uuid](std::exception_ptr error) {
        if (!error) {
          std::string line = uuid + "\n";
          if (write(ack_fd, line.data(), line.size()) != ssize_t(line.size())) _exit(3);
        }
        --in_flight;
      });
    }
  } catch (...) {
    _exit(2);
  }
  _exit(0);
}

// Reads acknowledged uuids until `count` arrived (or the pipe closed).
std::set<std::string> read_acks(FILE* in, size_t count) {
  std::set<std::string> acks;
  char line[128];
  while (acks.size() < count && std::fgets(line, sizeof line, in) != nullptr) {
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    acks.insert(s);
  }
  return acks;
}

class StoreCrash : public ::testing::TestWithParam<size_t> {};

TEST_P(StoreCrash, EveryAcknowledgedEpisodeSurvivesSigkill) {
  fs::path dir = fs::temp_directory_path() / ("ajet_crash_test_" + new_uuid_hex());
  fs::create_directories(dir);
  fs::path path = dir / "store.db";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    run_writer(path, fds[1]);
  }
  close(fds[1]);
  FILE* in = fdopen(fds[0], "r");
  std::set<std::string> acks = read_acks(in, GetParam());
  ASSERT_EQ(acks.size(), GetParam()) << "the writer stopped early";
  kill(pid, SIGKILL);
  // Acks that were already in the pipe when the child died count too.
  for (auto& late : read_acks(in, SIZE_MAX)) acks.insert(late);
  fclose(in);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "child ended with status " << status;

  Store store(path);  // the kernel dropped the child's lock; WAL recovery happens here
  for (const auto& uuid : acks) {
    auto row = store.get_episode(uuid);
    ASSERT_TRUE(row) << uuid << " was acknowledged but is missing";
    EXPECT_EQ(row->status, kEpisodeFinished);
    int i = std::stoi(uuid.substr(2));
    EXPECT_EQ(row->reward, i * 0.5);
    auto calls = store.get_calls(uuid);
    ASSERT_EQ(calls.size(), size_t(kCallsPerEpisode)) << uuid;
    for (int k = 0; k < kCallsPerEpisode; ++k) {
      EXPECT_EQ(calls[k].prompt_ids, make_call(uuid, i, k).prompt_ids);
      EXPECT_EQ(calls[k].logprobs, make_call(uuid, i, k).logprobs);
    }
  }
  // Nothing half-written: every finished episode, acknowledged or not, has all its calls.
  RecoveredState recovered = store.recover();
  EXPECT_GE(recovered.pending_finished.size(), acks.size());
  for (const auto& row : recovered.pending_finished) {
    EXPECT_EQ(store.get_calls(row.uuid).size(), size_t(kCallsPerEpisode)) << row.uuid;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(KillPoints, StoreCrash, ::testing::Values(1, 37, 300));

}  // namespace
}  // namespace ajet::store
