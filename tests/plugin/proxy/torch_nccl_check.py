#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""First contact with PyTorch's own NCCL, on a machine without a GPU.

One PyTorch process with the library LD_PRELOADed, symbols bound eagerly (LD_BIND_NOW=1) and the
dynamic loader's binding report on (LD_DEBUG=bindings, into files), calls
init_process_group("nccl"). Checked:
- libtorch_cuda.so's references to every interposed NCCL entry point bind to libnccl-net-sieve.so;
- the process fails with PyTorch's own error (an exception, not a signal), within the timeout;
- Sieve says exactly one line, naming the NCCL the wheel ships (nvidia/nccl/lib/libnccl.so.2) and
  its version, as ncclGetVersion gives it.

    torch_nccl_check.py LIBRARY      (exit 77: no torch with the nvidia-nccl wheel)
"""
import ctypes
import glob
import os
import re
import subprocess
import sys
import tempfile

INTERPOSED = ("ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclGroupStart", "ncclGroupEnd",
              "ncclCommAbort", "ncclCommDestroy", "ncclCommGetAsyncError")
SCRIPT = """
import datetime, os
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 20000))
dist.init_process_group("nccl", rank=0, world_size=1, timeout=datetime.timedelta(seconds=30))
print("init_process_group succeeded")
"""


def skip(why):
    print("skipped: " + why)
    sys.exit(77)


def wheel_nccl():
    """The nvidia-nccl wheel's libnccl.so.2 next to this interpreter's torch, and its version."""
    try:
        import nvidia.nccl
    except ImportError:
        return None, None
    for root in nvidia.nccl.__path__:
        path = os.path.join(root, "lib", "libnccl.so.2")
        if os.path.isfile(path):
            code = ctypes.c_int(0)
            ctypes.CDLL(path).ncclGetVersion(ctypes.byref(code))
            major, rest = divmod(code.value, 10000)
            return os.path.realpath(path), "%d.%d.%d" % (major, rest // 100, rest % 100)
    return None, None


def main():
    library = os.path.realpath(sys.argv[1])
    if "ncclAllReduce" not in subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True,
                                             text=True).stdout:
        print("FAIL: %s exports no ncclAllReduce, though this test is registered only in a build with CUDA" % library)
        return 1
    try:
        import torch  # noqa: F401 (present, and importable)
    except ImportError as error:
        skip("%s has no torch (tools/install-deps.sh): %s" % (sys.executable, error))
    nccl, version = wheel_nccl()
    if not nccl:
        skip("%s has no torch with the nvidia-nccl wheel (tools/install-deps.sh)" % sys.executable)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, LD_PRELOAD=library, LD_BIND_NOW="1", LD_DEBUG="bindings",
                   LD_DEBUG_OUTPUT=os.path.join(tmp, "bindings"), SIEVE_LOG_LEVEL="info")
        env.pop("SIEVE_LIBRARY", None)
        try:
            done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                                  timeout=240)
        except subprocess.TimeoutExpired:
            print("FAIL: init_process_group('nccl') hung (240 s)")
            return 1
        bound = {}
        pattern = re.compile(r"binding file (\S*libtorch_cuda\.so) \[\d+\] to (\S+) \[\d+\]: normal symbol `(nccl\w+)'")
        for path in glob.glob(os.path.join(tmp, "bindings.*")):
            with open(path, errors="replace") as f:
                for line in f:
                    if "libtorch_cuda" in line and "`nccl" in line:
                        m = pattern.search(line)
                        if m:
                            bound[m.group(3)] = os.path.realpath(m.group(2))
    for name in INTERPOSED:
        if bound.get(name) != library:
            failures.append("libtorch_cuda.so's %s binds to %s, not %s" % (name, bound.get(name), library))
    print("bindings: %s" % ", ".join("%s -> %s" % (n, os.path.basename(bound.get(n) or "?")) for n in INTERPOSED))
    if done.returncode <= 0 or "init_process_group succeeded" in done.stdout:
        failures.append("expected PyTorch's own error (exit 1), got exit %d" % done.returncode)
    if "ProcessGroupNCCL is only supported with GPUs" not in done.stderr:
        failures.append("PyTorch's own error is missing from stderr:\n" + done.stderr[-2000:])
    sieve_lines = [line for line in done.stderr.splitlines() if "NET/Sieve" in line]
    if len(sieve_lines) != 1:
        failures.append("Sieve said %d lines, not one: %s" % (len(sieve_lines), sieve_lines))
    else:  # the loader may name it through a symlink: compared by realpath
        said = re.search(r"NCCL (\S+) \((\S+)\)", sieve_lines[0])
        if not said or said.group(1) != version or os.path.realpath(said.group(2)) != nccl:
            failures.append("Sieve's line does not name NCCL %s at %s: %s" % (version, nccl, sieve_lines[0]))
    gpus_only = (line for line in done.stderr.splitlines() if "only supported with GPUs" in line)
    print("PyTorch: %s" % next(gpus_only, "(nothing)"))
    print("Sieve: %s" % (sieve_lines[0] if sieve_lines else "(nothing)"))
    for failure in failures:
        print("FAIL: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
