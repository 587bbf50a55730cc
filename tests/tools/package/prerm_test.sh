#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The .deb's prerm without py3clean removes the byte-code where Python writes it for the package
# sieve (sieve/__pycache__), in a scratch root given as dpkg's DPKG_ROOT.
# Usage: prerm_test.sh tools/package/debian/prerm
set -eu
prerm=$1
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
package=$root/usr/lib/python3/dist-packages/sieve
mkdir -p "$package/__pycache__" "$root/bin"
touch "$package/__init__.py" "$package/__pycache__/__init__.cpython-311.pyc"
ln -s "$(command -v rm)" "$root/bin/rm"  # a PATH with rm and without py3clean
DPKG_ROOT=$root PATH=$root/bin /bin/sh "$prerm" remove
if [ -e "$package/__pycache__" ]; then
  echo "FAIL: prerm without py3clean left $package/__pycache__"
  exit 1
fi
[ -e "$package/__init__.py" ] || { echo "FAIL: prerm removed the package's own files"; exit 1; }
echo "prerm without py3clean removes sieve/__pycache__"
