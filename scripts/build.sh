#!/usr/bin/env bash
# Configures (Release, Ninja when present) and builds everything into build/ (binaries in build/bin/).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${AJET_BUILD_DIR:-$here/build}"
gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j "${AJET_JOBS:-$(nproc)}"
