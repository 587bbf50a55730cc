# SPDX-License-Identifier: Apache-2.0
"""sieve._kernels and the C API behind it (sieve_capabilities, sieve_compact_gather/scatter and _host):

- the choice: Sieve's CUDA kernels only for a CUDA tensor and a library built with CUDA, Sieve's CPU
  kernels for a CPU tensor where the library has them (every build), torch without any library;
- the torch path (index, or runs for a mask of few contiguous runs) against boolean indexing, and the
  CPU kernels' path through the same checks;
- the CPU kernels bit for bit equal to the torch path, for every dtype, whole and in pieces;
- the kernels' mask as the library reads it (LSB-first uint32 words, kept elements before each tile);
- the C API without a device: clear codes for bad input, SIEVE_ERR_INTERNAL naming CUDA's error for a
  launch (no crash), SIEVE_ERR_UNAVAILABLE in a build without CUDA;
- with --gpu, on a GPU only (skipped as a whole without one): the kernels' gather and scatter equal
  torch's.

Run: SIEVE_LIBRARY=build/plugin/libnccl-net-sieve.so SIEVE_TEST_PROXY_BUILT=1 \\
     /opt/sieve/venv/bin/python tests/tools/python/test_kernels.py [--gpu]   (exit 77 without torch, or device)
"""

import ctypes
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# The package sieve from the checkout (tools/python), and this folder's helpers (suite, fsdp_test_ranks).
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE, PACKAGE_DIR]

from suite import main, require_torch, skip_script  # noqa: E402

torch = require_torch()
from sieve import _constants, _kernels  # noqa: E402

CUDA_BUILD = os.environ.get("SIEVE_TEST_PROXY_BUILT") in ("1", "ON", "TRUE", "true")
HAVE_DEVICE = torch.cuda.is_available()


class FakeCudaTensor:
    """What backend_for reads of a tensor, for a CUDA tensor on a machine without one."""
    is_cuda = True

    def __init__(self, element_size):
        self._size = element_size

    def element_size(self):
        return self._size


def masks(count, generator):
    """(name, keep): random, structured (few runs), empty, full, single elements at the tiles' edges."""
    edges = torch.zeros(count, dtype=torch.bool)
    edges[[0, 2047, 2048, count - 1]] = True
    runs = torch.zeros(count, dtype=torch.bool)
    runs[100:900] = True
    runs[3000:3100] = True
    return [("random", torch.rand(count, generator=generator) < 0.3), ("runs", runs), ("edges", edges),
            ("empty", torch.zeros(count, dtype=torch.bool)), ("full", torch.ones(count, dtype=torch.bool))]


class Choice(unittest.TestCase):
    def tearDown(self):
        _kernels._lib = None  # found again by the next test

    def test_the_kernels_run_on_the_one_copy_sieve_library_loads(self):
        # One loader, one ctypes object, so one copy of the library per process.
        import sieve
        self.assertIs(_kernels._library(), sieve.library())

    def test_the_capability_is_the_builds(self):
        self.assertEqual(_kernels.cuda_kernels_available(), CUDA_BUILD)

    def test_cpu_tensors_take_the_host_kernels_where_the_library_has_them(self):
        self.assertTrue(_kernels.host_kernels_available(), "every build has sieve_compact_*_host")
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            self.assertEqual(_kernels.backend_for(torch.zeros(4, dtype=dtype)), "sieve-host")
        self.assertEqual(_kernels.backend_for(torch.zeros(4, dtype=torch.uint8)), "torch", "no 1-byte kernels")
        _kernels._lib = False  # no library in reach
        self.assertFalse(_kernels.host_kernels_available())
        self.assertEqual(_kernels.backend_for(torch.zeros(4)), "torch")

    def test_cuda_tensors_take_the_kernels_only_from_a_library_built_with_cuda(self):
        self.assertEqual(_kernels.backend_for(FakeCudaTensor(4)), "sieve-cuda" if CUDA_BUILD else "torch")
        self.assertEqual(_kernels.backend_for(FakeCudaTensor(1)), "torch", "no 1-byte kernels")
        _kernels._lib = False  # no library in reach (none found, or it would not load)
        self.assertFalse(_kernels.cuda_kernels_available())
        self.assertEqual(_kernels.backend_for(FakeCudaTensor(4)), "torch")


class TorchPath(unittest.TestCase):
    """The torch path (no library in reach); HostPath runs the same tests on Sieve's CPU kernels."""
    backend = "torch"

    def setUp(self):
        _kernels._lib = False if self.backend == "torch" else None
        self.assertEqual(_kernels.backend_for(torch.zeros(1)), self.backend)

    def tearDown(self):
        _kernels._lib = None

    def test_gather_and_scatter_against_boolean_indexing(self):
        generator = torch.Generator().manual_seed(5)
        for name, keep in masks(5000, generator):
            compaction = _kernels.Compaction(keep)
            self.assertEqual(compaction.runs is not None, name != "random", name)
            for dtype in (torch.float32, torch.bfloat16):
                buffer = torch.randn(5000, generator=generator).to(dtype)
                compact = compaction.gather(buffer)
                self.assertTrue(torch.equal(compact, buffer[keep]), "%s %s gather" % (name, dtype))
                out = torch.full((5000,), -0.0 if name == "edges" else 7.0, dtype=dtype)
                compaction.scatter(compact * 2, out)
                expected = torch.where(keep, buffer * 2, torch.zeros((), dtype=dtype))
                self.assertTrue(torch.equal(out.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                                            expected.view(torch.int16 if dtype == torch.bfloat16 else torch.int32)),
                                "%s %s scatter: +0.0 where pruned" % (name, dtype))

    def test_pieces_cover_the_compact_buffer_once_and_put_each_element_back(self):
        generator = torch.Generator().manual_seed(6)
        keep = torch.rand(5000, generator=generator) < 0.3
        compaction = _kernels.Compaction(keep)
        self.assertTrue(compaction.pipelines(torch.zeros(5000)))
        pieces = compaction.pieces(211)
        self.assertEqual([o for o, _ in pieces], list(range(0, compaction.kept, 211)))
        self.assertEqual(sum(n for _, n in pieces), compaction.kept)
        self.assertEqual(compaction.pieces(compaction.kept + 5), [(0, compaction.kept)])
        buffer = torch.randn(5000, generator=generator)
        gathered = [compaction.gather_piece(buffer, o, n).clone() for o, n in pieces]
        self.assertTrue(torch.equal(torch.cat(gathered), buffer[keep]))
        out = torch.zeros(5000)
        for (offset, _), piece in reversed(list(zip(pieces, gathered))):  # in any order
            compaction.scatter_piece((piece * 2).to(torch.bfloat16), out, offset)
        expected = torch.where(keep, (buffer * 2).to(torch.bfloat16).float(), torch.zeros(()))
        self.assertTrue(torch.equal(out, expected))
        runs = torch.zeros(5000, dtype=torch.bool)
        runs[10:20] = True
        self.assertFalse(_kernels.Compaction(runs).pipelines(torch.zeros(5000)), "runs are plain copies")

    def test_gather_into_a_slice_of_a_larger_buffer(self):
        keep = torch.rand(3000, generator=torch.Generator().manual_seed(2)) < 0.4
        compaction = _kernels.Compaction(keep)
        buffer = torch.randn(3000)
        larger = torch.full((compaction.kept + 10,), 9.0)
        compaction.gather(buffer, out=larger.narrow(0, 5, compaction.kept))
        self.assertTrue(torch.equal(larger[5:5 + compaction.kept], buffer[keep]))
        self.assertTrue(torch.equal(larger[:5], torch.full((5,), 9.0)), "nothing outside the slice")
        self.assertTrue(torch.equal(larger[-5:], torch.full((5,), 9.0)))
        with self.assertRaises(ValueError):
            compaction.gather(buffer, out=larger.narrow(0, 0, compaction.kept + 1))
        with self.assertRaises(ValueError):
            compaction.gather(buffer, out=torch.empty(compaction.kept, dtype=torch.float64))

    def test_the_compact_buffer_is_reused(self):
        keep = torch.rand(1000, generator=torch.Generator().manual_seed(1)) < 0.5
        compaction = _kernels.Compaction(keep)
        first = compaction.gather(torch.randn(1000))
        self.assertEqual(compaction.gather(torch.randn(1000)).data_ptr(), first.data_ptr())


class HostPath(TorchPath):
    backend = "sieve-host"

    def test_bit_for_bit_the_torch_path(self):
        """Every dtype, NaNs and -0.0 included, whole and in pieces: the kernels' bits are torch's."""
        generator = torch.Generator().manual_seed(11)
        count = 70001
        special = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf"), 1e-40])
        for name, keep in masks(count, generator) + [("2:4", (torch.arange(count) % 4) < 2)]:
            compaction = _kernels.Compaction(keep)
            for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
                buffer = torch.randn(count, generator=generator).to(dtype)
                buffer[::97] = special.to(dtype).repeat(count // 97 // 5 + 1)[:buffer[::97].numel()]
                results = {}
                for backend in ("sieve-host", "torch"):
                    _kernels._lib = None if backend == "sieve-host" else False
                    self.assertEqual(_kernels.backend_for(buffer), backend)
                    compact = compaction.gather(buffer).clone()
                    out = torch.full((count,), 3.0, dtype=dtype)
                    compaction.scatter(compact, out)
                    pieces = [compaction.gather_piece(buffer, o, n).clone() for o, n in compaction.pieces(1000)]
                    back = torch.zeros(count, dtype=dtype)
                    for (offset, _), piece in zip(compaction.pieces(1000), pieces):
                        compaction.scatter_piece(piece, back, offset)
                    results[backend] = [t.view(torch.uint8) for t in
                                        (compact, out, torch.cat(pieces) if pieces else compact, back)]
                for got, want, what in zip(results["sieve-host"], results["torch"],
                                           ("gather", "scatter", "pieces", "scatter_piece")):
                    self.assertTrue(torch.equal(got, want), "%s %s %s" % (name, dtype, what))

    def test_threads_follow_torch(self):
        """A buffer past the kernels' per-thread size, on torch's thread count: still exact."""
        keep = torch.rand(3 << 20, generator=torch.Generator().manual_seed(4)) < 0.2
        compaction = _kernels.Compaction(keep)
        buffer = torch.randn(3 << 20)
        previous = torch.get_num_threads()
        try:
            for threads in (1, 2):
                torch.set_num_threads(threads)
                self.assertTrue(torch.equal(compaction.gather(buffer), buffer[keep]), threads)
                out = torch.empty_like(buffer)
                compaction.scatter(buffer[keep], out)
                self.assertTrue(torch.equal(out, torch.where(keep, buffer, torch.zeros(()))), threads)
        finally:
            torch.set_num_threads(previous)


class KernelMask(unittest.TestCase):
    def test_bits_and_tile_bases_are_what_the_kernels_read(self):
        tile = int(_kernels._library().sieve_compact_tile_elements())
        self.assertEqual(tile, 2048)  # compress/tile_layout.h's kTileElements
        generator = torch.Generator().manual_seed(9)
        for name, keep in masks(5000, generator):
            bits, tile_base = _kernels.Compaction(keep)._device_layout(torch.device("cpu"))
            self.assertEqual(bits.numel(), (5000 + 31) // 32)
            words = bits.to(torch.int64) & 0xFFFFFFFF
            unpacked = ((words.unsqueeze(1) >> torch.arange(32)) & 1).reshape(-1).bool()
            self.assertTrue(torch.equal(unpacked[:5000], keep) and not unpacked[5000:].any(), name)
            expected = [0] + [int(keep[:min(5000, (t + 1) * tile)].sum()) for t in range((5000 + tile - 1) // tile)]
            self.assertEqual(tile_base.tolist(), expected, name)


class CApi(unittest.TestCase):
    def setUp(self):
        self.lib = ctypes.CDLL(os.environ["SIEVE_LIBRARY"])
        self.lib.sieve_last_error.restype = ctypes.c_char_p
        self.lib.sieve_capabilities.restype = ctypes.c_uint32
        self.words = (ctypes.c_uint64 * 64)()
        self.p = ctypes.addressof(self.words)

    def call(self, name, *args):
        function = getattr(self.lib, name)
        function.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_uint64] * 2 + [ctypes.c_size_t] + [ctypes.c_void_p] * 3
        code = function(*args)
        return code, self.lib.sieve_last_error().decode()

    def test_capabilities(self):
        self.assertEqual(self.lib.sieve_capabilities() & _constants._CAP_CUDA_COMPACT,
                         _constants._CAP_CUDA_COMPACT if CUDA_BUILD else 0)
        self.assertTrue(self.lib.sieve_capabilities() & _kernels._CAP_HOST_COMPACT, "in every build")
        # The proxy's interposer goes in exactly where CUDA does (plugin/CMakeLists.txt).
        self.assertEqual(self.lib.sieve_capabilities() & _constants._CAP_PROXY,
                         _constants._CAP_PROXY if CUDA_BUILD else 0)

    def test_bad_input_and_no_device_are_clear_errors(self):
        p = self.p
        for name in ("sieve_compact_gather", "sieve_compact_scatter"):
            if not CUDA_BUILD:
                code, why = self.call(name, p, p, 64, 10, 4, p, p, None)
                self.assertEqual(code, _constants._ERR_UNAVAILABLE)
                self.assertIn("without CUDA", why)
                continue
            for args, code, words in (((None, p, 64, 10, 4, p, p, None), _constants._ERR_INVALID, "NULL"),
                                      ((p, p, 0, 0, 4, p, p, None), _constants._ERR_INVALID, "count is 0"),
                                      ((p, p, 64, 65, 4, p, p, None), _constants._ERR_RANGE, "more than count"),
                                      ((p, p, 64, 10, 3, p, p, None), _constants._ERR_INVALID, "not 2, 4 or 8")):
                self.assertEqual(self.call(name, *args)[0], code, "%s %s" % (name, args))
                self.assertIn(words, self.call(name, *args)[1])
            if not HAVE_DEVICE:  # a launch without a device: CUDA's error, no crash
                code, why = self.call(name, p, p, 64, 10, 4, p, p, None)
                self.assertEqual(code, _constants._ERR_INTERNAL)
                self.assertIn("CUDA error", why)


class OnTheGpu(unittest.TestCase):
    def test_the_kernels_equal_torch(self):
        generator = torch.Generator().manual_seed(3)
        for name, keep in masks(300001, generator):
            compaction = _kernels.Compaction(keep)
            for dtype in (torch.float32, torch.bfloat16, torch.float64):
                buffer = torch.randn(300001, generator=generator).to(dtype).cuda()
                self.assertEqual(_kernels.backend_for(buffer), "sieve-cuda")
                compact = compaction.gather(buffer)
                self.assertTrue(torch.equal(compact, buffer[keep.cuda()]), "%s %s" % (name, dtype))
                out = torch.full_like(buffer, 7.0)
                compaction.scatter(compact * 2, out)
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(out, torch.where(keep.cuda(), buffer * 2, torch.zeros_like(buffer))))


if __name__ == "__main__":
    if not os.environ.get("SIEVE_LIBRARY"):
        sys.exit("FAILED: set SIEVE_LIBRARY to the built libnccl-net-sieve.so")
    if sys.argv[1:] == ["--gpu"]:
        if not HAVE_DEVICE:
            skip_script("no CUDA device")
        if not CUDA_BUILD:
            sys.exit("FAILED: a device, but the library was built without CUDA")
        main([sys.argv[0], "OnTheGpu"])
    main([sys.argv[0]] + [name for name, value in sorted(globals().items()) if isinstance(value, type)
                          and issubclass(value, unittest.TestCase) and value is not OnTheGpu])
