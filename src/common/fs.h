// Whole-file reads and atomic writes whose errors name the file.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace ajet {

// A hidden sibling of `dir` on the same filesystem, unique to this process (".NAME.TAG-PID"), to
// write a directory into before publish_dir renames it into place.
std::filesystem::path temp_sibling(const std::filesystem::path& dir, const std::string& tag);

// Renames the fully written `tmp` to `dir`; an existing `dir` is moved aside first and removed
// after, so `dir` is always either whole (old or new) or absent. Throws Error(kIo) naming the
// paths; when the rename into place fails, the old directory is put back first (without throwing
// over the first error).
void publish_dir(const std::filesystem::path& tmp, const std::filesystem::path& dir);

// Reads a whole file; throws Error(kIo) naming the path when it cannot.
std::string read_file(const std::filesystem::path& path);

// Writes to `path.tmp-<pid>` then renames over `path`, so readers never see half a file.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

}  // namespace ajet
