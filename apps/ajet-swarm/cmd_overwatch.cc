// `ajet-swarm overwatch` (alias `top`): a live terminal monitor of one swarm server, or of several
// (multi-model training: one server per model; `--swarm-url` repeated or a comma list). One fetch
// thread per server polls it every --refresh-interval; the UI thread only draws, so `q`, scrolling
// and terminal resizes stay responsive while a server is slow or unreachable (CANNOT_CONNECT,
// retried). `--once` prints one plain-text snapshot of every server and exits (1 when any is
// unreachable). What is shown lives in src/client/overwatch_view.h; this file is only the terminal.
#define NCURSES_WIDECHAR 1
#include <curses.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <clocale>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>

#include "client/overwatch_view.h"
#include "command.h"
#include "common/error.h"
#include "common/no_color.h"

namespace ajet::swarm_cli {
namespace {

using client::LineStyle;
using client::OverwatchLayout;
using client::OverwatchSnapshot;

constexpr const char* kDefaultUrl = "http://127.0.0.1:10086";

struct OverwatchOptions {
  std::vector<std::string> urls;  // empty: kDefaultUrl
  double refresh_interval = 2.0;
  bool once = false;
  size_t width = 0;  // --once: 0 = $COLUMNS or 120
};

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

http::ClientOptions fetch_options(double refresh_interval) {
  http::ClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(2'000);
  o.timeout =
      std::chrono::milliseconds(int64_t(std::clamp(refresh_interval * 2.0, 1.0, 10.0) * 1000));
  o.user_agent = "ajet-swarm-overwatch";
  return o;
}

size_t default_width() {
  if (const char* c = std::getenv("COLUMNS"); c != nullptr && std::atoi(c) > 20)
    return size_t(std::atoi(c));
  return 120;
}

// Polls every server in the background, one thread each (a slow server delays only its own block);
// the latest snapshots and a version number under a mutex.
class Fetcher {
 public:
  explicit Fetcher(const OverwatchOptions& o) : options_(o), latest_(o.urls.size()) {
    for (size_t i = 0; i < o.urls.size(); ++i) {
      latest_[i].url = o.urls[i];
      latest_[i].refresh_interval = o.refresh_interval;
      latest_[i].error = "connecting…";
    }
    version_ = 1;  // the placeholders above: newer_than(0) returns them
    for (size_t i = 0; i < o.urls.size(); ++i) threads_.emplace_back([this, i] { run(i); });
  }
  ~Fetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void refresh_now() {
    std::lock_guard<std::mutex> lock(mu_);
    poke_ += 1;
    cv_.notify_all();
  }
  // The latest snapshots if any is newer than `version` (which is updated).
  std::optional<std::vector<OverwatchSnapshot>> newer_than(uint64_t& version) {
    std::lock_guard<std::mutex> lock(mu_);
    if (version_ == version) return std::nullopt;
    version = version_;
    return latest_;
  }

 private:
  void run(size_t i) {
    http::HttpClient http(options_.urls[i], fetch_options(options_.refresh_interval));
    uint64_t requests = 0, errors = 0, seen_poke = 0;
    while (true) {
      OverwatchSnapshot s = client::fetch_overwatch(http, options_.urls[i],
                                                    options_.refresh_interval, requests, errors);
      requests = s.requests;
      errors = s.errors;
      std::unique_lock<std::mutex> lock(mu_);
      latest_[i] = std::move(s);
      version_ += 1;
      cv_.wait_for(lock, std::chrono::duration<double>(options_.refresh_interval),
                   [&] { return stop_ || poke_ != seen_poke; });
      seen_poke = poke_;
      if (stop_) return;
    }
  }

  OverwatchOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t poke_ = 0;  // refresh_now() count: every thread fetches once per poke
  uint64_t version_ = 0;
  std::vector<OverwatchSnapshot> latest_;
  std::vector<std::thread> threads_;
};

// One snapshot of every server, fetched at once.
std::vector<OverwatchSnapshot> fetch_all(const OverwatchOptions& o,
                                         std::vector<http::HttpClient>& https,
                                         const std::vector<OverwatchSnapshot>& previous) {
  std::vector<std::future<OverwatchSnapshot>> pending;
  for (size_t i = 0; i < o.urls.size(); ++i) {
    uint64_t requests = i < previous.size() ? previous[i].requests : 0;
    uint64_t errors = i < previous.size() ? previous[i].errors : 0;
    pending.push_back(std::async(std::launch::async, [&, i, requests, errors] {
      return client::fetch_overwatch(https[i], o.urls[i], o.refresh_interval, requests, errors);
    }));
  }
  std::vector<OverwatchSnapshot> out;
  for (auto& p : pending) out.push_back(p.get());
  return out;
}

std::vector<http::HttpClient> clients_for(const OverwatchOptions& o) {
  std::vector<http::HttpClient> https;
  https.reserve(o.urls.size());
  for (const auto& url : o.urls) https.emplace_back(url, fetch_options(o.refresh_interval));
  return https;
}

// initscr/endwin as a scope, so an exception never leaves the terminal in curses mode.
class Screen {
 public:
  Screen() {
    std::setlocale(LC_ALL, "");
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    timeout(100);  // getch() wakes every 100 ms to pick up new snapshots
    if (has_colors() && !no_color_requested()) {  // NO_COLOR: bold, reverse and dim only
      start_color();
      use_default_colors();
      init_pair(1, COLOR_CYAN, -1);
      init_pair(2, COLOR_GREEN, -1);
      init_pair(3, COLOR_YELLOW, -1);
      init_pair(4, COLOR_RED, -1);
      init_pair(5, COLOR_MAGENTA, -1);
    }
  }
  ~Screen() { endwin(); }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;
};

attr_t attr_for(LineStyle style) {
  switch (style) {
    case LineStyle::kTitle: return A_REVERSE | A_BOLD;
    case LineStyle::kSection: return A_BOLD | COLOR_PAIR(1);
    case LineStyle::kColumns: return A_UNDERLINE;
    case LineStyle::kGood: return COLOR_PAIR(2);
    case LineStyle::kWarn: return COLOR_PAIR(3) | A_BOLD;
    case LineStyle::kBad: return COLOR_PAIR(4) | A_BOLD;
    case LineStyle::kDim: return A_DIM;
    case LineStyle::kChosen: return COLOR_PAIR(5) | A_BOLD;
    case LineStyle::kNormal: return A_NORMAL;
  }
  return A_NORMAL;
}

void draw(const std::vector<OverwatchSnapshot>& snapshots, size_t& scroll) {
  const int rows = LINES, cols = COLS;
  OverwatchLayout layout;
  layout.width = size_t(std::max(cols, 20));
  layout.max_episodes = 200;  // the screen scrolls; keep more than one page
  layout.max_tasks = 200;
  auto lines = client::render_overwatch(snapshots, layout);
  const size_t body_rows = size_t(std::max(rows - 1, 1));
  const size_t max_scroll = lines.size() > body_rows ? lines.size() - body_rows : 0;
  scroll = std::min(scroll, max_scroll);
  erase();
  for (size_t r = 0; r < body_rows && r + scroll < lines.size(); ++r) {
    const auto& line = lines[r + scroll];
    attr_t a = attr_for(line.style);
    attron(a);
    mvaddnstr(int(r), 0, line.text.c_str(), -1);
    if (line.style == LineStyle::kTitle) {
      for (int c = getcurx(stdscr); c < cols && getcury(stdscr) == int(r); ++c) addch(' ');
    }
    attroff(a);
  }
  attron(A_DIM);
  mvaddnstr(rows - 1, 0,
            ("q quit   up/down PgUp/PgDn Home scroll   r refresh now" +
             (max_scroll > 0 ? "   (line " + std::to_string(scroll + 1) + " of " +
                                   std::to_string(lines.size()) + ")"
                             : std::string()))
                .c_str(),
            cols);
  attroff(A_DIM);
  refresh();
}

void run_tui(const OverwatchOptions& o) {
  Fetcher fetcher(o);
  Screen screen;
  std::vector<OverwatchSnapshot> current;
  uint64_t version = 0;
  current = *fetcher.newer_than(version);  // the placeholders, or newer
  size_t scroll = 0;
  bool dirty = true;
  while (!g_stop) {
    if (auto s = fetcher.newer_than(version)) {
      current = std::move(*s);
      dirty = true;
    }
    if (dirty) {
      draw(current, scroll);
      dirty = false;
    }
    int ch = getch();
    switch (ch) {
      case ERR: break;
      case 'q':
      case 'Q': return;
      case 'r':
      case 'R': fetcher.refresh_now(); break;
      case KEY_RESIZE: dirty = true; break;
      case KEY_UP:
        scroll = scroll > 0 ? scroll - 1 : 0;
        dirty = true;
        break;
      case KEY_DOWN:
        scroll += 1;
        dirty = true;
        break;
      case KEY_PPAGE:
        scroll = scroll > size_t(LINES) ? scroll - size_t(LINES) + 1 : 0;
        dirty = true;
        break;
      case KEY_NPAGE:
        scroll += size_t(std::max(LINES - 1, 1));
        dirty = true;
        break;
      case KEY_HOME:
        scroll = 0;
        dirty = true;
        break;
      default: break;
    }
  }
}

void run_overwatch(OverwatchOptions o) {
  if (o.urls.empty()) o.urls.push_back(kDefaultUrl);
  OverwatchLayout layout;
  layout.width = o.width > 0 ? o.width : default_width();
  if (o.once) {
    std::vector<http::HttpClient> https = clients_for(o);
    std::vector<OverwatchSnapshot> snapshots = fetch_all(o, https, {});
    std::cout << client::overwatch_text(snapshots, layout) << std::flush;
    std::string unreachable;
    size_t n_unreachable = 0;
    for (const auto& s : snapshots) {
      if (s.connected) continue;
      unreachable += (unreachable.empty() ? "" : "; ") + s.url + ": " + s.error;
      n_unreachable += 1;
    }
    if (n_unreachable > 0) {
      fail(ErrorCode::kUnavailable, (n_unreachable == 1 ? "cannot reach the swarm server at "
                                                        : "cannot reach the swarm servers at ") +
                                        unreachable);
    }
    return;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (!::isatty(STDOUT_FILENO) || !::isatty(STDIN_FILENO)) {
    // Not a terminal (a log file, a pipe): print a snapshot every interval instead.
    std::vector<http::HttpClient> https = clients_for(o);
    std::vector<OverwatchSnapshot> snapshots;
    while (!g_stop) {
      snapshots = fetch_all(o, https, snapshots);
      std::cout << client::overwatch_text(snapshots, layout) << "\n" << std::flush;
      for (double waited = 0; waited < o.refresh_interval && !g_stop; waited += 0.1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    return;
  }
  run_tui(o);
}

const CommandRegistration kOverwatch("overwatch", [](CLI::App& app) {
  auto o = std::make_shared<OverwatchOptions>();
  auto* cmd = app.add_subcommand("overwatch",
                                 "Live terminal monitor of one or several swarm servers (q quits)");
  cmd->alias("top");
  cmd->add_option("--swarm-url,--url", o->urls,
                  "Swarm server to watch; repeat it or give a comma list for several (one per "
                  "model), shown in "
                  "order (default " +
                      std::string(kDefaultUrl) + ")")
      ->delimiter(',');
  cmd->add_option("--refresh-interval", o->refresh_interval, "Seconds between polls")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_flag("--once", o->once,
                "Print one plain-text snapshot of every server and exit (exit code 1 when any is "
                "unreachable)");
  cmd->add_option("--width", o->width,
                  "Columns of the plain-text output (default $COLUMNS, else 120)");
  cmd->callback([o] { run_overwatch(*o); });
});

}  // namespace
}  // namespace ajet::swarm_cli
