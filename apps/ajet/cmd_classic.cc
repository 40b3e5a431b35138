// The main command: `ajet --conf x.yaml [--backbone torch|async|debug] [--exp-dir DIR] [--swarm-url
// URL]` (classic mode, src/classic; --swarm-url drives a running front instead of starting one).
// Not a subcommand: main() calls run_main_entry() when no subcommand was given.
// SIGINT/SIGTERM/SIGHUP (a closed terminal) ask the run to stop cleanly (engine and front stopped,
// metrics and a last checkpoint kept); a second signal exits at once (the front dies with us:
// PR_SET_PDEATHSIG). SIGPIPE is ignored: a closed stdout (`ajet --conf x.yaml | head`) mutes the
// output and stops the run the same clean way. The exit code is 128 + the signal (141 for a closed
// stdout), 0 when every step ran.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <optional>

#include "classic/launcher.h"
#include "multi_model/launcher.h"
#include "command.h"
#include "common/error.h"

namespace ajet::cli {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};  // what asked for the stop (SIGPIPE: stdout was closed)

extern "C" void on_stop_signal(int sig) {
  if (g_stop.exchange(true)) ::_exit(128 + sig);
  g_stop_signal = sig;
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
  std::string swarm_url;
  bool resume = false;
  bool force_restart = false;
};

MainArgs& main_args() {
  static MainArgs args;
  return args;
}

}  // namespace

void add_main_entry(CLI::App& app) {
  MainArgs& a = main_args();
  app.add_option("--conf", a.conf,
                 "Classic mode: train with this config (YAML, upstream AgentJet key names)");
  app.add_option(
      "--backbone", a.backbone,
      "torch (synchronous RL), async, or debug (inference only); overrides ajet.backbone");
  app.add_option("--exp-dir", a.exp_dir, "Base directory of experiment directories")
      ->capture_default_str();
  app.add_option("--set", a.overrides,
                 "Override one config key (repeatable): --set ajet.engine.seed=2")
      ->allow_extra_args(false);
  app.add_flag("--resume", a.resume,
               "Continue the run in the experiment directory (after Ctrl-C, a kill or a crash) "
               "from its newest "
               "checkpoint, appending to its metrics.jsonl; without it a rerun moves the earlier "
               "run into earlier/");
  app.add_option("--swarm-binary", a.swarm_binary,
                 "ajet-swarm binary (default: the one next to ajet)");
  app.add_option("--swarm-flag", a.swarm_flags,
                 "Extra flag for `ajet-swarm start` (repeatable), e.g. --swarm-flag=--engine=PATH");
  app.add_option("--swarm-url", a.swarm_url,
                 "Drive this running front (http://HOST:PORT) instead of starting one: its engine "
                 "is started for "
                 "this run and stopped at its end; admin token from AJET_ADMIN_TOKEN");
  app.add_flag("--force-restart", a.force_restart,
               "With --swarm-url: stop the front's engine even when it trains another experiment "
               "(without it the "
               "run refuses to start rather than end someone else's training)");
}

int run_main_entry(CLI::App& app) {
  MainArgs& a = main_args();
  if (a.conf.empty()) {
    if (!a.backbone.empty() || app.count("--exp-dir") > 0 || !a.overrides.empty() || a.resume ||
        !a.swarm_url.empty()) {
      std::fprintf(
          stderr,
          "ajet: error: --backbone, --exp-dir, --set, --resume and --swarm-url need --conf FILE\n");
      return 2;
    }
    std::cout << app.help();
    return 2;
  }
  if (!a.swarm_url.empty() && (!a.swarm_binary.empty() || !a.swarm_flags.empty())) {
    std::fprintf(stderr,
                 "ajet: error: --swarm-binary and --swarm-flag start a front; --swarm-url drives a "
                 "running one "
                 "(give one or the other)\n");
    return 2;
  }
  if (a.force_restart && a.swarm_url.empty()) {
    std::fprintf(
        stderr,
        "ajet: error: --force-restart needs --swarm-url (a run without it starts its own front)\n");
    return 2;
  }
  if (!a.swarm_url.empty() && a.swarm_url.rfind("http://", 0) != 0) {
    std::fprintf(stderr, "ajet: error: --swarm-url '%s': expected http://HOST:PORT\n",
                 a.swarm_url.c_str());
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
  options.resume = a.resume;
  options.swarm_url = a.swarm_url;
  options.force_restart = a.force_restart;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout is an EPIPE on the next line, handled below
  auto say = [](const std::string& line) {
    static std::atomic<bool> muted{false};
    if (muted) return;
    std::cout << line << std::endl;
    if (!std::cout) {  // EPIPE (the reader went away) or EIO (the terminal closed): stop, quietly
      muted = true;
      if (!g_stop.exchange(true)) {
        g_stop_signal = SIGPIPE;
        std::fprintf(
            stderr,
            "ajet: stdout was closed; stopping the run (engine and front stopped, metrics kept)\n");
      }
    }
  };
  // A config naming several models (ajet.multi_model) runs one front per model (src/multi_model).
  std::optional<multi_model::MultiModelSpec> multi =
      multi_model::read_multi_model_spec(options.conf);
  if (multi && options.resume) {
    std::fprintf(stderr, "ajet: error: --resume is not supported for ajet.multi_model runs yet\n");
    return 2;
  }
  if (multi && !options.swarm_url.empty()) {
    std::fprintf(stderr,
                 "ajet: error: --swarm-url is not supported for ajet.multi_model runs (one front "
                 "per model)\n");
    return 2;
  }
  classic::RunResult result = multi ? multi_model::run_multi_model(options, *multi, g_stop, say)
                                    : classic::run_classic(options, g_stop, say);
  if (!result.stopped) return 0;
  return 128 + (g_stop_signal.load() != 0 ? g_stop_signal.load() : SIGINT);
}

}  // namespace ajet::cli
