# SPDX-License-Identifier: Apache-2.0
"""Step 5: PyTorch DDP, ResNet-18 pruned 80 %, 2 ranks on one GPU, all traffic through the Sieve net
plugin: dense (no proxy), published masks (LD_PRELOAD proxy, sieve.publish_pruned_model), learned
masks (SIEVE_TRACK=on) and observed masks (SIEVE_TRACK=observe: learning without compacting). Losses
compared with dense bit for bit; compacted collectives, wire bytes and time per step reported. 200
steps, 60 in the quick profile. Through NCCL's Socket transport when the canary found the Sieve net
plugin failing (the proxy, loaded with LD_PRELOAD, works over any transport)."""

import os

from common import Step, losses_compared, nccl_net_label, run_torch_ranks, statuses_text

STEPS = {"full": 200, "quick": 60}
LEAST_PER_VARIANT_S = {"full": 45, "quick": 20}  # torch's start, NCCL's set-up and the steps
# variant -> (extra environment, extra arguments of ddp_resnet18.py); dense first: the others compare with it.
VARIANTS = [
    ("dense", {}, []),
    ("published", {"LD_PRELOAD": "LIB"}, ["--sieve"]),
    ("learned", {"LD_PRELOAD": "LIB", "SIEVE_TRACK": "on"}, []),
    ("observe", {"LD_PRELOAD": "LIB", "SIEVE_TRACK": "observe"}, []),
]


def main():
    step = Step(__doc__)
    steps = STEPS[step.args.profile]
    script = os.path.join(step.kit, "kit", "ddp_resnet18.py")
    results = {}
    step.data["steps"] = steps
    step.data["net"] = nccl_net_label()
    step.data["variants"] = results
    for index, (variant, extra_env, extra_args) in enumerate(VARIANTS):
        timeout = step.left() / (len(VARIANTS) - index) - 5
        if timeout < LEAST_PER_VARIANT_S[step.args.profile]:
            step.could_not_run(variant, "no time left (%.0f s)" % step.left())
            continue
        statuses, ranks = run_torch_ranks(step, variant, "ddp-" + variant, script, ["--steps", str(steps)] + extra_args,
                                          extra_env, timeout)
        if not step.check(variant + ": both ranks finished", all(s == 0 for s in statuses) and all(ranks),
                          statuses_text(statuses)):
            continue
        stats = [r["stats"] for r in ranks]
        results[variant] = {
            "final_loss": ranks[0]["losses"][-1],
            "step_ms": max(r["step_ms"] for r in ranks),
            "density": ranks[0]["density"],
            "collectives_compacted": [s.get("collectives_compacted") for s in stats],
            "collectives_dense": [s.get("collectives_dense") for s in stats],
            "mask_violations": [s.get("mask_violations") for s in stats],
            "tables_activated": [s.get("tables_activated") for s in stats],
            "wire_bytes_sent": sum(s.get("bytes_wire_sent", 0) for s in stats),
            "stats_error": next((s["error"] for s in stats if "error" in s), ""),
            "losses": ranks[0]["losses"],
        }
        step.save()

    dense = results.get("dense")
    if dense:
        step.check("dense: %d losses" % steps, len(dense["losses"]) == steps, "%d" % len(dense["losses"]))
    for variant, result in results.items():
        if variant == "dense" or not dense:
            continue
        result.update(losses_compared(dense["losses"], result["losses"]))
        result["wire_ratio"] = (result["wire_bytes_sent"] / dense["wire_bytes_sent"] if dense["wire_bytes_sent"]
                                else None)
        result["time_ratio"] = result["step_ms"] / dense["step_ms"] if dense["step_ms"] else None
        compacted = all(result["collectives_compacted"]) and None not in result["collectives_compacted"]
        same = "bit-identical" if result["bit_identical"] else "first differs at step %s, max |diff| %.3g" % (
            result["first_different_step"], result["max_abs_difference"])
        if variant == "published":
            step.check("published: losses bit-identical to dense", result["bit_identical"], same)
            step.check("published: collectives compacted on both ranks", compacted,
                       "compacted %s" % result["collectives_compacted"])
        elif variant == "learned":
            # Learned masks may drop a value that breaks the mask, until the ranks fall back (README,
            # "What happens to violating values"): a difference is right only with a counted violation.
            violations = sum(v or 0 for v in result["mask_violations"])
            step.check("learned: losses bit-identical to dense, or differing after counted violations",
                       result["bit_identical"] or violations > 0, "%s; %d violations" % (same, violations))
            step.check("learned: collectives compacted on both ranks", compacted,
                       "compacted %s" % result["collectives_compacted"])
        else:
            step.check(variant + ": losses bit-identical to dense", result["bit_identical"], same)
    for result in results.values():
        del result["losses"]  # in the rank files of the logs; the summary keeps the comparison
    step.finish()


if __name__ == "__main__":
    main()
