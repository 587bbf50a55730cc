# SPDX-License-Identifier: Apache-2.0
"""Step 6: PyTorch FSDP2 (fully_shard), 2 ranks on one GPU, an MLP pruned 80 %, gradients reduced in
fp32 and in bf16: dense (no proxy) against Sieve (LD_PRELOAD proxy, sieve.publish_fsdp after the first
step), all traffic through the Sieve net plugin. Losses compared bit for bit. Where the proxy
compacted nothing, the result says that FSDP ran dense through it. 60 steps, 30 in the quick profile."""

import os

from common import Step, losses_compared, nccl_net_label, run_torch_ranks, statuses_text

STEPS = {"full": 60, "quick": 30}
LEAST_PER_MODE_S = {"full": 30, "quick": 20}
CONFIGS = ("fp32", "bf16")
MODES = [("dense", {}, []), ("sieve", {"LD_PRELOAD": "LIB"}, ["--publish"])]


def main():
    step = Step(__doc__)
    steps = STEPS[step.args.profile]
    script = os.path.join(step.kit, "kit", "fsdp_pruned.py")
    runs = {}
    step.data["net"] = nccl_net_label()
    for index, (mode, extra_env, extra_args) in enumerate(MODES):
        timeout = step.left() / (len(MODES) - index) - 5
        if timeout < LEAST_PER_MODE_S[step.args.profile]:
            step.could_not_run(mode, "no time left (%.0f s)" % step.left())
            continue
        statuses, ranks = run_torch_ranks(step, mode, "fsdp-" + mode, script, ["--steps", str(steps)] + extra_args,
                                          extra_env, timeout)
        if step.check(mode + ": both ranks finished", all(s == 0 for s in statuses) and all(ranks),
                      statuses_text(statuses)):
            runs[mode] = ranks

    step.data["steps"] = steps
    configs = {}
    for config in CONFIGS:
        entry = {}
        for mode, ranks in runs.items():
            per_rank = [r["configs"][config] for r in ranks]
            entry[mode] = {"final_loss": per_rank[0]["losses"][-1], "step_ms": max(r["step_ms"] for r in per_rank),
                           "collectives_compacted": [r["stats"].get("collectives_compacted") for r in per_rank],
                           "wire_bytes_sent": sum(r["stats"].get("bytes_wire_sent", 0) for r in per_rank),
                           "published": per_rank[0].get("publish")}
        if "dense" in runs and "sieve" in runs:
            compared = losses_compared(runs["dense"][0]["configs"][config]["losses"],
                                       runs["sieve"][0]["configs"][config]["losses"])
            entry.update(compared)
            compacted = sum(c or 0 for c in entry["sieve"]["collectives_compacted"])
            entry["sieve_compacted"] = compacted > 0
            entry["note"] = "" if compacted else "Sieve compacted no FSDP collective: FSDP ran dense through the proxy"
            step.check("%s: losses with Sieve bit-identical to dense" % config, compared["bit_identical"],
                       "bit-identical" if compared["bit_identical"] else "first differs at step %s, max |diff| %.3g"
                       % (compared["first_different_step"], compared["max_abs_difference"]))
            step.target("%s: Sieve compacts FSDP's collectives" % config, compacted > 0,
                        "%d compacted" % compacted if compacted else entry["note"])
        configs[config] = entry
    step.data["configs"] = configs
    step.finish()


if __name__ == "__main__":
    main()
