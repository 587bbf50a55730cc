# SPDX-License-Identifier: Apache-2.0
"""Rolling Sieve back is one line of the launch (docs/DEPLOY.md, "Roll back"): a training script that
makes the calls the README shows (publish_pruned_model, commit, stats, the DDP hook, sieve.fsdp and
publish_fsdp on FSDP2, the C API's publish/query/retract) runs to the end with Sieve absent from the
process (no LD_PRELOAD, no SIEVE_LIBRARY, no NCCL_NET_PLUGIN), with exactly one warning and zero
counters, and no SieveError.

Run it alone: python test_rollback.py (exit 77: no torch with Gloo here)."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tools", "python"))
sys.path[:0] = [HERE]

from suite import main, require_torch  # noqa: E402

require_torch(gloo=True)

# What a user's script looks like: the README's DDP recipe and its FSDP2 one, one rank on Gloo.
TRAINING_SCRIPT = r'''
import datetime, json
import torch
import torch.distributed as dist
import torch.nn.utils.prune as prune
from torch.nn.parallel import DistributedDataParallel
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
import sieve, sieve.ddp, sieve.fsdp

store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=120))
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
torch.manual_seed(0)


def net():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    prune.l1_unstructured(model[0], "weight", amount=0.5)
    return model


x = torch.randn(5, 8)
ddp = DistributedDataParallel(net(), gradient_as_bucket_view=True)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
published = None
for step in range(4):
    ddp(x).sum().backward()
    if step == 1:
        published = sieve.publish_pruned_model(ddp.module)
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
report = {"published": published, "stats": sieve.stats(), "commit": sieve.commit()["state"]}

buffer = torch.zeros(64)
mask_id = sieve.publish_mask(buffer, buffer.ne(1))
report["query"] = sieve.query(buffer)
sieve.retract(buffer)
sieve.retract_id(sieve.publish_ranges(buffer, [(0, 8)]) or 1)
sieve.retract_id(sieve.publish_collective("all_gather", torch.ones(64, dtype=torch.bool), torch.float32) or 1)
sieve.retract_all(ddp.module)

hooked = DistributedDataParallel(net())
hooked.register_comm_hook(sieve.ddp.CompactState(hooked), sieve.ddp.compact_hook)
hooked(x).sum().backward()

sharded = net()
fully_shard(sharded, mesh=init_device_mesh("cpu", (1,)))
sharded(x).sum().backward()
report["publish_fsdp"] = {k: v for k, v in sieve.publish_fsdp(sharded).items() if k in ("all_gather", "reduce_scatter")}
report["compact"] = sorted(set(map(str, sieve.fsdp.compact(sharded).values())))
sharded(x).sum().backward()
sieve.fsdp.uncompact(sharded)
report["fsdp_stats"] = sieve.fsdp.stats()
report["mask_id"] = mask_id
print("REPORT " + json.dumps(report))
dist.destroy_process_group()
'''

# What takes Sieve out of a launch: the rollback DEPLOY describes.
ROLLED_BACK = ("LD_PRELOAD", "NCCL_NET_PLUGIN", "SIEVE_LIBRARY", "NCCL_NET")


class RolledBack(unittest.TestCase):
    def test_a_training_script_runs_unchanged_with_one_warning(self):
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "train.py")
            with open(script, "w") as f:
                f.write(TRAINING_SCRIPT)
            env = {k: v for k, v in os.environ.items() if k not in ROLLED_BACK}
            env.update(PYTHONPATH=PACKAGE_DIR, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
            done = subprocess.run([sys.executable, script], cwd=tmp, env=env, capture_output=True, text=True,
                                  timeout=240)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertNotIn("SieveError", done.stderr)
        said = [line for line in done.stderr.splitlines() if "sieve" in line.lower()]
        self.assertEqual(len(said), 1, said)
        self.assertIn("is not loaded in this process", said[0])
        report = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
        self.assertEqual(len(report), 1, done.stdout)
        import json
        report = json.loads(report[0][len("REPORT "):])
        self.assertEqual(report["published"], 0)
        self.assertEqual(report["commit"], "refused")
        self.assertTrue(report["stats"] and not any(report["stats"].values()), report["stats"])
        self.assertEqual(report["mask_id"], 0)
        self.assertFalse(any(report["query"].values()), report["query"])
        self.assertEqual(report["publish_fsdp"], {"all_gather": 0, "reduce_scatter": 0})


if __name__ == "__main__":
    main()
