#!/usr/bin/env bash
# Installs the npm packages the tests compare against (tests/js/package.json) into a cache outside the
# repo: ${AJET_NPM_CACHE:-$HOME/.cache/agentjet/node}. Prints the node_modules path on its last line.
# Exits 3 (and says so loudly) when npm or the registry is unreachable, so tests can skip visibly.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${AJET_NPM_CACHE:-$HOME/.cache/agentjet/node}"
mkdir -p "$cache"
want="$(sha256sum "$here/tests/js/package.json" | cut -d' ' -f1)"
if [ -f "$cache/.stamp" ] && [ "$(cat "$cache/.stamp")" = "$want" ] && [ -d "$cache/node_modules" ]; then
  echo "$cache/node_modules"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "npm-deps: npm is not installed" >&2
  exit 3
fi
cp "$here/tests/js/package.json" "$cache/package.json"
if [ -f "$here/tests/js/package-lock.json" ]; then
  cp "$here/tests/js/package-lock.json" "$cache/package-lock.json"
fi
if ! (cd "$cache" && npm install --no-audit --no-fund --loglevel=error >&2); then
  echo "npm-deps: npm install failed (registry unreachable?)" >&2
  exit 3
fi
echo "$want" > "$cache/.stamp"
echo "$cache/node_modules"
