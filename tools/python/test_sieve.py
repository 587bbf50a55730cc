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


# --- FSDP ---------------------------------------------------------------------------------------
#
# Debian's torch 1.13 cannot import its FSDP under Python 3.11 (a dataclass error in
# torch.distributed._shard) and has no FSDP2, so FSDP runs here as stand-ins: objects with exactly
# the attributes sieve.publish_fsdp reads, built the way PyTorch 2.11's FSDP2 (_fsdp_param.py,
# _fsdp_param_group.py) and FSDP1 (_flat_param.py) build theirs. The buffers each collective moves
# are rebuilt from those sources independently of sieve's layout code (narrow/copy for the
# all-gather input, torch.chunk + pad for chunk_cat), from values that are nonzero exactly where
# kept: a published bitmap must equal "buffer != 0" element for element.


class CycleSim(object):
    """Python transcription of Proxy::match_cycle (plugin/proxy/proxy_collectives.cc): a call takes the
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
    """tests/proxy/fsdp_test.cc's Group::mask, element by element: shards of ceil(numel / n), rank-major,
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
        group = sieve._FsdpGroup(name, "same" if regather else None, True, all_gather=name, reduce_scatter=name)
        units.append(sieve._FsdpUnit(name, [group], parent))
    return units


def issued(units):
    return " ".join(("AG " if kind == "all_gather" else "RS ") + group.name for kind, group, _ in sieve._issue_order(units))


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
