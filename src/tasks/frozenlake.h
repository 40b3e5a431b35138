// `frozenlake`: a text grid world. The agent starts on S and must reach G without stepping into a
// hole H (F is frozen, walkable). Each reply holds exactly one <action>X</action>, X one of Up,
// Down, Left, Right; the environment answers with the grid (P marks the agent). Moving off the grid
// leaves the agent in place. On a slippery lake a move goes sideways (perpendicular, either side
// equally likely) with probability slip_prob, drawn from a seeded stream per step, so an episode
// replays exactly from (map, env_seed, actions). Reward 1 on reaching G, else 0 (hole, max_steps,
// a reply without exactly one valid action).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/builtin.h"

namespace ajet::tasks {

inline constexpr std::string_view kFrozenLakeSystemPrompt =
    "Walk from S to G on the grid, avoid H. P is you. Reply one move: <action>Up</action>, Down, "
    "Left or Right.";

enum class Move { kUp, kDown, kLeft, kRight };
std::string_view move_name(Move move);
std::optional<Move> move_from_name(std::string_view name);  // exact: "Up", "Down", "Left", "Right"

// The one action of a reply: nullopt unless the text holds exactly one <action>X</action> with a
// valid X.
std::optional<Move> parse_action(std::string_view reply);

struct LakeMap {
  std::vector<std::string> rows;  // square grid of S F H G
  int size() const { return static_cast<int>(rows.size()); }
  char at(int r, int c) const { return rows[static_cast<size_t>(r)][static_cast<size_t>(c)]; }
};

// Checks shape and letters (exactly one S and one G); throws naming the problem.
LakeMap parse_lake_map(const OrderedJson& rows, std::string_view where);
// Length of the shortest S->G walk avoiding holes; nullopt when G cannot be reached.
std::optional<int> shortest_path_length(const LakeMap& map);
// The first move of a shortest walk from (r, c) to G, nullopt when none exists.
std::optional<Move> best_move(const LakeMap& map, int r, int c);

struct StepResult {
  Move taken = Move::kUp;  // the direction actually moved (differs from the action after a slip)
  bool slipped = false;
  bool hit_wall = false;
  bool done = false;
  double reward = 0.0;
  std::string event;  // "moved", "wall", "hole", "goal", "max_steps"
};

class FrozenLakeEnv {
 public:
  FrozenLakeEnv(LakeMap map, double slip_prob, uint64_t env_seed, int max_steps);
  StepResult step(Move action);
  // The grid with P at the agent's cell (rows joined by "\n").
  std::string render() const;
  int row() const { return row_; }
  int col() const { return col_; }
  int steps() const { return steps_; }
  bool done() const { return done_; }
  const std::string& outcome() const { return outcome_; }  // "" while running, else the final event
  const LakeMap& map() const { return map_; }

 private:
  LakeMap map_;
  double slip_prob_;
  uint64_t env_seed_;
  int max_steps_;
  int row_ = 0;
  int col_ = 0;
  int steps_ = 0;
  bool done_ = false;
  std::string outcome_;
};

// The environment of a frozenlake task (metadata.map, slip_prob, max_steps, env_seed), with the
// agent options' overrides.
FrozenLakeEnv make_env(const Task& task, const AgentOptions& options = {});

const BuiltinTask& frozenlake_task();

}  // namespace ajet::tasks
