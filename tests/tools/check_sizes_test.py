#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tools/check_sizes.py finds what is over the limits and nothing else: a C++ or Python function of
101 lines is reported by name, one of 100 is not; braces in comments, strings, character and raw
literals, and lambdas inside a function, do not move where a function ends; class and namespace
scopes hold functions, an initializer list is none; a product file of 801 lines is reported, one
under tests/ or named like a test is not looked at.
Usage: check_sizes_test.py SOURCE_DIR"""
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
SOURCE_DIR = os.path.abspath(SOURCE_DIR)
CHECKER = os.path.join(SOURCE_DIR, "tools", "check_sizes.py")


def cc_function(name, lines, body_line="  x += 1;"):
    """A C++ function `lines` long from its name to its closing brace."""
    return "int %s(int x) {\n" % name + (body_line + "\n") * (lines - 3) + "  return x;\n}\n"


def py_function(name, lines):
    return "def %s(x):\n" % name + "    x += 1\n" * (lines - 2) + "    return x\n"


class CheckSizes(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return name

    def check(self, *names):
        done = subprocess.run([sys.executable, CHECKER, *names], cwd=self.dir.name, capture_output=True, text=True)
        return done.returncode, done.stdout

    def test_a_function_of_101_lines_is_reported_by_name_and_one_of_100_is_not(self):
        self.write("a.cc", cc_function("fits", 100) + "\n" + cc_function("too_long", 101))
        rc, out = self.check("a.cc")
        self.assertEqual(rc, 1)
        self.assertEqual(out, "a.cc:102: too_long is 101 lines (at most 100: split it into named steps)\n")

    def test_braces_in_comments_and_literals_do_not_count(self):
        tricky = ("int tricky() {\n"
                  '  const char* s = "{{{ \\" }";  // } {\n'
                  "  /* }\n"
                  "  } */\n"
                  "  char c = '}';\n"
                  '  const char* raw = R"x({ ")x";\n'
                  "  int n = 1'000;\n"
                  "  auto f = [&] { return s[0] + c + raw[0] + n; };\n"
                  "  if (f()) { return 1; }\n"
                  "  return 0;\n"
                  "}\n")
        self.write("b.cc", tricky + cc_function("after", 101))
        rc, out = self.check("b.cc")
        self.assertEqual(rc, 1)
        self.assertIn("b.cc:12: after is 101 lines", out)
        self.assertNotIn("tricky", out)

    def test_member_functions_count_and_an_initializer_is_no_function(self):
        text = ("namespace n {\n"
                "const int table[] = {\n" + "  1,\n" * 150 + "};\n"
                "class C {\n"
                " public:\n"
                "  C() : x_(0) {\n" + "    ++x_;\n" * 99 + "  }\n"
                "  int x_;\n"
                "};\n"
                'extern "C" {\n' + cc_function("c_entry", 101) + "}\n"
                "}  // namespace n\n")
        self.write("c.h", text)
        rc, out = self.check("c.h")
        self.assertEqual(rc, 1)
        self.assertEqual(out, "c.h:156: C is 101 lines (at most 100: split it into named steps)\n"
                              "c.h:260: c_entry is 101 lines (at most 100: split it into named steps)\n")

    def test_python_functions_are_measured_nested_ones_too(self):
        inner = "def outer():\n" + "".join("    " + line + "\n" for line in py_function("inner", 101).splitlines())
        self.write("d.py", py_function("fits", 100) + inner + "    return inner\n")
        rc, out = self.check("d.py")
        self.assertEqual(rc, 1)
        self.assertIn("inner is 101 lines", out)
        self.assertIn("outer is 103 lines", out)
        self.assertNotIn("fits", out)

    def test_product_files_over_800_lines_and_what_is_not_product(self):
        long_text = "int x;\n" * 801
        for name in ("net/long.cc", "tests/net/long_test.cc", "tools/python/test_long.py", "docs/LONG.md",
                     "tools/ok.cc"):
            self.write(name, long_text if name != "tools/ok.cc" else "int x;\n" * 800)
        subprocess.run(["git", "init", "-q"], cwd=self.dir.name, check=True)
        subprocess.run(["git", "add", "."], cwd=self.dir.name, check=True)
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertEqual(out, "net/long.cc:1: 801 lines (at most 800: split it by what its parts own)\n")

    @unittest.skipUnless(subprocess.run(["git", "-C", SOURCE_DIR, "rev-parse"], capture_output=True).returncode == 0,
                         "the source tree is not a git checkout: the checker reads what git tracks")
    def test_this_repository_passes(self):
        done = subprocess.run([sys.executable, CHECKER], cwd=SOURCE_DIR, capture_output=True, text=True)
        self.assertEqual((done.returncode, done.stdout), (0, ""))


if __name__ == "__main__":
    unittest.main()
