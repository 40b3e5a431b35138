// The frozenlake environment: moves, walls, holes, goal, the step limit, slipping from a seeded
// stream (replayable, at the configured rate), rendering, and shortest paths.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "tasks/frozenlake.h"

namespace ajet::tasks {
namespace {

LakeMap lake(std::vector<std::string> rows) { return parse_lake_map(OrderedJson(rows), "test"); }

TEST(FrozenLakeEnv, MovesWallsHolesAndGoal) {
  FrozenLakeEnv env(lake({"SFF", "FHF", "FFG"}), 0.0, 1, 20);
  EXPECT_EQ(env.render(), "PFF\nFHF\nFFG");
  StepResult s = env.step(Move::kUp);  // off the grid: stays
  EXPECT_TRUE(s.hit_wall);
  EXPECT_EQ(s.event, "wall");
  EXPECT_FALSE(s.done);
  EXPECT_EQ(env.row(), 0);
  EXPECT_EQ(env.col(), 0);
  EXPECT_EQ(env.steps(), 1);
  env.step(Move::kLeft);
  EXPECT_EQ(env.col(), 0);
  env.step(Move::kRight);
  EXPECT_EQ(env.render(), "SPF\nFHF\nFFG");
  s = env.step(Move::kDown);
  EXPECT_EQ(s.event, "hole");
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(env.outcome(), "hole");
  // A finished episode stays finished.
  s = env.step(Move::kRight);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(env.steps(), 4);

  FrozenLakeEnv win(lake({"SFF", "FHF", "FFG"}), 0.0, 1, 20);
  for (Move m : {Move::kRight, Move::kRight, Move::kDown}) EXPECT_FALSE(win.step(m).done);
  s = win.step(Move::kDown);
  EXPECT_EQ(s.event, "goal");
  EXPECT_EQ(s.reward, 1.0);
  EXPECT_EQ(win.outcome(), "goal");
}

TEST(FrozenLakeEnv, StepLimit) {
  FrozenLakeEnv env(lake({"SF", "FG"}), 0.0, 1, 3);
  env.step(Move::kUp);
  env.step(Move::kUp);
  StepResult s = env.step(Move::kUp);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.event, "max_steps");
  EXPECT_EQ(env.outcome(), "max_steps");
}

TEST(FrozenLakeEnv, SlipsAreSeededSidewaysAndAtTheConfiguredRate) {
  const LakeMap map = lake({"SFFFFFFF", "FFFFFFFF", "FFFFFFFF", "FFFFFFFF", "FFFFFFFF", "FFFFFFFF",
                            "FFFFFFFF", "FFFFFFFG"});
  int slips = 0;
  int steps = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    FrozenLakeEnv a(map, 0.5, seed, 1000);
    FrozenLakeEnv b(map, 0.5, seed, 1000);
    for (int i = 0; i < 10; ++i) {
      // Right from the top row: a slip goes Up (a wall) or Down, never Left.
      const Move action = a.row() == 0 ? Move::kRight : Move::kUp;
      StepResult x = a.step(action);
      StepResult y = b.step(action);
      EXPECT_EQ(x.taken, y.taken);  // same seed, same actions: same slips
      EXPECT_EQ(x.slipped, y.slipped);
      if (x.slipped) {
        ++slips;
        if (action == Move::kRight) {
          EXPECT_TRUE(x.taken == Move::kUp || x.taken == Move::kDown);
        }
        if (action == Move::kUp) {
          EXPECT_TRUE(x.taken == Move::kLeft || x.taken == Move::kRight);
        }
      } else {
        EXPECT_EQ(x.taken, action);
      }
      ++steps;
      if (a.done()) break;
    }
  }
  // Binomial(~3000, 0.5): sd ~ 27; 6 sd.
  EXPECT_NEAR(static_cast<double>(slips) / steps, 0.5,
              6 * 0.5 / std::sqrt(static_cast<double>(steps)));

  FrozenLakeEnv still(map, 0.0, 1, 1000);
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(still.step(Move::kDown).slipped);
}

TEST(FrozenLakeEnv, ShortestPathsAndBestMoves) {
  const LakeMap map = lake({"SFFF", "HHHF", "FFFF", "FHHG"});
  EXPECT_EQ(shortest_path_length(map), 6);
  EXPECT_EQ(best_move(map, 0, 0), Move::kRight);
  EXPECT_EQ(best_move(map, 0, 3), Move::kDown);
  EXPECT_FALSE(best_move(map, 3, 3).has_value());  // already at G
  EXPECT_FALSE(shortest_path_length(lake({"SH", "HG"})).has_value());
  // Following best moves from S always reaches G in exactly the shortest number of steps.
  FrozenLakeEnv env(map, 0.0, 1, 100);
  while (!env.done()) env.step(*best_move(map, env.row(), env.col()));
  EXPECT_EQ(env.outcome(), "goal");
  EXPECT_EQ(env.steps(), 6);
}

TEST(FrozenLakeEnv, BadMapsAreNamed) {
  EXPECT_THROW(lake({"SF", "FGF"}), Error);
  EXPECT_THROW(lake({"SX", "FG"}), Error);
  EXPECT_THROW(lake({"FF", "FG"}), Error);
  try {
    lake({"SF", "FQ"});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("map[1] has 'Q'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ajet::tasks
