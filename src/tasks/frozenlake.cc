#include "tasks/frozenlake.h"

#include <array>
#include <deque>

#include "common/error.h"
#include "tasks/generator.h"

namespace ajet::tasks {

namespace {

constexpr std::array<Move, 4> kMoves = {Move::kDown, Move::kRight, Move::kUp, Move::kLeft};

void delta(Move m, int& dr, int& dc) {
  dr = m == Move::kDown ? 1 : m == Move::kUp ? -1 : 0;
  dc = m == Move::kRight ? 1 : m == Move::kLeft ? -1 : 0;
}

// Sideways of a move: slipping turns it into one of these.
std::array<Move, 2> perpendicular(Move m) {
  if (m == Move::kUp || m == Move::kDown) return {Move::kLeft, Move::kRight};
  return {Move::kUp, Move::kDown};
}

struct LakeParams {
  int64_t size = 4;
  double hole_fraction = 0.2;
  bool slippery = false;
  double slip_prob = 2.0 / 3.0;
  int64_t max_steps = 0;  // 0: 4 * size
  double holdout_fraction = kDefaultHoldoutFraction;
};

LakeParams read_lake_params(const OrderedJson& json) {
  Params p(json, "frozenlake",
           {"size", "hole_fraction", "slippery", "slip_prob", "max_steps", "holdout_fraction"});
  LakeParams c;
  c.size = p.get_int("size", c.size, 2, 16);
  c.hole_fraction = p.get_number("hole_fraction", c.hole_fraction, 0, 0.8);
  c.slippery = p.get_bool("slippery", c.slippery);
  c.slip_prob = p.get_number("slip_prob", c.slip_prob, 0, 1);
  c.max_steps = p.get_int("max_steps", 4 * c.size, 1, 10000);
  c.holdout_fraction = p.get_number("holdout_fraction", c.holdout_fraction, 0, 1);
  return c;
}

// Distance to G from every cell over non-hole cells (-1: unreachable).
std::vector<std::vector<int>> distances_to_goal(const LakeMap& map) {
  const int n = map.size();
  std::vector<std::vector<int>> dist(static_cast<size_t>(n),
                                     std::vector<int>(static_cast<size_t>(n), -1));
  std::deque<std::pair<int, int>> queue;
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) {
      if (map.at(r, c) == 'G') {
        dist[static_cast<size_t>(r)][static_cast<size_t>(c)] = 0;
        queue.emplace_back(r, c);
      }
    }
  }
  while (!queue.empty()) {
    auto [r, c] = queue.front();
    queue.pop_front();
    for (Move m : kMoves) {
      int dr = 0;
      int dc = 0;
      delta(m, dr, dc);
      const int nr = r + dr;
      const int nc = c + dc;
      if (nr < 0 || nc < 0 || nr >= n || nc >= n || map.at(nr, nc) == 'H') continue;
      int& d = dist[static_cast<size_t>(nr)][static_cast<size_t>(nc)];
      if (d >= 0) continue;
      d = dist[static_cast<size_t>(r)][static_cast<size_t>(c)] + 1;
      queue.emplace_back(nr, nc);
    }
  }
  return dist;
}

std::pair<int, int> find_cell(const LakeMap& map, char what) {
  for (int r = 0; r < map.size(); ++r) {
    for (int c = 0; c < map.size(); ++c) {
      if (map.at(r, c) == what) return {r, c};
    }
  }
  return {0, 0};
}

const OrderedJson& meta_field(const Task& task, std::string_view key) {
  auto it = task.metadata.find(key);
  if (it == task.metadata.end() || it->is_null())
    invalid_argument("frozenlake task " + task.task_id + ": metadata needs '" + std::string(key) +
                     "'");
  return *it;
}

// Actions in free text: the <action> tags when there are any, else words split at spaces/commas.
std::optional<std::vector<Move>> parse_action_list(std::string_view text) {
  std::vector<Move> out;
  if (text.find("<action>") != std::string_view::npos) {
    size_t pos = 0;
    while (true) {
      size_t b = text.find("<action>", pos);
      if (b == std::string_view::npos) break;
      size_t e = text.find("</action>", b);
      if (e == std::string_view::npos) return std::nullopt;
      auto m = move_from_name(trim(text.substr(b + 8, e - b - 8)));
      if (!m) return std::nullopt;
      out.push_back(*m);
      pos = e + 9;
    }
    return out;
  }
  std::string word;
  auto flush = [&]() -> bool {
    if (word.empty()) return true;
    auto m = move_from_name(word);
    word.clear();
    if (!m) return false;
    out.push_back(*m);
    return true;
  };
  for (char c : text) {
    if (c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r') {
      if (!flush()) return std::nullopt;
    } else {
      word += c;
    }
  }
  if (!flush()) return std::nullopt;
  return out;
}

Judgement outcome_judgement(const FrozenLakeEnv& env, const std::vector<std::string>& actions,
                            std::string reason_if_running) {
  Judgement j;
  j.reason = env.done() ? env.outcome() : std::move(reason_if_running);
  j.reward = env.outcome() == "goal" ? 1.0 : 0.0;
  j.is_success = j.reward == 1.0;
  j.details["steps"] = env.steps();
  j.details["done"] = env.done();
  j.details["position"] = OrderedJson::array({env.row(), env.col()});
  j.details["observation"] = env.render();
  j.details["actions"] = actions;
  return j;
}

text::ChatMessage action_message(Move m) {
  return text::ChatMessage{.role = text::Role::kAssistant,
                           .content = "<action>" + std::string(move_name(m)) + "</action>"};
}

class FrozenLakeTask final : public BuiltinTask {
 public:
  std::string_view name() const override { return "frozenlake"; }
  std::vector<std::string> error_kinds() const override {
    return {"wrong_move", "random", "bad_format"};
  }

  std::vector<Task> generate(const GenerateOptions& options) const override {
    const LakeParams p = read_lake_params(options.params);
    return generate_split("frozenlake", options, p.holdout_fraction,
                          [&p](Rng& rng) { return sample(p, rng); });
  }

  Judgement judge_answer(const Task& task, std::string_view answer,
                         const AgentOptions& options) const override {
    FrozenLakeEnv env = make_env(task, options);
    std::optional<std::vector<Move>> moves = parse_action_list(answer);
    if (!moves) {
      Judgement j = outcome_judgement(env, {}, "format_error");
      j.reason = "format_error";
      return j;
    }
    std::vector<std::string> names;
    for (Move m : *moves) {
      if (env.done()) break;
      env.step(m);
      names.emplace_back(move_name(m));
    }
    return outcome_judgement(env, names, "not_finished");
  }

  Judgement judge_episode(const Task& task, const std::vector<text::ChatMessage>& messages,
                          const AgentOptions& options) const override {
    FrozenLakeEnv env = make_env(task, options);
    std::vector<std::string> names;
    for (const text::ChatMessage& m : messages) {
      if (m.role != text::Role::kAssistant) continue;
      if (env.done()) break;
      std::optional<Move> move = parse_action(m.content);
      if (!move) {
        Judgement j = outcome_judgement(env, names, "format_error");
        j.reason = "format_error";
        return j;
      }
      env.step(*move);
      names.emplace_back(move_name(*move));
    }
    return outcome_judgement(env, names, "not_finished");
  }

  Demo make_demo(const Task& task, std::string_view kind, Rng& rng) const override {
    if (kind != "correct" && kind != "wrong_move" && kind != "random" && kind != "bad_format") {
      invalid_argument(
          "frozenlake demo kind must be correct, wrong_move, random or bad_format, got '" +
          std::string(kind) + "'");
    }
    make_env(task);  // validates the task before anything is played
    const uint64_t base_seed = task_seed(task);
    const bool slippery = slip_prob_of(task) > 0;
    std::string k(kind);
    Demo d;
    if (k == "correct") {
      // On a slippery lake the best walk can still fall in; replay other seeds until one succeeds.
      for (int attempt = 0; attempt < (slippery ? 256 : 1); ++attempt) {
        const uint64_t seed =
            attempt == 0 ? base_seed : mix_seed(base_seed, static_cast<uint64_t>(attempt));
        d = play(task, seed, rng, -1, false);
        if (d.judgement.reward == 1.0) return finish(d, "correct");
      }
      k = "wrong_move";  // no lucky seed found: say honestly that this demo is not a success
    }
    if (k == "wrong_move") {
      for (int attempt = 0; attempt < 20; ++attempt) {
        FrozenLakeEnv probe = make_env(task, AgentOptions{.env_seed = base_seed});
        const int at = static_cast<int>(
            rng.uniform_int(0, std::max(0, shortest_path_length(probe.map()).value_or(1) - 1)));
        d = play(task, base_seed, rng, at, false);
        if (d.judgement.reward < 1.0) return finish(d, "wrong_move");
      }
      k = "random";
    }
    if (k == "random") {
      for (int attempt = 0; attempt < 100; ++attempt) {
        d = play(task, base_seed, rng, -1, true);
        if (d.judgement.reward < 1.0) return finish(d, "random");
      }
    }
    // bad_format: a few good moves, then a reply without exactly one valid action.
    FrozenLakeEnv probe = make_env(task, AgentOptions{.env_seed = base_seed});
    const int before = static_cast<int>(
        rng.uniform_int(0, std::max(0, shortest_path_length(probe.map()).value_or(1) - 1)));
    d = play(task, base_seed, rng, -1, false, before);
    static const std::vector<std::string> kBad = {
        "Down", "<action>Jump</action>", "<action>Up</action><action>Left</action>", "I go right."};
    d.messages.push_back(
        text::ChatMessage{.role = text::Role::kAssistant, .content = rng.pick(kBad)});
    d.judgement = judge_episode(task, d.messages, AgentOptions{.env_seed = d.env_seed});
    return finish(d, "bad_format");
  }

 protected:
  EpisodeResult run_episode_unchecked(const Task& task, ChatModel& model,
                                      const AgentOptions& options) const override {
    EpisodeResult r;
    FrozenLakeEnv env = make_env(task, options);
    r.messages = initial_messages(task, kFrozenLakeSystemPrompt);
    r.tools = task_tools(task);
    std::string termination;
    std::string error;
    int64_t turns = 0;
    int64_t slips = 0;
    std::vector<std::string> actions;
    while (termination.empty()) {
      std::optional<ModelReply> reply = call_model(model, r.messages, r.tools, termination, error);
      if (!reply) break;
      ++turns;
      r.messages.push_back(reply->message);
      std::optional<Move> move = parse_action(r.messages.back().content);
      if (!move) {
        termination = reply->finish_reason == "length" ? "truncated" : "format_error";
        break;
      }
      const StepResult s = env.step(*move);
      actions.emplace_back(move_name(*move));
      slips += s.slipped ? 1 : 0;
      if (s.done) {
        termination = s.event;
        break;
      }
      r.messages.push_back(text::ChatMessage{.role = text::Role::kUser, .content = env.render()});
    }
    r.output.reward = env.outcome() == "goal" ? 1.0 : 0.0;
    r.output.is_success = r.output.reward == 1.0;
    OrderedJson& md = r.output.metadata;
    md["task_id"] = task.task_id;
    md["env_type"] = "frozenlake";
    md["termination"] = termination;
    md["turns"] = turns;
    md["steps"] = env.steps();
    md["actions"] = actions;
    md["env_seed"] = options.env_seed ? *options.env_seed : task_seed(task);
    if (!error.empty()) md["error"] = error;
    OrderedJson& lm = r.output.log_metrics;
    lm["success"] = r.output.is_success ? 1.0 : 0.0;
    lm["steps"] = static_cast<double>(env.steps());
    lm["fell_in_hole"] = termination == "hole" ? 1.0 : 0.0;
    lm["format_error"] = termination == "format_error" ? 1.0 : 0.0;
    lm["slips"] = static_cast<double>(slips);
    return r;
  }

 private:
  static uint64_t task_seed(const Task& task) {
    auto it = task.metadata.find("env_seed");
    if (it != task.metadata.end() && it->is_number_integer()) return it->get<uint64_t>();
    return 0;
  }
  static double slip_prob_of(const Task& task) {
    auto it = task.metadata.find("slip_prob");
    return it != task.metadata.end() && it->is_number() ? it->get<double>() : 0.0;
  }

  Demo finish(Demo d, const std::string& kind) const {
    d.kind = kind;
    return d;
  }

  // Plays a demo: best moves, except a bad move at step `wrong_at` (into a hole when one is next
  // to the agent) or random moves throughout; stops after `max_moves` moves when >= 0.
  Demo play(const Task& task, uint64_t seed, Rng& rng, int wrong_at, bool random_moves,
            int max_moves = -1) const {
    Demo d;
    d.task_id = task.task_id;
    d.env_type = "frozenlake";
    d.env_seed = seed;
    d.messages = initial_messages(task, kFrozenLakeSystemPrompt);
    d.tools = task_tools(task);
    FrozenLakeEnv env = make_env(task, AgentOptions{.env_seed = seed});
    int moves = 0;
    while (!env.done() && (max_moves < 0 || moves < max_moves)) {
      Move m = best_move(env.map(), env.row(), env.col()).value_or(Move::kDown);
      if (random_moves) {
        m = kMoves[static_cast<size_t>(rng.uniform_int(0, 3))];
      } else if (moves == wrong_at) {
        std::vector<Move> into_hole;
        std::vector<Move> others;
        for (Move cand : kMoves) {
          int dr = 0;
          int dc = 0;
          delta(cand, dr, dc);
          const int nr = env.row() + dr;
          const int nc = env.col() + dc;
          const bool inside = nr >= 0 && nc >= 0 && nr < env.map().size() && nc < env.map().size();
          if (inside && env.map().at(nr, nc) == 'H') into_hole.push_back(cand);
          if (cand != m) others.push_back(cand);
        }
        m = !into_hole.empty() ? rng.pick(into_hole) : rng.pick(others);
      }
      d.messages.push_back(action_message(m));
      env.step(m);
      ++moves;
      if (!env.done())
        d.messages.push_back(text::ChatMessage{.role = text::Role::kUser, .content = env.render()});
    }
    d.judgement = judge_episode(task, d.messages, AgentOptions{.env_seed = seed});
    return d;
  }

  static SampledProblem sample(const LakeParams& p, Rng& rng) {
    const int n = static_cast<int>(p.size);
    for (int attempt = 0; attempt < 10000; ++attempt) {
      LakeMap map;
      for (int r = 0; r < n; ++r) {
        std::string row;
        for (int c = 0; c < n; ++c) {
          if (r == 0 && c == 0) {
            row += 'S';
          } else if (r == n - 1 && c == n - 1) {
            row += 'G';
          } else {
            row += rng.bernoulli(p.hole_fraction) ? 'H' : 'F';
          }
        }
        map.rows.push_back(row);
      }
      std::optional<int> path = shortest_path_length(map);
      if (!path) continue;
      SampledProblem out;
      std::string joined;
      for (const std::string& row : map.rows) joined += (joined.empty() ? "" : "/") + row;
      const double slip = p.slippery ? p.slip_prob : 0.0;
      out.key = "frozenlake:" + joined + (slip > 0 ? ":slip=" + std::to_string(slip) : "");
      Task& t = out.task;
      t.metadata["map"] = map.rows;
      t.metadata["size"] = n;
      t.metadata["slippery"] = slip > 0;
      t.metadata["slip_prob"] = slip;
      t.metadata["max_steps"] = p.max_steps;
      t.metadata["env_seed"] = stable_hash(out.key) >> 11;  // fits a JSON number exactly
      t.metadata["shortest_path"] = *path;
      int64_t holes = 0;
      for (const std::string& row : map.rows) {
        for (char c : row) holes += c == 'H' ? 1 : 0;
      }
      t.metadata["holes"] = holes;
      t.metadata["difficulty"] = 1 + (slip > 0 ? 1 : 0) + (*path > 2 * (n - 1) ? 1 : 0);
      FrozenLakeEnv env(map, slip, 0, static_cast<int>(p.max_steps));
      t.main_query = env.render();
      t.init_messages = OrderedJson::array();
      t.init_messages.push_back(
          OrderedJson{{"role", "system"}, {"content", std::string(kFrozenLakeSystemPrompt)}});
      t.init_messages.push_back(OrderedJson{{"role", "user"}, {"content", t.main_query}});
      return out;
    }
    invalid_argument("frozenlake: no solvable map found; lower hole_fraction");
  }
};

}  // namespace

std::string_view move_name(Move move) {
  switch (move) {
    case Move::kUp: return "Up";
    case Move::kDown: return "Down";
    case Move::kLeft: return "Left";
    case Move::kRight: return "Right";
  }
  return "Up";
}

std::optional<Move> move_from_name(std::string_view name) {
  if (name == "Up") return Move::kUp;
  if (name == "Down") return Move::kDown;
  if (name == "Left") return Move::kLeft;
  if (name == "Right") return Move::kRight;
  return std::nullopt;
}

std::optional<Move> parse_action(std::string_view reply) {
  size_t count = 0;
  std::optional<std::string> inner = extract_tagged(reply, "<action>", "</action>", count);
  if (!inner || count != 1) return std::nullopt;
  return move_from_name(trim(*inner));
}

LakeMap parse_lake_map(const OrderedJson& rows, std::string_view where) {
  const std::string w(where);
  if (!rows.is_array() || rows.empty())
    invalid_argument(w + ": map must be a non-empty array of row strings");
  LakeMap map;
  int starts = 0;
  int goals = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!rows[r].is_string())
      invalid_argument(w + ": map[" + std::to_string(r) + "] must be a string");
    std::string row = rows[r].get<std::string>();
    if (row.size() != rows.size()) {
      invalid_argument(w + ": map must be square; row " + std::to_string(r) + " has " +
                       std::to_string(row.size()) + " cells for " + std::to_string(rows.size()) +
                       " rows");
    }
    for (char c : row) {
      if (c != 'S' && c != 'F' && c != 'H' && c != 'G') {
        invalid_argument(w + ": map[" + std::to_string(r) + "] has '" + std::string(1, c) +
                         "'; cells are S F H G");
      }
      starts += c == 'S';
      goals += c == 'G';
    }
    map.rows.push_back(std::move(row));
  }
  if (starts != 1 || goals != 1) invalid_argument(w + ": map needs exactly one S and one G");
  return map;
}

std::optional<int> shortest_path_length(const LakeMap& map) {
  auto [r, c] = find_cell(map, 'S');
  const int d = distances_to_goal(map)[static_cast<size_t>(r)][static_cast<size_t>(c)];
  if (d < 0) return std::nullopt;
  return d;
}

std::optional<Move> best_move(const LakeMap& map, int r, int c) {
  const auto dist = distances_to_goal(map);
  const int here = dist[static_cast<size_t>(r)][static_cast<size_t>(c)];
  if (here <= 0) return std::nullopt;
  for (Move m : kMoves) {  // fixed preference: Down, Right, Up, Left
    int dr = 0;
    int dc = 0;
    delta(m, dr, dc);
    const int nr = r + dr;
    const int nc = c + dc;
    if (nr < 0 || nc < 0 || nr >= map.size() || nc >= map.size()) continue;
    if (dist[static_cast<size_t>(nr)][static_cast<size_t>(nc)] == here - 1) return m;
  }
  return std::nullopt;
}

FrozenLakeEnv::FrozenLakeEnv(LakeMap map, double slip_prob, uint64_t env_seed, int max_steps)
    : map_(std::move(map)), slip_prob_(slip_prob), env_seed_(env_seed), max_steps_(max_steps) {
  auto [r, c] = find_cell(map_, 'S');
  row_ = r;
  col_ = c;
}

StepResult FrozenLakeEnv::step(Move action) {
  StepResult s;
  s.taken = action;
  if (done_) {
    s.done = true;
    s.event = outcome_;
    s.reward = outcome_ == "goal" ? 1.0 : 0.0;
    return s;
  }
  ++steps_;
  if (slip_prob_ > 0) {
    // One stream per step: replaying the same actions with the same seed slips the same way.
    Rng rng(mix_seed(env_seed_, static_cast<uint64_t>(steps_)));
    if (rng.bernoulli(slip_prob_)) {
      s.slipped = true;
      s.taken = perpendicular(action)[rng.bernoulli(0.5) ? 1 : 0];
    }
  }
  int dr = 0;
  int dc = 0;
  delta(s.taken, dr, dc);
  const int nr = row_ + dr;
  const int nc = col_ + dc;
  if (nr < 0 || nc < 0 || nr >= map_.size() || nc >= map_.size()) {
    s.hit_wall = true;
  } else {
    row_ = nr;
    col_ = nc;
  }
  const char cell = map_.at(row_, col_);
  s.event = s.hit_wall ? "wall" : "moved";
  if (cell == 'H') {
    s.event = "hole";
  } else if (cell == 'G') {
    s.event = "goal";
    s.reward = 1.0;
  } else if (steps_ >= max_steps_) {
    s.event = "max_steps";
  }
  if (s.event == "hole" || s.event == "goal" || s.event == "max_steps") {
    s.done = true;
    done_ = true;
    outcome_ = s.event;
  }
  return s;
}

std::string FrozenLakeEnv::render() const {
  std::string out;
  for (int r = 0; r < map_.size(); ++r) {
    if (r > 0) out += '\n';
    std::string row = map_.rows[static_cast<size_t>(r)];
    if (r == row_) row[static_cast<size_t>(col_)] = 'P';
    out += row;
  }
  return out;
}

FrozenLakeEnv make_env(const Task& task, const AgentOptions& options) {
  const std::string where = "frozenlake task " + task.task_id + " metadata";
  LakeMap map = parse_lake_map(meta_field(task, "map"), where);
  double slip = 0;
  if (auto it = task.metadata.find("slip_prob"); it != task.metadata.end() && it->is_number())
    slip = it->get<double>();
  if (auto it = task.metadata.find("slippery");
      it != task.metadata.end() && it->is_boolean() && !it->get<bool>())
    slip = 0;
  int64_t max_steps = 4 * map.size();
  if (auto it = task.metadata.find("max_steps");
      it != task.metadata.end() && it->is_number_integer())
    max_steps = it->get<int64_t>();
  if (options.max_steps) max_steps = *options.max_steps;
  if (max_steps < 1) invalid_argument(where + ": max_steps must be >= 1");
  uint64_t seed = 0;
  if (auto it = task.metadata.find("env_seed");
      it != task.metadata.end() && it->is_number_integer())
    seed = it->get<uint64_t>();
  if (options.env_seed) seed = *options.env_seed;
  return FrozenLakeEnv(std::move(map), slip, seed, static_cast<int>(max_steps));
}

const BuiltinTask& frozenlake_task() {
  static const FrozenLakeTask task;
  return task;
}

}  // namespace ajet::tasks
