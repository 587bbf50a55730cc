# SPDX-License-Identifier: Apache-2.0
"""The machine section of a kit run: prints what the machine is (host, CPU, memory, GPUs as nvidia-smi
and the driver see them, NCCL, PyTorch, compute-sanitizer, the kit's own build) and decides whether
the steps can run. Writes all of it to --json.

Exit status: 0 = a usable GPU; 77 = no GPU (the line says which part is missing); 1 = a GPU whose
driver cannot run the kit (too old, or failing).
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step7_sanitizers import find_sanitizer  # noqa: E402 (the same search the step makes)


def command(argv, timeout=30):
    """(exit status, output) of a command; status None when it is missing or hangs."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        return done.returncode, done.stdout.decode(errors="replace").strip()
    except FileNotFoundError:
        return None, "not found"
    except subprocess.TimeoutExpired:
        return None, "no answer within %d s" % timeout


def glibc_version():
    """The C library's version here ("2.36"), or "" when it is not glibc."""
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        return version if name == "glibc" else ""
    except (ValueError, OSError, AttributeError):
        return ""


def version_tuple(text):
    try:
        return tuple(int(p) for p in text.split("."))
    except (ValueError, AttributeError):
        return ()


def cuda_compatibility(driver, runtime):
    """(usable, warning) for a driver of CUDA `driver` ("13.0") and programs built with CUDA `runtime`:
    an older major version cannot run them; an older minor version of the same major runs them
    (CUDA's minor version compatibility), but a feature new in the runtime's minor version would fail."""
    d, r = version_tuple(driver), version_tuple(runtime)
    if len(d) < 2 or len(r) < 2:
        return True, ""
    if d[0] < r[0]:
        return False, ""
    if d[0] == r[0] and d[1] < r[1]:
        return True, ("the driver supports CUDA %s, older than the kit's %s: CUDA's minor version compatibility "
                      "runs the kit's programs, but anything new in CUDA %s would fail" % (driver, runtime, runtime))
    return True, ""


def host_facts():
    facts = {"hostname": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
             "glibc": glibc_version()}
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    facts["os"] = line.split("=", 1)[1].strip().strip('"')
        with open("/proc/cpuinfo") as f:
            facts["cpu"] = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
        with open("/proc/meminfo") as f:
            facts["memory_GiB"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    return facts


def nvidia_smi():
    """What nvidia-smi says: found or not, its exit status, and one entry per GPU it lists."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"found": False}
    status, output = command([smi, "--query-gpu=index,name,driver_version,memory.total,pci.bus_id",
                              "--format=csv,noheader"])
    gpus = []
    if status == 0:
        for line in output.splitlines():
            fields = [f.strip() for f in line.split(",")]
            if len(fields) >= 5:
                gpus.append(dict(zip(("index", "name", "driver", "memory", "pci_bus_id"), fields)))
    return {"found": True, "path": smi, "exit": status, "output": output[:2000], "gpus": gpus}


TORCH_QUESTION = """
import json
facts = {}
try:
    import torch
    facts["version"] = torch.__version__
    facts["cuda"] = torch.version.cuda
    try:
        facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as error:
        facts["nccl_error"] = str(error)[:200]
except Exception as error:
    facts["error"] = str(error)[:200]
print(json.dumps(facts))
"""


def torch_facts():
    status, output = command([sys.executable, "-c", TORCH_QUESTION], timeout=120)
    try:
        return json.loads(output.splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "python could not answer (exit %s): %s" % (status, output[-200:])}


def kit_facts(kit):
    try:
        with open(os.path.join(kit, "BUILD.json")) as f:
            build = json.load(f)
        return {k: build.get(k) for k in ("commit", "modified", "commit_time", "cuda_toolkit", "device_code",
                                          "glibc_needed")}
    except (OSError, ValueError):
        return {"error": "no BUILD.json in the kit"}


def verdict(smi, probe_exit, probe, glibc="", glibc_needed=""):
    """(exit status, one line) from the C library's version and what nvidia-smi and the driver said."""
    if glibc and glibc_needed and version_tuple(glibc) < version_tuple(glibc_needed):
        return 1, "GPU unusable here: glibc %s, the kit's programs need glibc %s or newer" % (glibc, glibc_needed)
    reason = probe.get("verdict", "sieve-gpu-probe gave no answer")
    if probe_exit == 0:
        note = "" if smi["found"] else " (nvidia-smi is not installed; the driver answered)"
        warning = cuda_compatibility(probe.get("driver_cuda", ""), probe.get("runtime_cuda", ""))[1]
        return 0, "GPU ready" + note + (" (warning: %s)" % warning if warning else "")
    if probe_exit != 77:
        return 1, "GPU unusable: " + reason
    detail = reason[len("no GPU: "):] if reason.startswith("no GPU: ") else reason
    if not smi["found"]:
        return 77, "no GPU: nvidia-smi not found, and " + detail
    if smi["exit"] != 0:
        first = smi["output"].splitlines()[0] if smi["output"] else ""
        return 77, "no GPU: nvidia-smi failed (exit %s: %s), and %s" % (smi["exit"], first, detail)
    if not smi["gpus"]:
        return 77, "no GPU: nvidia-smi lists no GPU, and " + detail
    names = ", ".join(g["name"] for g in smi["gpus"])
    return 77, "no GPU: nvidia-smi lists %s, but %s" % (names, detail)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kit", required=True)
    parser.add_argument("--nccl-dir", default="")
    parser.add_argument("--nccl-found-by", default="")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()

    facts = {"host": host_facts(), "nvidia_smi": nvidia_smi(), "kit": kit_facts(args.kit)}
    probe_json = args.json + ".probe"
    probe_exit, probe_text = command([os.path.join(args.kit, "bin", "sieve-gpu-probe"), "--json", probe_json],
                                     timeout=60)
    try:
        with open(probe_json) as f:
            facts["driver"] = json.load(f)
    except (OSError, ValueError):
        facts["driver"] = {"verdict": "sieve-gpu-probe failed (exit %s): %s" % (probe_exit, probe_text[-300:])}
    facts["nccl"] = {"dir": args.nccl_dir, "found_by": args.nccl_found_by,
                     "version": facts["driver"].get("nccl_version", ""),
                     "library": facts["driver"].get("nccl_library", ""), "error": facts["driver"].get("nccl_error", "")}
    facts["python"] = {"executable": sys.executable, "version": platform.python_version()}
    facts["torch"] = torch_facts()
    sanitizer = find_sanitizer()
    facts["compute_sanitizer"] = {"path": sanitizer or "",
                                  "version": command([sanitizer, "--version"])[1].splitlines()[-1] if sanitizer else ""}
    status, line = verdict(facts["nvidia_smi"], probe_exit, facts["driver"], facts["host"]["glibc"],
                           facts["kit"].get("glibc_needed") or "")
    facts["verdict"] = {"exit": status, "line": line}

    host, smi, driver, torch = facts["host"], facts["nvidia_smi"], facts["driver"], facts["torch"]
    print("== machine")
    print("host:    %s, %s, kernel %s" % (host.get("hostname"), host.get("os", "?"), host.get("kernel")))
    print("CPU:     %s x %s, %s GiB memory" % (host.get("cpus"), host.get("cpu", "?"), host.get("memory_GiB", "?")))
    print("glibc:   %s (the kit's programs need %s or newer)" % (
        host.get("glibc") or "not glibc", facts["kit"].get("glibc_needed") or "?"))
    if not smi["found"]:
        print("nvidia-smi: not found")
    elif smi["exit"] != 0:
        print("nvidia-smi: failed (exit %s): %s" % (smi["exit"],
                                                    smi["output"].splitlines()[0] if smi["output"] else ""))
    else:
        for g in smi["gpus"] or [{"index": "-", "name": "(none listed)", "driver": "", "memory": "", "pci_bus_id": ""}]:
            print("GPU %s:   %s, driver %s, %s, PCI %s" % (g["index"], g["name"], g["driver"], g["memory"],
                                                           g["pci_bus_id"]))
    if driver.get("driver_library"):
        print("driver:  %s, CUDA %s (the kit's runtime: CUDA %s)" % (
            driver["driver_library"], driver.get("driver_cuda"), driver.get("runtime_cuda")))
    else:
        print("driver:  libcuda.so.1 not loadable: %s" % driver.get("driver_error", "?"))
    for i, d in enumerate(driver.get("devices", [])):
        print("CUDA %d:  %s, compute capability %s, %d MiB" % (i, d["name"], d["compute_capability"], d["memory_MiB"]))
    nccl = facts["nccl"]
    print("NCCL:    %s" % ("%s, %s (found: %s)" % (nccl["version"], nccl["library"], nccl["found_by"])
                           if nccl["version"] else "not found: %s" % (nccl["error"] or "no libnccl.so.2")))
    print("python:  %s, %s" % (sys.executable, platform.python_version()))
    print("PyTorch: %s" % ("%s, CUDA %s, NCCL %s" % (torch["version"], torch.get("cuda"), torch.get("nccl", "?"))
                           if "version" in torch else "not importable: %s" % torch.get("error")))
    print("compute-sanitizer: %s" % ("%s (%s)" % (sanitizer, facts["compute_sanitizer"]["version"]) if sanitizer
                                     else "not found"))
    kit = facts["kit"]
    print("kit:     commit %s%s, CUDA %s, %s" % ((kit.get("commit") or "?")[:12],
                                                 " (modified)" if kit.get("modified") else "",
                                                 kit.get("cuda_toolkit"), kit.get("device_code")))
    print(line, flush=True)
    with open(args.json, "w") as f:
        json.dump(facts, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
