#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test under ctest.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
"$here/scripts/setup.sh" --tests
# npm packages the cross-implementation tests compare against; tests skip loudly without them.
"$here/scripts/npm-deps.sh" >/dev/null || echo "test: npm packages unavailable; the JS cross-checks will be SKIPPED" >&2
"$here/scripts/build.sh"
cd "${AJET_BUILD_DIR:-$here/build}"
ctest --output-on-failure -j "${AJET_TEST_JOBS:-2}" "$@"
