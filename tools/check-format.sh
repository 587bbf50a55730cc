#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when a tracked C, C++ or CUDA file differs from what clang-format makes of it with the
# repository's .clang-format (clang-format 14, Debian 12's), or when a tracked source, script or
# CMake file lacks the SPDX license line in its first three lines, or when a comment, script or
# document names a path into the tree that does not exist (tools/check-paths.py), or when flake8
# finds fault with a tracked Python file (.flake8), or (tools/check-sizes.sh) a product file or
# function is over the size limits. Prints the files and the fix.
# Runs from any directory; needs a git checkout (it checks what git tracks, nothing generated).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
formatter=${CLANG_FORMAT:-clang-format}
command -v "$formatter" >/dev/null || { echo "check-format: $formatter not found (apt-get install clang-format)" >&2; exit 1; }
mapfile -t files < <(git ls-files -- '*.c' '*.cc' '*.h' '*.cu' '*.cuh' '*.cpp')
((${#files[@]} > 0)) || { echo "check-format: no tracked sources found under $root" >&2; exit 1; }
# One clang-format for every file (a process per file takes ten times as long); its diagnostics
# name each file it would change.
mapfile -t bad < <("$formatter" --style=file --dry-run --Werror "${files[@]}" 2>&1 |
                   sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*/\1/p' | sort -u)
if ((${#bad[@]} > 0)); then
  echo "check-format: ${#bad[@]} file(s) not formatted:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "check-format: fix with: clang-format -i ${bad[*]}" >&2
  exit 1
fi
# The license line: every file a contributor writes code in (CONTRIBUTING.md).
mapfile -t licensed < <(git ls-files -- '*.c' '*.cc' '*.h' '*.cu' '*.cuh' '*.cpp' '*.py' '*.sh' '*.cmake' \
                          '*.in' '*.toml' '*CMakeLists.txt' .ci/run)
unlicensed=()
for f in "${licensed[@]}"; do
  [[ -L $f ]] || head -3 "$f" | grep -q 'SPDX-License-Identifier: Apache-2.0' || unlicensed+=("$f")
done
if ((${#unlicensed[@]} > 0)); then
  echo "check-format: ${#unlicensed[@]} file(s) without 'SPDX-License-Identifier: Apache-2.0' in their first 3 lines:" >&2
  printf '  %s\n' "${unlicensed[@]}" >&2
  exit 1
fi
python3 "$root/tools/check-paths.py" "$root"
# The size rules (no product file over 800 lines, no function over 100) are checked with the format.
"$root/tools/check-sizes.sh"
# Python: flake8 (pyflakes' mistakes, pycodestyle's layout) on every tracked .py file, with .flake8.
command -v flake8 >/dev/null || { echo "check-format: flake8 not found (apt-get install flake8)" >&2; exit 1; }
mapfile -t python_files < <(git ls-files -- '*.py')
flake8 "${python_files[@]}" || { echo "check-format: fix what flake8 says above (settings: .flake8)" >&2; exit 1; }
echo "check-format: ${#files[@]} files formatted, ${#licensed[@]} files carry the SPDX line, every path named exists," \
     "no file or function over its size, ${#python_files[@]} Python files pass flake8"
