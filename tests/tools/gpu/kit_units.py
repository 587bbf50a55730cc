# SPDX-License-Identifier: Apache-2.0
"""The GPU kit's decisions, each on its own, without running the kit:

    kit_units.py Sanitizer   compute-sanitizer found beside nvcc and under /usr/local/cuda*/compute-sanitizer/;
                             one that cannot run (refused device, no summary, a foreign exit) is "cannot run"
    kit_units.py Versions    the driver's CUDA major decides, an older minor only warns; glibc older than
                             the kit needs makes the GPU unusable
    kit_units.py Plan        steps in the order given, the canary before the first NCCL step, and what
                             its verdict (and a missing NCCL) does to each NCCL step
    kit_units.py Installed   run.sh --installed takes the library of a python's installed package, never
                             the kit's python/ or PYTHONPATH, and only where its doctor passes --require
                             proxy (SIEVE_LIBRARY: a built library; SIEVE_TEST_PROXY_BUILT: whether it
                             has the proxy)
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools", "gpu", "kit"))
import installed  # noqa: E402
import machine  # noqa: E402
import schedule  # noqa: E402
import step7_sanitizers  # noqa: E402


def executable(path, text="#!/bin/sh\nexit 0\n"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


class Sanitizer(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.saved = dict(os.environ)
        os.environ["PATH"] = os.path.join(self.root, "bin")  # nothing of this machine's toolkit
        os.environ.pop("CUDA_HOME", None)
        self.none = os.path.join(self.root, "no-cuda*")

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.saved)
        self.tmp.cleanup()

    def test_not_found(self):
        self.assertIsNone(step7_sanitizers.find_sanitizer(self.none))

    def test_beside_nvcc_through_its_link(self):
        nvcc = executable(os.path.join(self.root, "cuda-13.0", "bin", "nvcc"))
        os.makedirs(os.path.join(self.root, "bin"))
        os.symlink(nvcc, os.path.join(self.root, "bin", "nvcc"))
        self.assertIsNone(step7_sanitizers.find_sanitizer(self.none))
        real = executable(os.path.join(self.root, "cuda-13.0", "compute-sanitizer", "compute-sanitizer"))
        self.assertEqual(step7_sanitizers.find_sanitizer(self.none), real)
        in_bin = executable(os.path.join(self.root, "cuda-13.0", "bin", "compute-sanitizer"))
        self.assertEqual(step7_sanitizers.find_sanitizer(self.none), in_bin)

    def test_under_the_toolkits_own_folder(self):
        older = executable(os.path.join(self.root, "cuda-12.8", "compute-sanitizer", "compute-sanitizer"))
        self.assertEqual(step7_sanitizers.find_sanitizer(os.path.join(self.root, "cuda*")), older)
        newer = executable(os.path.join(self.root, "cuda-13.0", "compute-sanitizer", "compute-sanitizer"))
        self.assertEqual(step7_sanitizers.find_sanitizer(os.path.join(self.root, "cuda*")), newer)

    def test_cannot_run(self):
        refused = "========= COMPUTE-SANITIZER\n========= Error: Device not supported\n========= Error: 999\n"
        errors = step7_sanitizers.sanitizer_errors(refused, "memcheck")
        self.assertIn("Device not supported", step7_sanitizers.cannot_run(refused, 1, errors))
        self.assertIn("no error summary", step7_sanitizers.cannot_run("segfault\n", 139, None))
        ran = "========= ERROR SUMMARY: 0 errors\n"
        self.assertIn("neither 0 nor", step7_sanitizers.cannot_run(ran, 255, 0))
        self.assertIsNone(step7_sanitizers.cannot_run(ran, 0, 0))
        found = "========= ERROR SUMMARY: 3 errors\n"
        self.assertIsNone(step7_sanitizers.cannot_run(found, 86, 3))  # errors found: a failure, not a refusal
        race = "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n"
        self.assertEqual(step7_sanitizers.sanitizer_errors(race, "racecheck"), 1)


class Versions(unittest.TestCase):
    SMI = {"found": True, "exit": 0, "gpus": [], "output": ""}

    def test_cuda_major_decides_minor_warns(self):
        self.assertEqual(machine.cuda_compatibility("12.8", "13.0"), (False, ""))
        usable, warning = machine.cuda_compatibility("13.0", "13.1")
        self.assertTrue(usable)
        self.assertIn("minor version compatibility", warning)
        self.assertEqual(machine.cuda_compatibility("13.2", "13.0"), (True, ""))
        self.assertEqual(machine.cuda_compatibility("14.0", "13.1"), (True, ""))

    def test_verdict_carries_the_minor_warning(self):
        status, line = machine.verdict(self.SMI, 0, {"driver_cuda": "13.0", "runtime_cuda": "13.1"})
        self.assertEqual(status, 0)
        self.assertIn("GPU ready (warning: the driver supports CUDA 13.0, older than the kit's 13.1", line)

    def test_glibc_floor(self):
        status, line = machine.verdict(self.SMI, 0, {}, glibc="2.31", glibc_needed="2.34")
        self.assertEqual(status, 1)
        self.assertIn("glibc 2.31, the kit's programs need glibc 2.34 or newer", line)
        self.assertEqual(machine.verdict(self.SMI, 0, {}, glibc="2.35", glibc_needed="2.34")[0], 0)
        self.assertEqual(machine.verdict(self.SMI, 0, {}, glibc="2.34", glibc_needed="2.34")[0], 0)
        self.assertRegex(machine.glibc_version(), r"^\d+\.\d+$")  # this machine runs glibc


class Plan(unittest.TestCase):
    NCCL = {"nccl": {"version": "2.28.9"}}

    def canary(self, verdict, status="fail", reason="the NCCL canary failed through X: NCCL WARN y"):
        return {"status": status, "budget_s": 45, "reason": "", "data": {"verdict": verdict, "reason": reason}}

    def test_order_as_given_canary_before_first_nccl_step(self):
        self.assertEqual(schedule.parse_steps("1-7"), [1, 2, 3, 4, 5, 6, 7])
        self.assertEqual(schedule.parse_steps("5,1,4,5"), [5, 1, 4])
        self.assertEqual(schedule.with_canary([1, 2, 7, 5, 4]), [1, 2, 7, 0, 5, 4])
        self.assertEqual(schedule.with_canary([1, 2, 7]), [1, 2, 7])
        self.assertEqual(schedule.with_canary([4, 0, 1]), [4, 0, 1])  # placed by hand
        self.assertEqual(schedule.with_canary([0, 4], canary=False), [4])
        with self.assertRaises(SystemExit):
            schedule.parse_steps("8")

    def test_quick_profile_fits_a_nine_minute_call(self):
        # Every step but the sanitizers (which take what is left) within 9 minutes, less run.sh's 40 s.
        quick = schedule.BUDGETS["quick"]
        self.assertLessEqual(sum(b for n, (b, _) in quick.items() if n != 7), 540 - 40)

    def test_no_nccl(self):
        reason, _ = schedule.nccl_plan(4, {"nccl": {"version": "", "error": "libnccl.so.2: cannot open"}}, None)
        self.assertEqual(reason, "no NCCL: libnccl.so.2: cannot open")

    def test_canary_verdicts(self):
        for step in (3, 4, 5, 6):
            self.assertEqual(schedule.nccl_plan(step, self.NCCL, self.canary("both", "pass", "")), (None, {}))
            reason, _ = schedule.nccl_plan(step, self.NCCL, self.canary("none"))
            self.assertIn("NCCL WARN y", reason)
            timeout = dict(self.canary(None), status="timeout")
            self.assertIn("no answer within its 45 s", schedule.nccl_plan(step, self.NCCL, timeout)[0])
        self.assertIn("Sieve net plugin alone", schedule.nccl_plan(3, self.NCCL, self.canary("socket-only"))[0])
        for step in (4, 5, 6):
            self.assertEqual(schedule.nccl_plan(step, self.NCCL, self.canary("socket-only")),
                             (None, {"KIT_NCCL_NETS": "Socket"}))
        skipped = {"status": "skipped", "budget_s": 45, "data": {}}  # no time for it: the steps decide alone
        self.assertEqual(schedule.nccl_plan(4, self.NCCL, skipped), (None, {}))


class Installed(unittest.TestCase):
    PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools", "python", "sieve")

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        venv = os.path.join(self.tmp.name, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
        self.python = os.path.join(venv, "bin", "python")
        purelib = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        self.site = purelib
        self.saved = dict(os.environ)
        os.environ["PYTHONPATH"] = os.path.dirname(os.path.abspath(self.PACKAGE))  # the kit's python/: ignored

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.saved)
        self.tmp.cleanup()

    def test_no_installed_package_is_said(self):
        library, package, why = installed.installed(self.python)
        self.assertEqual((library, package), ("", ""))
        self.assertIn("has no installed Sieve package", why)

    def test_the_installed_copy_serves_only_with_the_proxy(self):
        package = os.path.join(self.site, "sieve")
        shutil.copytree(self.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(os.environ["SIEVE_LIBRARY"], os.path.join(package, "libnccl-net-sieve.so"))
        library, found, why = installed.installed(self.python)
        if os.environ["SIEVE_TEST_PROXY_BUILT"] == "1":
            self.assertEqual((library, found, why), (os.path.realpath(os.path.join(package, "libnccl-net-sieve.so")),
                                                     os.path.realpath(package), ""))
        else:
            self.assertEqual(library, "")
            self.assertIn("cannot serve the NCCL steps: python -m sieve: --require proxy", why)
            self.assertIn("lacks the collective proxy", why)


if __name__ == "__main__":
    unittest.main()
