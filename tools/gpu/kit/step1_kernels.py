# SPDX-License-Identifier: Apache-2.0
"""Step 1: the collective proxy's kernel tests on the GPU (gather, scatter, violation records, graph
capture; every element size). The same tests under compute-sanitizer are step 7, last: the sanitizer
is the slowest part and the one a machine most often refuses."""

from common import Step, check_gtest, run


def main():
    step = Step(__doc__)
    report = step.path("kernel_test.json")
    status = run([step.bin("proxy_gpu_kernel_test"), "--gtest_output=json:" + report], min(120, step.left() - 5),
                 step.path("kernel_test.log"))
    check_gtest(step, "kernel tests", status, report)
    step.finish()


if __name__ == "__main__":
    main()
