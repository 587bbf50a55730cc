# SPDX-License-Identifier: Apache-2.0
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
from sieve import _library, fsdp_masks, masks  # noqa: E402

needs_torch = unittest.skipUnless(torch is not None, "needs torch (tools/install-deps.sh: build/venv)")
LIBRARY = os.environ.get("SIEVE_LIBRARY") or _library._loaded_path()


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
            done = run_python("import sieve; sieve.library(); print(sieve._library._loaded_path())",
                              LD_PRELOAD=LIBRARY, SIEVE_LIBRARY=LIBRARY)
            self.assertEqual(done.returncode, 0, done.stderr)
            done = run_python("import sieve; sieve.library(); print(sieve._library._loaded_path())", LD_PRELOAD=LIBRARY)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertEqual(os.path.realpath(done.stdout.strip()), os.path.realpath(LIBRARY))

    def test_nothing_loaded_gives_one_clear_error(self):
        done = run_python("import sieve; sieve.stats()")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("is not loaded in this process", done.stderr)
        self.assertIn("LD_PRELOAD", done.stderr)
        done = run_python("import sieve; sieve.stats()", SIEVE_LIBRARY="/nope/libnccl-net-sieve.so")
        self.assertIn("no such file", done.stderr)

    def test_sieve_library_takes_a_name_as_ld_preload_does(self):
        # Issue 43: a name without a slash is found by the dynamic loader (here through
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


class HeaderConstants(unittest.TestCase):
    """sieve/_constants.py is written by hand from plugin/sieve.h: every value must be the header's."""
    SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))

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
        }
        for ours, theirs in expected.items():
            self.assertIn(theirs, h, "sieve.h lost %s" % theirs)
            self.assertEqual(getattr(c, ours), h[theirs], "%s != sieve.h's %s" % (ours, theirs))
        self.assertEqual(c._COLLECTIVES, {"reduce_scatter": h["SIEVE_COLLECTIVE_REDUCE_SCATTER"],
                                          "all_gather": h["SIEVE_COLLECTIVE_ALL_GATHER"]})
        # every other module takes them from _constants: no second copy of a number to drift
        package = os.path.join(HERE, "sieve")
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

    def test_an_impossible_count_is_refused_not_a_crash(self):
        with self.assertRaises(sieve.SieveError) as caught:
            masks._publish_bits(0x1000, (1 << 64) - 1, 0, b"\x00")
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
        """Issue 34.8: ctypes wraps 2**70 to 0 (and 2**64 + 4 to 4), so (0, 2**70) became an empty
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
        """Issue 34.8: a plain list gave AttributeError ('list' object has no attribute ...)."""
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
# Debian's torch 1.13 cannot import its FSDP under Python 3.11 (a dataclass error in
# torch.distributed._shard) and has no FSDP2, so FSDP runs here as stand-ins: objects with exactly
# the attributes sieve.publish_fsdp reads, built the way PyTorch 2.11's FSDP2 (_fsdp_param.py,
# _fsdp_param_group.py) and FSDP1 (_flat_param.py) build theirs. The buffers each collective moves
# are rebuilt from those sources independently of sieve's layout code (narrow/copy for the
# all-gather input, torch.chunk + pad for chunk_cat), from values that are nonzero exactly where
# kept: a published bitmap must equal "buffer != 0" element for element.


def unpack(bits, count):
    """sieve's LSB-first bitmap bytes -> list of 0/1."""
    return [(bits[i // 8] >> (i % 8)) & 1 for i in range(count)]


class CycleSim(object):
    """Python transcription of Proxy::match_cycle (plugin/proxy/collectives.cc): a call takes the
    first entry of its kind, count and dtype at or after the cursor, wrapping, and the cursor moves
    past it; no entry: the call runs dense (None)."""

    def __init__(self, entries):
        self.cycle, self.cursor = list(entries), 0

    def call(self, kind, count, dtype):
        n = len(self.cycle)
        for k in range(n):
            i = (self.cursor + k) % n
            entry = self.cycle[i]
            if entry[0] == kind and entry[1] == count and entry[2] == dtype:
                self.cursor = i + 1
                return entry
        return None


def cxx_emulation_mask(numels, keeps, n):
    """tests/plugin/proxy/fsdp_test.cc's Group::mask, element by element: shards of ceil(numel / n), rank-major,
    padding pruned (the C++ emulation flattens parameters, i.e. 1-D ones)."""
    shard = [(numel + n - 1) // n for numel in numels]
    width = sum(shard)
    out = [0] * (width * n)
    for r in range(n):
        at = r * width
        for numel, keep, s in zip(numels, keeps, shard):
            for j in range(s):
                element = r * s + j
                if element < numel and keep[element]:
                    out[at + j] = 1
            at += s
    return out


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


@needs_torch
class FsdpLayout(unittest.TestCase):
    def test_a_hand_computed_group_on_two_ranks(self):
        # A: 5 x 2, ceil(5 / 2) = 3 rows a rank (rank 1: rows 3-4 and one padded row); B: 3, 2 a rank.
        a = torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0], [1, 0]])
        b = torch.tensor([1, 0, 1])
        bits = sieve.fsdp2_layout([(5, 2), (3,)], 2, [a, b]).int().tolist()
        self.assertEqual(bits, [1, 0, 0, 1, 1, 1, 1, 0,  # rank 0: A rows 0-2, B 0-1
                                0, 0, 1, 0, 0, 0, 1, 0])  # rank 1: A rows 3-4, padding, B 2, padding

    def test_agrees_with_the_cxx_emulation_rule(self):
        rng = __import__("random").Random(5)
        for trial in range(30):
            n = rng.randrange(2, 6)
            numels = [rng.randrange(1, 40) for _ in range(rng.randrange(1, 5))]
            keeps = [[rng.random() < 0.3 for _ in range(numel)] for numel in numels]
            ours = sieve.fsdp2_layout([(numel,) for numel in numels], n,
                                      [torch.tensor(k, dtype=torch.bool) for k in keeps]).int().tolist()
            self.assertEqual(ours, cxx_emulation_mask(numels, keeps, n), "trial %d" % trial)

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
            self.assertTrue(torch.equal(bits, fsdp2_scatter_buffer(values, n, dims).ne(0)), "reduce-scatter, case %d" % case)

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
    return " ".join(("AG " if kind == "all_gather" else "RS ") + group.name for kind, group, _ in fsdp_masks._issue_order(units))


@needs_torch
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

    def test_the_cycle_gives_identical_blocks_their_own_masks_and_a_naive_one_does_not(self):
        # Three identical blocks: their all-gathers share a shape, their reduce-scatters another.
        order = ["AG R", "AG 1", "AG 2", "AG 3", "AG 3", "AG 2", "RS 3", "AG 1", "RS 2", "RS 1", "RS R"]
        shape = {"AG R": ("all_gather", 10), "RS R": ("reduce_scatter", 10)}
        for k in "123":
            shape["AG " + k], shape["RS " + k] = ("all_gather", 64), ("reduce_scatter", 64)

        def run(cycle, steps=3):
            sim = CycleSim([shape[c] + ("f32", c) for c in cycle])
            wrong = []
            for _ in range(steps):
                for call in order:
                    got = sim.call(*(shape[call] + ("f32",)))
                    if got is None or got[3] != call:
                        wrong.append((call, got and got[3]))
            return wrong

        self.assertEqual(run(order), [])
        naive = ["AG R", "AG 1", "AG 2", "AG 3", "AG 3", "AG 2", "AG 1", "RS 3", "RS 2", "RS 1", "RS R"]
        self.assertIn(("RS 2", "RS 3"), run(naive), "all-gathers first, then reduce-scatters: block 2 gets block 3's")


class Mesh(object):
    """FSDPMeshInfo's attributes that sieve reads (a dataclass in FSDP2: equal when its fields are)."""

    def __init__(self, comm, size):
        self.shard_process_group, self.shard_mesh_size = comm, size

    def __eq__(self, other):
        return isinstance(other, Mesh) and (self.shard_process_group, self.shard_mesh_size) == (
            other.shard_process_group, other.shard_mesh_size)

    __hash__ = None


def fake_fully_shard(module, world_size, comm="pg", root=False, reshard=True, param_dtype=None, reduce_dtype=None,
                     shard_dim=None, post_forward=None):
    """An FSDP2 state on `module`, with what 2.11's fully_shard and its lazy init leave there: one
    FSDPParamGroup of the module's parameters that no inner fully_shard took, each an FSDPParam with
    FSDP2's own sizes (padded_sharded_param_size is torch.chunk's first chunk) and mixed-precision
    clamping (init_dtype_attrs); the root is not resharded after forward."""
    from types import SimpleNamespace
    taken = set()
    for sub in module.modules():
        if sub is not module and hasattr(sub, "_get_fsdp_state"):
            taken.update(id(p) for p in sub.parameters())
    fsdp_params = []
    for owner_name, owner in module.named_modules():
        for name, param in owner.named_parameters(recurse=False):
            if id(param) in taken:
                continue
            taken.add(id(param))
            dim = shard_dim(param) if shard_dim else 0
            orig = param.dtype
            p_dtype = None if param_dtype in (None, orig) else param_dtype
            r_dtype = None if reduce_dtype in (None, param_dtype) else reduce_dtype
            fsdp_params.append(SimpleNamespace(
                _module_info=SimpleNamespace(module=owner, param_name=name), _orig_size=param.shape,
                fsdp_placement=SimpleNamespace(dim=dim),
                padded_sharded_param_size=torch.chunk(param.detach(), world_size, dim=dim)[0].size(),
                orig_dtype=orig, param_dtype=p_dtype, reduce_dtype=r_dtype,
                sharded_param=SimpleNamespace(requires_grad=param.requires_grad), is_dtensor=False,
                _sharded_local_tensor=torch.empty(0)))
    mesh = Mesh(comm, world_size)
    after = None if root or not reshard else (post_forward or mesh)
    group = SimpleNamespace(fsdp_params=fsdp_params, mesh_info=mesh, post_forward_mesh_info=after,
                            unshard_in_backward=True)
    state = SimpleNamespace(_fsdp_param_groups=[group] if fsdp_params else [], _is_root=root, _modules=(module,),
                            _states_to_forward_prefetch=[], _states_to_backward_prefetch=[])
    module._get_fsdp_state = lambda: state
    return state


class Block(torch.nn.Module if torch else object):
    def __init__(self, width):
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)


def pruned_model(seed=0, blocks=3, width=6):
    """An embedding, identical blocks with different prune masks, a head: the root holds the
    embedding and the head (FSDP2's usual recipe: fully_shard every block, then the whole model)."""
    torch.manual_seed(seed)
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(11, width)
    model.blocks = torch.nn.ModuleList([Block(width) for _ in range(blocks)])
    model.head = torch.nn.Linear(width, 5)
    for block in model.blocks:
        prune.random_unstructured(block.up, "weight", amount=0.6)
        prune.random_unstructured(block.down, "weight", amount=0.5)
    prune.random_unstructured(model.head, "weight", amount=0.7)
    return model


def keep_of(module, name):
    """The mask of one parameter as torch.nn.utils.prune keeps it (None: not pruned)."""
    return dict(module.named_buffers(recurse=False)).get(name[:-len("_orig")] + "_mask") if name.endswith("_orig") else None


def fsdp2_group_buffers(state, seed):
    """(all-gather buffer, reduce-scatter buffer) FSDP2 moves for the state's group, with values
    nonzero exactly where kept, and the dtypes FSDP uses."""
    group = state._fsdp_param_groups[0]
    n = group.mesh_info.shard_mesh_size
    values, grads, dims, gdims = [], [], [], []
    for i, p in enumerate(group.fsdp_params):
        keep = keep_of(p._module_info.module, p._module_info.param_name)
        keep = torch.ones(p._orig_size, dtype=torch.bool) if keep is None else keep
        value = nonzero_where_kept(keep, seed + i)
        values.append(value)
        dims.append(p.fsdp_placement.dim)
        if p.sharded_param.requires_grad:
            grads.append(value)
            gdims.append(p.fsdp_placement.dim)
    gather = fsdp2_gather_buffer(values, n, dims)
    scatter = fsdp2_scatter_buffer(grads, n, gdims) if grads else None
    return gather, scatter


class Recorder(object):
    """Records what sieve publishes (kind, count, dtype code, bits as 0/1), and still publishes it."""

    def __init__(self):
        self.entries, self.ids = [], []

    def __enter__(self):
        self.original = fsdp_masks._publish_collective_bits  # what publish_fsdp calls

        def record(kind, count, dtype, bits):
            mask_id = self.original(kind, count, dtype, bits)
            self.entries.append((kind, count, dtype, unpack(bits, count)))
            self.ids.append(mask_id)
            return mask_id
        fsdp_masks._publish_collective_bits = record
        return self

    def __exit__(self, *exc):
        fsdp_masks._publish_collective_bits = self.original


F32, BF16 = 0, 2


@needs_torch
class PublishFsdp2(unittest.TestCase):
    """publish_fsdp on an FSDP2 stand-in; commit_now=False (the commit has its own test below)."""

    def setUp(self):
        self.before = sieve.stats()["masks_published"]

    def tearDown(self):
        for model in list(masks._fsdp_published):
            for mask_id in masks._fsdp_published.pop(model)["ids"]:
                masks._retract_id(mask_id)
        masks._release_retired()
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def shard(self, model, n, **kwargs):
        states = [fake_fully_shard(block, n, **kwargs) for block in model.blocks]
        root = fake_fully_shard(model, n, root=True, **kwargs)
        return root, states

    def test_frozen_parameters_and_reshard_to_another_mesh(self):
        """(Shard(1) placements: test_real_torch.py, on FSDP2 itself.)"""
        model = pruned_model(blocks=2, width=4)
        model.blocks[1].up.bias.requires_grad_(False)  # frozen: gathered, never reduced
        states = [fake_fully_shard(model.blocks[0], 4),
                  fake_fully_shard(model.blocks[1], 4, post_forward=Mesh("node", 2))]
        root = fake_fully_shard(model, 4, root=True)
        with Recorder() as published:
            sieve.publish_fsdp(model, commit_now=False)
        gather = {name: fsdp2_group_buffers(state, 7) for name, state in zip("12R", states + [root])}
        # Block 2 re-gathers on the post-forward mesh's communicator: not on this one's cycle.
        expected = [gather["R"][0], gather["1"][0], gather["2"][0], gather["1"][0], gather["2"][1], gather["1"][1],
                    gather["R"][1]]
        self.assertEqual([e[3] for e in published.entries], [b.ne(0).int().tolist() for b in expected])
        self.assertLess(len(published.entries[4][3]), len(published.entries[2][3]), "the frozen bias is not reduced")

    def test_without_reshard_a_skipped_parameter_shifts_the_shared_shape(self):
        """The communicator's rule, as publish_fsdp's docstring says: with nothing between
        them, the next block of the same shape takes the skipped block's mask for the rest of the step,
        and the root's unique all-gather puts the cycle back for the next step."""
        model = pruned_model()
        root, blocks = self.shard(model, 2, reshard=False)
        with Recorder() as published:
            sieve.publish_fsdp(model, commit_now=False)
        buffers = {"R": fsdp2_group_buffers(root, 1)}
        for i, state in enumerate(blocks):
            buffers[str(i + 1)] = fsdp2_group_buffers(state, 1)
        step = ["AG R", "AG 1", "AG 2", "AG 3", "RS 3", "RS 2", "RS 1", "RS R"]
        sim = CycleSim(published.entries)
        outcomes = []
        for skip in ("RS 3", None):
            for call in step:
                kind, name = call.split()
                buffer = buffers[name][0 if kind == "AG" else 1]
                got = sim.call("all_gather" if kind == "AG" else "reduce_scatter",
                               buffer.numel() - (2 if call == skip else 0), F32)
                outcomes.append("dense" if got is None else got[3] == buffer.ne(0).int().tolist())
        self.assertEqual(outcomes, [True] * 4 + ["dense", False, False, True] + [True] * 8)

    def test_what_cannot_be_mapped_is_withheld_with_its_whole_shape_and_said_once(self):
        model = pruned_model()
        root, blocks = self.shard(model, 2)
        blocks[0]._fsdp_param_groups[0].fsdp_params[0].is_dtensor = True  # block 1: tensor parallel
        for _ in range(2):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = sieve.publish_fsdp(model, commit_now=False)
            # Blocks share their shapes with block 1, so none of them is published; the root still is.
            self.assertEqual((result["all_gather"], result["reduce_scatter"]), (1, 1))
            self.assertEqual(len(result["skipped"]), 2)
            self.assertIn("tensor-parallel", result["skipped"][0])
            said = [w for w in caught if "tensor-parallel" in str(w.message)]
            self.assertEqual(len(said), 0 if _ else 2, "said once per process, listed every time")
        # An all-gather extension (float8): its count is unknown, so every all-gather runs dense.
        blocks[0]._fsdp_param_groups[0].fsdp_params[0].is_dtensor = False
        blocks[1]._fsdp_param_groups[0].fsdp_params[0]._sharded_local_tensor = type(
            "Float8", (), {"fsdp_pre_all_gather": None})()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = sieve.publish_fsdp(model, commit_now=False)
        self.assertEqual((result["all_gather"], result["reduce_scatter"]), (0, 4))
        # Parameters of two dtypes (gathered as bytes): test_real_torch.py, on FSDP2 itself.

    def test_a_shape_on_another_communicator_that_prunes_nothing_is_withheld(self):
        """Its calls would take these masks. (Two communicators that both prune: test_real_torch.py,
        on FSDP2 itself.)"""
        model = pruned_model(blocks=2)
        prune.remove(model.blocks[0].up, "weight")
        prune.remove(model.blocks[0].down, "weight")
        fake_fully_shard(model.blocks[0], 2, comm="experts")
        fake_fully_shard(model.blocks[1], 2)
        fake_fully_shard(model, 2, root=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = sieve.publish_fsdp(model, commit_now=False)
        self.assertEqual((result["all_gather"], result["reduce_scatter"]), (1, 1))

    def test_masks_by_name_forward_order_and_bad_input(self):
        model = pruned_model(blocks=2)
        self.shard(model, 2)
        keep = torch.rand(5, 6, generator=torch.Generator().manual_seed(3)) < 0.5
        plain = fsdp_masks._fsdp_plan(model)[0][0][1]
        given = fsdp_masks._fsdp_plan(model, masks={"head.bias": torch.tensor([1, 0, 1, 0, 1])})[0][0][1]
        self.assertEqual(len(plain), len(given))
        self.assertLess(int(given[0].bits.sum()), int(plain[0].bits.sum()), "head.bias pruned in the root's gather")
        # forward_order: the blocks in reverse (a model whose forward runs them so).
        swapped = fsdp_masks._fsdp_plan(model, forward_order=[model, model.blocks[1], model.blocks[0]])[0][0][1]
        self.assertTrue(torch.equal(swapped[1].bits, plain[2].bits))
        for bad in (dict(masks={"head.weight_orig": keep}),  # pruned already
                    dict(masks={"nope.weight": keep}),
                    dict(masks={"head.bias": torch.ones(6)}),  # wrong shape
                    dict(masks={3: keep}),
                    dict(forward_order=[model, model.blocks[0]]),
                    dict(forward_order=[model, model.blocks[0], model.blocks[0]]),
                    dict(forward_order=[model, model.blocks[0], model.head])):
            with self.assertRaises(sieve.SieveError, msg=str(bad)):
                sieve.publish_fsdp(model, commit_now=False, **bad)
        with self.assertRaises(sieve.SieveError):
            sieve.publish_fsdp(torch.nn.Linear(2, 2), commit_now=False)  # not FSDP
        model._get_fsdp_state()._is_root = None  # before FSDP's lazy init
        with self.assertRaises(sieve.SieveError) as caught:
            sieve.publish_fsdp(model, commit_now=False)
        self.assertIn("run one training step", str(caught.exception))

    def test_shapes_with_nothing_pruned_are_not_published(self):
        model = pruned_model(blocks=2)
        prune.remove(model.head, "weight")  # the root: nothing pruned any more
        self.shard(model, 2)
        result = sieve.publish_fsdp(model, commit_now=False)
        self.assertEqual((result["all_gather"], result["reduce_scatter"], result["skipped"]), (4, 2, []))
        for block in model.blocks:  # nothing pruned anywhere: nothing to publish, which is no error
            prune.remove(block.up, "weight")
            prune.remove(block.down, "weight")
        self.shard(model, 2)
        result = sieve.publish_fsdp(model, commit_now=False)
        self.assertEqual((result["all_gather"], result["reduce_scatter"], result["groups"]), (0, 0, ["pg"]))

    def test_publishing_again_replaces_and_all_gather_false_publishes_none(self):
        model = pruned_model(blocks=2)
        self.shard(model, 2)
        first = sieve.publish_fsdp(model, commit_now=False)
        count = sieve.stats()["masks_published"]
        self.assertEqual(count, self.before + first["all_gather"] + first["reduce_scatter"])
        again = sieve.publish_fsdp(model, commit_now=False, all_gather=False)
        self.assertEqual(again["all_gather"], 0)
        self.assertEqual(sieve.stats()["masks_published"], self.before + again["reduce_scatter"])


class FakeFsdp1(torch.nn.Module if torch else object):
    """A FullyShardedDataParallel stand-in: the wrapper holds _fsdp_wrapped_module, and its handle a
    FlatParameter with FSDP1's metadata, built as _flat_param.py builds it: parameters not owned by an
    inner instance, in module order; with use_orig_params, alignment padding so that every
    parameter starts at a multiple of 16 bytes."""

    def __init__(self, module, world_size, root=False, strategy="FULL_SHARD", prefetch="BACKWARD_PRE", align=True,
                 param_dtype=None, reduce_dtype=None):
        from types import SimpleNamespace
        from collections import namedtuple
        super().__init__()
        self._fsdp_wrapped_module = module
        ParamInfo = namedtuple("ParamInfo", "param_name module module_name")
        taken = set()
        for sub in module.modules():
            if isinstance(sub, FakeFsdp1):
                taken.update(id(p) for p in sub.parameters())
        infos, shapes, numels, padding, total = [], [], [], [], 0
        for owner_name, owner in module.named_modules():
            for name, param in owner.named_parameters(recurse=False):
                if id(param) in taken:
                    continue
                taken.add(id(param))
                if align and total % 4:
                    numels.append(4 - total % 4)
                    padding.append(True)
                    total += numels[-1]
                infos.append(ParamInfo(name, owner, owner_name))
                shapes.append(param.shape)
                numels.append(param.numel())
                padding.append(False)
                total += param.numel()
        padded = -(-total // world_size) * world_size
        flat = SimpleNamespace(_param_infos=infos, _shapes=shapes, _numels=[n for n, p in zip(numels, padding) if not p],
                               _numels_with_padding=numels, _is_padding_mask=padding,
                               _padded_unsharded_size=torch.Size([padded]), dtype=torch.float32, requires_grad=True)
        self._handle = SimpleNamespace(flat_param=flat, _sharding_strategy=SimpleNamespace(name=strategy),
                                       world_size=world_size, _fwd_bwd_param_dtype=param_dtype or torch.float32,
                                       _reduce_dtype=reduce_dtype or param_dtype or torch.float32) if infos else None
        self._is_root = root
        self.process_group = "pg"
        self.backward_prefetch = SimpleNamespace(name=prefetch) if prefetch else None
        self.forward_prefetch = False
        self._exec_order_data = SimpleNamespace(handles_pre_forward_order=[], _backward_prefetch_limit=1)


def fsdp1_buffers(instance, seed):
    """(all-gather buffer, reduce-scatter buffer) FSDP1 moves: the padded flat parameter (alignment
    padding holds 42, _FLAT_PARAM_PADDING_VALUE) and the padded flat gradient (zero there)."""
    flat = instance._handle.flat_param
    values, grads, at = [], [], 0
    for numel, is_padding in zip(flat._numels_with_padding, flat._is_padding_mask):
        if is_padding:
            values.append(torch.full((numel,), 42.0))
            grads.append(torch.zeros(numel))
            continue
        info = flat._param_infos[at]
        keep = keep_of(info.module, info.param_name)
        keep = torch.ones(flat._shapes[at], dtype=torch.bool) if keep is None else keep
        values.append(nonzero_where_kept(keep, seed + at).reshape(-1))
        grads.append(values[-1])
        at += 1
    end = flat._padded_unsharded_size[0]
    gather, scatter = torch.cat(values), torch.cat(grads)
    return (torch.nn.functional.pad(gather, [0, end - gather.numel()]),
            torch.nn.functional.pad(scatter, [0, end - scatter.numel()]))


@needs_torch
class PublishFsdp1(unittest.TestCase):
    def setUp(self):
        self.before = sieve.stats()["masks_published"]

    def tearDown(self):
        for model in list(masks._fsdp_published):
            for mask_id in masks._fsdp_published.pop(model)["ids"]:
                masks._retract_id(mask_id)
        masks._release_retired()
        self.assertEqual(sieve.stats()["masks_published"], self.before)

    def wrap(self, n, **kwargs):
        model = pruned_model(blocks=3, width=5)  # odd widths: alignment padding between parameters
        for i in range(3):
            model.blocks[i] = FakeFsdp1(model.blocks[i], n, **kwargs)
        return FakeFsdp1(model, n, root=True, **kwargs)

    def test_every_call_takes_its_own_exact_mask(self):
        for prefetch in ("BACKWARD_PRE", "BACKWARD_POST", None):
            wrapped = self.wrap(4, prefetch=prefetch)
            inner = wrapped._fsdp_wrapped_module
            with Recorder() as published:
                result = sieve.publish_fsdp(wrapped, commit_now=False)
            # The root keeps its parameters gathered for backward; FULL_SHARD blocks gather again.
            self.assertEqual((result["all_gather"], result["reduce_scatter"], result["skipped"]), (7, 4, []))
            buffers = {"R": fsdp1_buffers(wrapped, 5)}
            for i in range(3):
                buffers[str(i + 1)] = fsdp1_buffers(inner.blocks[i], 5)
            self.assertTrue(any(b.eq(42).any() for b, _ in buffers.values()), "the stand-in has alignment padding")
            step = {"BACKWARD_PRE": "AG R AG 1 AG 2 AG 3 AG 3 AG 2 RS 3 AG 1 RS 2 RS 1 RS R",
                    "BACKWARD_POST": "AG R AG 1 AG 2 AG 3 AG 3 AG 2 RS 3 AG 1 RS 2 RS 1 RS R",
                    None: "AG R AG 1 AG 2 AG 3 AG 3 RS 3 AG 2 RS 2 AG 1 RS 1 RS R"}[prefetch].split(" ")
            sim = CycleSim(published.entries)
            for _ in range(2):
                for kind, name in zip(step[::2], step[1::2]):
                    buffer = buffers[name][0 if kind == "AG" else 1]
                    got = sim.call("all_gather" if kind == "AG" else "reduce_scatter", buffer.numel(), F32)
                    self.assertIsNotNone(got, "%s %s" % (kind, name))
                    self.assertEqual(got[3], buffer.ne(0).int().tolist(), "%s %s at %s" % (kind, name, prefetch))
            sieve.retract_all(wrapped, commit_now=False)

    def test_names_lose_the_wrapper_prefix_and_the_recorded_order_wins(self):
        wrapped = self.wrap(2, strategy="SHARD_GRAD_OP", param_dtype=torch.bfloat16)
        inner = wrapped._fsdp_wrapped_module
        plan = fsdp_masks._fsdp_plan(wrapped, masks={"head.bias": torch.tensor([1, 0, 0, 0, 1])})[0][0][1]
        self.assertEqual([e.kind for e in plan], ["all_gather"] * 4 + ["reduce_scatter"] * 4,
                         "SHARD_GRAD_OP keeps parameters gathered for backward")
        self.assertEqual({e.dtype for e in plan if e.kind == "all_gather"}, {torch.bfloat16})
        self.assertEqual({e.dtype for e in plan if e.kind == "reduce_scatter"}, {torch.bfloat16},
                         "FSDP1 reduces in param_dtype when reduce_dtype is not set")
        # FSDP1 recorded blocks 3, 1, 2 in its first iteration: the table follows.
        handles = [inner.blocks[i]._handle for i in (2, 0, 1)]
        wrapped._exec_order_data.handles_pre_forward_order = [wrapped._handle] + handles
        recorded = fsdp_masks._fsdp_plan(wrapped)[0][0][1]
        self.assertEqual([e.label for e in recorded][:4], ["<root>", "blocks.2", "blocks.0", "blocks.1"])
        self.assertEqual(fsdp_masks._fsdp_plan(wrapped, forward_order=[wrapped] + list(inner.blocks))[0][0][1][1].label,
                         "blocks.0")

    def test_forward_prefetch_reaches_as_far_as_its_limit(self):
        wrapped = self.wrap(2)
        inner = wrapped._fsdp_wrapped_module
        labels = lambda: [e.label for e in fsdp_masks._fsdp_plan(wrapped)[0][0][1] if e.kind == "all_gather"][:4]
        for instance in [wrapped] + list(inner.blocks):
            instance.forward_prefetch = True
        self.assertEqual(labels(), ["<root>", "blocks.0", "blocks.1", "blocks.2"])
        wrapped._exec_order_data._forward_prefetch_limit = 2  # the root prefetches block 1 before block 0
        for instance in [wrapped] + list(inner.blocks):
            instance._exec_order_data = wrapped._exec_order_data
        self.assertEqual(labels(), ["<root>", "blocks.1", "blocks.0", "blocks.2"])

    def test_no_shard_publishes_nothing_and_an_uninitialised_root_is_refused(self):
        wrapped = self.wrap(2, strategy="NO_SHARD")
        self.assertEqual(fsdp_masks._fsdp_plan(wrapped)[0], [])
        wrapped._is_root = None
        with self.assertRaises(sieve.SieveError):
            sieve.publish_fsdp(wrapped, commit_now=False)


# Why a commit with no proxy to take its token is refused: in a CUDA build, the token's all-reduce
# never reached the proxy; in a build without CUDA there is no proxy to arm (the test's CMake says which).
if os.environ.get("SIEVE_TEST_PROXY_BUILT", "1") == "1":
    NO_PROXY_REASON, NO_PROXY_WARNING = "never reached the collective proxy", "never reached"
else:
    NO_PROXY_REASON, NO_PROXY_WARNING = "no collective proxy in this process", "built without the collective proxy"


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
        self.assertIn(NO_PROXY_REASON, result["reason"])
        self.assertTrue(any(NO_PROXY_WARNING in str(w.message) for w in caught))
        sieve.retract(grad)
        self.assertIn(mask_id, masks._held)
        del grad
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sieve.commit(union=True)
        self.assertNotIn(mask_id, masks._held, "released by the commit")

    def test_publish_fsdp_commits_on_the_group_fsdp_runs_on(self):
        import torch.distributed as dist
        before = sieve.stats()["masks_published"]
        model = pruned_model(blocks=2)
        for block in model.blocks:
            fake_fully_shard(block, 4, comm=dist.group.WORLD)
        fake_fully_shard(model, 4, comm=dist.group.WORLD, root=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = sieve.publish_fsdp(model)  # Gloo, no proxy: refused, said, never raised
        self.assertEqual(result["groups"], [dist.group.WORLD])
        self.assertEqual([c["state"] for c in result["commits"]], ["refused"])
        self.assertTrue(any(NO_PROXY_WARNING in str(w.message) for w in caught))
        self.assertEqual(sieve.stats()["masks_published"], before + result["all_gather"] + result["reduce_scatter"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sieve.retract_all(model)  # retracts, and commits on FSDP's group
        self.assertEqual(sieve.stats()["masks_published"], before)
        self.assertNotIn(id(model), masks._fsdp_published)


if __name__ == "__main__":
    if not LIBRARY:
        print("SKIP: set SIEVE_LIBRARY to the built libnccl-net-sieve.so, or LD_PRELOAD it")
        sys.exit(77)
    unittest.main()
