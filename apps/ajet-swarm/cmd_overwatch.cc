// `ajet-swarm overwatch` (alias `top`): a live terminal monitor of a swarm server (ncursesw). A
// fetch thread polls the server every --refresh-interval; the UI thread only draws, so `q`, scrolling
// and terminal resizes stay responsive while the server is slow or unreachable (CANNOT_CONNECT,
// retried). `--once` prints one plain-text snapshot and exits (1 when the server is unreachable).
// What is shown lives in src/client/overwatch_view.h; this file is only the terminal.
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
#include <iostream>
#include <mutex>
#include <thread>

#include "client/overwatch_view.h"
#include "command.h"
#include "common/error.h"

namespace ajet::swarm_cli {
namespace {

using client::LineStyle;
using client::OverwatchLayout;
using client::OverwatchSnapshot;

struct OverwatchOptions {
  std::string url = "http://127.0.0.1:10086";
  double refresh_interval = 2.0;
  bool once = false;
  size_t width = 0;  // --once: 0 = $COLUMNS or 120
};

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

http::ClientOptions fetch_options(double refresh_interval) {
  http::ClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(2'000);
  o.timeout = std::chrono::milliseconds(int64_t(std::clamp(refresh_interval * 2.0, 1.0, 10.0) * 1000));
  o.user_agent = "ajet-swarm-overwatch";
  return o;
}

size_t default_width() {
  if (const char* c = std::getenv("COLUMNS"); c != nullptr && std::atoi(c) > 20) return size_t(std::atoi(c));
  return 120;
}

// Polls the server in the background; the latest snapshot and a version number under a mutex.
class Fetcher {
 public:
  Fetcher(const OverwatchOptions& o) : options_(o), http_(o.url, fetch_options(o.refresh_interval)) {
    thread_ = std::thread([this] { run(); });
  }
  ~Fetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void refresh_now() {
    std::lock_guard<std::mutex> lock(mu_);
    poke_ = true;
    cv_.notify_all();
  }
  // The latest snapshot if newer than `version` (which is updated).
  std::optional<OverwatchSnapshot> newer_than(uint64_t& version) {
    std::lock_guard<std::mutex> lock(mu_);
    if (version_ == version) return std::nullopt;
    version = version_;
    return latest_;
  }

 private:
  void run() {
    uint64_t requests = 0, errors = 0;
    while (true) {
      OverwatchSnapshot s = client::fetch_overwatch(http_, options_.url, options_.refresh_interval, requests, errors);
      requests = s.requests;
      errors = s.errors;
      std::unique_lock<std::mutex> lock(mu_);
      latest_ = std::move(s);
      version_ += 1;
      cv_.wait_for(lock, std::chrono::duration<double>(options_.refresh_interval), [&] { return stop_ || poke_; });
      poke_ = false;
      if (stop_) return;
    }
  }

  OverwatchOptions options_;
  http::HttpClient http_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, poke_ = false;
  uint64_t version_ = 0;
  OverwatchSnapshot latest_;
  std::thread thread_;
};

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
    if (has_colors()) {
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

void draw(const OverwatchSnapshot& snapshot, size_t& scroll) {
  const int rows = LINES, cols = COLS;
  OverwatchLayout layout;
  layout.width = size_t(std::max(cols, 20));
  layout.max_episodes = 200;  // the screen scrolls; keep more than one page
  layout.max_tasks = 200;
  auto lines = client::render_overwatch(snapshot, layout);
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
             (max_scroll > 0 ? "   (line " + std::to_string(scroll + 1) + " of " + std::to_string(lines.size()) + ")"
                             : std::string()))
                .c_str(),
            cols);
  attroff(A_DIM);
  refresh();
}

void run_tui(const OverwatchOptions& o) {
  Fetcher fetcher(o);
  Screen screen;
  OverwatchSnapshot current;
  current.url = o.url;
  current.refresh_interval = o.refresh_interval;
  current.error = "connecting…";
  uint64_t version = 0;
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
      case KEY_UP: scroll = scroll > 0 ? scroll - 1 : 0; dirty = true; break;
      case KEY_DOWN: scroll += 1; dirty = true; break;
      case KEY_PPAGE: scroll = scroll > size_t(LINES) ? scroll - size_t(LINES) + 1 : 0; dirty = true; break;
      case KEY_NPAGE: scroll += size_t(std::max(LINES - 1, 1)); dirty = true; break;
      case KEY_HOME: scroll = 0; dirty = true; break;
      default: break;
    }
  }
}

void run_overwatch(const OverwatchOptions& o) {
  if (o.once) {
    http::HttpClient http(o.url, fetch_options(o.refresh_interval));
    OverwatchSnapshot s = client::fetch_overwatch(http, o.url, o.refresh_interval, 0, 0);
    OverwatchLayout layout;
    layout.width = o.width > 0 ? o.width : default_width();
    std::cout << client::overwatch_text(s, layout) << std::flush;
    if (!s.connected) fail(ErrorCode::kUnavailable, "cannot reach the swarm server at " + o.url + ": " + s.error);
    return;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (!::isatty(STDOUT_FILENO) || !::isatty(STDIN_FILENO)) {
    // Not a terminal (a log file, a pipe): print a snapshot every interval instead.
    http::HttpClient http(o.url, fetch_options(o.refresh_interval));
    uint64_t requests = 0, errors = 0;
    OverwatchLayout layout;
    layout.width = o.width > 0 ? o.width : default_width();
    while (!g_stop) {
      OverwatchSnapshot s = client::fetch_overwatch(http, o.url, o.refresh_interval, requests, errors);
      requests = s.requests;
      errors = s.errors;
      std::cout << client::overwatch_text(s, layout) << "\n" << std::flush;
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
  auto* cmd = app.add_subcommand("overwatch", "Live terminal monitor of a swarm server (q quits)");
  cmd->alias("top");
  cmd->add_option("--swarm-url", o->url, "Swarm server to watch")->capture_default_str();
  cmd->add_option("--refresh-interval", o->refresh_interval, "Seconds between polls")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_flag("--once", o->once, "Print one plain-text snapshot and exit (exit code 1 when unreachable)");
  cmd->add_option("--width", o->width, "Columns of the plain-text output (default $COLUMNS, else 120)");
  cmd->callback([o] { run_overwatch(*o); });
});

}  // namespace
}  // namespace ajet::swarm_cli
