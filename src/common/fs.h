// Whole-file reads and atomic writes whose errors name the file.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace ajet {

// Reads a whole file; throws Error(kIo) naming the path when it cannot.
std::string read_file(const std::filesystem::path& path);

// Writes to `path.tmp-<pid>` then renames over `path`, so readers never see half a file.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

}  // namespace ajet
