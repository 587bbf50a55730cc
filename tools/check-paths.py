#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every path into the tree that a comment, script or document names exists.

A comment that says where something lives ("the tests are in tests/net/tcp/", "tools/python/sieve.py")
goes stale silently when a file moves. This scans the tracked sources, scripts, CMake files and
documents for words that start with a top-level folder (plugin/, net/, compress/, topology/, tests/,
tools/, docs/, .ci/) and fails on one that names nothing:
- a path with a file extension must exist, from the top of the tree or from the naming file's folder;
- a path without one may be a build output named after its folder (tools/sieve-info/sieve-info), so
  its folder must exist;
- system headers (#include <net/if.h>) and patterns with * are not paths into the tree.

    check-paths.py [ROOT]      (exit 1 listing file:line: path for each that names nothing)
"""

import os
import re
import subprocess
import sys

TOP = r"(?:plugin|net|compress|topology|tests|tools|docs|\.ci)"
PATH = re.compile(r"(?<![\w./<-])(" + TOP + r"/[\w./+*-]*[\w+*-])")
SCANNED = re.compile(r"(\.(cc|h|cu|c|py|sh|md|txt|def|cmake|in|toml)|CMakeLists\.txt)$")
SYSTEM_INCLUDE = re.compile(r"#\s*include\s*<[^>]*>")
# These name paths of trees they make themselves (a check's examples and its test's tree).
EXEMPT = {"tools/check-paths.py", "tests/tools/check_paths_test.sh", "tests/tools/check_sizes_test.py"}


def missing_paths(root):
    files = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    problems = []
    for name in files:
        if not SCANNED.search(name) or name in EXEMPT:
            continue
        folder = os.path.dirname(name)
        try:
            with open(os.path.join(root, name), errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            for match in PATH.finditer(SYSTEM_INCLUDE.sub("", line)):
                path = match.group(1).rstrip(".")
                if "*" in path:
                    continue
                candidates = [os.path.join(root, path), os.path.join(root, folder, path)]
                if any(os.path.exists(c) for c in candidates):
                    continue
                has_extension = "." in os.path.basename(path)
                if not has_extension and any(os.path.isdir(os.path.dirname(c)) for c in candidates):
                    continue  # a build output named after its folder
                problems.append("%s:%d: %s" % (name, number, path))
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems = missing_paths(os.path.abspath(root))
    for problem in problems:
        print("check-paths: names nothing: " + problem)
    if problems:
        print("check-paths: %d path(s) name no file or folder of the tree; fix the text or the path" % len(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
