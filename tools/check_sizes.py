#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The size rules of CONTRIBUTING.md: no product file over 800 lines, no function over 100.

Usage: check_sizes.py [FILE...]   (default: every file git tracks under the current directory)

Product files are the tracked sources, scripts and CMake files outside tests/, less the tests that
live beside the code (test_*.py, *_test.*, *_check.py). Functions are measured from the line of
their name to the line of their closing brace (C, C++, CUDA: a scan of brace depth with comments,
strings and character literals blanked) or their last statement (Python: the ast module). Prints one
line per breach, FILE:LINE: what, and exits 1 when there is one."""
import ast
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100
C_SUFFIXES = (".c", ".cc", ".cpp", ".h", ".cu", ".cuh")
CODE_SUFFIXES = C_SUFFIXES + (".py", ".sh", ".cmake", ".in", ".toml")
# A brace that opens a scope holding functions rather than a function body.
# (The "C" of extern "C" is blanked with the other strings before the match.)
SCOPE_HEAD = re.compile(r"\b(namespace|class|struct|union|enum)\b|\bextern\s*$")
ACCESS_LABEL = re.compile(r"^\s*((public|private|protected)\s*:(?!:)\s*)+")
CONTROL_HEAD = re.compile(r"\b(if|for|while|switch|catch|do|else|try)\s*(\(|$)")


def is_product(path):
    name = os.path.basename(path)
    if path.startswith("tests/") or "/tests/" in path:
        return False
    if name == "CMakeLists.txt":
        return True
    if not name.endswith(CODE_SUFFIXES):
        return False
    stem = name.split(".")[0]
    return not (stem.startswith("test_") or stem.endswith(("_test", "_check")))


def blank_comments_and_literals(text):
    """The text with comments, strings and character literals replaced by spaces (newlines kept),
    so braces inside them do not count."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + m.end())
            end = n if end < 0 else end + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c in "\"'":
            # A digit separator (1'000'000) is no literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(head):
    """The name a function body's head declares: the identifier before its parameter list."""
    head = re.sub(r"\s+", " ", head)
    # Cut a constructor's initializer list: the first ':' after the parameters that is not '::'.
    m = re.search(r"([~\w:<>]+)\s*\(", head)
    return m.group(1) if m else head.strip()[:40]


def c_functions(text):
    """(name, first line, last line) of each function body at namespace or class scope."""
    code = blank_comments_and_literals(text)
    # The preprocessor's lines (and their continuations) take no part in the scan.
    code = re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)
    found = []
    stack = []  # per open brace: "scope", "function" or "other"
    head_start = 0
    function_start = None
    for i, c in enumerate(code):
        if c in ";":
            if all(kind == "scope" for kind in stack):
                head_start = i + 1
        elif c == "{":
            if all(kind == "scope" for kind in stack):
                head = code[head_start:i]
                if SCOPE_HEAD.search(head) and "(" not in head.split("{")[-1].split("=")[0]:
                    stack.append("scope")
                    head_start = i + 1
                elif "(" in head and not head.rstrip().endswith("=") and not CONTROL_HEAD.search(head.strip()):
                    stack.append("function")
                    label = ACCESS_LABEL.match(head)
                    stripped = label.end() if label else len(head) - len(head.lstrip())
                    function_start = (code.count("\n", 0, head_start + stripped) + 1, function_name(head))
                else:
                    stack.append("other")
            else:
                stack.append("other")
        elif c == "}":
            kind = stack.pop() if stack else "scope"
            if kind == "function" and function_start:
                first, name = function_start
                found.append((name, first, code.count("\n", 0, i) + 1))
                function_start = None
            if all(k == "scope" for k in stack):
                head_start = i + 1
    return found


def python_functions(text, path):
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        return [("(does not parse: %s)" % e.msg, e.lineno or 1, e.lineno or 1)]
    return [(node.name, node.lineno, node.end_lineno) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def breaches(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if lines > MAX_FILE_LINES:
        yield "%s:1: %d lines (at most %d: split it by what its parts own)" % (path, lines, MAX_FILE_LINES)
    if path.endswith(C_SUFFIXES):
        functions = c_functions(text)
    elif path.endswith(".py"):
        functions = python_functions(text, path)
    else:
        functions = []
    for name, first, last in functions:
        if last - first + 1 > MAX_FUNCTION_LINES:
            yield "%s:%d: %s is %d lines (at most %d: split it into named steps)" % (
                path, first, name, last - first + 1, MAX_FUNCTION_LINES)


def main(argv):
    if argv:
        paths = argv
    else:
        listed = subprocess.run(["git", "ls-files", "-z"], capture_output=True, text=True)
        if listed.returncode != 0:
            print("check_sizes.py: git ls-files failed (not a git checkout?): " + listed.stderr.strip(),
                  file=sys.stderr)
            return 2
        listed = listed.stdout
        paths = [p for p in listed.split("\0") if p and is_product(p) and not os.path.islink(p)]
    found = [line for path in paths for line in breaches(path)]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
