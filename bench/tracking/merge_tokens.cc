// Tokens a training step must process for a synthetic multi-turn agent, three ways, in one run:
//   (a) one sample per LLM call (no merging: every call repeats the shared history),
//   (b) timeline merging (a linear conversation of N calls is one sample),
//   (c) merging + tree packing of each GRPO group (the group's shared prompt computed once).
// Agent: N = 1, 2, 5, 10, 20 turns, a 256-token system prompt, a 32-token task, about 64 new
// tokens per turn (40 generated + 24 observation, each +-25 %), GRPO groups of 8, several groups.
// Also times merge_episode on long episodes (20 calls of about 2k tokens each). Prints a table and
// appends a dated section to docs/benchmarks.md (not with --smoke or --no-append). Wall time of a
// training step on the `small` model belongs to the trainer's benchmark, which can reuse
// tracking/synthetic.h.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "tracking/merge.h"
#include "tracking/packing.h"
#include "tracking/synthetic.h"

namespace {

using namespace ajet::tracking;

struct Row {
  int turns = 0;
  size_t per_call = 0;  // (a)
  size_t merged = 0;    // (b)
  size_t packed = 0;    // (c)
  size_t samples_a = 0;
  size_t samples_b = 0;
  size_t sequences_c = 0;
  size_t trained = 0;  // loss-mask ones (identical in all three)
};

Row measure(int turns, int groups, int group_size) {
  Row r;
  r.turns = turns;
  synthetic::AgentShape shape;
  shape.turns = turns;
  for (int g = 0; g < groups; ++g) {
    std::vector<Sample> group_samples;
    auto episodes = synthetic::grpo_group(shape, group_size, static_cast<uint64_t>(1000 + g));
    for (size_t e = 0; e < episodes.size(); ++e) {
      for (const CallRecord& c : episodes[e]) {
        r.per_call += c.stream_size();
        ++r.samples_a;
      }
      MergedEpisode m = merge_episode(
          {episodes[e][0].episode_uuid, "task-" + std::to_string(g), 1.0}, episodes[e], {});
      for (Sample& s : m.samples) {
        r.merged += s.token_ids.size();
        r.trained += s.trained_tokens();
        ++r.samples_b;
        group_samples.push_back(std::move(s));
      }
    }
    auto seqs = pack_tree(std::span<const Sample>(group_samples), 1u << 20);
    r.packed += packed_tokens(seqs);
    r.sequences_c += seqs.size();
  }
  return r;
}

struct Timing {
  size_t calls = 0;
  double tokens_per_call = 0;
  double us_per_episode = 0;
  double us_per_call = 0;
};

Timing time_merge(int repeats) {
  synthetic::AgentShape shape;
  shape.turns = 20;
  shape.system_prompt_tokens = 1400;
  shape.generated_tokens_per_turn = 48;
  shape.observation_tokens_per_turn = 32;
  auto episode = synthetic::grpo_group(shape, 1, 77)[0];
  Timing t;
  t.calls = episode.size();
  size_t tokens = 0;
  for (const CallRecord& c : episode) tokens += c.stream_size();
  t.tokens_per_call = static_cast<double>(tokens) / static_cast<double>(t.calls);
  size_t sink = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i)
    sink += merge_episode({"ep", "t", 1.0}, episode, {}).samples.size();
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  if (sink != static_cast<size_t>(repeats)) std::fprintf(stderr, "unexpected sample count\n");
  t.us_per_episode = us / repeats;
  t.us_per_call = t.us_per_episode / static_cast<double>(t.calls);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  ajet::bench::BenchCli cli(
      "merge_tokens",
      "Tokens a training step processes per LLM call, merged, and merged + tree-packed");
  if (auto code = cli.parse(argc, argv)) return *code;
  const bool smoke = cli.smoke();
  const std::vector<int> turns = smoke ? std::vector<int>{1, 2} : std::vector<int>{1, 2, 5, 10, 20};
  const int groups = smoke ? 1 : 4;
  const int group_size = 8;

  std::ostringstream table;
  table << "| turns N | (a) per-call tokens | (b) merged tokens | (c) merged + tree-packed | "
           "(a)/(b) | (b)/(c) | (a)/(c) "
           "| samples (a) -> (b) | trained tokens |\n";
  table << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  std::vector<Row> rows;
  for (int n : turns) {
    Row r = measure(n, groups, group_size);
    rows.push_back(r);
    char line[512];
    std::snprintf(line, sizeof line,
                  "| %d | %zu | %zu | %zu | %.2fx | %.2fx | %.2fx | %zu -> %zu | %zu |\n", n,
                  r.per_call, r.merged, r.packed,
                  static_cast<double>(r.per_call) / static_cast<double>(r.merged),
                  static_cast<double>(r.merged) / static_cast<double>(r.packed),
                  static_cast<double>(r.per_call) / static_cast<double>(r.packed), r.samples_a,
                  r.samples_b, r.trained);
    table << line;
  }
  const Timing t = time_merge(smoke ? 3 : 300);
  char timing[512];
  std::snprintf(
      timing, sizeof timing,
      "merge_episode on %zu calls of %.0f tokens on average: %.1f us per episode, %.2f us per call "
      "(one thread, Release, %u hardware threads, load average (1/5/15 min) %s).\n",
      t.calls, t.tokens_per_call, t.us_per_episode, t.us_per_call,
      std::thread::hardware_concurrency(), ajet::bench::load_average_text().c_str());

  std::cout << table.str() << "\n" << timing;
  const Row& first = rows.front();
  const Row& last = rows.back();
  const double a_over_b_last =
      static_cast<double>(last.per_call) / static_cast<double>(last.merged);
  const double b_over_c_first =
      static_cast<double>(first.merged) / static_cast<double>(first.packed);
  std::cout << "issue targets: (a)/(b) >= 10x at N = " << last.turns << ": " << a_over_b_last
            << (a_over_b_last >= 10 ? " (met)" : " (NOT met)")
            << "; (b)/(c) >= 1.5x at N = 1: " << b_over_c_first
            << (b_over_c_first >= 1.5 ? " (met)" : " (NOT met)") << "\n";
  if (!cli.append()) return 0;

  std::ostringstream md;
  md << "`bench/tracking/merge_tokens`: a synthetic tool-using agent (tracking/synthetic.h) with a "
        "256-token system\n"
     << "prompt, a 32-token task and about 64 new tokens per turn (40 generated + 24 observation, "
        "each +-25 %),\n"
     << groups << " GRPO groups of " << group_size
     << " episodes. Tokens a forward/backward pass processes with\n"
     << "(a) one sample per LLM call, (b) timeline merging, (c) merging + tree packing of each "
        "group (shared\n"
     << "prompt once). Trained tokens (loss mask 1) are the same in all three. Wall time of a "
        "training step on\n"
     << "the `small` model is the trainer benchmark's job.\n\n"
     << table.str() << "\n"
     << timing;
  ajet::bench::append_to_benchmarks("Timeline merging and tree packing: tokens per training step",
                                    md.str());
  return 0;
}
