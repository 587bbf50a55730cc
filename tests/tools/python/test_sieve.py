# SPDX-License-Identifier: Apache-2.0
"""Checks the ctypes binding against the built library, without a GPU (the C API only records
addresses). Run: SIEVE_LIBRARY=build/plugin/libnccl-net-sieve.so python3 tests/tools/python/test_sieve.py
(or with LD_PRELOAD instead). Needs torch (the tensor checks); skipped as a whole without it."""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# The package sieve from the checkout (tools/python), and this folder's helpers (suite, fsdp_test_ranks).
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE, PACKAGE_DIR]

from suite import main, require_torch  # noqa: E402

torch = require_torch()
import sieve  # noqa: E402
from sieve import _library, fsdp_masks, masks  # noqa: E402

LIBRARY = os.environ.get("SIEVE_LIBRARY") or _library._loaded_path()


def run_python(code, PYTHONPATH_FIRST=None, **env):
    """Runs code in a fresh interpreter with exactly these Sieve-related variables (the package from
    PYTHONPATH_FIRST when given, else this checkout's)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("SIEVE_LIBRARY", "LD_PRELOAD")}
    environment.update(env)
    environment["PYTHONPATH"] = PYTHONPATH_FIRST or PACKAGE_DIR
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60)


class FindsTheRightLibrary(unittest.TestCase):
    def test_the_preloaded_copy_wins_and_a_conflicting_sieve_library_is_an_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            other = os.path.join(tmp, "libnccl-net-sieve.so")
            shutil.copy(LIBRARY, other)
            done = run_python("import sieve; sieve.library()", LD_PRELOAD=LIBRARY, SIEVE_LIBRARY=other)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("another copy of Sieve is already loaded", done.stderr)
            self.assertIn(other, done.stderr)
            done = run_python("import sieve; sieve.library(); print(sieve._library._loaded_path())",
                              LD_PRELOAD=LIBRARY, SIEVE_LIBRARY=LIBRARY)
            self.assertEqual(done.returncode, 0, done.stderr)
            done = run_python("import sieve; sieve.library(); print(sieve._library._loaded_path())", LD_PRELOAD=LIBRARY)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertEqual(os.path.realpath(done.stdout.strip()), os.path.realpath(LIBRARY))

    def test_nothing_loaded_gives_one_clear_error(self):
        done = run_python("import sieve; sieve.library()")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("is not loaded in this process", done.stderr)
        self.assertIn("LD_PRELOAD", done.stderr)
        # A rolled-back job (test_rollback.py): the calls a training script makes do nothing, said once.
        done = run_python("import sieve; print(sum(sieve.stats().values()), sieve.stats() == sieve.stats())")
        self.assertEqual((done.returncode, done.stdout.strip()), (0, "0 True"), done.stderr)
        self.assertEqual(done.stderr.count("is not loaded in this process"), 1, done.stderr)
        # A SIEVE_LIBRARY that names nothing is a mistake in the launch, not a rollback.
        done = run_python("import sieve; sieve.stats()", SIEVE_LIBRARY="/nope/libnccl-net-sieve.so")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("no such file", done.stderr)

    def test_sieve_library_takes_a_name_as_ld_preload_does(self):
        # A name without a slash is found by the dynamic loader (here through
        # LD_LIBRARY_PATH), and names the preloaded copy when that copy was loaded under it.
        directory = os.path.dirname(os.path.realpath(LIBRARY))
        name = os.path.basename(LIBRARY)
        done = run_python("import sieve; sieve.library(); print(sieve._library._loaded_path())", SIEVE_LIBRARY=name,
                          LD_LIBRARY_PATH=directory)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(os.path.realpath(done.stdout.strip()), os.path.realpath(LIBRARY))
        done = run_python("import sieve; sieve.library()", SIEVE_LIBRARY=name, LD_PRELOAD=LIBRARY)
        self.assertEqual(done.returncode, 0, done.stderr)
        done = run_python("import sieve; sieve.library()", SIEVE_LIBRARY="libnccl-net-sieve-nowhere.so")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("the dynamic loader cannot load it", done.stderr)

    def test_one_loader_maps_one_copy_for_the_c_api_and_the_kernels(self):
        # The kernels took the package's copy before SIEVE_LIBRARY, so a process with both
        # mapped two copies (two mask registries, two sets of counters).
        probe = ("import sieve\n"
                 "from sieve import _kernels, _library\n"
                 "kernels = _kernels._library()\n"
                 "try:\n"
                 "    print('same' if sieve.library() is kernels else 'different')\n"
                 "except sieve.SieveError as e:\n"
                 "    print('refused: %s' % e)\n"
                 "print(getattr(_library, '_lib_path', None))\n"
                 "print(len({line.split()[-1] for line in open('/proc/self/maps') if 'libnccl-net-sieve' in line}))\n")
        with tempfile.TemporaryDirectory() as tmp:  # a wheel's layout: the library inside the package
            shutil.copytree(os.path.join(PACKAGE_DIR, "sieve"), os.path.join(tmp, "sieve"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            carried = os.path.join(tmp, "sieve", "libnccl-net-sieve.so")
            shutil.copy(LIBRARY, carried)
            # without SIEVE_LIBRARY or a preload the kernels take the package's copy, and the C API then
            # has that copy (it is the one loaded), or refuses a SIEVE_LIBRARY set since that names another
            for env, said, path in (({"SIEVE_LIBRARY": LIBRARY}, "same", LIBRARY),
                                    ({"LD_PRELOAD": LIBRARY}, "same", LIBRARY), ({}, "same", carried)):
                done = run_python(probe, PYTHONPATH_FIRST=tmp, **env)
                lines = done.stdout.splitlines()
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertTrue(lines[0].startswith(said), (env, lines))
                self.assertEqual(os.path.realpath(lines[1]), os.path.realpath(path), env)
                self.assertEqual(lines[2], "1", "%s: more than one copy mapped" % env)
            late = probe.replace("kernels = _kernels._library()\n", "kernels = _kernels._library()\nimport os\n"
                                 "os.environ['SIEVE_LIBRARY'] = %r\n" % LIBRARY)
            lines = run_python(late, PYTHONPATH_FIRST=tmp).stdout.splitlines()
            self.assertTrue(lines[0].startswith("refused: SIEVE_LIBRARY=%s, but another copy" % LIBRARY), lines)
            self.assertEqual(lines[2], "1")

    @unittest.skipUnless(shutil.which("cc"), "needs a C compiler to build the planted library")
    def test_the_doctor_loads_no_library_from_the_current_directory(self):
        # `python -m sieve` once found nvidia/nccl/lib/libnccl.so.2 through sys.path, which under
        # -m starts with the current directory, and loaded it: its constructor ran. A library planted
        # there (one whose constructor leaves a mark) must be neither loaded nor named.
        with tempfile.TemporaryDirectory() as cwd:
            planted = os.path.join(cwd, "nvidia", "nccl", "lib")
            os.makedirs(planted)
            mark = os.path.join(cwd, "constructor-ran")
            source = os.path.join(cwd, "planted.c")
            with open(source, "w") as out:
                out.write('#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {\n'
                          '  FILE* f = fopen("%s", "w"); if (f) fclose(f); }\n'
                          'int ncclGetVersion(int* v) { *v = 22809; return 0; }\n' % mark)
            built = subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(planted, "libnccl.so.2"), source],
                                   capture_output=True, text=True)
            self.assertEqual(built.returncode, 0, built.stderr)
            environment = {k: v for k, v in os.environ.items() if k not in ("SIEVE_LIBRARY", "LD_PRELOAD")}
            environment.update(PYTHONPATH=PACKAGE_DIR, SIEVE_LIBRARY=LIBRARY)
            done = subprocess.run([sys.executable, "-m", "sieve"], cwd=cwd, env=environment, capture_output=True,
                                  text=True, timeout=60)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("NCCL it would interpose", done.stdout)
            self.assertNotIn(cwd, done.stdout)
            self.assertFalse(os.path.exists(mark), "the planted library was loaded:\n" + done.stdout)


class HeaderConstants(unittest.TestCase):
    """sieve/_constants.py is written by hand from plugin/sieve.h: every value must be the header's."""
    SOURCE = os.path.normpath(os.path.join(PACKAGE_DIR, "..", ".."))

    def header(self):
        import re
        with open(os.path.join(self.SOURCE, "plugin", "sieve.h")) as f:
            text = f.read()
        values = {name: int(value) for name, value in re.findall(r"\b(SIEVE_[A-Z0-9_]+)\s*=\s*(-?\d+)", text)}
        values.update({name: int(value) for name, value in re.findall(r"#define (SIEVE_[A-Z0-9_]+) (-?\d+)\b", text)})
        return values

    def test_every_constant_is_the_headers(self):
        from sieve import _constants as c
        h = self.header()
        expected = {
            "_ERR_INVALID": "SIEVE_ERR_INVALID_ARGUMENT", "_ERR_UNSUPPORTED": "SIEVE_ERR_UNKNOWN_DTYPE",
            "_ERR_RANGE": "SIEVE_ERR_RANGE", "_ERR_NOT_FOUND": "SIEVE_ERR_NOT_FOUND",
            "_ERR_INTERNAL": "SIEVE_ERR_INTERNAL", "_ERR_UNAVAILABLE": "SIEVE_ERR_UNAVAILABLE",
            "_DTYPE_F32": "SIEVE_DTYPE_F32", "_DTYPE_F16": "SIEVE_DTYPE_F16", "_DTYPE_BF16": "SIEVE_DTYPE_BF16",
            "_DTYPE_F64": "SIEVE_DTYPE_F64", "_DTYPE_I8": "SIEVE_DTYPE_I8", "_DTYPE_U8": "SIEVE_DTYPE_U8",
            "_DTYPE_I32": "SIEVE_DTYPE_I32", "_DTYPE_I64": "SIEVE_DTYPE_I64", "_COMMIT_UNION": "SIEVE_COMMIT_UNION",
            "_COMMIT_REFUSED": "SIEVE_COMMIT_REFUSED", "_COMMIT_ACTIVATED": "SIEVE_COMMIT_ACTIVATED",
            "_COMMIT_PENDING": "SIEVE_COMMIT_PENDING", "_TOKEN_WORDS": "SIEVE_COMMIT_TOKEN_WORDS",
            "_TOKEN_NO_PROXY": "SIEVE_COMMIT_TOKEN_NO_PROXY", "_CAP_CUDA_COMPACT": "SIEVE_CAP_CUDA_COMPACT",
            "_CAP_HOST_COMPACT": "SIEVE_CAP_HOST_COMPACT", "_CAP_PROXY": "SIEVE_CAP_PROXY",
            "_CAP_VERBS": "SIEVE_CAP_VERBS",
        }
        for ours, theirs in expected.items():
            self.assertIn(theirs, h, "sieve.h lost %s" % theirs)
            self.assertEqual(getattr(c, ours), h[theirs], "%s != sieve.h's %s" % (ours, theirs))
        self.assertEqual(c._COLLECTIVES, {"reduce_scatter": h["SIEVE_COLLECTIVE_REDUCE_SCATTER"],
                                          "all_gather": h["SIEVE_COLLECTIVE_ALL_GATHER"]})
        # every other module takes them from _constants: no second copy of a number to drift
        package = os.path.join(PACKAGE_DIR, "sieve")
        for name in os.listdir(package):
            if name.endswith(".py") and name != "_constants.py":
                with open(os.path.join(package, name)) as f:
                    self.assertNotRegex(f.read(), r"(?m)^_(ERR|DTYPE|COMMIT|TOKEN)_\w* *[,=]", name)

    def test_the_version_is_the_projects_and_the_librarys(self):
        import re
        with open(os.path.join(self.SOURCE, "CMakeLists.txt")) as f:
            project = re.search(r"project\(sieve VERSION ([0-9.]+)", f.read()).group(1)
        self.assertEqual(sieve.__version__, project)
        self.assertEqual(sieve.library().sieve_version().decode().split()[0].split("-")[0], project)
        with open(os.path.join(self.SOURCE, "pyproject.toml")) as f:
            pyproject = f.read()
        self.assertIn('input = "CMakeLists.txt"', pyproject, "the wheel's version is project()'s")
        with open(os.path.join(PACKAGE_DIR, "sieve", "__init__.py")) as f:
            self.assertNotRegex(f.read(), r"(?m)^__version__ *=", "no second version to drift")

    def test_the_version_follows_project_wherever_the_package_is(self):
        # One source, project(VERSION); each way of installing the package carries it on.
        probe = "import sieve; print(sieve.__version__)"
        with tempfile.TemporaryDirectory() as tmp:
            package = os.path.join(tmp, "tools", "python", "sieve")
            shutil.copytree(os.path.join(PACKAGE_DIR, "sieve"), package, ignore=shutil.ignore_patterns("__pycache__"))
            with open(os.path.join(tmp, "CMakeLists.txt"), "w") as f:  # a checkout of another release
                f.write("cmake_minimum_required(VERSION 3.18)\nproject(sieve VERSION 9.8.7 LANGUAGES C CXX)\n")
            done = run_python(probe, PYTHONPATH_FIRST=os.path.dirname(package))
            self.assertEqual((done.returncode, done.stdout.strip()), (0, "9.8.7"), done.stderr)
            with open(os.path.join(package, "_installed.py"), "w") as f:  # what cmake --install writes
                f.write('LIBRARY = "../libnccl-net-sieve.so"\nVERSION = "9.8.8"\n')
            done = run_python(probe, PYTHONPATH_FIRST=os.path.dirname(package))
            self.assertEqual((done.returncode, done.stdout.strip()), (0, "9.8.8"), done.stderr)
            os.unlink(os.path.join(tmp, "CMakeLists.txt"))
            os.unlink(os.path.join(package, "_installed.py"))
            done = run_python(probe, PYTHONPATH_FIRST=os.path.dirname(package), SIEVE_LIBRARY=LIBRARY)
            self.assertEqual((done.returncode, done.stdout.strip()),
                             (0, sieve.library().sieve_version().decode().split()[0].split("-")[0]), done.stderr)


class CApiThroughCtypes(unittest.TestCase):
    def setUp(self):
        self.before = sieve.stats()["masks_published"]

    def test_version_and_every_counter(self):
        self.assertRegex(sieve.library().sieve_version().decode(), r"^\d+\.\d+\.\d+")
        s = sieve.stats()
        for field in ("collectives_dense", "collectives_compacted", "mask_violations", "masks_published",
                      "tables_activated", "tables_refused"):
            self.assertIn(field, s)

    def test_publish_stages_and_the_dtype_reads_back(self):
        buffer = (ctypes.c_uint16 * 64)()
        address = ctypes.addressof(buffer)
        bits = bytes([0b00010001] * 2)
        for code in range(8):  # every dtype reads back as published (F16 vs BF16, I8 vs U8, ...)
            mask_id = masks._publish_bits(address, 16, code, bits)
            info = _library._MaskInfo(size=ctypes.sizeof(_library._MaskInfo))
            _library._check(sieve.library().sieve_mask_query(ctypes.c_void_p(address), ctypes.byref(info)))
            self.assertEqual((info.dtype, info.mask_id), (code, mask_id))
        _library._check(sieve.library().sieve_mask_retract(ctypes.c_void_p(address)))
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_a_retract_by_id_leaves_a_newer_mask_alone(self):
        buffer = (ctypes.c_float * 16)()
        address = ctypes.addressof(buffer)
        old = masks._publish_bits(address, 16, 0, b"\xff\xff")
        new = masks._publish_bits(address, 16, 0, b"\x0f\x00")  # replaces old
        masks._retract_id(old)
        info = _library._MaskInfo(size=ctypes.sizeof(_library._MaskInfo))
        _library._check(sieve.library().sieve_mask_query(ctypes.c_void_p(address), ctypes.byref(info)))
        self.assertEqual((info.mask_id, info.kept), (new, 4))
        masks._retract_id(new)
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_a_short_bitmap_is_refused_not_read_past_its_end(self):
        # The binding publishes through the _for entry points, which take the length of bits.
        buffer = (ctypes.c_float * 64)()
        for publish in (lambda bits: masks._publish_bits(ctypes.addressof(buffer), 64, 0, bits),
                        lambda bits: masks._publish_collective_bits("all_gather", 64, 0, bits)):
            with self.assertRaises(sieve.SieveError) as caught:
                publish(b"\xff" * 7)  # 64 elements need 8 bytes
            self.assertEqual(caught.exception.code, -3)
            self.assertIn("bits", str(caught.exception))
        self.assertEqual(sieve.stats()["masks_published"], self.before)
        mask_id = masks._publish_collective_bits("all_gather", 64, 0, b"\xff" * 8)
        sieve.retract_id(mask_id)
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_an_impossible_count_is_refused_not_a_crash(self):
        with self.assertRaises(sieve.SieveError) as caught:
            masks._publish_bits(0x1000, (1 << 64) - 1, 0, b"\x00")
        self.assertEqual(caught.exception.code, -3)


class Tensors(unittest.TestCase):
    def setUp(self):
        self.before = sieve.stats()["masks_published"]

    def test_publish_query_retract(self):
        grad = torch.zeros(1000)
        keep = torch.zeros(1000, dtype=torch.bool)
        keep[::4] = True
        mask_id = sieve.publish_mask(grad, keep)
        info = sieve.query(grad)
        self.assertEqual((info["count"], info["kept"], info["mask_id"]), (1000, 250, mask_id))
        sieve.retract(grad)
        with self.assertRaises(sieve.SieveError) as caught:
            sieve.query(grad)
        self.assertEqual(caught.exception.code, -4)

    def test_a_mask_that_keeps_nothing_is_warned_about(self):
        # Valid (a layer pruned away) but far more often inverted: every element would go as zero.
        code = ("import sieve, torch\n"
                "sieve.publish_mask(torch.zeros(16), torch.ones(16))\n"
                "sieve.publish_mask(torch.zeros(16), torch.zeros(16))\n"
                "sieve.publish_collective('all_gather', torch.zeros(8, dtype=torch.bool), torch.float32)\n")
        done = run_python(code, SIEVE_LIBRARY=LIBRARY)
        self.assertEqual(done.returncode, 0, done.stderr)
        said = [line for line in done.stderr.splitlines() if "keeps none of its" in line]
        self.assertEqual(len(said), 2, done.stderr)
        self.assertIn("sieve_mask_publish_for: the mask keeps none of its 16 elements", said[0])
        self.assertIn("sieve_collective_mask_publish_for: the mask keeps none of its 8 elements", said[1])

    # Review, hang 4: the binding retracted when a tensor was garbage-collected: the first of a
    # bucket's gradients to die retracted the whole bucket, a cycle retracted whenever the collector
    # ran (different on each rank), a temporary view retracted at once. Now the binding holds what it
    # published, and only retract + commit lets it go.
    def test_the_garbage_collector_retracts_nothing(self):
        import gc
        import random
        grad = torch.zeros(4096, dtype=torch.bfloat16)
        mask_id = sieve.publish_mask(grad.view(-1), torch.ones(4096))  # through a temporary view
        self.assertEqual(sieve.query(grad)["dtype"], 2)  # BF16, not F16
        address = grad.data_ptr()

        class Cycle:
            pass
        holder = Cycle()
        holder.me, holder.grad = holder, grad
        del grad, holder
        rng = random.Random(7)
        for _ in range(20):
            junk = [Cycle() for _ in range(rng.randrange(100))]
            for j in junk:
                j.me = j
            del junk
            if rng.random() < 0.5:
                gc.collect()
            info = _library._MaskInfo(size=ctypes.sizeof(_library._MaskInfo))
            self.assertEqual(sieve.library().sieve_mask_query(ctypes.c_void_p(address), ctypes.byref(info)), 0)
            self.assertEqual(info.mask_id, mask_id)
        self.assertIn(mask_id, masks._held, "the binding keeps the tensor, so nothing reuses its address")
        masks._retract_id(mask_id)
        masks._release_retired()  # what every commit does: no table holds it here, so it is let go
        self.assertNotIn(mask_id, masks._held)
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_bad_input_is_refused_with_a_clear_error(self):
        grad = torch.zeros(10)
        with self.assertRaises(sieve.SieveError) as caught:
            sieve.publish_mask(grad, torch.ones(11))
        self.assertIn("11", str(caught.exception))
        with self.assertRaises(sieve.SieveError):
            sieve.publish_mask(torch.zeros(4, 4).t(), torch.ones(16))  # not contiguous
        with self.assertRaises(sieve.SieveError):
            sieve.publish_mask(torch.zeros(4, dtype=torch.complex64), torch.ones(4))
        with self.assertRaises(sieve.SieveError):
            sieve.publish_ranges(torch.zeros(100), [(95, 10)])
        with self.assertRaises(sieve.SieveError) as caught:
            sieve.publish_ranges(torch.zeros(100), [(0, 4), (-1, 2)])
        self.assertIn("range 1's start is -1", str(caught.exception))
        self.assertNotIn("18446744073709551615", str(caught.exception))
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_integers_past_uint64_are_refused_not_wrapped(self):
        """ctypes wraps 2**70 to 0 (and 2**64 + 4 to 4), so (0, 2**70) became an empty
        range and the mask pruned everything."""
        grad = torch.zeros(100)
        for ranges, said in (([(0, 2 ** 70)], "range 0's length is 1180591620717411303424"),
                             ([(0, 4), (2 ** 64 + 4, 1)], "range 1's start is 18446744073709551620"),
                             ([(0, 2 ** 64)], "range 0's length is 18446744073709551616"),
                             ([(0.5, 3)], "range 0's start must be an integer"),
                             ([(0, 4, 5)], "range 0 is (0, 4, 5), not a (start, length) pair"),
                             (7, "ranges must be (start, length) pairs")):
            with self.assertRaises(sieve.SieveError, msg=repr(ranges)) as caught:
                sieve.publish_ranges(grad, ranges)
            self.assertIn(said, str(caught.exception))
        with self.assertRaises(sieve.SieveError):
            sieve.retract_id(2 ** 64 + 1)
        self.assertEqual(sieve.stats()["masks_published"], self.before)
        # the largest representable count still reaches the library, which refuses it by its size
        with self.assertRaises(sieve.SieveError) as caught:
            sieve.publish_ranges(grad, [(0, 2 ** 64 - 1)])
        self.assertNotIn("counts elements", str(caught.exception))
        # a 0-d integer tensor and a NumPy-style integer are integers
        mask_id = sieve.publish_ranges(grad, [(torch.tensor(2), 3)])
        self.assertEqual(sieve.query(grad)["kept"], 3)
        sieve.retract_id(mask_id)

    def test_a_list_where_a_tensor_belongs_is_a_sieve_error(self):
        """A plain list gave AttributeError ('list' object has no attribute ...)."""
        grad = torch.zeros(8)
        calls = [lambda: sieve.publish_mask([0.0] * 8, torch.ones(8)), lambda: sieve.publish_mask(grad, [1] * 8),
                 lambda: sieve.publish_ranges([0.0] * 8, [(0, 2)]), lambda: sieve.retract([0.0] * 8),
                 lambda: sieve.query([0.0] * 8), lambda: sieve.publish_collective("all_gather", [1, 0], torch.float32)]
        for k, call in enumerate(calls):
            with self.assertRaises(sieve.SieveError, msg="call %d" % k) as caught:
                call()
            self.assertRegex(str(caught.exception), "(must be a torch.Tensor, not list|must be a tensor)")
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_a_collective_mask_names_no_buffer_and_retracts_by_id(self):
        keep = torch.zeros(64, dtype=torch.bool)
        keep[::3] = True
        first = sieve.publish_collective("reduce_scatter", keep, torch.bfloat16)
        second = sieve.publish_collective("all_gather", keep, torch.float32)  # a second shape, not a replacement
        self.assertNotEqual(first, second)
        self.assertEqual(sieve.stats()["masks_published"], self.before + 2)
        self.assertNotIn(first, masks._held, "a collective's mask holds no tensor")
        for bad in (lambda: sieve.publish_collective("all_reduce", keep, torch.float32),
                    lambda: sieve.publish_collective("all_gather", keep, torch.complex64),
                    lambda: sieve.publish_collective("all_gather", torch.zeros(0), torch.float32)):
            with self.assertRaises(sieve.SieveError):
                bad()
        sieve.retract_id(first)
        sieve.retract_id(second)
        with self.assertRaises(sieve.SieveError) as caught:
            sieve.retract_id(second)
        self.assertEqual(caught.exception.code, -4)
        masks._release_retired()
        self.assertEqual(sieve.stats()["masks_published"], self.before)


# --- FSDP ---------------------------------------------------------------------------------------
#
# The rules publish_fsdp builds on, checked without FSDP: the layouts of FSDP's buffers (against
# buffers rebuilt here from PyTorch 2.11's FSDP2 and FSDP1 sources, independently of sieve's layout
# code, from values nonzero exactly where kept) and the order of one step's collectives. publish_fsdp
# itself runs against PyTorch's real FSDP2 and FSDP1 (2 and 4 Gloo ranks on the CPU) in
# test_real_torch.py, not against stand-ins here.


def fsdp2_gather_buffer(values, world_size, dims):
    """The whole all-gather buffer FSDP2 moves for a group: per rank, each parameter's torch.chunk
    along its shard dim, copied into zeros of chunk 0's size (_init_sharded_param), flattened and
    concatenated (foreach_all_gather's copy-in); ranks one after another."""
    parts = []
    for r in range(world_size):
        for value, dim in zip(values, dims):
            chunks = list(torch.chunk(value, world_size, dim=dim))
            padded = torch.zeros(chunks[0].size(), dtype=value.dtype)
            if r < len(chunks) and chunks[r].numel():
                padded.narrow(dim, 0, chunks[r].size(dim)).copy_(chunks[r])
            parts.append(padded.reshape(-1))
    return torch.cat(parts)


def fsdp2_scatter_buffer(grads, world_size, dims):
    """The reduce-scatter input FSDP2 builds (foreach_reduce): a Shard(d > 0) gradient becomes
    cat(chunk(grad, dim=d), dim=0); then chunk_cat along dim 0 into world_size rows, each chunk
    flattened and padded to ceil(rows / world_size) rows."""
    grads = [torch.cat(torch.chunk(g, world_size, dim=d), dim=0) if d else g for g, d in zip(grads, dims)]
    parts = []
    for r in range(world_size):
        for g in grads:
            rows = -(-g.shape[0] // world_size)
            width = rows * (g.numel() // g.shape[0])
            chunks = list(torch.chunk(g, world_size, dim=0))
            flat = chunks[r].reshape(-1) if r < len(chunks) else g.new_zeros(0)
            parts.append(torch.cat([flat, g.new_zeros(width - flat.numel())]))
    return torch.cat(parts)


def nonzero_where_kept(keep, seed, dtype=torch.float32 if torch else None):
    generator = torch.Generator().manual_seed(seed)
    magnitude = 1 + torch.rand(keep.shape, generator=generator)
    sign = torch.where(torch.rand(keep.shape, generator=generator) < 0.5, -1.0, 1.0)
    return (magnitude * sign * keep.ne(0)).to(dtype)


class FsdpLayout(unittest.TestCase):
    def test_a_hand_computed_group_on_two_ranks(self):
        # A: 5 x 2, ceil(5 / 2) = 3 rows a rank (rank 1: rows 3-4 and one padded row); B: 3, 2 a rank.
        a = torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0], [1, 0]])
        b = torch.tensor([1, 0, 1])
        bits = sieve.fsdp2_layout([(5, 2), (3,)], 2, [a, b]).int().tolist()
        self.assertEqual(bits, [1, 0, 0, 1, 1, 1, 1, 0,  # rank 0: A rows 0-2, B 0-1
                                0, 0, 1, 0, 0, 0, 1, 0])  # rank 1: A rows 3-4, padding, B 2, padding

    def test_random_groups_equal_the_nonzeros_of_what_fsdp2_moves(self):
        # Generated groups (1-D to 3-D parameters, any row counts, shard dims 0 or 1, 2 to 5 ranks)
        # against the oracle below, which builds the buffer as FSDP2 does (torch.chunk per rank).
        rng = __import__("random").Random(5)
        for trial in range(30):
            n = rng.randrange(2, 6)
            shapes = [tuple(rng.randrange(1, 9) for _ in range(rng.randrange(1, 4)))
                      for _ in range(rng.randrange(1, 5))]
            # FSDP2 shards a dim other than 0 only when it divides evenly among the ranks.
            dims = [rng.randrange(0, 2) if len(shape) > 1 and shape[1] % n == 0 else 0 for shape in shapes]
            keeps = [torch.rand(shape, generator=torch.Generator().manual_seed(trial * 10 + i)) < 0.3
                     for i, shape in enumerate(shapes)]
            values = [nonzero_where_kept(k, trial * 10 + i) for i, k in enumerate(keeps)]
            bits = sieve.fsdp2_layout(shapes, n, keeps, dims)
            self.assertTrue(torch.equal(bits, fsdp2_gather_buffer(values, n, dims).ne(0)),
                            "trial %d: %s over %d ranks, dims %s" % (trial, shapes, n, dims))

    def test_equals_the_nonzeros_of_the_buffers_fsdp2_moves(self):
        cases = [  # (shapes, shard dims, world size): uneven rows, empty last ranks, 3-D, Shard(1)
            ([(7, 3), (5,), (2, 2, 3)], [0, 0, 0], 4),
            ([(3, 8), (9,)], [1, 0], 4),
            ([(1, 5), (4, 4)], [0, 0], 3),
        ]
        for case, (shapes, dims, n) in enumerate(cases):
            keeps = [torch.rand(shape, generator=torch.Generator().manual_seed(case * 10 + i)) < 0.4
                     for i, shape in enumerate(shapes)]
            values = [nonzero_where_kept(k, case * 10 + i) for i, k in enumerate(keeps)]
            bits = sieve.fsdp2_layout(shapes, n, keeps, dims)
            self.assertTrue(torch.equal(bits, fsdp2_gather_buffer(values, n, dims).ne(0)), "all-gather, case %d" % case)
            self.assertTrue(torch.equal(bits, fsdp2_scatter_buffer(values, n, dims).ne(0)),
                            "reduce-scatter, case %d" % case)

    def test_fsdp1_hand_computed_flat_parameter(self):
        # [p0: 3][alignment padding: 1][p1: 2] = 6 elements, padded to 8 on 4 ranks.
        p0, p1 = torch.tensor([1, 0, 1]), torch.tensor([[0, 1]])
        gather = sieve.fsdp1_layout([3, 1, 2], 4, [p0, p1], [False, True, False], keep_padding=True)
        scatter = sieve.fsdp1_layout([3, 1, 2], 4, [p0, p1], [False, True, False])
        self.assertEqual(gather.int().tolist(), [1, 0, 1, 1, 0, 1, 0, 0])
        self.assertEqual(scatter.int().tolist(), [1, 0, 1, 0, 0, 1, 0, 0])
        self.assertEqual(sieve.fsdp1_layout([5], 2).int().tolist(), [1, 1, 1, 1, 1, 0])

    def test_bad_layouts_are_refused(self):
        for bad in (lambda: sieve.fsdp2_layout([(4,)], 0),
                    lambda: sieve.fsdp2_layout([(4,)], 2, [torch.ones(5)]),  # mask of another shape
                    lambda: sieve.fsdp2_layout([(3, 5)], 2, None, [1]),  # Shard(1) must divide evenly
                    lambda: sieve.fsdp2_layout([()], 2),  # 0-dim
                    lambda: sieve.fsdp2_layout([], 2),
                    lambda: sieve.fsdp2_layout([(4,)], 2, None, [1]),
                    lambda: sieve.fsdp1_layout([3, 2], 2, [torch.ones(3)]),
                    lambda: sieve.fsdp1_layout([3], 2, [torch.ones(4)]),
                    lambda: sieve.fsdp1_layout([3], 2, padding=[False, True])):
            with self.assertRaises(sieve.SieveError):
                bad()

    def test_semi_structured_masks_find_2_4_weights_only(self):
        model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 3))
        with torch.no_grad():
            w = model[0].weight
            w.copy_(torch.arange(1, 33, dtype=torch.float32).view(4, 8))
            w.view(-1, 4)[:, 1:3] = 0  # two of every four zero
            w[0, 4] = 0  # a group with one nonzero still fits 2:4
            model[1].weight.view(-1, 4)[:, 0] = 0  # three of four nonzero: not 2:4
            model[2].weight.zero_()  # nothing to read (its last dim is not a multiple of 4 either)
        found = sieve.semi_structured_masks(model)
        self.assertEqual(sorted(found), ["0.weight"])
        self.assertTrue(torch.equal(found["0.weight"], model[0].weight.ne(0)))


def units_and_groups(spec):
    """spec: [(name, parent, regather)] in forward order -> _FsdpUnit list (one group each, named
    like its unit, with all-gathers and reduce-scatters)."""
    units = []
    for name, parent, regather in spec:
        group = fsdp_masks._FsdpGroup(name, "same" if regather else None, True, all_gather=name, reduce_scatter=name)
        units.append(fsdp_masks._FsdpUnit(name, [group], parent))
    return units


def issued(units):
    return " ".join(("AG " if kind == "all_gather" else "RS ") + group.name
                    for kind, group, _ in fsdp_masks._issue_order(units))


class FsdpIssueOrder(unittest.TestCase):
    """The order of one step's collectives, derived by hand from 2.11's hooks: FSDP2 pre-backward
    all-gathers its group if resharded, then prefetches the group before it in post-forward order;
    post_backward (when its input's gradient arrives) reduce-scatters; the root is not resharded after
    forward; FSDP1 prefetches at BACKWARD_PRE like that, at BACKWARD_POST after its backward, right
    before its reduce-scatter."""

    def test_a_root_and_three_blocks_resharded_after_forward(self):
        units = units_and_groups([("R", None, False), ("1", "R", True), ("2", "R", True), ("3", "R", True)])
        self.assertEqual(issued(units), "AG R AG 1 AG 2 AG 3 AG 3 AG 2 RS 3 AG 1 RS 2 RS 1 RS R")

    def test_blocks_kept_unsharded_after_forward(self):
        units = units_and_groups([("R", None, False), ("1", "R", False), ("2", "R", False)])
        self.assertEqual(issued(units), "AG R AG 1 AG 2 RS 2 RS 1 RS R")

    def test_nested_blocks(self):
        # post-forward order A1 M1 B1 A2 M2 B2 R; a block's reduce-scatter waits for its children's.
        units = units_and_groups([("R", None, False), ("B1", "R", True), ("A1", "B1", True), ("M1", "B1", True),
                                  ("B2", "R", True), ("A2", "B2", True), ("M2", "B2", True)])
        self.assertEqual(issued(units), "AG R AG B1 AG A1 AG M1 AG B2 AG A2 AG M2 "
                                        "AG B2 AG M2 AG A2 RS M2 AG B1 RS A2 RS B2 AG M1 AG A1 RS M1 RS A1 RS B1 RS R")

    def test_fsdp1_backward_post_and_no_prefetch(self):
        for at, expected in (("post", "AG R AG 1 AG 2 AG 3 AG 3 AG 2 RS 3 AG 1 RS 2 RS 1 RS R"),
                             (None, "AG R AG 1 AG 2 AG 3 AG 3 RS 3 AG 2 RS 2 AG 1 RS 1 RS R")):
            units = units_and_groups([("R", None, False), ("1", "R", True), ("2", "R", True), ("3", "R", True)])
            for unit in units:
                unit.prefetch_at = at
            self.assertEqual(issued(units), expected, "prefetch at %s" % at)

    def test_explicit_prefetch_lists(self):
        units = units_and_groups([("R", None, False), ("1", "R", True), ("2", "R", True), ("3", "R", True)])
        units[1].forward_prefetch = ["2", "3"]  # set_modules_to_forward_prefetch
        units[3].backward_prefetch = ["2", "1"]  # set_modules_to_backward_prefetch on block 3 only
        units[2].backward_prefetch = []
        self.assertEqual(issued(units), "AG R AG 1 AG 2 AG 3 AG 3 AG 2 AG 1 RS 3 RS 2 RS 1 RS R")


# Why a commit with no proxy to take its token is refused: in a CUDA build, the token's all-reduce
# never reached the proxy; in a build without CUDA there is no proxy to arm (the test's CMake says which).
if os.environ.get("SIEVE_TEST_PROXY_BUILT", "1") == "1":
    NO_PROXY_REASON, NO_PROXY_WARNING = "never reached the collective proxy", "never reached"
else:
    NO_PROXY_REASON, NO_PROXY_WARNING = "no collective proxy in this process", "built without the collective proxy"


class CommitOnAProcessGroup(unittest.TestCase):
    """commit() is a collective on a torch.distributed group. Here the group is Gloo on the CPU, so no
    proxy intercepts the token (as on a rank without LD_PRELOAD): the commit is refused, says why,
    and never raises; a retracted tensor is let go once a commit has run."""

    @classmethod
    def setUpClass(cls):
        import torch.distributed as dist
        cls.store = tempfile.NamedTemporaryFile(delete=False)
        dist.init_process_group("gloo", init_method="file://" + cls.store.name, rank=0, world_size=1)

    @classmethod
    def tearDownClass(cls):
        import torch.distributed as dist
        dist.destroy_process_group()
        if os.path.exists(cls.store.name):
            os.unlink(cls.store.name)

    def test_a_commit_without_a_proxy_is_refused_and_says_why(self):
        grad = torch.zeros(1000)
        mask_id = sieve.publish_mask(grad, torch.ones(1000))
        with self.assertLogs("sieve", "WARNING") as caught:  # an operational notice: logged, not a warning
            result = sieve.commit()
        self.assertEqual(result["state"], "refused")
        self.assertIn(NO_PROXY_REASON, result["reason"])
        self.assertTrue(any(NO_PROXY_WARNING in line for line in caught.output), caught.output)
        sieve.retract(grad)
        self.assertIn(mask_id, masks._held)
        del grad
        with self.assertLogs("sieve", "WARNING"):
            sieve.commit(union=True)
        self.assertNotIn(mask_id, masks._held, "released by the commit")


if __name__ == "__main__":
    if not LIBRARY:
        sys.exit("FAILED: set SIEVE_LIBRARY to the built libnccl-net-sieve.so, or LD_PRELOAD it")
    main()
