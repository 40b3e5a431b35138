// The one channel an SFT session or race prints on: whole lines, in order, from any thread. The
// commands print on stdout (flushed per line, so a pipe sees each line as it comes); tests collect.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace ajet::sft {

// printf-style formatting into a std::string.
std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

class Printer {
 public:
  using Sink = std::function<void(std::string_view line)>;  // one line, without its newline
  Printer();                                                // stdout
  explicit Printer(Sink sink);                              // e.g. a test's collector

  void line(std::string_view text);
  void linef(const char* format, ...) __attribute__((format(printf, 2, 3)));

 private:
  std::mutex mu_;
  Sink sink_;
};

}  // namespace ajet::sft
