#include "sft/printer.h"

#include <cstdarg>
#include <cstdio>

namespace ajet::sft {
namespace {

std::string vformat(const char* format, va_list args) {
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, args);
  return out;
}

}  // namespace

std::string strprintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::string out = vformat(format, args);
  va_end(args);
  return out;
}

Printer::Printer()
    : sink_([](std::string_view line) {
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
      }) {}

Printer::Printer(Sink sink) : sink_(std::move(sink)) {}

void Printer::line(std::string_view text) {
  std::lock_guard lock(mu_);
  sink_(text);
}

void Printer::linef(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::string text = vformat(format, args);
  va_end(args);
  line(text);
}

}  // namespace ajet::sft
