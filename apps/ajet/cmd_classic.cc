// The main command: `ajet --conf x.yaml [--backbone torch|async|debug] [--exp-dir DIR]` (classic
// mode, src/classic). Not a subcommand: main() calls run_main_entry() when no subcommand was given.
// SIGINT/SIGTERM ask the run to stop cleanly (engine and front stopped, metrics kept); a second
// signal exits at once (the front dies with us: PR_SET_PDEATHSIG).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>

#include "classic/launcher.h"
#include "command.h"
#include "common/error.h"

namespace ajet::cli {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) {
  if (g_stop.exchange(true)) ::_exit(130);
  static const char kMsg[] = "\najet: stopping (again to quit at once)\n";
  ssize_t ignored = ::write(2, kMsg, sizeof(kMsg) - 1);
  (void)ignored;
}

struct MainArgs {
  std::string conf;
  std::string backbone;
  std::string exp_dir = "saved_experiments";
  std::string swarm_binary;
  std::vector<std::string> swarm_flags;
  std::vector<std::string> overrides;
};

MainArgs& main_args() {
  static MainArgs args;
  return args;
}

}  // namespace

void add_main_entry(CLI::App& app) {
  MainArgs& a = main_args();
  app.add_option("--conf", a.conf, "Classic mode: train with this config (YAML, upstream AgentJet key names)");
  app.add_option("--backbone", a.backbone, "torch (synchronous RL), async, or debug (inference only); overrides ajet.backbone");
  app.add_option("--exp-dir", a.exp_dir, "Base directory of experiment directories")->capture_default_str();
  app.add_option("--set", a.overrides, "Override one config key (repeatable): --set ajet.engine.seed=2")
      ->allow_extra_args(false);
  app.add_option("--swarm-binary", a.swarm_binary, "ajet-swarm binary (default: the one next to ajet)");
  app.add_option("--swarm-flag", a.swarm_flags, "Extra flag for `ajet-swarm start` (repeatable), e.g. --swarm-flag=--engine=PATH");
}

int run_main_entry(CLI::App& app) {
  MainArgs& a = main_args();
  if (a.conf.empty()) {
    if (!a.backbone.empty() || app.count("--exp-dir") > 0 || !a.overrides.empty()) {
      std::fprintf(stderr, "ajet: error: --backbone, --exp-dir and --set need --conf FILE\n");
      return 2;
    }
    std::cout << app.help();
    return 2;
  }
  classic::LaunchOptions options;
  options.conf = a.conf;
  options.backbone = a.backbone;
  options.exp_base_dir = a.exp_dir;
  options.swarm_binary = a.swarm_binary.empty() ? sibling_binary("ajet-swarm") : a.swarm_binary;
  options.swarm_flags = a.swarm_flags;
  options.overrides = a.overrides;
  options.interactive = ::isatty(2) != 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  classic::RunResult result = classic::run_classic(options, g_stop, [](const std::string& line) {
    std::cout << line << std::endl;
  });
  return result.stopped ? 130 : 0;
}

}  // namespace ajet::cli
