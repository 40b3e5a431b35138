// Runs a fuzz target's LLVMFuzzerTestOneInput once per file named on the command line (directories:
// every regular file in them, sorted), so every build - not only clang's - replays the seed corpus.
// Exits non-zero when a path is missing; a crash or an escaping exception fails the process.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> contents((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  // An exactly sized heap copy, so a sanitized build catches reads past the end.
  auto data = std::make_unique<uint8_t[]>(contents.size() + (contents.empty() ? 1 : 0));
  std::copy(contents.begin(), contents.end(), data.get());
  LLVMFuzzerTestOneInput(data.get(), contents.size());
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  uint8_t empty = 0;
  LLVMFuzzerTestOneInput(&empty, 0);
  size_t runs = 1;
  for (int i = 1; i < argc; ++i) {
    fs::path path = argv[i];
    std::vector<fs::path> files;
    if (fs::is_directory(path)) {
      for (const auto& entry : fs::directory_iterator(path)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
    } else if (fs::is_regular_file(path)) {
      files.push_back(path);
    } else {
      std::fprintf(stderr, "replay: %s does not exist\n", path.c_str());
      return 2;
    }
    for (const auto& file : files) {
      run_file(file);
      ++runs;
    }
  }
  std::printf("replay: %zu inputs ran without a crash\n", runs);
  return 0;
}
