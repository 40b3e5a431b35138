#!/usr/bin/env bash
# Every JSON text the project reads goes through the bounded parser in src/common/json.h (parse_json,
# try_parse_json, sax_parse_json, require_json_depth): nlohmann's own entry points have no depth limit,
# and the first value nested 70,000 levels deep that a later dump() walks overflows the stack (issue 38:
# a tool call's arguments string killed the front). This fails naming each file:line of the project's
# C++ (src, apps, fuzz, bench; tests may parse their own literals) that calls one, and checks first
# that it would catch one.
# Usage: json_parse_guard.sh SOURCE_DIR
set -uo pipefail
root="$1"
# nlohmann's readers, called through any of the names this tree gives its JSON types, and the
# "..."_json literal and stream operator, which parse too.
pattern='\b(Json|OrderedJson|OJson|json|ordered_json|basic_json(<[^>]*>)?|J)::(parse|accept|sax_parse|from_cbor|from_msgpack|from_ubjson|from_bjdata|from_bson)[[:space:]]*\(|"_json\b|>>[[:space:]]*[a-z_]*json\b'

scan() {
  grep -rnE --include='*.cc' --include='*.h' --include='*.cpp' --include='*.hpp' "$pattern" "$@" |
    grep -v '^[^:]*/src/common/json\.cc:'
}

probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
printf 'Json j = Json::parse(text, nullptr, false);\n' >"$probe/raw.cc"
printf 'auto o = nlohmann::ordered_json::parse(text);\n' >"$probe/ordered.cc"
printf 'Json ok = parse_json(text, "body");  // SafetensorsFile::parse(bytes) is ours\n' >"$probe/fine.cc"
caught="$(scan "$probe" | sed 's|.*/||' | cut -d: -f1 | sort | tr '\n' ' ')"
if [ "$caught" != "ordered.cc raw.cc " ]; then
  echo "FAIL: the guard itself is broken: on its probes it named '$caught', wanted 'ordered.cc raw.cc '"
  exit 1
fi

dirs=()
for d in src apps fuzz bench; do [ -d "$root/$d" ] && dirs+=("$root/$d"); done
found="$(scan "${dirs[@]}")"
if [ -n "$found" ]; then
  echo "FAIL: JSON parsed without the depth limit; use parse_json / try_parse_json / sax_parse_json"
  echo "(src/common/json.h), or convert a value instead of re-parsing its dump:"
  echo "$found" | sed "s|^$root/||"
  exit 1
fi
echo "ok: every JSON parse in src, apps, fuzz and bench goes through src/common/json.h"
