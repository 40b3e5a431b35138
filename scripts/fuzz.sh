#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/fuzz_*.cc) with clang, ASan and UBSan, in a build dir of their own
# with nothing torch-related (AJET_FUZZ_ONLY=ON), and runs them.
#
#   scripts/fuzz.sh [--smoke] [--build-dir DIR] [--time SECONDS] [--runs N] [NAME...] [-- LIBFUZZER_ARGS...]
#
# NAME is a target without its prefix (safetensors for fuzz/fuzz_safetensors.cc); default: all.
# By hand: each target fuzzes for --time seconds (default 60) with a working corpus DIR/corpus/NAME that
# persists between runs and is seeded from fuzz/corpus/NAME; crash inputs land in DIR/artifacts/NAME/.
# --smoke (the ctest `fuzz_smoke`): a fixed number of inputs per target (--runs, default
# $AJET_FUZZ_RUNS or 10000), a fixed seed and a fresh working corpus, so the result never depends on
# timing. Exits 77 (ctest: skipped) when clang or its libFuzzer runtime is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build-fuzz"
smoke=0
seconds=60
runs="${AJET_FUZZ_RUNS:-10000}"
names=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --build-dir) build="$2"; shift ;;
    --time) seconds="$2"; shift ;;
    --runs) runs="$2"; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) names+=("$1") ;;
  esac
  shift
done

if ! command -v clang >/dev/null 2>&1 || ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: SKIPPED: clang not found (scripts/setup.sh installs it)" >&2
  exit 77
fi
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" >"$probe/log" 2>&1; then
  cat "$probe/log" >&2
  echo "fuzz: SKIPPED: clang cannot link libFuzzer (install libclang-rt-dev for this clang)" >&2
  exit 77
fi

if [ ${#names[@]} -eq 0 ]; then
  for src in "$here"/fuzz/fuzz_*.cc; do
    n="$(basename "$src" .cc)"
    names+=("${n#fuzz_}")
  done
fi

gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  mkdir -p "$build"
  cmake -S "$here" -B "$build" "${gen[@]}" -DAJET_FUZZ_ONLY=ON -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log" >&2; rm -f "$build/CMakeCache.txt"; exit 1; }
fi
targets=()
for n in "${names[@]}"; do targets+=("fuzz_$n"); done
cmake --build "$build" --target "${targets[@]}" -j "${AJET_JOBS:-$(nproc)}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
failed=()
for n in "${names[@]}"; do
  seeds="$here/fuzz/corpus/$n"
  work="$build/corpus/$n"
  artifacts="$build/artifacts/$n"
  if [ "$smoke" -eq 1 ]; then rm -rf "$work"; fi
  mkdir -p "$work" "$artifacts"
  corpora=("$work")
  if [ -d "$seeds" ]; then corpora+=("$seeds"); fi
  if [ "$smoke" -eq 1 ]; then
    # A target whose inputs are slow caps its own smoke run: "// fuzz-smoke-runs: N" in its source.
    own="$(sed -n 's|^// fuzz-smoke-runs: \([0-9]*\)$|\1|p' "$here/fuzz/fuzz_$n.cc")"
    if [ -z "$own" ] || [ "$own" -gt "$runs" ]; then own="$runs"; fi
    limits=(-runs="$own" -seed=1)
  else
    limits=(-max_total_time="$seconds")
  fi
  dict=()  # tokens libFuzzer splices into inputs: nesting, framing, keys (fuzz/dict/NAME.dict)
  if [ -f "$here/fuzz/dict/$n.dict" ]; then dict=(-dict="$here/fuzz/dict/$n.dict"); fi
  echo "fuzz: $n (${limits[*]})"
  # New inputs go to the first corpus dir (the working one); the seed corpus is only read.
  if ! "$build/bin/fuzz_$n" "${limits[@]}" "${dict[@]}" -artifact_prefix="$artifacts/" -print_final_stats=1 \
       "${extra[@]}" "${corpora[@]}" >"$build/fuzz_$n.log" 2>&1; then
    tail -n 60 "$build/fuzz_$n.log" >&2
    failed+=("$n")
  else
    grep -E "^(Done|stat::number_of_executed_units|#[0-9]+.*DONE)" "$build/fuzz_$n.log" | tail -n 2 || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (crash inputs in $build/artifacts/)" >&2
  exit 1
fi
echo "fuzz: ${#names[@]} target(s) ran clean"
