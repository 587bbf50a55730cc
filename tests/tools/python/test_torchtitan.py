# SPDX-License-Identifier: Apache-2.0
"""torchtitan's FSDP2 setup with sieve.fsdp (docs/PYTORCH.md, "torchtitan"), run for real: 2 processes,
Gloo on loopback, torchtitan's llama3 "debugmodel" (2 of its layers) sharded by torchtitan's own
apply_fsdp_to_decoder (embeddings, [norm, lm_head], every block, then the root; its MixedPrecisionPolicy,
bf16 parameters and fp32 reduction as its defaults, and gradient division turned off), pruned with
torch.nn.utils.prune; every loss and parameter bit-identical to the same setup without Sieve (the sign
of zero folded, as test_sieve_fsdp.py), and every block compacted.

Two things of torchtitan 0.3.0 do not run on a CPU, so this test goes around them and says so:
- parallelize_llama builds its mesh through ParallelDims on torchtitan.tools.utils.device_type, which
  is "cuda" where no accelerator exists ("Found no NVIDIA driver on your system"): the test hands
  apply_fsdp_to_decoder, which parallelize_llama calls, a CPU mesh instead;
- none of its attention backends trains on a CPU ("sdpa" is refused at build time, FlexAttention has no
  CPU backward, "varlen" needs aten::_flash_attention_forward, CUDA only): each block's inner attention,
  which holds no parameter, is replaced by a causal scaled_dot_product_attention. The sharding is
  torchtitan's, unchanged.
torchtitan 0.3.0 imports DataParallelMeshDims from torch.distributed.fsdp, which PyTorch 2.11 lacks.
Where torchtitan does not import, this test is skipped (exit 77) with that reason.

Run it alone: python test_torchtitan.py (exit 77: no torch with Gloo, or no torchtitan, here)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The package sieve from the checkout (tools/python), and this folder's helpers (suite, fsdp_test_ranks).
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE, PACKAGE_DIR]
from fsdp_test_ranks import init_gloo, run_ranks  # noqa: E402

from suite import require_torch  # noqa: E402

torch = require_torch(gloo=True)
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402
import torch.nn.utils.prune as prune  # noqa: E402
import sieve.fsdp as sieve_fsdp  # noqa: E402

try:
    import torchtitan
    from torchtitan.distributed.fsdp import apply_fsdp_to_decoder
    from torchtitan.models.llama3 import model_registry
except ImportError as exc:  # not installed, or a torch without what it imports (2.11: DataParallelMeshDims)
    print("SKIP: torchtitan does not import with torch %s: %s" % (torch.__version__, exc))
    sys.exit(77)

STEPS = 3
LAYERS = 2
VOCAB = 2048  # the debugmodel's
BATCH, SEQ = 2, 16


class CausalAttention(torch.nn.Module):
    """torchtitan's inner attention contract, (B, L, N, H) in and out, with an attention a CPU can
    differentiate."""

    def forward(self, q, k, v, attention_masks=None, scale=None, enable_gqa=False):
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                                               enable_gqa=enable_gqa)
        return out.transpose(1, 2)


def build():
    spec = model_registry("debugmodel")
    spec.model.layers = spec.model.layers[:LAYERS]
    torch.manual_seed(0)
    model = spec.model.build()
    model.init_states()
    for block in model.layers.values():
        block.attention.inner_attention = CausalAttention()
        for lin in block.modules():
            if isinstance(lin, torch.nn.Linear):
                prune.l1_unstructured(lin, "weight", amount=0.6)
                with torch.no_grad():  # +0.0: the sign of a zero the compacted all-gather does not carry
                    lin.weight_orig.masked_fill_(lin.weight_mask == 0, 0.0)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("fsdp",))
    apply_fsdp_to_decoder(model, mesh, param_dtype=torch.bfloat16, reduce_dtype=torch.float32, pp_enabled=False)
    for module in model.modules():
        if isinstance(module, FSDPModule):  # Gloo has no PREMUL_SUM (see the docstring)
            module.set_force_sum_reduction_for_comms(True)
    return model


def bits(t):
    t = t.detach()
    t = t.full_tensor() if hasattr(t, "full_tensor") else t
    return (t.float() + 0.0).view(torch.int32).clone()


def train(model):
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4)  # torchtitan's default_adamw rate
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    positions = torch.arange(SEQ).repeat(BATCH, 1)
    losses = []
    for _ in range(STEPS):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
        logits = model(tokens[:, :-1], positions, None)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().view(torch.int32).item())
    return losses, [bits(p) for p in model.parameters()]


def same(label, dense, sieve):
    assert dense[0] == sieve[0], "%s: losses differ: %s vs %s" % (label, dense[0], sieve[0])
    for i, (a, b) in enumerate(zip(dense[1], sieve[1])):
        assert torch.equal(a, b), "%s: parameter %d differs after training" % (label, i)


def case_exact():
    dense = train(build())
    model = build()
    before = sieve_fsdp.stats()
    outcome = sieve_fsdp.compact(model)
    blocks = {k: v for k, v in outcome.items() if k.startswith("layers.")}
    assert len(blocks) == LAYERS and all(v == "compacted" for v in blocks.values()), outcome
    result = train(model)
    after = sieve_fsdp.stats()
    same("torchtitan", dense, result)
    assert after["compacted"] - before["compacted"] >= LAYERS * STEPS, (before, after)
    assert after["fallback"] == before["fallback"] and after["dense"] == before["dense"], (before, after)


def worker(rank, world, port):
    init_gloo(rank, world, port)
    try:
        torch.set_num_threads(1)
        case_exact()
    finally:
        dist.destroy_process_group()


def main():
    version = getattr(torchtitan, "__version__", "?")
    return run_ranks(__file__, worker, 2, 300,
                     "OK: torchtitan %s's apply_fsdp_to_decoder with sieve.fsdp.compact bit-identical to it "
                     "without Sieve at 2 ranks (torch %s), every block compacted" % (version, torch.__version__))


if __name__ == "__main__":
    sys.exit(main())
