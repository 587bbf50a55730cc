#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails when a product file (what git tracks outside tests/, less the tests beside the code) is over
# 800 lines or a C, C++, CUDA or Python function in one is over 100 (CONTRIBUTING.md, "Where things
# live"). The scan is tools/check_sizes.py: brace depth for C and C++, the ast module for Python.
# Runs from any directory; tools/check-format.sh runs it, so the test command enforces it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v python3 >/dev/null || { echo "check-sizes: python3 not found" >&2; exit 1; }
if ! found=$(python3 tools/check_sizes.py "$@"); then
  echo "check-sizes: over the limits (files: 800 lines, functions: 100):" >&2
  printf '%s\n' "$found" | sed 's/^/  /' >&2
  exit 1
fi
echo "check-sizes: no product file over 800 lines, no function over 100"
