#!/usr/bin/env bash
# The C++ sources follow .clang-format: names every file clang-format would change and how to fix it.
set -euo pipefail
root="$1"
cd "$root"
if ! command -v clang-format >/dev/null 2>&1; then
  echo "format_check: clang-format is not installed (scripts/setup.sh --tests installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files 'src/*.cc' 'src/*.h' 'apps/*.cc' 'apps/*.h' 'tests/*.cc' 'tests/*.h' \
                                  'bench/*.cc' 'bench/*.h' 'fuzz/*.cc' 'fuzz/*.h' 2>/dev/null || true)
if [ ${#files[@]} -eq 0 ]; then  # not a git checkout: every C++ file under the source folders
  mapfile -t files < <(find src apps tests bench fuzz -name '*.cc' -o -name '*.h' | sort)
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! clang-format --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format_check: ${#bad[@]} file(s) do not follow .clang-format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix: clang-format -i ${bad[*]:0:3}${bad[3]:+ ...}" >&2
  exit 1
fi
echo "format_check: ${#files[@]} files follow .clang-format"
