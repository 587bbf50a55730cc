#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks a GPU kit made by tools/gpu/bundle.sh, on the CPU, so a kit that cannot run on the GPU
# machine fails here rather than there.
#
#   check_kit.sh size KIT               at most 60 MiB
#   check_kit.sh elf-deps KIT           every ELF needs only the kit's lib/ and image-provides.txt
#                                       (readelf), and resolves so (ldd with only the kit on
#                                       LD_LIBRARY_PATH); no RPATH/RUNPATH; the glibc floor stated in
#                                       image-provides.txt and BUILD.json is the newest GLIBC_ needed
#   check_kit.sh no-build-paths KIT DIR...   no file names any of these directories
#   check_kit.sh python KIT             every Python file compiles
#   check_kit.sh device-code KIT        sm_90 machine code and PTX for later GPUs wherever device
#                                       code is, and in libnccl-net-sieve.so above all
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
[[ $# -ge 2 ]] || fail "usage: check_kit.sh size|elf-deps|no-build-paths|python|device-code KIT [DIR...]"
check=$1 kit=$2
shift 2
[[ -x $kit/run.sh && -d $kit/bin && -d $kit/lib ]] || fail "$kit is not a GPU kit (no run.sh, bin/, lib/)"

elves() {  # every ELF file of the kit
  local f
  for f in "$kit"/bin/* "$kit"/lib/*; do
    [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]] && echo "$f"
  done
}

case $check in
size)
  bytes=$(du -sb "$kit" | cut -f1)
  echo "kit: $((bytes / 1024)) KiB in $(find "$kit" -type f | wc -l) files"
  ((bytes <= 60 * 1024 * 1024)) || fail "the kit is $((bytes / 1024 / 1024)) MiB, over 60 MiB"
  ;;

elf-deps)
  mapfile -t provided < <(grep -v '^\s*\(#\|$\)' "$kit/image-provides.txt")
  is_provided() { local p; for p in "${provided[@]}"; do [[ $1 == "$p" ]] && return 0; done; return 1; }
  problems=0
  glibc_max="" glibcxx_max=""
  for elf in $(elves); do
    name=${elf#"$kit"/}
    needed=$(readelf -d "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    from_image=() from_kit=()
    for soname in $needed; do
      if [[ -f $kit/lib/$soname ]]; then from_kit+=("$soname")
      elif is_provided "$soname"; then from_image+=("$soname")
      else echo "$name needs $soname: neither in the kit's lib/ nor in image-provides.txt"; problems=1
      fi
    done
    # The kit relies on run.sh's LD_LIBRARY_PATH alone: a search path would be this machine's.
    search_path=$(readelf -d "$elf" | grep -E '\((RPATH|RUNPATH)\)' || true)
    if [[ -n $search_path ]]; then
      echo "$name has a library search path of its own: $search_path"; problems=1
    fi
    # ldd resolves the whole tree (the copied libraries' own needs too) the way the loader will there.
    while read -r soname arrow path _; do
      if [[ $arrow == "=>" && $path == "not" ]]; then
        is_provided "$soname" || { echo "$name: $soname not found"; problems=1; }
      elif [[ $arrow == "=>" && -f $kit/lib/$soname && $(realpath "$path") != "$(realpath "$kit/lib/$soname")" ]]; then
        echo "$name: $soname resolves to $path, not to the kit's copy"; problems=1
      elif [[ $arrow == "=>" && ! -f $kit/lib/$soname ]] && ! is_provided "$soname"; then
        echo "$name: $soname comes from $path, which the GPU image is not declared to provide"; problems=1
      fi
    done < <(env -i PATH="$PATH" LD_LIBRARY_PATH="$kit/lib" ldd "$elf" 2>&1)
    versions=$(objdump -T "$elf" 2>/dev/null | grep -o 'GLIBC_[0-9.]*\|GLIBCXX_[0-9.]*' | sort -u || true)
    glibc_max=$(printf '%s\n' "$glibc_max" $(grep '^GLIBC_' <<<"$versions") | sort -V | tail -n 1)
    glibcxx_max=$(printf '%s\n' "$glibcxx_max" $(grep '^GLIBCXX_' <<<"$versions") | sort -V | tail -n 1)
    echo "$name: kit ${from_kit[*]:-(none)}; image ${from_image[*]:-(none)}"
  done
  echo "newest symbol versions needed: ${glibc_max:-none}, ${glibcxx_max:-none}"
  # The glibc floor the kit states (image-provides.txt, BUILD.json, which run.sh compares with the
  # machine's) must be the one its programs need.
  floor=${glibc_max#GLIBC_}
  stated=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("glibc_needed", ""))' "$kit/BUILD.json")
  [[ $stated == "$floor" ]] || { echo "BUILD.json states glibc ${stated:-nothing}, the programs need $floor"; problems=1; }
  grep -q "^# glibc $floor or newer" "$kit/image-provides.txt" ||
    { echo "image-provides.txt does not state the floor: '# glibc $floor or newer'"; problems=1; }
  ((problems == 0)) || fail "some ELF files of the kit need libraries the GPU machine may lack (above)"
  ;;

no-build-paths)
  [[ $# -ge 1 ]] || fail "no-build-paths needs the directories to look for"
  found=0
  for dir in "$@"; do
    dir=${dir%/}
    if grep -r -l -a -F -- "$dir/" "$kit"; then
      echo "the files above name $dir/"; found=1
    fi
  done
  ((found == 0)) || fail "the kit names directories of the machine that built it"
  echo "no file of the kit names: $*"
  ;;

python)
  mapfile -t files < <(find "$kit" -name '*.py' | sort)
  ((${#files[@]} > 0)) || fail "no Python file in the kit"
  "${PYTHON:-python3}" -c '
import sys
for path in sys.argv[1:]:
    with open(path) as f:
        compile(f.read(), path, "exec")
' "${files[@]}"
  echo "${#files[@]} Python files compile: ${files[*]##*/}"
  [[ -z $(find "$kit" -name __pycache__) ]] || fail "the kit holds __pycache__ directories"
  ;;

device-code)
  mapfile -t files < <(elves)
  listing=$("${PYTHON:-python3}" "$here/fatbin_archs.py" --require-sm 90 "${files[@]}") || { echo "$listing"; fail "device code for sm_90 missing (above)"; }
  echo "$listing"
  ! grep -q "libnccl-net-sieve.so: no device code" <<<"$listing" || fail "libnccl-net-sieve.so holds no device code"
  ;;

*) fail "unknown check $check";;
esac
