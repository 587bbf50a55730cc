# SPDX-License-Identifier: Apache-2.0
"""Step 3: the collective proxy's multi-process tests under the machine's real NCCL: 2 ranks (4 for
reduce-scatter/all-gather) on one GPU, each its own NCCL "host", all traffic through the Sieve net
plugin. Every dtype and op compacted equals dense; reduce-scatter and all-gather; union masks; a
captured CUDA graph; learned masks with a violation."""

from common import Step, check_gtest, run


def main():
    step = Step(__doc__)
    report = step.path("multiprocess_test.json")
    # The test starts the ranks itself, with every NCCL variable they need; it finds sieve-proxy-rank
    # and the library beside itself in the kit.
    status = run([step.bin("proxy_gpu_multiprocess_test"), "--gtest_output=json:" + report], step.left() - 5,
                 step.path("multiprocess_test.log"))
    check_gtest(step, "multi-process tests", status, report)
    step.finish()


if __name__ == "__main__":
    main()
