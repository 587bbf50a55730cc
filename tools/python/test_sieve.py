"""Checks the ctypes binding against the built library, without a GPU (CPU tensors: the C API only
records addresses). Run: SIEVE_LIBRARY=build/plugin/libnccl-net-sieve.so /usr/bin/python3 tools/python/test_sieve.py
Exits 77 (skipped) when torch or numpy is missing."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy  # noqa: F401
    import torch
    import torch.nn.utils.prune as prune
except ImportError as missing:
    print("SKIP: %s (the binding test needs torch and numpy; Debian: python3-torch)" % missing)
    sys.exit(77)

import sieve  # noqa: E402


class BindingTest(unittest.TestCase):
    def setUp(self):
        self.before = sieve.stats()["masks_published"]

    def test_finds_the_library_and_reads_stats(self):
        self.assertTrue(sieve.library().sieve_version().startswith(b"0."))
        s = sieve.stats()
        for field in ("collectives_dense", "collectives_compacted", "mask_violations", "masks_published"):
            self.assertIn(field, s)

    def test_publish_query_retract(self):
        grad = torch.zeros(1000)
        keep = torch.zeros(1000, dtype=torch.bool)
        keep[::4] = True
        mask_id = sieve.publish_mask(grad, keep)
        self.assertGreater(mask_id, 0)
        info = sieve.query(grad)
        self.assertEqual(info["count"], 1000)
        self.assertEqual(info["kept"], 250)
        self.assertEqual(info["mask_id"], mask_id)
        self.assertEqual(sieve.stats()["masks_published"], self.before + 1)
        sieve.retract(grad)
        self.assertEqual(sieve.stats()["masks_published"], self.before)
        with self.assertRaises(sieve.SieveError) as caught:
            sieve.query(grad)
        self.assertEqual(caught.exception.code, -4)

    def test_same_mask_same_hash_in_every_dtype_it_fits(self):
        keep = torch.rand(4097, generator=torch.Generator().manual_seed(1)) < 0.3
        a, b = torch.zeros(4097), torch.zeros(4097, dtype=torch.float16)
        sieve.publish_mask(a, keep)
        sieve.publish_mask(b, keep)
        self.assertEqual(sieve.query(a)["hash"], sieve.query(b)["hash"])
        self.assertEqual(sieve.query(b)["kept"], int(keep.sum()))
        sieve.retract(a)
        sieve.retract(b)

    def test_ranges(self):
        grad = torch.zeros(100, dtype=torch.float64)
        sieve.publish_ranges(grad, [(0, 10), (50, 5)])
        self.assertEqual(sieve.query(grad)["kept"], 15)
        sieve.retract(grad)
        with self.assertRaises(sieve.SieveError) as caught:
            sieve.publish_ranges(grad, [(95, 10)])
        self.assertEqual(caught.exception.code, -3)
        self.assertIn("past the end", str(caught.exception))

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
            sieve.publish_mask(torch.zeros(0), torch.ones(0))
        with self.assertRaises(sieve.SieveError) as caught:
            sieve.retract(torch.zeros(3))
        self.assertEqual(caught.exception.code, -4)
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def test_publishes_every_pruned_parameter_on_its_gradient(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                    torch.nn.Linear(8 * 6 * 6, 10))
        prune.l1_unstructured(model[0], "weight", amount=0.8)
        prune.l1_unstructured(model[3], "weight", amount=0.8)
        with self.assertRaises(sieve.SieveError):
            sieve.publish_pruned_model(model)  # no gradients yet
        model(torch.randn(2, 3, 8, 8)).sum().backward()
        # What the proxy relies on: the gradient is exactly zero where prune's mask prunes.
        for module in (model[0], model[3]):
            self.assertTrue(torch.all(module.weight_orig.grad[module.weight_mask == 0] == 0))
        self.assertEqual(sieve.publish_pruned_model(model), 2)
        self.assertEqual(sieve.query(model[0].weight_orig.grad)["kept"], int(model[0].weight_mask.sum()))
        self.assertEqual(sieve.query(model[3].weight_orig.grad)["kept"], int(model[3].weight_mask.sum()))
        self.assertEqual(sieve.stats()["masks_published"], self.before + 2)
        # Gradients moved (as when DDP rebuilds its buckets): republishing drops the stale addresses.
        for module in (model[0], model[3]):
            module.weight_orig.grad = module.weight_orig.grad.clone()
        self.assertEqual(sieve.publish_pruned_model(model), 2)
        self.assertEqual(sieve.stats()["masks_published"], self.before + 2)
        sieve.retract_all(model)
        self.assertEqual(sieve.stats()["masks_published"], self.before)


if __name__ == "__main__":
    if not os.environ.get("SIEVE_LIBRARY") and not sieve._loaded_path():
        print("SKIP: set SIEVE_LIBRARY to the built libnccl-net-sieve.so")
        sys.exit(77)
    unittest.main()
