// Reading /proc/<pid>/stat (Linux): the fields after the command name, which may itself hold spaces
// and parentheses, so the split starts after the last ')'.
#pragma once

#include <sys/types.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ajet {

// Fields 3.. of /proc/<pid>/stat (state first, then ppid, …; field N of proc(5) is at index N - 3).
// Empty when the process is gone or the file cannot be read.
inline std::vector<std::string> proc_stat_fields(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return {};
  const size_t comm_end = stat.rfind(')');
  if (comm_end == std::string::npos) return {};
  std::istringstream rest(stat.substr(comm_end + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(std::move(field));
  return fields;
}

}  // namespace ajet
