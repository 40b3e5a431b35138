#!/usr/bin/env bash
# The deployment files (deploy/, docs/cluster.md) match the code: shell and sbatch files parse
# (bash -n), systemd units verify (systemd-analyze verify where it exists, else a key check), and
# deploy_check.py parses the YAML and checks every ajet / ajet-swarm / ajet-engine / ajet_swarm command
# line against the real program's --help and every train config against the real front.
#   deploy_check.sh SOURCE_DIR BIN_DIR      (BIN_DIR: where ajet, ajet-swarm and ajet-engine are)
set -euo pipefail
root="$(cd "$1" && pwd)"
bin="$(cd "$2" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$root"
for b in ajet ajet-swarm ajet-engine; do
  [ -x "$bin/$b" ] || { echo "deploy_check: no $bin/$b (build ajet, ajet-swarm and ajet-engine first)" >&2; exit 1; }
done
if ! python3 -c 'import yaml' 2>/dev/null; then
  echo "deploy_check: python3 has no PyYAML (Debian: python3-yaml; scripts/setup.sh --tests installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard deploy 2>/dev/null || true)
if [ ${#files[@]} -eq 0 ]; then  # not a git checkout
  mapfile -t files < <(find deploy -type f | sort)
fi
fail=0

# Shell files parse.
shells=0
for f in "${files[@]}"; do
  case "$f" in
    *.sh|*.sbatch)
      shells=$((shells + 1))
      bash -n "$f" || { echo "deploy_check: $f: bash -n failed" >&2; fail=1; } ;;
  esac
done

# systemd units: systemd-analyze verify on copies whose install prefix (/opt/agentjet) points at this
# build and checkout, so ExecStart's programs exist; a template is verified as its instance @1.
units=()
for f in "${files[@]}"; do case "$f" in *.service) units+=("$f") ;; esac; done
if [ ${#units[@]} -gt 0 ]; then
  if command -v systemd-analyze >/dev/null 2>&1; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    copies=()
    for f in "${units[@]}"; do
      name="$(basename "$f")"
      name="${name/@.service/@1.service}"
      sed -e "s#/opt/agentjet/bin#$bin#g" -e "s#/opt/agentjet/src#$root#g" "$f" > "$tmp/$name"
      copies+=("$tmp/$name")
    done
    out="$(cd "$tmp" && timeout 60 systemd-analyze verify "${copies[@]}" 2>&1)" && rc=0 || rc=$?
    ours="$(printf '%s\n' "$out" | grep -F -e "$tmp" -e '.service' || true)"
    if [ "$rc" -ne 0 ] || [ -n "$ours" ]; then
      echo "deploy_check: systemd-analyze verify (exit $rc) on ${units[*]}:" >&2
      printf '%s\n' "$out" | sed "s#$tmp/##g" >&2
      fail=1
    fi
    unit_check="systemd-analyze verify"
  else
    for f in "${units[@]}"; do
      for key in '^\[Unit\]' '^\[Service\]' '^\[Install\]' '^ExecStart=/' '^Description='; do
        grep -q "$key" "$f" || { echo "deploy_check: $f: no line matching $key" >&2; fail=1; }
      done
      bad="$(grep -vnE '^(#.*|\[[A-Za-z]+\]|[A-Za-z]+=.*|)$' "$f" || true)"
      [ -z "$bad" ] || { echo "deploy_check: $f: not KEY=VALUE: $bad" >&2; fail=1; }
    done
    unit_check="a key check (no systemd-analyze)"
  fi
fi

# YAML, command lines against --help, train configs against the front.
python3 "$here/deploy_check.py" "$root" "$bin" || fail=1

if [ "$fail" -ne 0 ]; then
  echo "deploy_check: FAILED" >&2
  exit 1
fi
echo "deploy_check: $shells shell files parse; ${#units[@]} systemd units pass ${unit_check:-no unit check}"
