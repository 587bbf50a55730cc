"""Checks the ctypes binding against the built library, without a GPU (the C API only records
addresses). Run: SIEVE_LIBRARY=build/plugin/libnccl-net-sieve.so python3 tools/python/test_sieve.py
(or with LD_PRELOAD instead). The library-finding and C API checks need nothing else; the tensor
checks need torch and skip one by one without it."""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import torch
    import torch.nn.utils.prune as prune
except ImportError:
    torch = None

import sieve  # noqa: E402

needs_torch = unittest.skipUnless(torch is not None, "needs torch (Debian: python3-torch)")
LIBRARY = os.environ.get("SIEVE_LIBRARY") or sieve._loaded_path()


def run_python(code, **env):
    """Runs code in a fresh interpreter with exactly these Sieve-related variables."""
    environment = {k: v for k, v in os.environ.items() if k not in ("SIEVE_LIBRARY", "LD_PRELOAD")}
    environment.update(env)
    environment["PYTHONPATH"] = HERE
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
            done = run_python("import sieve; sieve.library(); print(sieve._loaded_path())",
                              LD_PRELOAD=LIBRARY, SIEVE_LIBRARY=LIBRARY)
            self.assertEqual(done.returncode, 0, done.stderr)
            done = run_python("import sieve; sieve.library(); print(sieve._loaded_path())", LD_PRELOAD=LIBRARY)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertEqual(os.path.realpath(done.stdout.strip()), os.path.realpath(LIBRARY))

    def test_nothing_loaded_gives_one_clear_error(self):
        done = run_python("import sieve; sieve.stats()")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("is not loaded in this process", done.stderr)
        self.assertIn("LD_PRELOAD", done.stderr)
        done = run_python("import sieve; sieve.stats()", SIEVE_LIBRARY="/nope/libnccl-net-sieve.so")
        self.assertIn("no such file", done.stderr)


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
            mask_id = sieve._publish_bits(address, 16, code, bits)
            info = sieve._MaskInfo(size=ctypes.sizeof(sieve._MaskInfo))
            sieve._check(sieve.library().sieve_mask_query(ctypes.c_void_p(address), ctypes.byref(info)))
            self.assertEqual((info.dtype, info.mask_id), (code, mask_id))
        sieve._check(sieve.library().sieve_mask_retract(ctypes.c_void_p(address)))
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_a_retract_by_id_leaves_a_newer_mask_alone(self):
        buffer = (ctypes.c_float * 16)()
        address = ctypes.addressof(buffer)
        old = sieve._publish_bits(address, 16, 0, b"\xff\xff")
        new = sieve._publish_bits(address, 16, 0, b"\x0f\x00")  # replaces old
        sieve._retract_id(old)
        info = sieve._MaskInfo(size=ctypes.sizeof(sieve._MaskInfo))
        sieve._check(sieve.library().sieve_mask_query(ctypes.c_void_p(address), ctypes.byref(info)))
        self.assertEqual((info.mask_id, info.kept), (new, 4))
        sieve._retract_id(new)
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_an_impossible_count_is_refused_not_a_crash(self):
        with self.assertRaises(sieve.SieveError) as caught:
            sieve._publish_bits(0x1000, (1 << 64) - 1, 0, b"\x00")
        self.assertEqual(caught.exception.code, -3)


@needs_torch
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
            info = sieve._MaskInfo(size=ctypes.sizeof(sieve._MaskInfo))
            self.assertEqual(sieve.library().sieve_mask_query(ctypes.c_void_p(address), ctypes.byref(info)), 0)
            self.assertEqual(info.mask_id, mask_id)
        self.assertIn(mask_id, sieve._held, "the binding keeps the tensor, so nothing reuses its address")
        sieve._retract_id(mask_id)
        sieve._release_retired()  # what every commit does: no table holds it here, so it is let go
        self.assertNotIn(mask_id, sieve._held)
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
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_a_collective_mask_names_no_buffer_and_retracts_by_id(self):
        keep = torch.zeros(64, dtype=torch.bool)
        keep[::3] = True
        first = sieve.publish_collective("reduce_scatter", keep, torch.bfloat16)
        second = sieve.publish_collective("all_gather", keep, torch.float32)  # a second shape, not a replacement
        self.assertNotEqual(first, second)
        self.assertEqual(sieve.stats()["masks_published"], self.before + 2)
        self.assertNotIn(first, sieve._held, "a collective's mask holds no tensor")
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
        sieve._release_retired()
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_one_mask_per_bucket_composed_from_its_pruned_gradients(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
        prune.l1_unstructured(model[0], "weight", amount=0.8)
        prune.l1_unstructured(model[2], "weight", amount=0.5)
        with self.assertRaises(sieve.SieveError):
            sieve.publish_pruned_model(model)  # no gradients yet
        params = [model[0].weight_orig, model[0].bias, model[2].weight_orig, model[2].bias]
        bucket = torch.zeros(sum(p.numel() for p in params))  # as DDP's gradient_as_bucket_view lays them out
        offset = 0
        for p in params:
            p.grad = bucket[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        self.assertEqual(sieve.publish_pruned_model(model, commit_now=False), 1)
        info = sieve.query(bucket)
        pruned_away = int((model[0].weight_mask == 0).sum() + (model[2].weight_mask == 0).sum())
        self.assertEqual((info["count"], info["kept"]), (bucket.numel(), bucket.numel() - pruned_away))
        self.assertEqual(sieve.stats()["masks_published"], self.before + 1)
        self.assertEqual(sieve.publish_pruned_model(model, commit_now=False), 1)  # replaces, never adds
        self.assertEqual(sieve.stats()["masks_published"], self.before + 1)
        del params, bucket, offset, p  # the binding holds the bucket: the gradients stay where they are
        sieve.retract_all(model, commit_now=False)
        self.assertEqual(sieve.stats()["masks_published"], self.before)


@needs_torch
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
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = sieve.commit()
        self.assertEqual(result["state"], "refused")
        self.assertIn("never reached the collective proxy", result["reason"])
        self.assertTrue(any("never reached" in str(w.message) for w in caught))
        sieve.retract(grad)
        self.assertIn(mask_id, sieve._held)
        del grad
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sieve.commit(union=True)
        self.assertNotIn(mask_id, sieve._held, "released by the commit")


if __name__ == "__main__":
    if not LIBRARY:
        print("SKIP: set SIEVE_LIBRARY to the built libnccl-net-sieve.so, or LD_PRELOAD it")
        sys.exit(77)
    unittest.main()
