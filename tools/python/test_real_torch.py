# SPDX-License-Identifier: Apache-2.0
"""The mask helpers against the real structures of PyTorch 2.11, not stand-ins: two ranks as
processes on loopback, Gloo on the CPU.

- publish_pruned_model against DDP's real buckets after their rebuild: over several steps every
  bucket DDP hands to its all-reduce has a mask at its address whose bits are exactly the bucket's
  nonzeros.
- publish_fsdp against FSDP2's (fully_shard) real collectives: every all-gather and reduce-scatter
  of several steps is captured where FSDP2 calls torch.distributed, and the mask the proxy's rule
  gives it (CycleSim: the next mask of its kind, count and dtype) covers exactly the zeros of the
  buffer it moves (the reduce-scatter's input; the all-gather's whole buffer, every rank's input).
  Also with weights sharded on dim 1, a block on a second communicator (its shapes withheld), a
  parameter left without a gradient for one step (that reduce-scatter alone runs dense) and a frozen
  float64 parameter (FSDP2 gathers that group as bytes: withheld).

The ranks meet through a TCPStore that this process serves on a port the kernel picks (port 0): each
case under its own key prefix, nothing on the file system, no port chosen by one process and bound by
another. On a hang, every rank's Python stacks are dumped (faulthandler on SIGUSR1) into the failure.

Run: SIEVE_LIBRARY=build/plugin/libnccl-net-sieve.so /opt/sieve/venv/bin/python tools/python/test_real_torch.py
(exit 77: skipped, no library or no torch 2.x with FSDP2 and Gloo).
"""

import datetime
import faulthandler
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import warnings

if "--rank" in sys.argv:  # before torch's import: the parent asks for every thread's stack on a hang
    faulthandler.register(signal.SIGUSR1, all_threads=True)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
WORLD = 2
STEP_TIMEOUT = 400  # seconds for the two ranks' whole run (mostly importing torch; 210 s seen on the loaded VM)

try:
    import torch
    import torch.distributed as dist
    import torch.distributed.fsdp as _fsdp
    HAVE_TORCH = hasattr(_fsdp, "fully_shard")  # FSDP2: torch >= 2.6
    HAVE_TORCH = HAVE_TORCH and dist.is_gloo_available()
except ImportError:
    torch = None
    HAVE_TORCH = False


def unpack(bits, count):
    """sieve's LSB-first bitmap bytes -> bool tensor."""
    flat = torch.tensor(list(bits), dtype=torch.uint8)
    shifts = torch.arange(8, dtype=torch.uint8)
    return ((flat.unsqueeze(1) >> shifts) & 1).reshape(-1)[:count].bool()


TIMEOUT = datetime.timedelta(seconds=60)
# Every case's models and process groups, alive until the rank ends with os._exit. Freeing them hung a
# rank about one run in four here, with a file store and with a TCPStore alike: dropping the last
# reference to a case's ProcessGroupGloo (held by the DDP model, released when the case returns) runs
# its C++ destructor, and the rank never left the case's return line (faulthandler: no frame below
# it; Gloo's pt_gloo_runloop thread alive) while the other rank waited for it in the next case's
# init_process_group until its timeout. Nothing of Sieve runs there; the test keeps the objects
# instead of tearing Gloo down between cases.
_KEEP = []


def init(rank, store):
    """A process group on the case's own prefix of the parent's TCPStore."""
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD, timeout=TIMEOUT)


def prune_every_layer(model, seed):
    """Random masks, the same on every rank (one seed), about half of every weight and a third of every
    bias, through torch.nn.utils.prune; and the pruned elements of every weight_orig zero as well, so
    that the parameters FSDP gathers are zero exactly where pruned. Every row and column of a weight
    keeps an element: a fully pruned row or column would make gradients elsewhere zero (a dead unit),
    zeros no mask names, and "the mask is the buffer's zeros" would not hold for a reason of the
    model's, not of sieve's."""
    import torch.nn.utils.prune as prune
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            rows, cols = module.weight.shape
            keep = torch.rand(rows, cols, generator=generator) < 0.5
            for i in range(max(rows, cols)):
                keep[i % rows, (i * 7) % cols] = True
            prune.custom_from_mask(module, "weight", keep)
            prune.custom_from_mask(module, "bias", torch.rand(rows, generator=generator) > 0.3)
            with torch.no_grad():
                module.weight_orig.mul_(module.weight_mask)
                module.bias_orig.mul_(module.bias_mask)


# --- DDP -------------------------------------------------------------------------------------------

def ddp_rank(rank, store):
    import sieve
    from sieve import masks
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    init(rank, store)
    # Tanh, not ReLU: no unit is dead for a whole batch, so every kept gradient element is nonzero.
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 8))
    prune_every_layer(model, seed=1)
    # Small buckets: several of them, and DDP rebuilds them in backward order after the first step.
    ddp = DDP(model, gradient_as_bucket_view=True, bucket_cap_mb=0.01)
    steps = []

    def hook(state, bucket):  # sees what DDP all-reduces, then does exactly DDP's default
        buffer = bucket.buffer()
        steps[-1].append({"index": bucket.index(), "address": buffer.data_ptr(), "count": buffer.numel(),
                          "nonzero": buffer.ne(0).clone()})
        return default_hooks.allreduce_hook(state, bucket)
    ddp.register_comm_hook(None, hook)
    published = {}
    original = masks._publish_bits

    def record(address, count, dtype, bits, owner=None):
        published[address] = (count, dtype, unpack(bits, count))
        return original(address, count, dtype, bits, owner)
    masks._publish_bits = record
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(100 + rank)
    problems = []
    try:
        sieve.publish_pruned_model(model, commit_now=False)
        problems.append("published before any gradient exists")
    except sieve.SieveError:
        pass
    for step in range(5):
        steps.append([])
        optimizer.zero_grad()
        ddp(torch.randn(16, 32, generator=generator)).square().sum().backward()
        optimizer.step()
        if step == 1:  # after the second backward: the buckets are rebuilt
            count = sieve.publish_pruned_model(model, commit_now=False)
            if count != len(steps[-1]):
                problems.append("published %d masks for %d buckets" % (count, len(steps[-1])))
            staged = sieve.stats()["masks_published"]
            sieve.publish_pruned_model(model, commit_now=False)  # again: replaces, never adds
            if sieve.stats()["masks_published"] != staged:
                problems.append("publishing again added masks: %d -> %d" % (staged, sieve.stats()["masks_published"]))
    for step in range(2, 5):
        for bucket in steps[step]:
            where = "step %d, bucket %d" % (step, bucket["index"])
            mask = published.get(bucket["address"])
            if mask is None:
                problems.append("%s: no mask at the bucket's address" % where)
                continue
            if mask[0] != bucket["count"]:
                problems.append("%s: mask of %d elements, bucket of %d" % (where, mask[0], bucket["count"]))
            elif not torch.equal(mask[2], bucket["nonzero"]):
                differ = int((mask[2] != bucket["nonzero"]).sum())
                problems.append("%s: %d elements where the mask is not the bucket's nonzeros" % (where, differ))
    signature = sorted((count, int(bits.sum())) for count, _, bits in published.values())
    everyone = [None] * WORLD
    dist.all_gather_object(everyone, signature)
    if any(s != signature for s in everyone):
        problems.append("the ranks published different masks: %s" % everyone)
    sieve.retract_all(model, commit_now=False)
    _KEEP.append((ddp, dist.group.WORLD))
    dist.destroy_process_group()
    return {"problems": problems, "buckets": len(steps[-1]), "masks": len(published),
            "checked": sum(len(s) for s in steps[2:])}


# --- FSDP2 -----------------------------------------------------------------------------------------

class Block(torch.nn.Module if torch else object):
    """gate: a parameter that a step may leave out (skip_gate), so that it has no gradient then."""

    def __init__(self, width, gate=False):
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)
        self.gate = torch.nn.Parameter(torch.linspace(0.5, 1.5, width)) if gate else None
        self.skip_gate = False

    def forward(self, x):
        y = x + self.down(torch.tanh(self.up(x)))
        return y if self.gate is None or self.skip_gate else y * self.gate


class Model(torch.nn.Module if torch else object):
    """FSDP2's usual recipe: identical blocks, each its own fully_shard, and the root holding the
    rest. Sizes chosen so that shards need padding (odd rows over 2 ranks)."""

    def __init__(self, width=10, blocks=3, gate=False):
        super().__init__()
        self.inp = torch.nn.Linear(7, width)
        self.blocks = torch.nn.ModuleList([Block(width, gate) for _ in range(blocks)])
        self.head = torch.nn.Linear(width, 5)

    def forward(self, x):
        x = torch.tanh(self.inp(x))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def fsdp2_rank(rank, store, reshard_after_forward, param_dtype=None, reduce_dtype=None, shard_dim=False,
               two_groups=False, skip_gate_at=None, frozen_f64=False):
    """shard_dim: the blocks' weights sharded on dim 1 (shard_placement_fn). two_groups: block 0 on a
    second process group of the same ranks (a second communicator). skip_gate_at: in that captured
    step the last block's gate gets no gradient (FSDP2 reduce-scatters the group without it).
    frozen_f64: the last block holds a frozen float64 parameter (FSDP2 then all-gathers the group as
    bytes)."""
    import sieve
    from sieve import fsdp_masks
    from sieve.masks import _dtype_code_of
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import Shard
    from test_sieve import CycleSim
    init(rank, store)
    mesh = init_device_mesh("cpu", (WORLD,))
    torch.manual_seed(0)
    model = Model(gate=skip_gate_at is not None)
    prune_every_layer(model, seed=2)
    if frozen_f64:
        model.blocks[-1].register_parameter("frozen", torch.nn.Parameter(torch.arange(1.0, 6.0, dtype=torch.float64),
                                                                         requires_grad=False))
    # FSDP2 gathers the parameters in param_dtype and reduces the gradients in reduce_dtype, which it
    # drops when it equals param_dtype (the gradients are already in it)
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    placement = (lambda p: Shard(1) if p.dim() == 2 else None) if shard_dim else None
    for i, block in enumerate(model.blocks):
        block_mesh = DeviceMesh.from_group(dist.new_group(list(range(WORLD))), "cpu") if two_groups and i == 0 else mesh
        fully_shard(block, mesh=block_mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy,
                    shard_placement_fn=placement)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)

    calls = []  # (kind, count, dtype, nonzero of the whole buffer the collective moves, communicator, step)
    capturing = [False]
    step_number = [0]
    real_all_gather, real_reduce_scatter = dist.all_gather_into_tensor, dist.reduce_scatter_tensor
    comms = {}  # process group -> its number, in the order of first use

    def comm_of(group):
        return comms.setdefault(dist.group.WORLD if group is None else group, len(comms))

    def all_gather(output_tensor, input_tensor, group=None, async_op=False):
        work = real_all_gather(output_tensor, input_tensor, group=group, async_op=async_op)
        if capturing[0]:  # the whole buffer is every rank's input, rank 0's first: the output
            if work is not None:
                work.wait()
            calls.append(("all_gather", output_tensor.numel(), output_tensor.dtype, output_tensor.ne(0).clone(),
                          comm_of(group), step_number[0]))
        return work

    def reduce_scatter(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if capturing[0]:
            calls.append(("reduce_scatter", input.numel(), input.dtype, input.ne(0).clone(), comm_of(group),
                          step_number[0]))
        return real_reduce_scatter(output, input, op=op, group=group, async_op=async_op)
    dist.all_gather_into_tensor, dist.reduce_scatter_tensor = all_gather, reduce_scatter

    published = []
    original = fsdp_masks._publish_collective_bits

    def record(kind, count, dtype, bits):
        published.append((kind, count, dtype, unpack(bits, count)))
        return original(kind, count, dtype, bits)
    fsdp_masks._publish_collective_bits = record
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(100 + rank)

    def step():
        optimizer.zero_grad()
        model(torch.randn(6, 7, generator=generator)).square().sum().backward()
        optimizer.step()
    step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what is withheld comes back in result["skipped"]
        result = sieve.publish_fsdp(model, commit_now=False)
    capturing[0] = True
    for step_number[0] in range(3):
        model.blocks[-1].skip_gate = step_number[0] == skip_gate_at
        step()
    capturing[0] = False
    # The proxy's rule on each communicator, with its own cursor over the published masks; a call no
    # mask has the shape of runs dense (allowed, counted: the cases say which calls those must be).
    cycles = {}
    dense = []
    problems = []
    for k, (kind, count, dtype, nonzero, comm, at) in enumerate(calls):
        expected = (param_dtype if kind == "all_gather" else reduce_dtype or param_dtype) or torch.float32
        if dtype != expected and not (frozen_f64 and kind == "all_gather" and dtype == torch.uint8):
            problems.append("call %d: %s in %s, not %s" % (k, kind, dtype, expected))
            continue
        cycle = cycles.setdefault(comm, CycleSim(published))
        entry = cycle.call(kind, count, _dtype_code_of(dtype)) if dtype != torch.uint8 else None
        if entry is None:
            dense.append({"call": k, "kind": kind, "count": count, "comm": comm, "step": at})
        elif not torch.equal(entry[3], nonzero):
            lost = (~entry[3] & nonzero).nonzero().reshape(-1).tolist()
            zero = (entry[3] & ~nonzero).nonzero().reshape(-1).tolist()
            problems.append("call %d: %s of %d elements: the mask prunes %d nonzeros (at %s) and keeps %d zeros (at %s)"
                            % (k, kind, count, len(lost), lost[:20], len(zero), zero[:20]))
    kinds = [c[0] for c in calls]
    sieve.retract_all(model, commit_now=False)
    _KEEP.append((model, mesh, dist.group.WORLD))
    dist.destroy_process_group()
    return {"problems": problems, "calls": len(calls), "all_gathers": kinds.count("all_gather"),
            "reduce_scatters": kinds.count("reduce_scatter"), "masks": len(published), "dense": dense,
            "skipped": result["skipped"], "groups": len(result["groups"]), "comms": len(comms),
            "uint8_gathers": sum(1 for c in calls if c[2] == torch.uint8)}


CASES = {"ddp": lambda rank, store: ddp_rank(rank, store),
         "fsdp2": lambda rank, store: fsdp2_rank(rank, store, True),
         "fsdp2_no_reshard": lambda rank, store: fsdp2_rank(rank, store, False),
         "fsdp2_bf16_params": lambda rank, store: fsdp2_rank(rank, store, True, torch.bfloat16, torch.float32),
         "fsdp2_bf16": lambda rank, store: fsdp2_rank(rank, store, True, torch.bfloat16, torch.bfloat16),
         "fsdp2_shard_dim": lambda rank, store: fsdp2_rank(rank, store, True, shard_dim=True),
         "fsdp2_two_groups": lambda rank, store: fsdp2_rank(rank, store, True, two_groups=True),
         "fsdp2_skipped_parameter": lambda rank, store: fsdp2_rank(rank, store, True, skip_gate_at=1),
         "fsdp2_frozen_f64": lambda rank, store: fsdp2_rank(rank, store, True, frozen_f64=True)}


def rank_main(rank, port):
    """Every case in turn, each on its own process group and key prefix: {case: result}."""
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT)
    return {case: run(rank, dist.PrefixStore(case, store)) for case, run in CASES.items()}


def run_ranks():
    """Runs every case on WORLD processes; returns each rank's results (its JSON line). The store
    lives here, in the parent, for the whole run: the ranks come and go as its clients."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=TIMEOUT, wait_for_workers=False)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
        # Output to files, not pipes: a rank never blocks on a full pipe that nobody reads yet.
        logs = [(open(os.path.join(tmp, "out%d" % r), "w+"), open(os.path.join(tmp, "err%d" % r), "w+"))
                for r in range(WORLD)]
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(rank), str(store.port)],
                                  env=env, stdout=logs[rank][0], stderr=logs[rank][1]) for rank in range(WORLD)]

        def tail(rank, n=3000):
            logs[rank][1].seek(0)
            return logs[rank][1].read()[-n:]
        def failed(what):
            """Every rank still running dumps its stacks; the failure shows every rank's output."""
            for other in procs:
                if other.poll() is None:
                    other.send_signal(signal.SIGUSR1)
            time.sleep(3)
            return AssertionError("%s; every rank's output (stacks of those still running):\n%s" % (
                what, "\n".join("rank %d:\n%s" % (r, tail(r, 6000)) for r in range(WORLD))))
        try:
            deadline = time.monotonic() + STEP_TIMEOUT
            for rank, proc in enumerate(procs):
                try:
                    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise failed("a rank did not finish in %d s" % STEP_TIMEOUT) from None
                if proc.returncode != 0:
                    raise failed("rank %d exited %d" % (rank, proc.returncode))
            results = []
            for rank in range(WORLD):
                logs[rank][0].seek(0)
                results.append(json.loads(logs[rank][0].read().strip().splitlines()[-1]))
            return results
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for out, err in logs:
                out.close()
                err.close()


@unittest.skipUnless(HAVE_TORCH, "needs torch 2.x with FSDP2 and Gloo (tools/install-deps.sh: build/venv)")
class RealStructures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ranks = run_ranks()

    def results(self, case):
        return [(rank, results[case]) for rank, results in enumerate(self.ranks)]

    def test_publish_pruned_model_covers_ddps_real_buckets_after_the_rebuild(self):
        for rank, result in self.results("ddp"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertGreaterEqual(result["buckets"], 2, "small buckets: several per step")
            self.assertEqual(result["masks"], result["buckets"])
            self.assertEqual(result["checked"], 3 * result["buckets"])

    def test_publish_fsdp_covers_fully_shards_real_collectives_in_their_order(self):
        for rank, result in self.results("fsdp2"):
            self.assertEqual((result["problems"], result["dense"]), ([], []), "rank %d" % rank)
            # per step: 4 groups gathered in forward and again in backward (the root too: it was given
            # reshard_after_forward=True), 4 reduce-scatters
            self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 8, 3 * 4))

    def test_publish_fsdp_with_mixed_precision_gathers_in_param_dtype_and_reduces_in_reduce_dtype(self):
        for case in ("fsdp2_bf16_params", "fsdp2_bf16"):  # reduce in float32; in bf16 (= param_dtype)
            for rank, result in self.results(case):
                self.assertEqual((result["problems"], result["dense"]), ([], []), "%s, rank %d" % (case, rank))
                self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 8, 3 * 4))

    def test_publish_fsdp_without_reshard_after_forward(self):
        for rank, result in self.results("fsdp2_no_reshard"):
            self.assertEqual((result["problems"], result["dense"]), ([], []), "rank %d" % rank)
            self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 4, 3 * 4))

    def test_publish_fsdp_with_weights_sharded_on_dim_1(self):
        for rank, result in self.results("fsdp2_shard_dim"):
            self.assertEqual((result["problems"], result["dense"], result["skipped"]), ([], [], []), "rank %d" % rank)
            self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 8, 3 * 4))

    def test_a_shape_on_two_communicators_is_withheld_and_the_rest_compacts(self):
        for rank, result in self.results("fsdp2_two_groups"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertEqual((result["groups"], result["comms"]), (2, 2))
            self.assertEqual(len(result["skipped"]), 2)  # the blocks' all-gather and reduce-scatter shapes
            self.assertTrue(all("several communicators" in s for s in result["skipped"]), result["skipped"])
            # Every call of the blocks (either communicator) runs dense; the root's (2 all-gathers
            # and a reduce-scatter per step) find their masks.
            self.assertTrue(all(d["count"] == result["dense"][0]["count"] for d in result["dense"]))
            self.assertEqual(result["calls"] - len(result["dense"]), 3 * 3)

    def test_a_parameter_without_a_gradient_runs_only_that_reduce_scatter_dense(self):
        for rank, result in self.results("fsdp2_skipped_parameter"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertEqual([(d["kind"], d["step"]) for d in result["dense"]], [("reduce_scatter", 1)])
            self.assertEqual((result["all_gathers"], result["reduce_scatters"]), (3 * 8, 3 * 4))

    def test_a_group_gathered_as_bytes_is_withheld(self):
        for rank, result in self.results("fsdp2_frozen_f64"):
            self.assertEqual(result["problems"], [], "rank %d" % rank)
            self.assertTrue(any("as bytes" in s for s in result["skipped"]), result["skipped"])
            # the last block's gathers, in bytes, are the only dense calls (forward and backward)
            self.assertEqual(result["uint8_gathers"], 3 * 2)
            self.assertEqual(len(result["dense"]), result["uint8_gathers"])


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--rank":
        print(json.dumps(rank_main(int(sys.argv[2]), int(sys.argv[3]))), flush=True)
        sys.stderr.flush()
        os._exit(0)  # no destructors of the kept process groups (see _KEEP)
    if not (os.environ.get("SIEVE_LIBRARY") or os.environ.get("LD_PRELOAD")):
        print("SKIP: set SIEVE_LIBRARY to the built libnccl-net-sieve.so, or LD_PRELOAD it")
        sys.exit(77)
    if not HAVE_TORCH:
        print("SKIP: needs torch 2.x with FSDP2 and Gloo")
        sys.exit(77)
    unittest.main()
