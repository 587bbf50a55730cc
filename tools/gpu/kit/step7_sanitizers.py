# SPDX-License-Identifier: Apache-2.0
"""Step 7: the proxy's kernel tests under compute-sanitizer's memcheck (out-of-bounds and misaligned
accesses) and racecheck (shared-memory hazards). A sanitizer that cannot run here ("Device not
supported", as on gVisor; no error summary; an exit status other than 0 and its own error code) makes
the step partial, not failed: only errors it found, or tests that failed under it, fail the step."""

import glob
import os
import re
import shutil

from common import Step, check_gtest, gtest_report, run

ERROR_EXIT = 86  # --error-exitcode: the sanitizer's own "errors found"
CUDA_ROOTS = "/usr/local/cuda*"


def find_sanitizer(cuda_roots=CUDA_ROOTS):
    """compute-sanitizer on PATH, else beside nvcc (on PATH, through its links), else in a CUDA
    toolkit's usual places: $CUDA_HOME/bin, /usr/local/cuda*/bin, /usr/local/cuda*/compute-sanitizer/
    (where the toolkit keeps the real one), /opt/nvidia/*/compute-sanitizer/."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    candidates = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        for bin_dir in dict.fromkeys((os.path.dirname(nvcc), os.path.dirname(os.path.realpath(nvcc)))):
            candidates += [os.path.join(bin_dir, "compute-sanitizer"),
                           os.path.join(bin_dir, "..", "compute-sanitizer", "compute-sanitizer")]
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "compute-sanitizer"))
    for root in sorted(glob.glob(cuda_roots), reverse=True):  # the newest toolkit first
        candidates += [os.path.join(root, "bin", "compute-sanitizer"),
                       os.path.join(root, "compute-sanitizer", "compute-sanitizer")]
    candidates += sorted(glob.glob("/opt/nvidia/*/compute-sanitizer/compute-sanitizer"), reverse=True)
    return next((os.path.normpath(c) for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)), None)


def sanitizer_errors(text, tool):
    """The error count in compute-sanitizer's last summary line, or None when it printed none."""
    # memcheck: "========= ERROR SUMMARY: 0 errors";
    # racecheck: "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    if tool == "racecheck":
        found = re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?", text)
        if found:
            return int(found[-1])
    found = re.findall(r"ERROR SUMMARY: (\d+) errors?", text)
    return int(found[-1]) if found else None


def cannot_run(text, status, errors):
    """Why the sanitizer could not run here (None when it ran): it refused the device, printed no
    error summary, or ended with a status that is neither success nor its own error code."""
    refused = re.search(r"Device not supported[^\n]*", text)
    if refused:
        return "compute-sanitizer cannot run here: " + refused.group(0).strip()
    if errors is None:
        return "compute-sanitizer printed no error summary (exit %s)" % status
    if status not in (0, ERROR_EXIT):
        return "compute-sanitizer ended with exit %d, neither 0 nor its error code %d" % (status, ERROR_EXIT)
    return None


def main():
    step = Step(__doc__)
    step.partial_when_nothing_ran = True
    test = step.bin("proxy_gpu_kernel_test")
    sanitizer = find_sanitizer()
    step.data["sanitizer"] = sanitizer or ""
    refused = None
    # racecheck runs longer than memcheck (it tracks every shared-memory access): it gets the larger share.
    for tool, share in (("memcheck", 0.4), ("racecheck", 1.0)):
        if not sanitizer:
            step.could_not_run(tool, "compute-sanitizer not found (PATH, beside nvcc, $CUDA_HOME/bin, "
                                     "/usr/local/cuda*/bin, /usr/local/cuda*/compute-sanitizer/)")
            continue
        if refused:
            step.could_not_run(tool, refused)
            continue
        budget = step.left() * share - 5
        if budget < 20:
            step.could_not_run(tool, "no time left (%.0f s)" % step.left())
            continue
        log = step.path(tool + ".log")
        report = step.path(tool + ".json")
        status = run([sanitizer, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "100", test,
                      "--gtest_output=json:" + report], budget, log)
        with open(log, errors="replace") as f:
            text = f.read()
        errors = sanitizer_errors(text, tool)
        step.data[tool] = {"exit": status, "errors": errors}
        step.save()
        if status is None:
            step.check(tool + " finished in time", False, "killed after %.0f s" % budget)
            continue
        why = cannot_run(text, status, errors)
        if why and not errors:
            step.data[tool]["cannot_run"] = why
            step.could_not_run(tool, why)
            tests = gtest_report(report)
            if tests and tests[1]:  # the tests ran under it, and some failed: that is no refusal
                check_gtest(step, "kernel tests under " + tool, status, report)
            refused = why if "Device not supported" in why else None  # the other tool would be refused alike
            continue
        step.check(tool + ": no errors", status in (0, ERROR_EXIT) and errors == 0,
                   "exit %d, %s" % (status, "%d errors" % errors if errors is not None else "no summary line"))
        check_gtest(step, "kernel tests under " + tool, status if status != ERROR_EXIT else 0, report)
    step.finish()


if __name__ == "__main__":
    main()
