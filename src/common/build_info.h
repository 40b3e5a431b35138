// What this build is: the project version (what `--version` prints), the git commit it was built
// from and the CMake build type. Generated at build time (cmake/BuildInfo.cmake); link
// ajet_build_info.
#pragma once

#include <string_view>

namespace ajet {

struct BuildInfo {
  std::string_view version;  // "0.1.0" (CMake's PROJECT_VERSION)
  std::string_view
      git_commit;  // 12 hex digits of HEAD at build time; "unknown" outside a git checkout
  std::string_view build_type;  // "Release", "Debug", … ("" when none was set)
};

const BuildInfo& build_info();

}  // namespace ajet
