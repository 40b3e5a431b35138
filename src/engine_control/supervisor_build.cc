// EngineSupervisor::build_engine: builds the ajet-engine target of a synced source tree (cmake
// configure + build, output captured to engine-build.log). A failure keeps the previous engine and
// puts the compiler's first errors into the build note that engine_status_detail shows.
#include <fmt/format.h>
#include <unistd.h>

#include <fstream>

#include "common/subprocess.h"
#include "engine_control/supervisor.h"
#include "episodes/registry.h"
#include "episodes/verbose_log.h"

namespace ajet::engine_control {

namespace fs = std::filesystem;

namespace {

// The compiler's first error lines, else the last lines of the output.
std::string error_summary(const std::string& output) {
  std::vector<std::string> lines, errors;
  size_t pos = 0;
  while (pos < output.size()) {
    size_t nl = output.find('\n', pos);
    if (nl == std::string::npos) nl = output.size();
    std::string line = output.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    if (line.find("error") != std::string::npos || line.find("Error") != std::string::npos)
      errors.push_back(line);
    lines.push_back(std::move(line));
  }
  const std::vector<std::string>& pick = errors.empty() ? lines : errors;
  std::string out;
  size_t begin = errors.empty() && pick.size() > 8 ? pick.size() - 8 : 0;
  for (size_t i = begin; i < pick.size() && i < begin + 8; ++i) {
    if (!out.empty()) out += " | ";
    out += pick[i].substr(0, 400);
  }
  return out.empty() ? "(no output)" : out;
}

}  // namespace

fs::path EngineSupervisor::build_engine(const EngineLaunch& launch, Session& session) {
  (void)session;
  fs::path previous = options_.default_engine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!last_good_binary_.empty()) previous = last_good_binary_;
    phase_ = Phase::kBuilding;
  }
  const fs::path log_path = launch.run_dir / "engine-build.log";
  std::string detail = fmt::format("building the synced code in {} (target ajet-engine; log {})",
                                   launch.code_root.string(), log_path.string());
  registry_.set_status_detail(detail);
  verbose_.add("engine", detail);

  std::vector<std::string> configure = {"cmake",
                                        "-S",
                                        launch.code_root.string(),
                                        "-B",
                                        launch.build_dir.string(),
                                        "-DCMAKE_BUILD_TYPE=Release",
                                        "-DAJET_BUILD_TESTS=OFF",
                                        "-DAJET_BUILD_BENCH=OFF",
                                        "-DAJET_BUILD_FUZZ=OFF"};
  if (find_on_path("ninja") && !fs::exists(launch.build_dir / "CMakeCache.txt")) {
    configure.insert(configure.begin() + 1, {"-G", "Ninja"});
  }
  // Every upload unpacks into a new directory with an empty build directory, so without a compiler
  // cache each sync rebuilds the whole engine (minutes) even for a one-line change. With ccache on
  // the PATH (scripts/setup.sh installs it), paths under the upload's directory are hashed relative
  // to it, so the unchanged files of the next upload are cache hits (docs/swarm-server.md, "Remote
  // code sync").
  std::vector<std::pair<std::string, std::string>> env;
  const bool use_ccache = find_on_path("ccache").has_value();
  if (use_ccache) {
    configure.push_back("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache");
    configure.push_back("-DCMAKE_C_COMPILER_LAUNCHER=ccache");
    env = {{"CCACHE_BASEDIR", launch.build_dir.parent_path().string()}, {"CCACHE_NOHASHDIR", "1"}};
  }
  const std::vector<std::string> build = {
      "cmake",       "--build", launch.build_dir.string(),          "--target",
      "ajet-engine", "-j",      std::to_string(options_.build_jobs)};
  std::ofstream log_file(log_path, std::ios::app);
  auto cancelled = [this] { return stop_requested(); };
  std::string failure;
  for (const auto& argv : {configure, build}) {
    log_file << "$ " << fmt::format("{}", fmt::join(argv, " ")) << '\n';
    CommandResult r;
    try {
      r = run_command(SpawnOptions{argv, env, {}}, cancelled);
    } catch (const std::exception& e) {
      failure = e.what();
      break;
    }
    log_file << r.output << std::flush;
    if (r.cancelled) return previous;
    if (!exited_cleanly(r.status)) {
      failure = fmt::format("{} ({}): {}",
                            argv[1] == "--build" ? "build failed" : "cmake configure failed",
                            describe_exit(r.status), error_summary(r.output));
      break;
    }
  }
  fs::path built = launch.build_dir / "bin" / "ajet-engine";
  if (failure.empty() && !fs::exists(built)) failure = "the build produced no " + built.string();
  std::string note;
  fs::path result = built;
  if (!failure.empty()) {
    note = fmt::format(
        "the synced code failed to build, so the previous engine ({}) runs: {} (log: {})",
        previous.string(), failure, log_path.string());
    result = previous;
  } else {
    note = fmt::format("running the engine built from the synced code in {}",
                       launch.code_root.string());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    build_note_ = note;
    if (failure.empty()) last_good_binary_ = built;
  }
  verbose_.add("engine", note);
  registry_.set_status_detail(note);
  return result;
}

}  // namespace ajet::engine_control
