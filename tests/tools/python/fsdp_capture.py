# SPDX-License-Identifier: Apache-2.0
"""test_real_torch.py's capture of FSDP's real collectives and its replay of them through the proxy.

Capture and Published record, inside a rank, what FSDP issues and what publish_fsdp publishes;
order_problems checks the plan against the order of the real calls; replay_part packs a rank's
calls and masks, and replay(), in the parent, runs every rank's through proxy_shape_replay
(tests/plugin/proxy/shape_replay.cc: the real Proxy on the fake backend, SIEVE_PROXY_REPLAY) and
checks what it reports. Imported after torch (suite.require_torch).
"""

import json
import os
import subprocess
import tempfile

import torch
import torch.distributed as dist


def unpack(bits, count):
    """sieve's LSB-first bitmap bytes -> bool tensor."""
    flat = torch.tensor(list(bits), dtype=torch.uint8)
    shifts = torch.arange(8, dtype=torch.uint8)
    return ((flat.unsqueeze(1) >> shifts) & 1).reshape(-1)[:count].bool()


class Capture:
    """Records, while `on`, every collective FSDP issues where it calls torch.distributed (module
    attributes, looked up at each call): the kind, the whole buffer it moves (count, dtype, nonzeros),
    its communicator (numbered in order of first use) and the step. The whole buffer: a reduce-scatter's
    input; an all-gather's output once complete (every rank's input, rank 0's first). FSDP1 on the
    CPU gathers with dist.all_gather into torch.chunk views of its padded flat parameter (a GPU's
    all_gather_into_tensor moves that same buffer): their concatenation."""

    # FSDP's names for the collectives it issues: PyTorch 2.15 calls all_gather_single and
    # reduce_scatter_single where 2.11 calls all_gather_into_tensor and reduce_scatter_tensor.
    GATHERS = ("all_gather_into_tensor", "all_gather_single")
    SCATTERS = ("reduce_scatter_tensor", "reduce_scatter_single")

    def __init__(self):
        self.calls, self.on, self.step, self.comms = [], False, 0, {}
        names = [n for n in self.GATHERS + self.SCATTERS + ("all_gather",) if hasattr(dist, n)]
        self.saved = {name: getattr(dist, name) for name in names}
        for name in names:
            setattr(dist, name, self._wrap(name, self.saved[name]))

    def _wrap(self, name, real):
        if name in self.GATHERS:
            def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
                work = real(output_tensor, input_tensor, group=group, async_op=async_op)
                if self.on:
                    if work is not None:
                        work.wait()
                    self.add("all_gather", output_tensor, group)
                return work
            return all_gather_into_tensor
        if name in self.SCATTERS:
            def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
                if self.on:
                    self.add("reduce_scatter", input, group)
                return real(output, input, op=op, group=group, async_op=async_op)
            return reduce_scatter_tensor

        def all_gather(tensor_list, tensor, group=None, async_op=False):
            work = real(tensor_list, tensor, group=group, async_op=async_op)
            if self.on:
                if work is not None:
                    work.wait()
                self.add("all_gather", torch.cat([t.reshape(-1) for t in tensor_list]), group)
            return work
        return all_gather

    def comm_of(self, group):
        return self.comms.setdefault(dist.group.WORLD if group is None else group, len(self.comms))

    def add(self, kind, buffer, group):
        self.calls.append({"kind": kind, "count": buffer.numel(), "dtype": buffer.dtype,
                           "nonzero": buffer.reshape(-1).ne(0).clone(), "comm": self.comm_of(group), "step": self.step})

    def close(self):
        for name, real in self.saved.items():
            setattr(dist, name, real)


class Published:
    """What publish_fsdp publishes, in order: (kind, count, sieve dtype code, bool bits); still published."""

    def __init__(self):
        from sieve import fsdp_masks
        self.entries, self.module, self.original = [], fsdp_masks, fsdp_masks._publish_collective_bits

        def record(kind, count, dtype, bits):
            self.entries.append((kind, count, dtype, unpack(bits, count)))
            return self.original(kind, count, dtype, bits)
        fsdp_masks._publish_collective_bits = record

    def close(self):
        self.module._publish_collective_bits = self.original


def bit_positions(hex_bits, limit=20):
    """The elements an LSB-first bitmap (as hex) keeps, the first `limit` of them."""
    value, found, i = int.from_bytes(bytes.fromhex(hex_bits), "little"), [], 0
    while value and len(found) < limit:
        if value & 1:
            found.append(i)
        value, i = value >> 1, i + 1
    return found


def differ(what, bits, nonzero, kind, count):
    """Why a mask (hex bitmap) is not exactly a buffer's nonzeros (hex bitmap)."""
    mask, data = int.from_bytes(bytes.fromhex(bits), "little"), int.from_bytes(bytes.fromhex(nonzero), "little")
    lost, zero = data & ~mask, mask & ~data
    width = len(bits) // 2
    return "%s: %s of %d elements: the mask prunes %d nonzeros (at %s) and keeps %d zeros (at %s)" % (
        what, kind, count, bin(lost).count("1"), bit_positions(lost.to_bytes(width, "little").hex()),
        bin(zero).count("1"), bit_positions(zero.to_bytes(width, "little").hex()))


def order_problems(calls, published, plan_comms, steps_in_order, expect_dtype=None, in_order=None):
    """publish_fsdp's plan against the order FSDP really issued its calls in (which calls the proxy
    compacts is the replay's, replay()): in each step of steps_in_order, the calls of the published
    shapes on the communicators publish_fsdp committed on (plan_comms, communicator by communicator)
    are the published masks one for one, each mask exactly that call's nonzeros (in_order a number:
    the first so many in order, the rest the same masks in any order); and each call in the dtype
    expect_dtype(call) names (None: any)."""
    from sieve.masks import _dtype_code_of, _packbits
    shapes = {entry[:3] for entry in published}
    problems = []

    def shape(call):
        return call["kind"], call["count"], _dtype_code_of(call["dtype"])
    for k, call in enumerate(calls):
        expected = expect_dtype(call) if expect_dtype is not None else None
        if expected is not None and call["dtype"] != expected:
            problems.append("call %d: %s in %s, not %s" % (k, call["kind"], call["dtype"], expected))
    for step in steps_in_order:
        issued = [c for comm in plan_comms for c in calls
                  if c["step"] == step and c["comm"] == comm and shape(c) in shapes]
        expected = published
        if in_order is not None:
            def key(shape_and_bits):
                return shape_and_bits[0], tuple(shape_and_bits[1].tolist())
            issued = issued[:in_order] + sorted(issued[in_order:], key=lambda c: key((shape(c), c["nonzero"])))
            expected = published[:in_order] + sorted(published[in_order:], key=lambda e: key((e[:3], e[3])))
        if len(issued) != len(expected):
            problems.append("step %d issued %d calls of the published shapes, %d masks were published" % (
                step, len(issued), len(expected)))
            continue
        for i, (call, entry) in enumerate(zip(issued, expected)):
            if shape(call) != entry[:3]:
                problems.append("step %d, mask %d: published for %s, the call is %s" % (step, i, entry[:3],
                                                                                        shape(call)))
            elif not torch.equal(entry[3], call["nonzero"]):
                problems.append(differ("step %d, mask %d" % (step, i), _packbits(entry[3]).hex(),
                                       _packbits(call["nonzero"]).hex(), call["kind"], call["count"]))
    return problems


# sieve.h's SIEVE_DTYPE_* codes, in order: the names compress::dtype_name gives them.
DTYPE_NAMES = ("f32", "f16", "bf16", "f64", "i8", "u8", "i32", "i64")


def replay_part(capture, published, plan_comms):
    """This rank's share of the replay (replay(), in the parent): its communicators (by their ranks),
    the ones publish_fsdp committed on, what it published and every captured call, bitmaps as hex."""
    from sieve.masks import _dtype_code_of, _packbits
    comms = sorted(capture.comms.items(), key=lambda item: item[1])
    return {"comms": [dist.get_process_group_ranks(group) for group, _ in comms], "plan_comms": plan_comms,
            "published": [{"collective": kind, "count": count, "dtype": DTYPE_NAMES[dtype],
                           "bits": _packbits(bits).hex()} for kind, count, dtype, bits in published],
            "calls": [{"collective": c["kind"], "count": c["count"], "dtype": DTYPE_NAMES[_dtype_code_of(c["dtype"])],
                       "comm": c["comm"], "step": c["step"], "nonzero": _packbits(c["nonzero"]).hex()}
                      for c in capture.calls]}


def replay(case, found):
    """What the proxy itself does with a case's calls: every rank's captured calls and published masks
    (replay_part) through the real Proxy on the fake backend (SIEVE_PROXY_REPLAY, the
    proxy_shape_replay of tests/plugin/proxy), the table committed on the communicators publish_fsdp
    committed on. Each rank's result gets its dense calls and its compacted count, and a problem for
    what must hold whatever the proxy decides: the commit agreed, every call's result equal to the
    same call's dense one, every rank deciding alike, and a compacted call's mask one published for
    its shape that is exactly its buffer's nonzeros."""
    comms, numbered, ranks = [], {}, []
    for rank, result in found:
        part, mine = result["replay"], []
        for local, members in enumerate(part["comms"]):
            mine.append(numbered.setdefault((local, tuple(members)), len(comms)))
            if mine[-1] == len(comms):
                comms.append(members)
        ranks.append({"commit": [mine[c] for c in part["plan_comms"]], "published": part["published"],
                      "calls": [dict(c, comm=mine[c["comm"]]) for c in part["calls"]]})
    with tempfile.NamedTemporaryFile("w", suffix=".json") as calls:
        json.dump({"comms": comms, "ranks": ranks}, calls)
        calls.flush()
        done = subprocess.run([os.environ["SIEVE_PROXY_REPLAY"], calls.name], capture_output=True, text=True,
                              timeout=300)
    if done.returncode != 0:
        raise AssertionError("%s: the replay exited %d: %s" % (case, done.returncode, done.stderr[-3000:]))
    replayed = json.loads(done.stdout)
    decided = [[(d["path"], d["mask"]) for d in r["calls"]] for r in replayed["ranks"]]
    for (rank, result), mine in zip(found, replayed["ranks"]):
        part, problems, dense, compacted = result["replay"], result["problems"], [], 0
        problems += ["the commit on communicator %d: %s" % (c, state)
                     for c, state in zip(part["plan_comms"], mine["commits"]) if state != "activated"]
        if decided[rank] != decided[0]:
            problems.append("rank %d decided otherwise than rank 0: %s, rank 0 %s" % (rank, decided[rank], decided[0]))
        if len(mine["calls"]) != len(part["calls"]):
            problems.append("replayed %d of %d calls" % (len(mine["calls"]), len(part["calls"])))
        for k, (call, did) in enumerate(zip(part["calls"], mine["calls"])):
            what = "call %d (%s of %d x %s, step %d)" % (k, call["collective"], call["count"], call["dtype"],
                                                         call["step"])
            if did["error"] or not did["exact"]:
                problems.append("%s: %s" % (what, did["error"] or "its result differs from the dense one"))
            if not did["path"].startswith("compact"):
                dense.append({"call": k, "kind": call["collective"], "count": call["count"], "comm": call["comm"],
                              "step": call["step"]})
                continue
            compacted += 1
            shape = (call["collective"], call["count"], call["dtype"])
            mask = part["published"][did["mask"]] if 0 <= did["mask"] < len(part["published"]) else None
            if mask is None:
                problems.append("%s: compacted with no published mask (%d)" % (what, did["mask"]))
            elif (mask["collective"], mask["count"], mask["dtype"]) != shape:
                problems.append("%s: compacted with mask %d, published for %s" % (
                    what, did["mask"], (mask["collective"], mask["count"], mask["dtype"])))
            elif mask["bits"] != call["nonzero"]:
                problems.append(differ(what, mask["bits"], call["nonzero"], call["collective"], call["count"]))
        result.update(dense=dense, compacted=compacted, log=replayed["log"])
