#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the GPU kit: everything a GPU machine needs to run every GPU check of Sieve with one command
# (DIR/run.sh), made here on a machine without a GPU so the GPU's minutes go to the checks alone.
#
#   tools/gpu/bundle.sh DIR
#
# A Release build (device code: sm_80 and sm_90 machine code, PTX the driver compiles for later
# GPUs) in $GPU_KIT_BUILD_DIR (default build-gpu-kit/ in the source tree; rebuilt incrementally, with
# ccache when it is installed), then DIR gets:
#   run.sh, README.md          the entry point and how to run it
#   bin/                       the GPU tests and benchmarks, sieve-gpu-probe, sieve-info
#   lib/                       libnccl-net-sieve.so and every shared library they need that is not
#                              in image-provides.txt (hwloc's runtime and its dependencies)
#   kit/                       the steps (Python), the training scripts, the summary-to-tables script
#   python/sieve/              the Python binding (the package; PYTHONPATH=python)
#   licenses/                  the copyright files of the copied libraries
#   image-provides.txt, BUILD.json (commit, toolkit, files with sizes and sha256)
# DIR is replaced as a whole. Inside the source tree it must be ignored by git (under build*/), so it
# never travels with the working tree unasked. Fails when DIR would exceed 60 MiB.
# Exit status 77: no CUDA toolkit here (nothing to bundle).
set -euo pipefail

die() { echo "bundle: $*" >&2; exit 1; }

if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
[[ $# -eq 1 && -n $1 && $1 != -* ]] || die "usage: tools/gpu/bundle.sh DIR (or --help)"
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(realpath -m "$1")
build=$(realpath -m "${GPU_KIT_BUILD_DIR:-$root/build-gpu-kit}")
limit_bytes=$((60 * 1024 * 1024))

nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [[ ! -x $nvcc ]]; then
  echo "bundle: no CUDA toolkit (nvcc not on PATH nor in /usr/local/cuda/bin): there is nothing to bundle" >&2
  exit 77
fi
if [[ $dir/ == "$root"/* ]] && git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
   ! git -C "$root" check-ignore -q "$dir"; then
  die "$dir is inside the source tree but not ignored by git: it would travel with the working tree (use a folder under build*/)"
fi
[[ $dir != "$build" && $dir != "$build"/* && $build != "$dir"/* ]] || die "DIR and the build directory ($build) must not contain each other"

# --- build ----------------------------------------------------------------------------------------
targets=(nccl-net-sieve sieve-proxy-rank sieve-allreduce-perf sieve-proxy-kernel-bench sieve-gpu-probe sieve-info
         proxy_gpu_kernel_test proxy_gpu_multiprocess_test)
# Source and build paths become relative in everything compiled (__FILE__ in test assertions and
# device code alike), so nothing in the kit names this machine's directories.
prefix_map="-ffile-prefix-map=$root/= -ffile-prefix-map=$build/=build/"
launchers=()
if command -v ccache >/dev/null; then
  launchers=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
mkdir -p "$build"
# No RPATH anywhere: run.sh sets LD_LIBRARY_PATH to lib/ and NCCL's directory.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DSIEVE_BUILD_BENCHMARKS=OFF -DSIEVE_BUILD_FUZZERS=OFF -DSIEVE_BUILD_TESTS=ON -DCMAKE_SKIP_RPATH=ON \
  -DCMAKE_C_FLAGS="$prefix_map" -DCMAKE_CXX_FLAGS="$prefix_map" -DCMAKE_CUDA_FLAGS="-Xcompiler=${prefix_map// /,}" \
  "${launchers[@]}" >"$build/kit-configure.log" 2>&1 || { cat "$build/kit-configure.log" >&2; die "cmake configure failed"; }
# The NCCL programs link libnccl (the toolkit's, or libnccl-dev's); without it CMake skips them.
if grep -q '^SIEVE_LIBNCCL_FOR_TOOLS:FILEPATH=.*NOTFOUND' "$build/CMakeCache.txt"; then
  die "no libnccl.so here (CUDA toolkit's lib/ or libnccl-dev): sieve-proxy-rank and sieve-allreduce-perf cannot be built"
fi
cmake --build "$build" -j "${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" --target "${targets[@]}"

# --- assemble in a fresh directory, then replace DIR ----------------------------------------------
stage="$dir.staging"
rm -rf "$stage"
mkdir -p "$stage"/{bin,lib,kit,python,licenses}
for built in tools/gpu/sieve-proxy-rank tools/gpu/sieve-allreduce-perf tools/gpu/sieve-proxy-kernel-bench \
             tools/gpu/sieve-gpu-probe tools/sieve-info/sieve-info tests/plugin/proxy/gpu/proxy_gpu_kernel_test \
             tests/plugin/proxy/gpu/proxy_gpu_multiprocess_test; do
  [[ -x $build/$built ]] || die "the build produced no $built"
  install -m 755 "$build/$built" "$stage/bin/"
done
install -m 755 "$build/plugin/libnccl-net-sieve.so" "$stage/lib/"

# Every library a bundled ELF needs, unless the GPU image provides it: copied, then its own needs too.
mapfile -t provided < <(grep -v '^\s*\(#\|$\)' "$root/tools/gpu/image-provides.txt")
is_provided() {
  local p
  for p in "${provided[@]}"; do [[ $1 == "$p" ]] && return 0; done
  return 1
}
copied=()
while :; do
  added=0
  for elf in "$stage"/bin/* "$stage"/lib/*; do
    while read -r soname arrow path _; do
      [[ $arrow == "=>" ]] || continue
      is_provided "$soname" && continue
      [[ -e $stage/lib/$soname ]] && continue
      [[ $path == /* ]] || die "$(basename "$elf") needs $soname, which is not found here"
      cp -L "$path" "$stage/lib/$soname"
      chmod 644 "$stage/lib/$soname"
      copied+=("$path")
      added=1
    done < <(LD_LIBRARY_PATH="$stage/lib" ldd "$elf" 2>/dev/null)
  done
  ((added)) || break
done
for path in "${copied[@]}"; do  # the licence of each copied library, from its Debian package
  package=$(dpkg -S "$(realpath "$path")" 2>/dev/null | head -n 1 | cut -d: -f1) || true
  if [[ -n $package && -f /usr/share/doc/$package/copyright ]]; then
    cp "/usr/share/doc/$package/copyright" "$stage/licenses/$package.copyright"
  fi
done

install -m 755 "$root/tools/gpu/run.sh" "$stage/run.sh"
install -m 644 "$root/tools/gpu/README.md" "$root/tools/gpu/image-provides.txt" "$stage/"
install -m 644 "$root"/tools/gpu/kit/*.py "$root/tools/gpu/ddp_resnet18.py" "$root/tools/gpu/fsdp_pruned.py" \
  "$root/tools/gpu/summary_tables.py" "$stage/kit/"
mkdir -p "$stage/python/sieve"
install -m 644 "$root"/tools/python/sieve/*.py "$stage/python/sieve/"

# BUILD.json: what this kit is, reproducibly (the commit's time, not the build's).
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
changes=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null || true)
commit_time=$(git -C "$root" log -1 --format=%cI 2>/dev/null || echo unknown)
cuda=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
# The oldest glibc the kit runs on: the newest GLIBC_ symbol version any of its ELF files needs.
glibc_needed=$(for f in "$stage"/bin/* "$stage"/lib/*; do objdump -T "$f" 2>/dev/null; done |
               grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
[[ -n $glibc_needed ]] || die "objdump found no GLIBC_ symbol version in the kit's programs"
python3 - "$stage" "$commit" "${#changes}" "$commit_time" "$cuda" "$glibc_needed" <<'PY'
import hashlib, json, os, sys
stage, commit, dirty, commit_time, cuda, glibc_needed = sys.argv[1:]
files = []
for base, _, names in os.walk(stage):
    for name in sorted(names):
        path = os.path.join(base, name)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        files.append({"path": os.path.relpath(path, stage), "bytes": os.path.getsize(path), "sha256": digest})
files.sort(key=lambda f: f["path"])
info = {"commit": commit, "modified": dirty != "0", "commit_time": commit_time, "cuda_toolkit": cuda,
        "build_type": "Release", "device_code": "sm_80, sm_90 machine code; compute_80, compute_90 PTX",
        "glibc_needed": glibc_needed,
        "files": files}
with open(os.path.join(stage, "BUILD.json"), "w") as out:
    json.dump(info, out, indent=1)
PY

bytes=$(du -sb "$stage" | cut -f1)
if ((bytes > limit_bytes)); then
  du -ab "$stage" | sort -n | tail -n 8 >&2
  die "the kit would be $((bytes / 1024 / 1024)) MiB, over the 60 MiB limit (largest files above)"
fi
rm -rf "$dir"
mv "$stage" "$dir"
echo "bundle: $dir: $(find "$dir" -type f | wc -l) files, $((bytes / 1024)) KiB; copied libraries: ${copied[*]:-none}"
