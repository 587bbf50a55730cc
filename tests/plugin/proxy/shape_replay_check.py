# SPDX-License-Identifier: Apache-2.0
"""proxy_shape_replay (shape_replay.cc) on small hand-made cases, without torch: what it reports is
what test_real_torch.py reads the proxy's decisions from, so it must report them right. The cases and
what each must give come from the contract (proxy.h, mask_registry.h), not from the proxy's code:
- one mask of a shape: the call compacts with it, and its result is the dense result exactly;
- the same mask published twice for a shape: still certain, the first of them is used;
- data with nonzeros the mask prunes: compacted all the same (publishing is a promise), and the
  replay says its result differs from the dense one;
- two different masks of a shape: dense, and the proxy's log says why;
- a shape without a mask, and a communicator never committed on: dense;
- ranks that published different tables: the commit is refused, every call passes through;
- four ranks, two 2-rank communicators besides the world's: each call on its own communicator.

Run: python3 tests/plugin/proxy/shape_replay_check.py build/tests/plugin/proxy/proxy_shape_replay
"""

import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

REPLAY = None
COUNT = 40
COMPACT = "compact (published mask)"


def hex_bits(keep):
    packed = bytearray((len(keep) + 7) // 8)
    for i, kept in enumerate(keep):
        if kept:
            packed[i // 8] |= 1 << (i % 8)
    return packed.hex()


def random_mask(seed, count=COUNT):
    rng = random.Random(seed)
    return hex_bits([rng.random() < 0.4 for _ in range(count)])


M1, M2 = random_mask(1), random_mask(2)


def mask(kind, dtype, bits, count=COUNT):
    return {"collective": kind, "dtype": dtype, "count": count, "bits": bits}


def call(kind, comm, dtype, nonzero, count=COUNT):
    return {"collective": kind, "comm": comm, "dtype": dtype, "count": count, "nonzero": nonzero}


def replay(document):
    with tempfile.NamedTemporaryFile("w", suffix=".json") as calls:
        json.dump(document, calls)
        calls.flush()
        done = subprocess.run([REPLAY, calls.name], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError("proxy_shape_replay exited %d: %s" % (done.returncode, done.stderr))
    return json.loads(done.stdout)


def decisions(rank):
    return [(c["path"], c["mask"], c["exact"], c["error"]) for c in rank["calls"]]


class ShapeReplay(unittest.TestCase):
    def test_what_the_proxy_does_with_each_shape(self):
        published = [mask("all_gather", "f32", M1), mask("reduce_scatter", "f32", M1),
                     mask("reduce_scatter", "f32", M1), mask("reduce_scatter", "bf16", M1),
                     mask("reduce_scatter", "bf16", M2)]
        calls = [call("all_gather", 0, "f32", M1), call("reduce_scatter", 0, "f32", M1),
                 call("reduce_scatter", 0, "f32", M2), call("reduce_scatter", 0, "bf16", M1),
                 call("all_gather", 0, "f32", random_mask(3, 48), 48), call("reduce_scatter", 1, "f32", M1)]
        out = replay({"comms": [[0, 1], [0, 1]],
                      "ranks": [{"commit": [0], "published": published, "calls": calls} for _ in range(2)]})
        for rank in out["ranks"]:
            self.assertEqual(rank["commits"], ["activated"])
            self.assertEqual(decisions(rank), [(COMPACT, 0, True, ""), (COMPACT, 1, True, ""),
                                               (COMPACT, 1, False, ""), ("dense", -1, True, ""),
                                               ("dense", -1, True, ""), ("pass-through", -1, True, "")])
        self.assertTrue(any("several different reduce-scatter masks of 40 x bf16" in line for line in out["log"]),
                        out["log"])

    def test_ranks_that_published_different_tables_run_dense(self):
        calls = [call("all_gather", 0, "f32", M1)]
        out = replay({"comms": [[0, 1]],
                      "ranks": [{"commit": [0], "published": [mask("all_gather", "f32", bits)], "calls": calls}
                                for bits in (M1, M2)]})
        for rank in out["ranks"]:
            self.assertTrue(rank["commits"][0].startswith("refused"), rank["commits"])
            self.assertEqual(decisions(rank), [("pass-through", -1, True, "")])

    def test_four_ranks_and_two_smaller_communicators(self):
        published = [mask("reduce_scatter", "f32", M1)]
        out = replay({"comms": [[0, 1, 2, 3], [0, 1], [2, 3]],
                      "ranks": [{"commit": [0], "published": published,
                                 "calls": [call("reduce_scatter", 0, "f32", M1),
                                           call("reduce_scatter", 1 if rank < 2 else 2, "f32", M1)]}
                                for rank in range(4)]})
        for rank in out["ranks"]:
            self.assertEqual(decisions(rank), [(COMPACT, 0, True, ""), ("pass-through", -1, True, "")])


if __name__ == "__main__":
    if len(sys.argv) < 2 or not os.access(sys.argv[1], os.X_OK):
        sys.exit("usage: shape_replay_check.py PATH/proxy_shape_replay")
    REPLAY = sys.argv.pop(1)
    unittest.main()
