// A fresh, empty directory for one test, removed with everything in it when the ScratchDir goes
// away. Header-only (GoogleTest and the standard library): every test binary can include it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace ajet::test_support {

class ScratchDir {
 public:
  // <temp>/ajet_<suite>_<test>_<pid>_<n>: the test's names say whose it is when one is left behind
  // (a crash); the process id and a counter keep apart parallel test processes and several in one
  // test.
  ScratchDir() {
    static std::atomic<int> counter{0};
    std::string name = "ajet";
    if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
      name.append("_").append(info->test_suite_name()).append("_").append(info->name());
    }
    for (char& c : name) {
      if (c == '/') c = '_';  // parameterised tests: "Suite/Name/0"
    }
    path_ = std::filesystem::temp_directory_path() /
            (name + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;  // a destructor must not throw; a leftover directory is harmless
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace ajet::test_support
