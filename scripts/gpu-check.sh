#!/usr/bin/env bash
# The engine on a GPU, checked and measured in one run (issue 19; docs/engine.md, "GPU"). On a machine
# with an NVIDIA GPU, a CUDA PyTorch (its libtorch is what the engine builds against), the CUDA
# toolkit (PyTorch's CMake files look for it) and the project's build dependencies (scripts/setup.sh),
# it downloads nothing and:
#   1. builds ajet, ajet-engine and bench/gpu/gpu_check against that PyTorch's libtorch in a separate
#      build folder (build-gpu/; -DAJET_TORCH_FROM_PYTHON=ON);
#   2. writes a random `small` Qwen2 checkpoint with `ajet model init` (a tokenizer trained first with
#      `ajet tokenizer train`);
#   3. compares our logits on the GPU with transformers' on the same checkpoint and device (float32,
#      eager attention) and with an independent plain-PyTorch Qwen2 forward (tests/model/
#      reference_forward.py, float64 on the CPU); where transformers is missing, with the latter
#      alone, and the table says so; also our paged KV-cache forward against our dense one;
#   4. measures decode tokens/s at 1, 8 and 64 sequences;
#   5. runs one GRPO step on the GPU and on the CPU and compares its loss and gradient norm, and times
#      more steps on the GPU;
#   6. prints a Markdown table to paste into docs/benchmarks.md (also left in the work folder).
# Exit status 0 when every comparison is within its tolerance, 1 when one is not, 2 on bad use or a
# failed build, 77 when the machine lacks a prerequisite (no GPU, no Python with torch): ctest's skip.
#
# --cpu runs the same steps on the CPU with /usr/bin/python3's torch (python3-torch; the system
# libtorch, or --bin's binaries): what ctest runs here (gpu_check_script_cpu), so the script works
# before anyone spends GPU time on it. --dry-run prints what it found and would run, and runs nothing;
# --configure-only stops after CMake's configure step (are the dependencies there?).
#
# A GPU machine without the project's packages (a CUDA image with PyTorch and nothing else, say) gets
# them as .deb files: on a Debian 12 machine with apt and a network, `--fetch-debs DIR` downloads the
# build dependencies into DIR (about 20 MB) and exits; on the GPU machine `--debs DIR` unpacks them
# into WORK/sysroot (dpkg -x, nothing installed) and builds against them.
#
# usage: scripts/gpu-check.sh [--cpu] [--dry-run] [--quick] [--device cuda:N] [--python PY]
#                             [--build DIR | --bin DIR] [--work DIR] [--preset small|tiny] [--tol X]
#                             [--debs DIR] [--configure-only] | --fetch-debs DIR
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

mode=gpu dry=0 quick=0 configure_only=0 device="" python="" build="" bin="" work="" preset="" tol=1e-3 debs="" fetch=""
usage() { sed -n '/^# usage:/,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) mode=cpu ;;
    --dry-run) dry=1 ;;
    --quick) quick=1 ;;
    --configure-only) configure_only=1 ;;
    --device|--python|--build|--bin|--work|--preset|--tol|--debs|--fetch-debs)
      [ $# -ge 2 ] || { echo "gpu-check: $1 needs a value" >&2; exit 2; }
      flag="$1" v="$2"; shift
      case "$flag" in
        --device) device="$v" ;; --python) python="$v" ;; --build) build="$v" ;; --bin) bin="$v" ;;
        --work) work="$v" ;; --preset) preset="$v" ;; --tol) tol="$v" ;; --debs) debs="$v" ;;
        --fetch-debs) fetch="$v" ;;
      esac ;;
    -h|--help) usage ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
# The build's non-torch dependencies (scripts/setup.sh's -dev packages) and the shared libraries and
# pkg-config they need, as Debian 12 names them.
DEB_PKGS=(
  libboost1.81-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev libyaml-cpp-dev libcli11-dev
  libspdlog-dev libfmt-dev libsqlite3-dev libgtest-dev libgmock-dev libncurses-dev libssl-dev zlib1g-dev
  libspdlog1.10 libfmt9 libyaml-cpp0.7 libutf8proc2 libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
  libpcre2-posix3 libsqlite3-0 libssl3 zlib1g libncursesw6 libncurses6 libtinfo6
  pkgconf-bin libpkgconf3
)
if [ -n "$fetch" ]; then
  mkdir -p "$fetch"
  (cd "$fetch" && apt-get download "${DEB_PKGS[@]}")
  echo "gpu-check: $(find "$fetch" -name '*.deb' | wc -l) packages in $fetch ($(du -sh "$fetch" | cut -f1)); on the GPU machine: --debs $fetch" >&2
  exit 0
fi
if [ "$mode" = cpu ]; then device="${device:-cpu}"; else device="${device:-cuda:0}"; fi
case "$device" in
  cpu) [ "$mode" = cpu ] || { echo "gpu-check: --device cpu needs --cpu" >&2; exit 2; } ;;
  cuda|cuda:[0-9]|cuda:[0-9][0-9]) [ "$mode" = gpu ] || { echo "gpu-check: --cpu runs on cpu, not $device" >&2; exit 2; } ;;
  *) echo "gpu-check: --device must be cuda or cuda:N (or cpu with --cpu), got '$device'" >&2; exit 2 ;;
esac
preset="${preset:-$([ $quick = 1 ] && echo tiny || echo small)}"
case "$preset" in tiny|small) ;; *) echo "gpu-check: --preset must be tiny or small, got '$preset'" >&2; exit 2 ;; esac
work="${work:-$here/exp/gpu-check-$mode}"
say() { echo "gpu-check: $*" >&2; }
run() {  # echo, then run unless --dry-run
  say "+ $*"
  [ "$dry" = 1 ] || "$@"
}

# --- What this machine has ------------------------------------------------------------------------
gpu_line="no GPU (--cpu)"
if [ "$mode" = gpu ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then say "no nvidia-smi: not a machine with an NVIDIA GPU (--cpu checks the script without one)"; exit 77; fi
  index=0
  [ "$device" = cuda ] || index="${device#cuda:}"
  gpu_line="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed -n "$((index + 1))p")"
  [ -n "$gpu_line" ] || { say "nvidia-smi lists no GPU $index"; exit 77; }
  # PyTorch's CMake files find the CUDA toolkit through nvcc.
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
  command -v nvcc >/dev/null 2>&1 || say "warning: no nvcc on PATH: CMake may not find the CUDA toolkit that the CUDA libtorch needs"
fi
# A Python whose torch can do what the mode needs: CUDA on a GPU machine, anything with --cpu.
need='import torch; assert torch.cuda.is_available(), "torch.cuda.is_available() is False"'
[ "$mode" = cpu ] && need='import torch'
candidates=("$python")
[ -n "$python" ] || candidates=("${AJET_GPU_PYTHON:-}" python3 /opt/torch/.venv/bin/python3 /usr/bin/python3)
[ "$mode" = cpu ] && [ -z "$python" ] && candidates=(/usr/bin/python3 python3)
py=""
for c in "${candidates[@]}"; do
  if [ -z "$c" ] || ! command -v "$c" >/dev/null 2>&1; then continue; fi
  if "$c" -c "$need" >/dev/null 2>&1; then py="$(command -v "$c")"; break; fi
done
if [ -z "$py" ]; then
  say "no Python with torch$([ "$mode" = gpu ] && echo ' and CUDA') among: ${candidates[*]} (--python PY names one)"
  exit 77
fi
torch_line="$("$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)')"
has_transformers=0
"$py" -c 'import transformers' >/dev/null 2>&1 && has_transformers=1
say "python $py ($torch_line), transformers $([ $has_transformers = 1 ] && echo yes || echo 'no: the reference is the plain-PyTorch forward')"
say "device $device: $gpu_line; preset $preset; work folder $work"

# --- 1. Build ---------------------------------------------------------------------------------------
# --debs: the packages unpacked into a folder the build searches first. Their .pc files name /usr;
# pkgconf runs from there too when the machine has no pkg-config. Binaries find the libraries through
# the RPATH CMake gives them in the build tree.
deb_flags=()
if [ -n "$debs" ]; then
  ls "$debs"/*.deb >/dev/null 2>&1 || { say "--debs $debs: no .deb files there (--fetch-debs makes them)"; exit 2; }
  root="$work/sysroot"
  run rm -rf "$root"
  run mkdir -p "$root"
  for d in "$debs"/*.deb; do run dpkg -x "$d" "$root"; done
  lib="$root/usr/lib/x86_64-linux-gnu"
  if [ "$dry" = 0 ]; then
    find "$root" -name '*.pc' -exec sed -i "s|=/usr\\b|=$root/usr|g" {} +
    for l in "$lib"/*.so; do [ -e "$l" ] || say "warning: $l points nowhere (a runtime package missing from --debs)"; done
  fi
  export PKG_CONFIG_PATH="$lib/pkgconfig:$root/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  if command -v pkg-config >/dev/null 2>&1; then
    deb_flags+=("-DPKG_CONFIG_EXECUTABLE=$(command -v pkg-config)")
  else
    run mkdir -p "$root/bin"
    [ "$dry" = 1 ] || printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$lib" "$root/usr/bin/pkgconf" >"$root/bin/pkg-config"
    run chmod +x "$root/bin/pkg-config"
    deb_flags+=("-DPKG_CONFIG_EXECUTABLE=$root/bin/pkg-config")
  fi
  deb_flags+=("-DCMAKE_PREFIX_PATH=$root/usr" "-DOPENSSL_ROOT_DIR=$root/usr")
fi
if [ -z "$bin" ]; then
  if [ "$mode" = cpu ]; then
    build="${build:-$here/build-gpu-cpu}"
    torch_flags=()  # the system libtorch, as every other build here
  else
    build="${build:-$here/build-gpu}"
    torch_flags=(-DAJET_TORCH_FROM_PYTHON=ON "-DAJET_TORCH_PYTHON=$py")
  fi
  gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  # A configure that failed leaves a cache but no build files: configure again then.
  if [ ! -f "$build/CMakeCache.txt" ] || { [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; }; then
    if ! run cmake -S "$here" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${torch_flags[@]}" "${deb_flags[@]}" \
        -DAJET_BUILD_FUZZ=OFF >"${TMPDIR:-/tmp}/gpu-check-cmake.log" 2>&1; then
      tail -30 "${TMPDIR:-/tmp}/gpu-check-cmake.log" >&2
      say "configure failed (above; whole log ${TMPDIR:-/tmp}/gpu-check-cmake.log). It needs the Debian/Ubuntu packages"
      say "of scripts/setup.sh and, for CUDA, the CUDA toolkit; nothing is downloaded here"
      exit 2
    fi
  fi
  if [ $configure_only = 1 ]; then say "configured $build (--configure-only)"; exit 0; fi
  run cmake --build "$build" --target ajet ajet-engine gpu_check -j "${AJET_JOBS:-$(nproc)}"
  bin="$build/bin"
fi
for b in ajet gpu_check; do
  [ "$dry" = 1 ] || [ -x "$bin/$b" ] || { say "$bin/$b is missing (--bin names a build's bin/)"; exit 2; }
done

# --- 2. A random checkpoint --------------------------------------------------------------------------
# The built-in tasks' text supports only a few hundred merges: the vocabulary ends up near 700-1000.
corpus=()
[ $quick = 1 ] && corpus=(--calc 600 --countdown 200 --frozenlake 100)
run mkdir -p "$work"
if [ "$dry" = 1 ] || [ ! -f "$work/tokenizer/tokenizer.json" ]; then
  run "$bin/ajet" tasks corpus --seed 1 "${corpus[@]}" --out "$work/corpus.txt"
  run rm -rf "$work/tokenizer"
  run "$bin/ajet" tokenizer train --corpus "$work/corpus.txt" --vocab-size 1024 --out "$work/tokenizer"
fi
# std 0.1: logits of magnitude ~10, so a wrong layer shows far above float32 rounding.
run rm -rf "$work/model"
run "$bin/ajet" model init --preset "$preset" --tokenizer "$work/tokenizer" --seed 7 --init-std 0.1 --untie-embeddings \
  --out "$work/model"

# --- 3-5. Logits, decode, GRPO --------------------------------------------------------------------
# Token ids spread over the vocabulary, one repeated: 32 of them (12 with --quick).
vocab=1000
[ "$dry" = 1 ] || vocab="$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$work/model/config.json" | head -1)"
n=$([ $quick = 1 ] && echo 12 || echo 32)
ids="1,1"
for ((i = 2; i < n; i++)); do ids="$ids,$(( (i * 389 + 7) % vocab ))"; done
results="$work/results.jsonl"
[ "$dry" = 1 ] || : >"$results"
# Each gpu_check line (one JSON object) is kept for the table.
check() { say "+ $bin/gpu_check $*"; [ "$dry" = 1 ] || "$bin/gpu_check" "$@" | tee -a "$results"; }
check logits --model "$work/model" --device "$device" --ids "$ids" --out "$work/ours.f64"

# The references: transformers on the same device in float32 (where it is installed), and always the
# independent plain-PyTorch forward in float64 on the CPU.
ref_py=$(cat <<'EOF'
import json, sys, numpy as np, torch
model_dir, ids_csv, device, ours_path, out_path, kind = sys.argv[1:7]
ids = [int(x) for x in ids_csv.split(",")]
ours = np.fromfile(ours_path, "<f8")
if kind == "transformers":
    import transformers
    from transformers import AutoModelForCausalLM
    kw = {"attn_implementation": "eager"}
    try:
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **kw)
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, **kw)
    m = m.to(device).eval()
    with torch.no_grad():
        ref = m(torch.tensor([ids], device=device)).logits[0].double().cpu().numpy().ravel()
    name = f"transformers {transformers.__version__}, float32, eager attention, {device}"
else:
    import subprocess
    subprocess.run([sys.executable, sys.argv[7], model_dir, ids_csv, out_path], check=True, stdout=subprocess.DEVNULL)
    ref = np.fromfile(out_path, "<f8")
    name = "plain-PyTorch Qwen2 forward (tests/model/reference_forward.py), float64, cpu"
assert ref.shape == ours.shape, (ref.shape, ours.shape)
print(json.dumps({"check": "reference", "reference": name, "max_abs_diff": float(np.abs(ref - ours).max()),
                  "max_abs_logit": float(np.abs(ref).max())}))
EOF
)
kinds=(plain)
[ $has_transformers = 1 ] && kinds=(transformers plain)
for kind in "${kinds[@]}"; do
  say "+ $py - (reference logits: $kind)"
  [ "$dry" = 1 ] || "$py" -c "$ref_py" "$work/model" "$ids" "$device" "$work/ours.f64" "$work/reference.f64" \
    "$kind" "$here/tests/model/reference_forward.py" | tee -a "$results"
done

if [ $quick = 1 ]; then
  check decode --model "$work/model" --device "$device" --concurrency 1,8 --prompt 16 --max-tokens 8
  check grpo --model "$work/model" --device "$device" --group 4 --prompt 16 --completion 16 --reps 1
else
  check decode --model "$work/model" --device "$device" --concurrency 1,8,64 --prompt 64 --max-tokens 128
  check grpo --model "$work/model" --device "$device" --group 8 --prompt 128 --completion 128 --reps 3
fi
# The same first step on the CPU: the device must not change what a step computes.
if [ "$mode" = gpu ]; then
  if [ $quick = 1 ]; then g=(--group 4 --prompt 16 --completion 16); else g=(--group 8 --prompt 128 --completion 128); fi
  check grpo --model "$work/model" --device cpu "${g[@]}" --reps 0
fi
[ "$dry" = 1 ] && { say "dry run: nothing was built or run"; exit 0; }

# --- 6. The table --------------------------------------------------------------------------------
table_py=$(cat <<'EOF'
import json, sys
results_path, tol, header = sys.argv[1], float(sys.argv[2]), sys.argv[3]
rows = [json.loads(l) for l in open(results_path) if l.startswith("{")]
by = lambda kind: [r for r in rows if r["check"] == kind]
logits = by("logits")[0]
grpo = by("grpo")
main_dev = logits["device"]
ok = True
out = [header, "", "| check | result | within tolerance |", "|---|---|---|"]
for ref in by("reference"):
    good = ref["max_abs_diff"] <= tol
    ok &= good
    out.append(f"| our logits ({logits['tokens']} tokens, vocab {logits['vocab']}, {main_dev}) vs {ref['reference']} | "
               f"max abs diff {ref['max_abs_diff']:.2e} (max abs logit {ref['max_abs_logit']:.1f}) | "
               f"{'yes' if good else 'NO'} (<= {tol:g}) |")
if not any(r["reference"].startswith("transformers") for r in by("reference")):
    out.append("| transformers | not installed for this Python: compared with the plain-PyTorch forward only | |")
good = logits["paged_vs_dense_max_abs_diff"] <= tol
ok &= good
out.append(f"| paged KV-cache forward (prefill + 1 decode step) vs dense, {main_dev} | max abs diff "
           f"{logits['paged_vs_dense_max_abs_diff']:.2e} | {'yes' if good else 'NO'} |")
for d in by("decode"):
    out.append(f"| decode x{d['concurrency']} (prompt {d['prompt']}, {d['max_tokens']} tokens each), {d['device']} | "
               f"{d['tokens_per_s']:,.0f} tokens/s ({d['tokens']} tokens in {d['seconds']:.2f} s) | |")
on_dev = [g for g in grpo if g["device"] == main_dev][0]
if "best_step_seconds" in on_dev:
    out.append(f"| GRPO step ({on_dev['samples']} samples, {on_dev['tokens']} tokens, {on_dev['trained_tokens']} trained), "
               f"{main_dev} | {on_dev['best_step_seconds']:.3f} s best of {len(on_dev['step_seconds'])} "
               f"({on_dev['sample_tokens_per_s']:,.0f} sample tokens/s; first step {on_dev['first_step_seconds']:.2f} s) | |")
cpu = [g for g in grpo if g["device"] == "cpu" and g is not on_dev]
if cpu:
    c = cpu[0]
    # The first step's loss is fixed by the advantages (ratio 1); entropy and gradient norm test the maths.
    rel = max(abs(on_dev[k] - c[k]) / max(abs(c[k]), 1e-12) for k in ("loss", "entropy", "grad_norm"))
    good = rel <= tol
    ok &= good
    out.append(f"| GRPO first step, {main_dev} vs cpu: entropy {on_dev['entropy']:.6f} vs {c['entropy']:.6f}, grad norm "
               f"{on_dev['grad_norm']:.6f} vs {c['grad_norm']:.6f}, loss {on_dev['loss']:.6f} vs {c['loss']:.6f} | "
               f"max relative diff {rel:.2e} | {'yes' if good else 'NO'} |")
print("\n".join(out))
sys.exit(0 if ok else 1)
EOF
)
layers="$(sed -n 's/.*"num_hidden_layers": *\([0-9]*\).*/\1/p' "$work/model/config.json" | head -1)"
header="scripts/gpu-check.sh$([ $quick = 1 ] && echo ' --quick')$([ $mode = cpu ] && echo ' --cpu'), $(date -I): $gpu_line; $torch_line;"
header="$header \`$preset\` preset ($layers layers, vocab $vocab), float32, random weights (std 0.1)."
set +e
"$py" -c "$table_py" "$results" "$tol" "$header" | tee "$work/table.md"
status=${PIPESTATUS[0]}
set -e
say "table: $work/table.md; raw results: $results"
[ "$status" = 0 ] || say "a comparison is outside its tolerance (the table's NO)"
exit "$status"
