# SPDX-License-Identifier: Apache-2.0
"""Checks sieve's DDP communication hook under real DDP: 2 processes, Gloo on loopback, a pruned model,
several steps, every loss, gradient and parameter compared bit for bit with DDP's default. Needs a
torch with Gloo (PyTorch 2.x); skipped as a whole without one. Run: python tests/tools/python/test_ddp.py"""

import datetime
import json
import logging
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# The package sieve from the checkout (tools/python), and this folder's helpers (suite, fsdp_test_ranks).
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE, PACKAGE_DIR]

from fsdp_test_ranks import end_rank  # noqa: E402
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
    """The tensor's bits as int32 (fp32), zero's sign folded (x + 0.0 turns -0.0 into +0.0): Sieve's
    one stated exception to bit-identity, +0.0 at a pruned position where the default may give -0.0."""
    return (tensor.detach().float() + 0.0).view(torch.int32)


def _raw(tensor):
    return tensor.detach().float().clone().view(torch.int32)


# What a user's training may do to a pruned model that the masks Sieve agreed on do not say:
# each is applied identically under DDP's default hook and under Sieve's.
def _regrow(step, rank, model, at=2):
    """From step `at` on, every rank regrows a third of the first convolution's and the first
    linear's pruned weights (prune keeps their values in weight_orig) and never calls update_masks().
    It must come after DDP's bucket rebuild, whose new buckets vote on the masks of their time (step
    1; under static_graph step 2)."""
    if step == at:
        for module in (model[0], model[7]):
            module.weight_mask.view(-1)[::3] = 1.0


def _nan_at_pruned(model):
    """Rank 0's gradient of the second convolution gets a NaN at one pruned position in step 1 (as
    prune's grad x mask gives where the weight's gradient is NaN or inf)."""
    where = int((model[3].weight_mask.reshape(-1) == 0).nonzero()[0])
    seen = {"step": -1}

    def hook(grad):
        if seen["step"] == 1 and dist.get_rank() == 0:
            grad = grad.clone()
            grad.view(-1)[where] = float("nan")
        return grad

    model[3].weight_orig.register_hook(hook)
    return seen


def _outside(model):
    """A penalty on every weight_orig (prune keeps the pruned values there): its gradient is dense,
    nonzero where the masks prune, in every step."""
    return 1e-3 * sum((m.weight_orig ** 2).sum() for m in model if hasattr(m, "weight_orig"))


def _train(rank, world, mode, rank_masks=None, bucket_cap_mb=0.01, piece_elements=None, change=None,
           static_graph=False):
    """STEPS steps of SGD with momentum on rank's own synthetic batches; returns losses and the
    bits of every gradient and parameter after each step, and the hook's state. change: None,
    "regrow", "nan" or "outside" (see _regrow, _nan_at_pruned, _outside)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from sieve import ddp as sieve_ddp
    model = _model(7)
    nan_step = _nan_at_pruned(model) if change == "nan" else None
    ddp = DDP(model, bucket_cap_mb=bucket_cap_mb, static_graph=static_graph)
    state = None
    if mode in ("sieve", "sieve_bf16"):
        state = sieve_ddp.register(ddp, masks=rank_masks,
                                   wire_dtype=torch.bfloat16 if mode == "sieve_bf16" else None,
                                   piece_elements=piece_elements)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(100 + rank)
    losses, grads, params = [], [], []
    for step in range(STEPS):
        if change == "regrow":
            _regrow(step, rank, model, at=3 if static_graph else 2)
        if nan_step is not None:
            nan_step["step"] = step
        x = torch.randn(4, 3, 8, 8, generator=generator)
        y = torch.randint(0, 10, (4,), generator=generator)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        if change == "outside":
            loss = loss + _outside(model)
        loss.backward()
        grads.append([_bits(p.grad) for p in model.parameters()])
        optimizer.step()
        params.append([_bits(p) for p in model.parameters()])
        losses.append(loss.item())
    _train.raw = [_raw(p) for p in model.parameters()] + [_raw(p.grad) for p in model.parameters()]
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
        _train.raw_default = _train.raw
        for case in cases:
            results[case] = _case(rank, world, case, ref_losses, ref_grads, ref_params)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(results, f)
    end_rank(0)  # no interpreter finalization: see end_rank


def _case(rank, world, case, ref_losses, ref_grads, ref_params):
    result = {}
    if case == "exact":
        losses, grads, params, state = _train(rank, world, "sieve")
        result["losses_equal"] = [a.hex() for a in losses] == [a.hex() for a in ref_losses]
        result["grads_equal"] = all(_same(a, b) for a, b in zip(grads, ref_grads))
        result["params_equal"] = all(_same(a, b) for a, b in zip(params, ref_params))
        result["stats"] = state.stats
        result["losses_moved"] = losses[-1] != losses[0]
        # Sieve's stated exception: at a pruned position +0.0 where the default may give -0.0. Every
        # raw difference of the last step's parameters and gradients must be one of those.
        signs = others = 0
        for a, b in zip(_train.raw, _train.raw_default):
            differ = a != b
            zeros = differ & ((a & 0x7fffffff) == 0) & ((b & 0x7fffffff) == 0)
            signs += int(zeros.sum())
            others += int(differ.sum()) - int(zeros.sum())
        result["zero_sign_differences"], result["other_differences"] = signs, others
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
    elif case in ("regrow", "nan", "outside", "outside_pieces", "static_regrow"):
        # Each against the default under the same change: the buckets the change touches fall back
        # to the default's dense all-reduce on every rank, the others stay compacted. static_graph:
        # DDP's first step calls every hook from its own end-of-backward callback.
        change = {"outside_pieces": "outside", "static_regrow": "regrow"}.get(case, case)
        static = case == "static_regrow"
        ref = _train(rank, world, "default", change=change, static_graph=static)
        said = []
        handler = logging.Handler()
        handler.emit = said.append
        logging.getLogger("sieve").addHandler(handler)
        try:
            losses, grads, params, state = _train(rank, world, "sieve", change=change, static_graph=static,
                                                  piece_elements=97 if case == "outside_pieces" else None)
        finally:
            logging.getLogger("sieve").removeHandler(handler)
        result["said"] = [record.getMessage() for record in said]
        result["losses_equal"] = [a.hex() for a in losses] == [a.hex() for a in ref[0]]
        result["grads_equal"] = all(_same(a, b) for a, b in zip(grads, ref[1]))
        result["params_equal"] = all(_same(a, b) for a, b in zip(params, ref[2]))
        result["nan_in_params"] = any(bool(torch.isnan(p.view(torch.float32)).any()) for p in params[-1])
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
            self.assertEqual(r["other_differences"], 0, "rank %d: raw bits differ beyond the sign of zero" % rank)

    def test_buckets_are_voted_again_after_the_rebuild_and_compact(self):
        for r in (r["exact"] for r in self._results):
            stats = r["stats"]
            # Several buckets (bucket_cap_mb is tiny), each voted at its first sight and again after
            # DDP's rebuild changed the buckets; every vote agreed; every step compacted.
            self.assertGreater(stats["votes"], 2)
            self.assertEqual(stats["votes"], stats["agreed"])
            self.assertEqual(stats["dense"], 0)
            self.assertEqual(stats["fallback"], 0, "a check fired on gradients that are zero where pruned")
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

    def _check_fallback(self, case):
        results = [r[case] for r in self._results]
        for rank, r in enumerate(results):
            self.assertTrue(r["losses_equal"], "%s, rank %d: a loss differs from the default's" % (case, rank))
            self.assertTrue(r["grads_equal"], "%s, rank %d: a gradient differs from the default's" % (case, rank))
            self.assertTrue(r["params_equal"], "%s, rank %d: a parameter differs from the default's" % (case, rank))
            self.assertGreater(r["stats"]["fallback"], 0, "%s, rank %d: nothing fell back" % (case, rank))
            self.assertEqual(len(r["said"]), 1, "%s, rank %d: said %s, not once" % (case, rank, r["said"]))
            self.assertIn("nonzero (or NaN) where its mask prunes", r["said"][0])
        # The flags are summed by the all-reduce itself: every rank falls back on the same buckets.
        self.assertEqual(results[0]["stats"], results[1]["stats"], "%s: the ranks decided differently" % case)
        return results

    def test_regrowth_without_update_masks_gives_the_defaults_result(self):
        for r in self._check_fallback("regrow"):
            self.assertGreater(r["stats"]["compacted"], r["stats"]["fallback"], "untouched buckets stay compacted")

    def test_regrowth_under_static_graph_gives_the_defaults_result(self):
        self._check_fallback("static_regrow")

    def test_a_nan_at_a_pruned_position_gives_the_defaults_nans(self):
        for r in self._check_fallback("nan"):
            self.assertTrue(r["nan_in_params"], "the default's NaN reached the parameters; so must Sieve's")

    def test_dense_gradients_outside_the_mask_give_the_defaults_result(self):
        for r in self._check_fallback("outside"):
            # Every step's fallback re-sends the bucket dense: counted in elements_sent.
            self.assertGreater(r["stats"]["elements_sent"], r["stats"]["elements_dense"] * 0.9)

    def test_dense_gradients_outside_the_mask_in_pieces_fall_back_piece_by_piece(self):
        for r in self._check_fallback("outside_pieces"):
            self.assertGreater(r["stats"]["pieces"], 2 * r["stats"]["compacted"])

    def test_bf16_wire_is_lossy_but_close(self):
        for r in (r["bf16"] for r in self._results):
            self.assertFalse(r["params_equal"], "a bf16 wire cannot be bit-identical to fp32")
            self.assertEqual(r["stats"]["dense"], 0)
            for a, b in zip(r["losses"], r["ref_losses"]):
                self.assertAlmostEqual(a, b, delta=0.05 * abs(b) + 1e-3)

    @classmethod
    def setUpClass(cls):
        cls._results = _run(["exact", "pieces", "disagree", "bf16", "regrow", "nan", "outside", "outside_pieces",
                            "static_regrow"])


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
