#!/usr/bin/env bash
# Cold-build cost of the tree one file per translation unit (A: -DAJET_UNITY_BUILD=OFF) against the
# project default, the unity build (B: batches of 8 sources per translation unit), in one run: each
# configuration is configured in a fresh directory without ccache and builds the same targets. Prints
# wall seconds and CPU seconds (user + sys) of each build and the B/A ratios, and appends the table
# with the date to docs/benchmarks.md.
#
#   bench/build/unity_ab.sh [--targets "t1 t2 ..."] [--all] [--jobs 2] [--keep] [--no-append]
# Default targets: a sample of both kinds, torch-free (text_test, http_test, e2e_test with the front
# and the CLI) and libtorch (train_test with src/model and src/train). --all builds everything.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
targets="text_test http_test e2e_test train_test" jobs=2 keep=0 append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --targets) targets="$2"; shift 2 ;;
    --all) targets="all"; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --no-append) append=0; shift ;;
    *) echo "unity_ab: unknown argument '$1' (expected --targets, --all, --jobs, --keep, --no-append)" >&2; exit 2 ;;
  esac
done
work="$(mktemp -d /tmp/ajet-unity-ab.XXXXXX)"
[ "$keep" = 1 ] || trap 'rm -rf "$work"' EXIT
gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi

# build NAME UNITY: configures and builds into $work/NAME; prints "wall cpu objects".
build() {
  local dir="$work/$1"
  CCACHE_DISABLE=1 cmake -S "$here" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DAJET_UNITY_BUILD="$2" \
    -DCMAKE_CXX_COMPILER_LAUNCHER= >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log" >&2; exit 1; }
  # shellcheck disable=SC2086
  if ! CCACHE_DISABLE=1 /usr/bin/time -f "%e %U %S" -o "$dir.time" \
      cmake --build "$dir" -j "$jobs" --target $targets >"$dir.build.log" 2>&1; then
    tail -30 "$dir.build.log" >&2; exit 1
  fi
  local objects
  objects=$(find "$dir" -name '*.o' | wc -l)
  awk -v n="$objects" '{ printf "%.0f %.0f %d\n", $1, $2 + $3, n }' "$dir.time"
}

echo "unity_ab: building '$targets' twice from scratch (-j $jobs), in $work" >&2
read -r a_wall a_cpu a_obj < <(build per-file OFF)
echo "unity_ab: A (one file per TU): ${a_wall} s wall, ${a_cpu} s CPU, $a_obj objects" >&2
read -r b_wall b_cpu b_obj < <(build unity ON)
echo "unity_ab: B (unity): ${b_wall} s wall, ${b_cpu} s CPU, $b_obj objects" >&2

ratio() { awk -v b="$1" -v a="$2" 'BEGIN { printf "%.2f", b / a }'; }
table="| build | objects | wall s | CPU s |
|---|---:|---:|---:|
| A: one file per translation unit | $a_obj | $a_wall | $a_cpu |
| B: unity (8 sources per unit) | $b_obj | $b_wall | $b_cpu |
| B / A | | $(ratio "$b_wall" "$a_wall") | $(ratio "$b_cpu" "$a_cpu") |"
echo "$table"
if [ "$append" = 1 ]; then
  {
    echo
    echo "### Cold build: one file per translation unit vs unity ($(date -u +%Y-%m-%d), bench/build/unity_ab.sh)"
    echo
    echo "Targets: \`$targets\`, \`-j $jobs\`, no ccache, Release, on $(nproc) cores ($(uname -m))."
    echo
    echo "$table"
  } >>"$here/docs/benchmarks.md"
fi
