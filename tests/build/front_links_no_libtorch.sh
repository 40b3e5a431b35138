#!/usr/bin/env bash
# The design's first rule, checked on the built binaries: the front (`ajet-swarm`) and the CLI with
# classic mode (`ajet`) never load libtorch. Fails naming each binary and the torch library it loads,
# so a target_link_libraries that pulls the model library into the front breaks the build's tests.
#   front_links_no_libtorch.sh BINARY...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
bad=0
for bin in "$@"; do
  [ -x "$bin" ] || { echo "FAIL: $bin is not an executable" >&2; bad=1; continue; }
  libs="$(ldd "$bin")" || { echo "FAIL: ldd $bin failed" >&2; bad=1; continue; }
  torch="$(grep -E 'lib(torch|c10|gloo)[^ ]*\.so' <<<"$libs" | awk '{print $1}' | tr '\n' ' ' || true)"
  if [ -n "$torch" ]; then
    echo "FAIL: $(basename "$bin") loads libtorch: $torch" >&2
    bad=1
  else
    echo "ok: $(basename "$bin") loads $(wc -l <<<"$libs") libraries, none of them libtorch"
  fi
done
exit "$bad"
