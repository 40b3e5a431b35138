// `ajet research run STUDY.yaml [--dir DIR]`, `ajet research resume DIR`, `ajet research status
// DIR`: a study of many classic runs driven by the research controller (src/research). The study
// directory holds the journal (the only state), the notebook, the trials' experiment directories
// and, once done, finish.flag. SIGINT/SIGTERM/SIGHUP stop the running trials cleanly and exit 128 +
// the signal; `resume` continues. A second signal exits at once (the trials die with us:
// PR_SET_PDEATHSIG).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "command.h"
#include "common/error.h"
#include "common/fs.h"
#include "research/controller.h"
#include "research/journal.h"
#include "research/llm_proposer.h"
#include "research/notebook.h"
#include "research/proposer.h"
#include "research/runner.h"
#include "research/study.h"

namespace ajet::cli {
namespace {
namespace fs = std::filesystem;

std::atomic<bool> g_research_stop{false};
std::atomic<int> g_research_signal{0};

extern "C" void on_research_signal(int sig) {
  if (g_research_stop.exchange(true)) ::_exit(128 + sig);
  g_research_signal = sig;
  static const char kMsg[] =
      "\najet research: stopping the running trials (again to quit at once)\n";
  ssize_t ignored = ::write(2, kMsg, sizeof(kMsg) - 1);
  (void)ignored;
}

struct ResearchArgs {
  std::string study;
  std::string dir;
  std::string ajet;  // the ajet binary trials run (default: this one)
  std::string
      llm_url;  // the LLM researcher's endpoint (default: OPENAI_BASE_URL; none: built-in search)
  std::string llm_model;  // its model (default: AJET_RESEARCH_MODEL, else gpt-4o-mini)
};

// The study's lock: one controller per study directory (flock, released when the process dies).
int lock_study(const fs::path& dir) {
  const fs::path file = dir / "research.lock";
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail(ErrorCode::kIo, "cannot open " + file.string());
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    (void)n;
    fail(ErrorCode::kFailedPrecondition, "another controller (pid " + std::string(pid) +
                                             ") is running the study in " + dir.string());
  }
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(fd, 0) == 0) {
    ssize_t n = ::pwrite(fd, me.data(), me.size(), 0);
    (void)n;
  }
  return fd;  // kept open for the life of the process
}

fs::path journal_path(const fs::path& dir) { return dir / "journal.sqlite"; }

research::Study study_of(research::Journal& journal, const fs::path& dir) {
  const auto text = journal.meta("study_yaml");
  const auto file = journal.meta("study_file");
  const auto workdir = journal.meta("workdir");
  if (!text || !file || !workdir)
    fail(ErrorCode::kDataLoss, journal_path(dir).string() + " holds no study");
  return research::parse_study(*text, *file, *workdir);
}

// Runs the controller until the study is done or a signal; exits the process with the study's code.
[[noreturn]] void drive(const research::Study& study, research::Journal& journal,
                        const fs::path& dir, const ResearchArgs& a) {
  const std::string& ajet = a.ajet;
  struct sigaction sa {};
  sa.sa_handler = on_research_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  int code = 1;
  {
    const fs::path ajet_binary = ajet.empty() ? sibling_binary("ajet") : ajet;
    auto say = [](const std::string& line) { std::cout << line << std::endl; };
    std::unique_ptr<research::TrialRunner> runner;
    if (study.runner.type == "remote") {
      research::RemoteRunnerOptions remote;
      remote.servers = study.runner.servers;
      remote.unreachable =
          std::chrono::milliseconds(int64_t(study.budget.unreachable_seconds * 1000));
      remote.say = say;
      runner = std::make_unique<research::RemoteRunner>(ajet_binary, remote);
    } else {
      runner = std::make_unique<research::LocalRunner>(ajet_binary);
    }
    research::BuiltinProposer builtin;
    // The LLM researcher when an endpoint is given (--llm-url or OPENAI_BASE_URL); whatever it gets
    // wrong falls back to the built-in search, with a line saying why.
    std::optional<research::LlmEndpoint> endpoint = research::llm_endpoint_from_env();
    if (!a.llm_url.empty()) {
      if (!endpoint) endpoint = research::LlmEndpoint{};
      endpoint->base_url = a.llm_url;
    }
    if (endpoint && !a.llm_model.empty()) endpoint->model = a.llm_model;
    std::optional<research::LlmProposer> llm;
    if (endpoint)
      llm.emplace(*endpoint, builtin,
                  [](const std::string& line) { std::cout << line << std::endl; });
    research::Proposer& proposer = llm ? static_cast<research::Proposer&>(*llm) : builtin;
    std::cout << "ajet research: candidates from " << proposer.name() << std::endl;
    research::ControllerOptions options;
    options.dir = dir;
    options.say = say;
    research::Controller controller(study, journal, *runner, proposer, options);
    code = controller.run(g_research_stop);
    if (code < 0) {
      std::cout << "ajet research: stopped; continue with: ajet research resume " << dir.string()
                << std::endl;
      code = 128 + (g_research_signal.load() ? g_research_signal.load() : SIGINT);
    } else {
      std::cout << "ajet research: done; notebook: " << (dir / "notebook.md").string() << std::endl;
    }
  }
  std::cout.flush();
  std::exit(code);
}

void run_new(const ResearchArgs& a) {
  const fs::path file = a.study;
  if (!fs::exists(file)) invalid_argument("ajet research run: no study file " + file.string());
  const fs::path dir =
      fs::absolute(a.dir.empty() ? fs::path("saved_research") / file.stem() : fs::path(a.dir));
  if (fs::exists(journal_path(dir))) {
    invalid_argument("ajet research run: " + dir.string() +
                     " already holds a study; continue it with `ajet research resume " +
                     dir.string() + "`, or pick another --dir");
  }
  const std::string text = research::read_study_file(file);
  const research::Study study = research::parse_study(text, fs::absolute(file), fs::current_path());
  fs::create_directories(dir);
  lock_study(dir);
  write_file_atomic(dir / "study.yaml", text);
  research::Journal journal(journal_path(dir));
  journal.transaction([&] {
    journal.set_meta("study_yaml", text);
    journal.set_meta("study_file", fs::absolute(file).lexically_normal().string());
    journal.set_meta("workdir", study.workdir.string());
  });
  std::cout << "ajet research: study in " << dir.string() << " (notebook.md; `ajet research status "
            << dir.string() << "`)" << std::endl;
  drive(study, journal, dir, a);
}

void resume(const ResearchArgs& a) {
  const fs::path dir = fs::absolute(a.dir);
  if (!fs::exists(journal_path(dir))) {
    invalid_argument("ajet research resume: no study in " + dir.string() + " (no journal.sqlite)");
  }
  lock_study(dir);
  research::Journal journal(journal_path(dir));
  const research::Study study = study_of(journal, dir);
  if (journal.meta("phase").value_or("") == research::kPhaseDone) {
    std::cout << research::status_text(study, journal);
    std::cout << "ajet research: the study is done (" << (dir / "finish.flag").string() << ")"
              << std::endl;
    std::exit(static_cast<int>(journal.meta_int("exit_code").value_or(1)));
  }
  std::cout << "ajet research: resuming the study in " << dir.string() << std::endl;
  drive(study, journal, dir, a);
}

void status(const ResearchArgs& a) {
  const fs::path dir = fs::absolute(a.dir);
  if (!fs::exists(journal_path(dir)))
    invalid_argument("ajet research status: no study in " + dir.string());
  research::Journal journal(journal_path(dir));
  const research::Study study = study_of(journal, dir);
  std::cout << research::status_text(study, journal);
}

const CommandRegistration kResearch("research", [](CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "research",
      "Automated research: a study of many classic runs (search, early stopping, "
      "confirmation on fresh seeds, a notebook)");
  cmd->require_subcommand(1);
  auto args = std::make_shared<ResearchArgs>();
  auto* run = cmd->add_subcommand("run", "Start a study from a study file");
  run->add_option("study", args->study, "The study file (YAML; docs/research.md)")->required();
  run->add_option("--dir", args->dir,
                  "The study directory (default: saved_research/<study file name>)");
  run->add_option("--ajet", args->ajet, "The ajet binary the trials run (default: this one)");
  for (CLI::App* c : {run}) {
    c->add_option("--llm-url", args->llm_url,
                  "An OpenAI-compatible endpoint (.../v1) for the LLM researcher (default: "
                  "OPENAI_BASE_URL; none: the built-in search alone)");
    c->add_option("--llm-model", args->llm_model,
                  "The LLM researcher's model (default: AJET_RESEARCH_MODEL, else gpt-4o-mini)");
  }
  run->callback([args] { run_new(*args); });
  auto* res = cmd->add_subcommand("resume", "Continue a study after a stop, a kill or a crash");
  res->add_option("dir", args->dir, "The study directory")->required();
  res->add_option("--ajet", args->ajet, "The ajet binary the trials run (default: this one)");
  res->add_option("--llm-url", args->llm_url,
                  "As for run (not stored: give it again, or set OPENAI_BASE_URL)");
  res->add_option("--llm-model", args->llm_model, "As for run");
  res->callback([args] { resume(*args); });
  auto* st = cmd->add_subcommand(
      "status", "Show a study's progress: trials running, best so far, budget left");
  st->add_option("dir", args->dir, "The study directory")->required();
  st->callback([args] { status(*args); });
});

}  // namespace
}  // namespace ajet::cli
