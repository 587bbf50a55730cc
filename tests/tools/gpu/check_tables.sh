#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tools/gpu/summary_tables.py on the sample summary gives exactly the tables recorded beside it.
# (After a deliberate change of the tables: python3 tools/gpu/summary_tables.py
# tests/tools/gpu/sample_summary.json > tests/tools/gpu/sample_tables.md, and read the diff.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"${PYTHON:-python3}" "$here/../../../tools/gpu/summary_tables.py" "$here/sample_summary.json" | diff -u "$here/sample_tables.md" - ||
  { echo "FAIL: the tables differ from tests/tools/gpu/sample_tables.md (above)" >&2; exit 1; }
echo "the tables of the sample summary are as recorded"
