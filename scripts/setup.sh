#!/usr/bin/env bash
# Installs every Debian package the project needs (with --tests: also those only the tests need).
# A no-op when all are present.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libgloo-dev libopenblas0-openmp libopenblas-openmp-dev
  libboost1.81-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev libsqlite3-dev
  libgtest-dev libgmock-dev libncurses-dev libssl-dev zlib1g-dev
  python3-torch python3-numpy python3-pip python3-setuptools python3-wheel python3-venv
  curl zip unzip clang libclang-rt-14-dev procps ccache
  bubblewrap
)
# `setup.sh --tests` (scripts/test.sh): also what only the tests need. chromium renders the web
# pages in the browser tests (tests/web), driven by playwright-core from npm; clang-format checks the
# house style (tests/build/format_check.sh); python3-yaml parses the deployment manifests
# (tests/build/deploy_check.sh).
if [ "${1:-}" = "--tests" ]; then
  PKGS+=(chromium clang-format python3-yaml)
elif [ $# -gt 0 ]; then
  echo "setup: unknown argument '$1' (expected --tests or nothing)" >&2
  exit 2
fi
missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
