# SPDX-License-Identifier: Apache-2.0
"""tools/test-report.py, the test command's verdict on which suites ran.

- On small ctest projects made here: a clean run passes; a failure, an unlabelled test, a skip that
  names no lacking thing, a skip of a suite the host has, and an expected suite that was never
  registered each fail the run, naming the test or suite.
- On the real suite, with torch taken off the path: every Python suite of this build (labels python
  and needs-torch) is copied, with its command, environment and skip code, into a project of its own,
  run by ctest with a `torch` package first on PYTHONPATH that cannot be imported, and judged as
  tools/test.sh judges on a host that installed torch. The scripts must skip (not pass), and the report
  must fail naming them.

    test_report_test.py SOURCE_DIR BUILD_DIR CTEST
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR, BUILD_DIR, CTEST = sys.argv[1:4] if len(sys.argv) >= 4 else (None, None, "ctest")
REPORT = os.path.join(SOURCE_DIR or ".", "tools", "test-report.py")


def bracket(text):
    return "[==[%s]==]" % text


def write_project(directory, tests):
    """A ctest project of tests: (name, command list, {property: value or list})."""
    lines = []
    for name, command, properties in tests:
        lines.append("add_test(%s %s)" % (bracket(name), " ".join(bracket(word) for word in command)))
        if properties:
            values = " ".join("%s %s" % (key, bracket(";".join(value) if isinstance(value, list) else str(value)))
                              for key, value in properties.items())
            lines.append("set_tests_properties(%s PROPERTIES %s)" % (bracket(name), values))
    with open(os.path.join(directory, "CTestTestfile.cmake"), "w") as out:
        out.write("\n".join(lines) + "\n")


def run_project(directory, env=None):
    junit = os.path.join(directory, "junit.xml")
    subprocess.run([CTEST, "--test-dir", directory, "--output-junit", junit, "--timeout", "120"], env=env,
                   capture_output=True, text=True, timeout=600)
    return junit


def report(directory, junit, *args):
    done = subprocess.run([sys.executable, REPORT, "--run", directory, junit] + list(args), capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


class OnSmallProjects(unittest.TestCase):
    def judge(self, tests, *args):
        with tempfile.TemporaryDirectory() as directory:
            write_project(directory, tests)
            return report(directory, run_project(directory), *args)

    def test_a_clean_run_passes_and_prints_the_table(self):
        code, out = self.judge([("ok", ["true"], {"LABELS": ["area"]}),
                                ("gpu", ["sh", "-c", "exit 77"],
                                 {"LABELS": ["area", "needs-gpu"], "SKIP_RETURN_CODE": 77})],
                               "--expect", "area")
        self.assertEqual(code, 0, out)
        self.assertRegex(out, r"area\s+yes\s+always\s+2\s+1\s+0\s+1")
        self.assertRegex(out, r"needs-gpu\s+no\s+host lacks gpu\s+1\s+0\s+0\s+1")
        self.assertIn("1 passed, 0 failed, 1 skipped", out)

    def test_each_way_of_not_running_fails_the_run(self):
        cases = {
            "a failure": ([("bad", ["false"], {"LABELS": ["area"]})], [], "bad failed"),
            "no label": ([("bare", ["true"], {})], [], "bare carries no label"),
            "a skip naming nothing": ([("quiet", ["sh", "-c", "exit 77"],
                                        {"LABELS": ["area"], "SKIP_RETURN_CODE": 77})], [],
                                      "quiet was skipped on a host that has what it needs (it names no needs-label)"),
            "a skip of what the host has": ([("py", ["sh", "-c", "exit 77"],
                                              {"LABELS": ["area", "needs-torch"], "SKIP_RETURN_CODE": 77})],
                                            ["--have", "torch"],
                                            "py was skipped on a host that has what it needs (needs-torch)"),
            "a suite never registered": ([("ok", ["true"], {"LABELS": ["area"]})], ["--have", "cuda-toolkit"],
                                         "suite needs-cuda-toolkit was expected (host has cuda-toolkit)"),
            "an area that did not run": ([("ok", ["true"], {"LABELS": ["area"]})], ["--expect", "docs"],
                                         "suite docs was expected (always)"),
            # tools/test.sh has torch-newest: the Python suites' second run, on the newest PyTorch, is
            # expected beside the first.
            "the newest PyTorch's suites not run": ([("py", ["true"], {"LABELS": ["area", "needs-torch"]})],
                                                    ["--have", "torch", "--have", "torch-newest"],
                                                    "suite needs-torch-newest was expected (host has torch-newest)"),
        }
        for case, (tests, args, words) in cases.items():
            code, out = self.judge(tests, *args)
            self.assertEqual(code, 1, "%s:\n%s" % (case, out))
            self.assertIn(words, out, case)
            self.assertIn("test-report: FAILED", out, case)


class TorchOffThePath(unittest.TestCase):
    def test_the_torch_suites_skip_and_the_report_fails(self):
        shown = subprocess.run([CTEST, "--test-dir", BUILD_DIR, "--show-only=json-v1", "-L", "needs-torch"],
                               capture_output=True, text=True, check=True, timeout=120).stdout
        tests = []
        for test in json.loads(shown)["tests"]:
            properties = {p["name"]: p["value"] for p in test.get("properties", [])}
            if "python" not in properties.get("LABELS", []):
                continue  # the Python suites; the scripts that start them (sieve-bench's) take longer
            kept = {key: properties[key] for key in ("ENVIRONMENT", "SKIP_RETURN_CODE", "LABELS") if key in properties}
            if "WORKING_DIRECTORY" in properties:
                kept["WORKING_DIRECTORY"] = properties["WORKING_DIRECTORY"]
            tests.append((test["name"], test["command"], kept))
        names = sorted(name for name, _, _ in tests)
        # The Python suites of this tree: a configure that dropped them would fail here as well.
        for expected in ("python_ddp_hook", "python_fsdp2_custom_collectives", "proxy_python_binding"):
            self.assertIn(expected, names)
        with tempfile.TemporaryDirectory() as directory:
            shadow = os.path.join(directory, "shadow", "torch")
            os.makedirs(shadow)
            with open(os.path.join(shadow, "__init__.py"), "w") as out:
                out.write("raise ModuleNotFoundError(\"No module named 'torch' (taken off the path by the test)\", "
                          "name='torch')\n")
            project = os.path.join(directory, "project")
            os.makedirs(project)
            write_project(project, tests)
            env = dict(os.environ, PYTHONPATH=os.path.dirname(shadow))
            junit = run_project(project, env)
            # A host that has everything these suites need (a GPU for the GPU case too), torch included:
            # only torch's absence from the path can make them skip.
            needs = sorted({label[len("needs-"):] for _, _, properties in tests for label in properties["LABELS"]
                            if label.startswith("needs-")})
            self.assertIn("torch", needs)
            code, out = report(project, junit, *["--have=" + what for what in needs])
        self.assertEqual(code, 1, out)
        self.assertIn("suite needs-torch was expected (host has torch) and no test of it passed", out)
        for name in names:
            self.assertIn("%s was skipped on a host that has what it needs" % name, out)


if __name__ == "__main__":
    if BUILD_DIR is None:
        sys.exit("usage: test_report_test.py SOURCE_DIR BUILD_DIR CTEST")
    unittest.main(argv=sys.argv[:1])
