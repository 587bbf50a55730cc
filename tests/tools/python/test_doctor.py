# SPDX-License-Identifier: Apache-2.0
"""`python -m sieve` (the doctor) and `python -m sieve run` (the launcher) against the built library
(SIEVE_LIBRARY), without torch: the library loaded in a child, its capabilities and --require, a
library that cannot load named by what it lacks, NCCL_NET_PLUGIN chosen per NCCL version and never
replacing another plugin unasked, and the exit statuses. SIEVE_TEST_PROXY_BUILT says whether the
build has CUDA (the proxy).

Run: SIEVE_LIBRARY=build/plugin/libnccl-net-sieve.so SIEVE_TEST_PROXY_BUILT=0 python3 test_doctor.py"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE, PACKAGE_DIR]

from suite import main  # noqa: E402
from sieve import _launch  # noqa: E402

LIBRARY = os.path.abspath(os.environ["SIEVE_LIBRARY"])
PROXY_BUILT = os.environ["SIEVE_TEST_PROXY_BUILT"] == "1"
# What takes part in choosing: cleared, so the host's own settings change nothing here.
CLEARED = ("LD_PRELOAD", "NCCL_NET_PLUGIN", "SIEVE_LIBRARY", "LD_LIBRARY_PATH")


def sieve(*args, stdout=subprocess.PIPE, **env):
    environment = {k: v for k, v in os.environ.items() if k not in CLEARED}
    environment.update(PYTHONPATH=PACKAGE_DIR, SIEVE_LIBRARY=LIBRARY)
    environment.update(env)
    with tempfile.TemporaryDirectory() as cwd:  # never the checkout: -m puts the current directory on sys.path
        return subprocess.run([sys.executable, "-m", "sieve", *args], cwd=cwd, env=environment, stdout=stdout,
                              stderr=subprocess.PIPE, text=True, timeout=120)


def python_code(code, **env):
    environment = {k: v for k, v in os.environ.items() if k not in CLEARED}
    environment.update(PYTHONPATH=PACKAGE_DIR)
    environment.update(env)
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120)


class Advice(unittest.TestCase):
    def test_not_loaded_advises_the_launcher_and_the_path(self):
        # A wheel's copy is on no loader path: LD_PRELOAD by name would not find it.
        done = python_code("import sieve; sieve.library()")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("start the job with python -m sieve run -- COMMAND, or LD_PRELOAD=", done.stderr)


class Capabilities(unittest.TestCase):
    def test_the_doctor_reports_them_and_fails_for_a_required_one_missing(self):
        done = sieve()
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("loads: yes, in a fresh process", done.stdout)
        line = next(text for text in done.stdout.splitlines() if text.startswith("capabilities: "))
        self.assertEqual("proxy" in line.split(": ", 1)[1].split(", "), PROXY_BUILT, line)
        self.assertIn("host-compact", line)
        required = sieve("--require", "proxy,host-compact")
        if PROXY_BUILT:
            self.assertEqual(required.returncode, 0, required.stderr)
        else:
            self.assertEqual(required.returncode, 1)
            self.assertEqual(required.stderr.strip().splitlines(),
                             ["python -m sieve: --require proxy: %s lacks the collective proxy (built without CUDA: "
                              "under LD_PRELOAD it intercepts no collective)" % LIBRARY])
        unknown = sieve("--require", "proxie")
        self.assertEqual(unknown.returncode, 2)
        self.assertIn("unknown capability 'proxie'", unknown.stderr)

    def test_info_json(self):
        done = sieve("info", "--json")
        self.assertEqual(done.returncode, 0, done.stderr)
        report = json.loads(done.stdout)
        self.assertEqual((report["library"], report["loads"]), (LIBRARY, True))
        self.assertEqual("proxy" in report["capabilities"], PROXY_BUILT)
        self.assertEqual(report["environment"]["LD_PRELOAD"], LIBRARY)

    def test_the_launcher_warns_without_the_proxy_and_refuses_when_it_is_required(self):
        ran = sieve("run", "--require", "proxy", "--", sys.executable, "-c", "print('RAN')")
        self.assertEqual((ran.returncode, "RAN" in ran.stdout), (0, True) if PROXY_BUILT else (1, False), ran.stderr)
        ran = sieve("run", "--", sys.executable, "-c", "print('RAN')")
        self.assertEqual(ran.returncode, 0, ran.stderr)
        self.assertEqual("lacks the collective proxy" in ran.stderr, not PROXY_BUILT, ran.stderr)


class UnloadableLibrary(unittest.TestCase):
    """A library whose dependency the loader cannot find (as libhwloc.so.15 on a node without hwloc)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sieve-doctor-")
        compiler = shutil.which("cc") or shutil.which("gcc")
        assert compiler, "no C compiler: the build host has one"
        with open(os.path.join(cls.tmp, "gone.c"), "w") as f:
            f.write("int sieve_test_gone(void) { return 1; }\n")
        with open(os.path.join(cls.tmp, "lib.c"), "w") as f:
            f.write("int sieve_test_gone(void);\nint sieve_capabilities(void) { return sieve_test_gone(); }\n")
        gone = os.path.join(cls.tmp, "libsieve-test-gone.so.1")
        cls.library = os.path.join(cls.tmp, "lib", "libnccl-net-sieve.so")
        os.mkdir(os.path.dirname(cls.library))
        subprocess.run([compiler, "-shared", "-fPIC", "-Wl,-soname,libsieve-test-gone.so.1", "-o", gone,
                        os.path.join(cls.tmp, "gone.c")], check=True)
        subprocess.run([compiler, "-shared", "-fPIC", "-o", cls.library, os.path.join(cls.tmp, "lib.c"), gone],
                       check=True)
        os.unlink(gone)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_the_doctor_fails_naming_the_missing_library(self):
        done = sieve(SIEVE_LIBRARY=self.library)
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
        self.assertIn("cannot be loaded: it needs libsieve-test-gone.so.1, which the dynamic loader does not find",
                      done.stderr)
        self.assertIn("loads: no", done.stdout)

    def test_the_binding_names_the_missing_library(self):
        done = python_code("import sieve; sieve.stats()", SIEVE_LIBRARY=self.library)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("it needs libsieve-test-gone.so.1, which the dynamic loader does not find", done.stderr)
        self.assertNotIn("give its path", done.stderr)

    def test_the_launcher_refuses_instead_of_a_dead_job(self):
        ran = sieve("run", "--", sys.executable, "-c", "print('RAN')", SIEVE_LIBRARY=self.library)
        self.assertEqual(ran.returncode, 1)
        self.assertNotIn("RAN", ran.stdout)
        self.assertIn("libsieve-test-gone.so.1", ran.stderr)


PROBE = "import os; print(os.environ.get('NCCL_NET_PLUGIN')); print(os.environ.get('LD_LIBRARY_PATH'))"


class NetPluginVariable(unittest.TestCase):
    def test_per_nccl_version(self):
        path = "/opt/x/libnccl-net-sieve.so"
        for nccl in ("2.19.3", "2.20.5", None):  # 2.19/2.20 load only libnccl-net-<value>.so; unknown: the name
            variables, _ = _launch.plugin_variables(path, nccl, {"LD_LIBRARY_PATH": "/a:/opt/x"})
            self.assertEqual(variables, {"NCCL_NET_PLUGIN": "sieve", "LD_LIBRARY_PATH": "/opt/x:/a"}, nccl)
        for nccl in ("2.21.5", "2.26.6", "2.28.9", "2.30.7"):
            self.assertEqual(_launch.plugin_variables(path, nccl, {})[0], {"NCCL_NET_PLUGIN": path}, nccl)
        long_path = "/" + "d" * 240 + "/libnccl-net-sieve.so"  # over 2.28's 254 characters
        self.assertEqual(_launch.plugin_variables(long_path, "2.28.9", {})[0]["NCCL_NET_PLUGIN"], "sieve")
        self.assertEqual(_launch.plugin_variables("/a,b/libnccl-net-sieve.so", "2.28.9", {})[0]["NCCL_NET_PLUGIN"],
                         "sieve", "2.27+ split the value at commas")
        for nccl in ("2.19.3", "2.21.5", "2.26.6", "2.28.9", None):  # never over what 2.26 keeps, 2.27+ accept
            self.assertLessEqual(len(_launch.plugin_variables(long_path, nccl, {})[0]["NCCL_NET_PLUGIN"]), 254)

    def test_the_launcher_never_replaces_another_plugin_unasked(self):
        refused = sieve("run", "--", sys.executable, "-c", PROBE, NCCL_NET_PLUGIN="ofi")
        self.assertEqual(refused.returncode, 2)
        self.assertEqual(refused.stdout, "")
        self.assertIn("NCCL_NET_PLUGIN=ofi is set", refused.stderr)
        self.assertIn("--replace-plugin", refused.stderr)
        replaced = sieve("run", "--replace-plugin", "--", sys.executable, "-c", PROBE, NCCL_NET_PLUGIN="ofi")
        self.assertEqual(replaced.returncode, 0, replaced.stderr)
        self.assertIn(replaced.stdout.split()[0], (LIBRARY, "sieve"))
        for ours in ("sieve", "/elsewhere/libnccl-net-sieve.so"):  # Sieve already: replaced without a word
            again = sieve("run", "--", sys.executable, "-c", PROBE, NCCL_NET_PLUGIN=ours)
            self.assertEqual(again.returncode, 0, again.stderr)
            self.assertIn(again.stdout.split()[0], (LIBRARY, "sieve"))

    def test_the_name_comes_with_the_library_directory(self):
        ran = sieve("run", "--", sys.executable, "-c", PROBE)
        plugin, search = ran.stdout.split()[:2]
        self.assertTrue(plugin == LIBRARY or search.split(":")[0] == os.path.dirname(LIBRARY), ran.stdout)


class ExitStatuses(unittest.TestCase):
    def test_as_a_shell(self):
        with tempfile.TemporaryDirectory() as tmp:
            plain = os.path.join(tmp, "train.sh")
            with open(plain, "w") as f:
                f.write("#!/bin/sh\nexit 0\n")
            os.chmod(plain, 0o644)
            self.assertEqual(sieve("run", "--", plain).returncode, 126)
        self.assertEqual(sieve("run", "--", "/nonexistent/cmd").returncode, 127)
        self.assertEqual(sieve("run", "--", sys.executable, "-c", "import sys; sys.exit(5)").returncode, 5)
        self.assertEqual(sieve("run").returncode, 2)

    def test_run_help(self):
        done = sieve("run", "--help")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(done.stdout.startswith("usage: python -m sieve run"), done.stdout)
        self.assertIn("--replace-plugin", done.stdout)

    def test_a_closed_pipe_is_no_traceback(self):
        read, write = os.pipe()
        os.close(read)
        try:
            done = sieve(stdout=write)
        finally:
            os.close(write)
        self.assertNotIn("Traceback", done.stderr)
        self.assertNotEqual(done.returncode, 0)


if __name__ == "__main__":
    main()
