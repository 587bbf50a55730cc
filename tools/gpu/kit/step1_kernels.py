"""Step 1: the collective proxy's kernel tests on the GPU (gather, scatter, violation records, graph
capture; every element size), then the same tests under compute-sanitizer's memcheck (out-of-bounds
and misaligned accesses) and racecheck (shared-memory hazards)."""

import glob
import os
import re
import shutil

from common import Step, check_gtest, run


def find_sanitizer():
    """compute-sanitizer on PATH, else in a CUDA toolkit's usual places."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    candidates = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "compute-sanitizer")]
    candidates += sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer"), reverse=True)
    candidates += sorted(glob.glob("/opt/nvidia/*/compute-sanitizer/compute-sanitizer"), reverse=True)
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def sanitizer_errors(log_path, tool):
    """The error count in compute-sanitizer's last summary line, or None when it printed none."""
    with open(log_path, errors="replace") as log:
        text = log.read()
    # memcheck: "========= ERROR SUMMARY: 0 errors"; racecheck: "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    if tool == "racecheck":
        found = re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?", text)
        if found:
            return int(found[-1])
    found = re.findall(r"ERROR SUMMARY: (\d+) errors?", text)
    return int(found[-1]) if found else None


def main():
    step = Step(__doc__)
    test = step.bin("proxy_gpu_kernel_test")

    report = step.path("kernel_test.json")
    status = run([test, "--gtest_output=json:" + report], min(120, step.left()), step.path("kernel_test.log"))
    check_gtest(step, "kernel tests", status, report)

    sanitizer = find_sanitizer()
    step.data["sanitizer"] = sanitizer or ""
    # racecheck runs longer than memcheck (it tracks every shared-memory access): it gets the larger share.
    for tool, share in (("memcheck", 0.4), ("racecheck", 1.0)):
        if not sanitizer:
            step.could_not_run(tool, "compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda*/bin)")
            continue
        budget = step.left() * share - 5
        if budget < 20:
            step.could_not_run(tool, "no time left (%.0f s)" % step.left())
            continue
        log = step.path(tool + ".log")
        report = step.path(tool + ".json")
        status = run([sanitizer, "--tool", tool, "--error-exitcode", "86", "--print-limit", "100", test,
                      "--gtest_output=json:" + report], budget, log)
        errors = sanitizer_errors(log, tool)
        step.data[tool] = {"exit": status, "errors": errors}
        if status is None:
            step.check(tool + " finished in time", False, "killed after %.0f s" % budget)
            continue
        step.check(tool + ": no errors", status == 0 and errors == 0,
                   "exit %d, %s" % (status, "%d errors" % errors if errors is not None else "no summary line"))
        check_gtest(step, "kernel tests under " + tool, status if status != 86 else 0, report)
    step.finish()


if __name__ == "__main__":
    main()
