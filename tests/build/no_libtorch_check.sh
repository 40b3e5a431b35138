#!/usr/bin/env bash
# The configure-time rule ajet_no_libtorch (cmake/AjetModule.cmake) on the project in no_libtorch_check/:
# configuring a binary that reaches libtorch through two libraries must fail and name the whole chain;
# the same project without that link must configure.
# Usage: no_libtorch_check.sh CMAKE WORK_DIR
set -uo pipefail
cmake="$1" work="$2"
src="$(cd "$(dirname "$0")" && pwd)/no_libtorch_check"
rm -rf "$work" && mkdir -p "$work"
if "$cmake" -S "$src" -B "$work/torch" -DLINK_TORCH=ON >"$work/torch.log" 2>&1; then
  echo "FAIL: a binary that links libtorch configured without error"; exit 1
fi
want="app must not link libtorch (the front and the CLI are torch-free), but it does: app -> lib_b -> lib_a -> /usr/lib/x86_64-linux-gnu/libtorch_cpu.so"
if ! tr -s ' \n' ' ' <"$work/torch.log" | grep -qF "$want"; then
  echo "FAIL: the error does not name the chain; wanted: $want"; cat "$work/torch.log"; exit 1
fi
if ! "$cmake" -S "$src" -B "$work/clean" >"$work/clean.log" 2>&1; then
  echo "FAIL: the project without libtorch did not configure"; cat "$work/clean.log"; exit 1
fi
echo "ok: the rule fails naming the chain, and passes without it"
