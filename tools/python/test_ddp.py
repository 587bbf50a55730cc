# SPDX-License-Identifier: Apache-2.0
"""Checks sieve's DDP communication hook under real DDP: 2 processes, Gloo on loopback, a pruned model,
several steps, every loss, gradient and parameter compared bit for bit with DDP's default. Needs a
torch with Gloo (PyTorch 2.x); skipped as a whole without one. Run: python tools/python/test_ddp.py"""

import datetime
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from suite import main, require_torch  # noqa: E402

torch = require_torch(gloo=True)
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.utils.prune as prune  # noqa: E402
STEPS = 4


def _model(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    for module in model.modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            prune.l1_unstructured(module, "weight", amount=0.8)
    return model


def _bits(tensor):
    """The tensor's bits as int32 (fp32), zero's sign folded (x + 0.0 turns -0.0 into +0.0)."""
    return (tensor.detach().float() + 0.0).view(torch.int32)


def _train(rank, world, mode, rank_masks=None, bucket_cap_mb=0.01, piece_elements=None):
    """STEPS steps of SGD with momentum on rank's own synthetic batches; returns losses and the
    bits of every gradient and parameter after each step, and the hook's state."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from sieve import ddp as sieve_ddp
    model = _model(7)
    ddp = DDP(model, bucket_cap_mb=bucket_cap_mb)
    state = None
    if mode in ("sieve", "sieve_bf16"):
        state = sieve_ddp.register(ddp, masks=rank_masks,
                                   wire_dtype=torch.bfloat16 if mode == "sieve_bf16" else None,
                                   piece_elements=piece_elements)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(100 + rank)
    losses, grads, params = [], [], []
    for _ in range(STEPS):
        x = torch.randn(4, 3, 8, 8, generator=generator)
        y = torch.randint(0, 10, (4,), generator=generator)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        grads.append([_bits(p.grad) for p in model.parameters()])
        optimizer.step()
        params.append([_bits(p) for p in model.parameters()])
        losses.append(loss.item())
    return losses, grads, params, state


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)


def _worker(rank, world, port, out, cases):
    # A client of the parent's TCPStore (see _run): no rendezvous file, no port picked by one process
    # and bound by another.
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    torch.set_num_threads(1)
    results = {}
    try:
        ref_losses, ref_grads, ref_params, _ = _train(rank, world, "default")
        for case in cases:
            results[case] = _case(rank, world, case, ref_losses, ref_grads, ref_params)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(results, f)


def _case(rank, world, case, ref_losses, ref_grads, ref_params):
    result = {}
    if case == "exact":
        losses, grads, params, state = _train(rank, world, "sieve")
        result["losses_equal"] = [a.hex() for a in losses] == [a.hex() for a in ref_losses]
        result["grads_equal"] = all(_same(a, b) for a, b in zip(grads, ref_grads))
        result["params_equal"] = all(_same(a, b) for a, b in zip(params, ref_params))
        result["stats"] = state.stats
        result["losses_moved"] = losses[-1] != losses[0]
    elif case == "pieces":
        # Every bucket in pieces of 97 kept elements (the last one shorter): each piece its own
        # all-reduce, gathered and scattered while the others are in flight.
        losses, grads, params, state = _train(rank, world, "sieve", piece_elements=97)
        result["losses_equal"] = [a.hex() for a in losses] == [a.hex() for a in ref_losses]
        result["grads_equal"] = all(_same(a, b) for a, b in zip(grads, ref_grads))
        result["params_equal"] = all(_same(a, b) for a, b in zip(params, ref_params))
        result["stats"] = state.stats
    elif case == "disagree":
        # Rank 1 believes the first layer keeps everything: that bucket's vote fails on both ranks
        # and it runs dense everywhere; the others still compact; nothing changes a result.
        model = _model(7)
        masks = {"0.weight_orig": torch.ones_like(model[0].weight_orig)} if rank == 1 else None
        losses, grads, params, state = _train(rank, world, "sieve", rank_masks=masks)
        result["losses_equal"] = [a.hex() for a in losses] == [a.hex() for a in ref_losses]
        result["params_equal"] = all(_same(a, b) for a, b in zip(params, ref_params))
        result["stats"] = state.stats
    elif case == "bf16":
        losses, grads, params, state = _train(rank, world, "sieve_bf16")
        result["losses"], result["ref_losses"] = losses, ref_losses
        result["params_equal"] = all(_same(a, b) for a, b in zip(params, ref_params))
        result["stats"] = state.stats
    return result


def _run(cases, world=2):
    """Every case in one pair of processes (each start imports torch: seconds on a loaded machine).
    Returns [{case: rank's result}] by rank."""
    # The store lives in this process on a port the kernel picks, and outlives the ranks.
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=60),
                          wait_for_workers=False)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # the ranks inherit it
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(world, store.port, tmp, cases), nprocs=world, join=True)
        results = []
        for rank in range(world):
            with open(os.path.join(tmp, "rank%d.json" % rank)) as f:
                results.append(json.load(f))
        return results


class CompactHookUnderRealDdp(unittest.TestCase):
    def test_two_ranks_every_loss_gradient_and_parameter_bit_identical_to_the_default(self):
        for rank, r in enumerate(r["exact"] for r in self._results):
            self.assertTrue(r["losses_equal"], "rank %d: a loss differs from the default's" % rank)
            self.assertTrue(r["grads_equal"], "rank %d: a gradient differs from the default's" % rank)
            self.assertTrue(r["params_equal"], "rank %d: a parameter differs from the default's" % rank)
            self.assertTrue(r["losses_moved"])

    def test_buckets_are_voted_again_after_the_rebuild_and_compact(self):
        for r in (r["exact"] for r in self._results):
            stats = r["stats"]
            # Several buckets (bucket_cap_mb is tiny), each voted at its first sight and again after
            # DDP's rebuild changed the buckets; every vote agreed; every step compacted.
            self.assertGreater(stats["votes"], 2)
            self.assertEqual(stats["votes"], stats["agreed"])
            self.assertEqual(stats["dense"], 0)
            self.assertLess(stats["elements_sent"], 0.5 * stats["elements_dense"])

    def test_buckets_in_pieces_are_still_bit_identical_to_the_default(self):
        results = [r["pieces"] for r in self._results]
        for rank, r in enumerate(results):
            self.assertTrue(r["losses_equal"], "rank %d: a loss differs from the default's" % rank)
            self.assertTrue(r["grads_equal"], "rank %d: a gradient differs from the default's" % rank)
            self.assertTrue(r["params_equal"], "rank %d: a parameter differs from the default's" % rank)
            # More all-reduces than buckets: the pieces really were separate collectives.
            self.assertGreater(r["stats"]["pieces"], 2 * r["stats"]["compacted"])
        self.assertEqual(results[0]["stats"], results[1]["stats"], "the ranks cut their buckets differently")

    def test_a_bucket_whose_ranks_disagree_runs_dense_on_every_rank(self):
        results = [r["disagree"] for r in self._results]
        for rank, r in enumerate(results):
            self.assertTrue(r["losses_equal"] and r["params_equal"], "rank %d differs from the default" % rank)
            self.assertLess(r["stats"]["agreed"], r["stats"]["votes"])
            self.assertGreater(r["stats"]["dense"], 0)
            self.assertGreater(r["stats"]["compacted"], 0)
        self.assertEqual(results[0]["stats"], results[1]["stats"], "the ranks decided differently")

    def test_bf16_wire_is_lossy_but_close(self):
        for r in (r["bf16"] for r in self._results):
            self.assertFalse(r["params_equal"], "a bf16 wire cannot be bit-identical to fp32")
            self.assertEqual(r["stats"]["dense"], 0)
            for a, b in zip(r["losses"], r["ref_losses"]):
                self.assertAlmostEqual(a, b, delta=0.05 * abs(b) + 1e-3)

    @classmethod
    def setUpClass(cls):
        cls._results = _run(["exact", "pieces", "disagree", "bf16"])


class CompactStateChecks(unittest.TestCase):
    def test_refuses_a_wire_dtype_it_cannot_send_and_masks_of_unknown_parameters(self):
        from sieve import ddp as sieve_ddp
        with self.assertRaises(ValueError):
            sieve_ddp.CompactState(_model(1), wire_dtype=torch.int8)
        with self.assertRaises(ValueError):
            sieve_ddp.CompactState(_model(1), masks={"nope.weight": torch.ones(3)})
        with self.assertRaises(ValueError):
            sieve_ddp.CompactState(_model(1), piece_elements=0)

    def test_pieces_by_default_only_where_a_sum_has_no_order(self):
        from sieve import ddp as sieve_ddp

        class Group:
            def __init__(self, n):
                self.n = n

            def size(self):
                return self.n

        state = sieve_ddp.CompactState(_model(1))
        self.assertEqual(state._pieces_of(Group(2)), sieve_ddp.PIECE_ELEMENTS)
        self.assertEqual(state._pieces_of(Group(4)), 0, "one piece: the ring's order as one all-reduce")
        self.assertEqual(sieve_ddp.CompactState(_model(1), piece_elements=5)._pieces_of(Group(4)), 5)


if __name__ == "__main__":
    main()
