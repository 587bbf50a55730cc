#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs sieve-info and checks what it prints: --json parses and lists every SIEVE_* variable of
plugin/config_params.def; its NICs agree with /sys/class/net/*/device; the plugin's devices (when
it offers any) are NICs of the topology with the same PCI path; a topology file gives the expected
GPU x NIC matrix; bad input gives clear errors; --help lists every option and --version names the
project's version and the build id. Usage: sieve_info_check.py SIEVE_INFO SOURCE_DIR PROJECT_VERSION BUILD_ID"""
import json
import os
import re
import subprocess
import sys

sieve_info, source_dir, project_version, build_id = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
fixtures = os.path.join(source_dir, "tests", "topology", "fixtures")
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def run(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_")}
    env.update(env_extra or {})
    done = subprocess.run([sieve_info, *args], capture_output=True, text=True, timeout=60, env=env)
    return done.returncode, done.stdout, done.stderr


# Other tests create and delete veth pairs concurrently: only interfaces present before and after
# the run are compared.
def interfaces():
    result = {}
    for name in os.listdir("/sys/class/net"):
        link = f"/sys/class/net/{name}/device"
        result[name] = os.path.realpath(link) if os.path.exists(link) else ""
    return result


before = interfaces()
# 1. --json parses (json.tool, as ops would pipe it) and carries the whole configuration.
rc, out, err = run("--json")
check(rc == 0, f"sieve-info --json exited {rc}: {err}")
tool = subprocess.run([sys.executable, "-m", "json.tool"], input=out, capture_output=True, text=True, timeout=60)
check(tool.returncode == 0, f"python3 -m json.tool rejects the output: {tool.stderr}")
report = json.loads(out)
after = interfaces()
stable = {name: device for name, device in before.items() if after.get(name) == device}
with open(os.path.join(source_dir, "plugin", "config_params.def")) as f:
    declared = re.findall(r'^SIEVE_PARAM\(\s*\w+(?:\([^)]*\))?\s*,\s*\w+\s*,\s*"(SIEVE_[A-Z0-9_]+)"', f.read(), re.M)
listed = [entry["name"] for entry in report["config"]]
check(listed == declared, f"config lists {listed}, config_params.def declares {declared}")
for entry in report["config"]:
    check(entry["source"] == "default" and entry["value"] == entry["default"],
          f"{entry['name']}: expected its default with a clean environment, got {entry}")
check(report["topology"]["ok"], f"live topology failed: {report['topology']['error']}")

# 2. The NICs agree with /sys/class/net/*/device.
nics = {(n["name"], n["kind"]): n for n in report["topology"]["nics"]}
check(len(stable) > 0, "no stable interface in /sys/class/net")
for name, device in sorted(stable.items()):
    nic = nics.get((name, "netdev"))
    check(nic is not None, f"/sys/class/net/{name} is missing from sieve-info")
    if nic is None:
        continue
    check(nic["sysfs_device_path"] == device, f"{name}: sysfs_device_path {nic['sysfs_device_path']!r} != {device!r}")
    check(nic["virtual"] == (device == ""), f"{name}: virtual flag {nic['virtual']} but device {device!r}")
    if nic["pci_bus_id"]:
        check(nic["pci_bus_id"] in device.split("/"), f"{name}: bus id {nic['pci_bus_id']} not in {device}")
        check(device.startswith(nic["pci_path"]), f"{name}: pci_path {nic['pci_path']} is not above {device}")

# 3. The plugin's devices are topology NICs at the same place (once the plugin offers devices), and
# each says what a connection over it gets: auto (the default) gives 1 socket below 25 Gbit/s.
plugin = report["plugin"]
for device in plugin["devices"] if plugin else []:
    expected_sockets = 1 if device["speed_mbps"] < 25000 else 4
    check((device.get("sockets_per_connection"), device.get("threads_per_connection")) ==
          (expected_sockets, (expected_sockets + 1) // 2),
          f"plugin device {device['name']} at {device['speed_mbps']} Mbps: connection shape {device}")
    nic = nics.get((device["name"], "netdev"))
    check(nic is not None, f"plugin device {device['name']} is not a NIC of the topology")
    if nic is not None:
        check(device["pci_path"] in (nic["pci_path"], nic["sysfs_device_path"], ""),
              f"plugin device {device['name']}: pciPath {device['pci_path']!r} vs topology {nic['pci_path']!r}")

# 3b. Explicit SIEVE_NSOCKS / SIEVE_NTHREADS win over auto on every device.
if plugin and plugin["devices"]:
    rc, out, err = run("--json", env_extra={"SIEVE_NSOCKS": "3", "SIEVE_NTHREADS": "1"})
    check(rc == 0, f"sieve-info --json with SIEVE_NSOCKS=3 exited {rc}: {err}")
    for device in json.loads(out)["plugin"]["devices"] if rc == 0 else []:
        check((device.get("sockets_per_connection"), device.get("threads_per_connection")) == (3, 1),
              f"SIEVE_NSOCKS=3 SIEVE_NTHREADS=1: device {device['name']} shows {device}")

# 4. A topology file: the 2-socket node's matrix, best NICs, and SIEVE_TOPO_FILE as its source.
node = os.path.join(fixtures, "two_socket_8gpu_4nic.xml")
rc, out, err = run("--json", "--no-plugin", env_extra={"SIEVE_TOPO_FILE": node})
check(rc == 0, f"SIEVE_TOPO_FILE run exited {rc}: {err}")
fixture = json.loads(out)
topo = fixture["topology"]
check(topo["file"] == node and topo["source"] == "topology file", f"topology file not used: {topo['file']}")
check(topo["matrix"]["nics"] == ["ib0", "ib1", "eth2", "eth3"], f"matrix columns {topo['matrix']['nics']}")
check(topo["matrix"]["rows"][0] == ["PIX", "NODE", "SYS", "SYS"], f"GPU0 row {topo['matrix']['rows'][0]}")
check(topo["matrix"]["rows"][1] == ["PXB", "NODE", "SYS", "SYS"], f"GPU1 row {topo['matrix']['rows'][1]}")
check([g["best_nic"] for g in topo["gpus"]] == ["ib0", "ib0", "ib1", "ib1", "eth2", "eth2", "eth3", "eth3"],
      f"best NICs {[g['best_nic'] for g in topo['gpus']]}")
topo_entry = [e for e in fixture["config"] if e["name"] == "SIEVE_TOPO_FILE"][0]
check(topo_entry["source"] == "environment" and topo_entry["value"] == node, f"SIEVE_TOPO_FILE entry {topo_entry}")
check(fixture["plugin"] is None, "--no-plugin still loaded the plugin")

# 5. Text mode shows the matrix; a secret is never printed; a typo is reported.
rc, out, err = run("--topo", node, "--no-plugin", env_extra={"SIEVE_JOB_TOKEN": "hunter2", "SIEVE_PIN_THREAD": "on"})
check(rc == 1 and "SIEVE_PIN_THREAD" in err, f"a misspelt variable: exit {rc}, stderr {err!r}")
check("GPU x NIC" in out and "GPU1   PXB" in out, "text mode lacks the GPU x NIC matrix")
check("hunter2" not in out, "the job token is printed")
check("did you mean SIEVE_PIN_THREADS" in out, "the SIEVE_PIN_THREAD typo is not reported")

# 6. Bad input: clear errors and non-zero exits, JSON still valid.
rc, out, err = run("--json", "--no-plugin", "--topo", "/nonexistent/topology.xml")
check(rc == 1, f"missing topology file exited {rc}")
check("/nonexistent/topology.xml" in json.loads(out)["topology"]["error"], "missing file not named in the error")
rc, out, err = run("--frobnicate")
check(rc == 2 and "--frobnicate" in err, f"unknown argument: rc {rc}, stderr {err!r}")

# 7. One rule for every bad value: parsable but out of range (each bound), or not parsable at all, is
# reported naming the range and the default kept; the plugin still starts and offers its devices.
bad = {"SIEVE_NSOCKS": "99", "SIEVE_PEER_TIMEOUT_MS": "0", "SIEVE_RATE_LIMIT_MBPS": "-1",
       "SIEVE_PROXY_MAX_DENSITY": "150", "SIEVE_STATS_INTERVAL": "-3", "SIEVE_CHUNK_SIZE": "lots"}
rc, out, err = run("--json", env_extra=bad)
check(rc == 1, f"bad values: exit {rc}, a health check would pass")
for name in bad:
    check(name in err, f"bad values: {name} not named on stderr {err!r}")
bad_report = json.loads(out)
check(len(bad_report.get("problems", [])) == len(bad), f"bad values: problems {bad_report.get('problems')}")
check(bad_report["plugin"]["devices_error"] == "",
      f"out-of-range values stopped the plugin: {bad_report['plugin']['devices_error']!r}")
check(len(bad_report["plugin"]["devices"]) == len(plugin["devices"]) if plugin else True,
      "out-of-range values changed the plugin's device list")
entries = {e["name"]: e for e in bad_report["config"]}
for name, value in bad.items():
    entry = entries[name]
    check(entry["source"] == "default" and entry["value"] == entry["default"], f"{name}={value}: entry {entry}")
    said = [d for d in bad_report["diagnostics"] if d.startswith(name + "=")]
    check(len(said) == 1, f"{name}={value}: diagnostics {bad_report['diagnostics']}")
    if entry["range"] and value != "lots":
        check(said and f"outside {entry['range']}" in said[0], f"{name}={value}: range not named in {said}")

# 8. A health check (a Slurm prolog): a plugin that cannot be loaded or cannot start exits non-zero
# with the reason on stderr and in the JSON, not just the NCCL result code.
rc, out, err = run("--plugin", "/nonexistent/libnope.so")
check(rc == 1 and "/nonexistent/libnope.so" in err, f"missing plugin: exit {rc}, stderr {err!r}")
rc, out, err = run("--json", env_extra={"SIEVE_SOCKET_IFNAME": "nonexistent0"})
check(rc == 1, f"SIEVE_SOCKET_IFNAME=nonexistent0: exit {rc}")
check("SIEVE_SOCKET_IFNAME=nonexistent0" in err, f"SIEVE_SOCKET_IFNAME=nonexistent0: reason not on stderr {err!r}")
check(err.count("SIEVE_SOCKET_IFNAME=nonexistent0") == 1, f"the reason is printed more than once: {err!r}")
nic_report = json.loads(out)
check("SIEVE_SOCKET_IFNAME=nonexistent0" in nic_report["plugin"]["devices_error"],
      f"JSON devices_error lacks the reason: {nic_report['plugin']['devices_error']!r}")
check(any("SIEVE_SOCKET_IFNAME=nonexistent0" in p for p in nic_report.get("problems", [])),
      f"JSON problems lack the reason: {nic_report.get('problems')}")
rc, out, err = run("--json")
check(rc == 0 and json.loads(out).get("problems") == [] and err == "", f"a healthy run: exit {rc}, stderr {err!r}")

# 9. --help lists every option main.cc (and the masks command) accepts and exits 0; --version prints
# the tool and CMake's project version and exits 0; an option without its value is named.
options = {}
for source in ("main.cc", "masks_command.cc"):
    with open(os.path.join(source_dir, "tools", "sieve-info", source)) as f:
        options[source] = set(re.findall(r'(?:arg|a) == "(--[a-z-]+)"', f.read()))
check(len(options["main.cc"]) >= 5, f"options found in main.cc: {options['main.cc']}")
rc, out, err = run("--help")
check(rc == 0 and err == "", f"--help: exit {rc}, stderr {err!r}")
for option in sorted(options["main.cc"]):
    check(option in out, f"--help does not list {option}")
rc, out, err = run("masks", "--help")
check(rc == 0, f"masks --help: exit {rc}")
for option in sorted(options["masks_command.cc"]):
    check(option in out, f"masks --help does not list {option}")
rc, out, err = run("--version")
# ... and the build id, as python -m sieve --version and sieve_build_id() give it (CMake's, passed by ctest).
check(rc == 0 and out == f"sieve-info {project_version} (build {build_id})\n", f"--version: exit {rc}, output {out!r}")
rc, out, err = run("--topo")
check(rc == 2 and "--topo" in err, f"--topo without a value: exit {rc}, stderr {err!r}")

# 10. An unknown link speed reads the same everywhere: the topology says unknown, the plugin's device
# says which speed it assumed (NCCL sees that number); --topo FILE says the plugin's devices are
# still this machine's; text columns never run into each other.
rc, out, err = run("--json")
live = json.loads(out)
live_nics = {n["name"]: n for n in live["topology"]["nics"] if n["kind"] == "netdev"}
rc, text, err = run()
for device in live["plugin"]["devices"] if live["plugin"] else []:
    nic = live_nics.get(device["name"])
    unknown = nic is not None and nic["speed_mbps"] <= 0
    check(device.get("speed_assumed") == unknown,
          f"plugin device {device['name']}: speed_assumed {device.get('speed_assumed')}, "
          f"topology speed {nic and nic['speed_mbps']}")
    line = [row for row in text.splitlines() if row.startswith(f"  device {device['index']} ")]
    check(line and (("assumed" in line[0]) == unknown), f"text line for device {device['name']}: {line}")
    nic_rows = [row for row in text.splitlines() if row.startswith(f"  {device['name']} ")]
    if unknown:
        check(nic_rows and "unknown" in nic_rows[0], f"NIC row of {device['name']} with unknown speed: {nic_rows}")
rc, out, err = run("--json", "--topo", node)
topo_report = json.loads(out)
check(topo_report["plugin"].get("topology_file") == "" and topo_report["topology"]["file"] == node,
      f"--topo: plugin topology_file {topo_report['plugin'].get('topology_file')!r}")
rc, text, err = run("--topo", node)
plugin_section = text.split("\nTopology")[0]
check("this machine" in plugin_section,
      f"--topo: the plugin section does not say its devices are this machine's:\n{plugin_section}")


def columns_stay_apart(text, header_start, label):
    """Every row of the table whose header line starts with header_start has a blank before each
    header column (a cell that overflows runs into the next column's first character)."""
    lines = text.splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith(header_start)]
    check(len(starts) == 1, f"{label}: header {header_start!r} not found")
    if not starts:
        return
    header = lines[starts[0]]
    columns = [m.start() for m in re.finditer(r"(?<=  )\S", header)]
    for row in lines[starts[0] + 1:]:
        if not row.strip() or row.startswith("  problem:"):
            break
        if row.strip().startswith("pciPath"):
            continue
        for col in columns:
            if len(row) > col and row[col - 1] != " ":
                check(False, f"{label}: a cell runs into column {col}: {row!r}")
                break


with open(node) as f:
    long_names = f.read().replace('"eth2"', '"enp133s0f0np0xy"')  # 15 characters, IFNAMSIZ's limit
long_node = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sieve-info-long-names-{os.getpid()}.xml")
with open(long_node, "w") as f:
    f.write(long_names)
rc, text, err = run("--topo", long_node, "--no-plugin", env_extra={"SIEVE_TOPO_FILE": long_node})
os.remove(long_node)
check("enp133s0f0np0xy" in text, "the renamed NIC is not in the output")
columns_stay_apart(text, "  name ", "NICs")
columns_stay_apart(text, "  SIEVE_SOCKET_IFNAME ", "Configuration")

# SIEVE_STATS_FILE is checked, never written: a health check run with a job's settings must not
# leave a stats file of its own (a series of a process that moved nothing) where Prometheus reads.
stats_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sieve-info-stats-{os.getpid()}")
os.mkdir(stats_dir)
rc, out, err = run("--json",
                   env_extra={"SIEVE_STATS_FILE": stats_dir + "/s-%p.prom", "SIEVE_STATS_FORMAT": "prometheus"})
check(os.listdir(stats_dir) == [], f"sieve-info wrote {os.listdir(stats_dir)} for SIEVE_STATS_FILE")
for name in os.listdir(stats_dir):
    os.remove(os.path.join(stats_dir, name))
os.rmdir(stats_dir)
rc, out, err = run("--json", env_extra={"SIEVE_STATS_FILE": "/nonexistent/dir/s.prom"})
check(rc == 1 and "SIEVE_STATS_FILE=/nonexistent/dir/s.prom: its directory /nonexistent/dir cannot be used" in err,
      f"a stats file in a missing directory: exit {rc}, {err!r}")

# --plugin sieve is looked up by NCCL's name through the loader; sieve-info names the file it found.
plugin_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(sieve_info))), "plugin")
rc, out, err = run("--plugin", "sieve", "--json", env_extra={"LD_LIBRARY_PATH": plugin_dir})
found = json.loads(out)["plugin"]
check(found["library"] == "sieve" and
      os.path.realpath(found["library_file"]) == os.path.realpath(os.path.join(plugin_dir, "libnccl-net-sieve.so")),
      f"--plugin sieve: library {found['library']!r}, file {found['library_file']!r}")
rc, text, err = run("--plugin", "sieve", env_extra={"LD_LIBRARY_PATH": plugin_dir})
check(re.search(r"library +sieve \(/\S+/libnccl-net-sieve\.so\)", text),
      "--plugin sieve: the text does not name the file found")

# The library's capabilities (sieve_capabilities()) are the build's, and --require fails a node whose
# library lacks one: a build without CUDA has no collective proxy, so a preload would compact nothing.
cuda = os.environ["SIEVE_TEST_PROXY_BUILT"] == "1"
verbs = os.environ["SIEVE_TEST_VERBS_BUILT"] == "1"
built = {"proxy": cuda, "cuda-compact": cuda, "host-compact": True, "verbs": verbs}
rc, out, err = run("--json")
check(json.loads(out)["plugin"]["capabilities"] == [name for name, present in built.items() if present],
      f"capabilities {json.loads(out)['plugin']['capabilities']}, the build has {built}")
rc, text, err = run()
check(re.search(r"capabilities +host-compact", text) or re.search(r"capabilities +proxy", text),
      "the text does not list the capabilities")
for name, present in built.items():
    rc, out, err = run("--require", name)
    lines = [line for line in err.splitlines() if "--require" in line]
    check((rc, len(lines)) == ((0, 0) if present else (1, 1)), f"--require {name}: exit {rc}, {lines}")
rc, out, err = run("--require", "host-compact,proxie")
check(rc == 2 and "unknown capability 'proxie'" in err, f"--require of an unknown name: exit {rc}, {err!r}")

# Another spelling the registry takes (an on/off choice reads every boolean): accepted, and shown as
# what is in force, not only as written.
rc, out, err = run("--json", env_extra={"SIEVE_TRACK": "yes"})
track = next(c for c in json.loads(out)["config"] if c["name"] == "SIEVE_TRACK")
check(rc == 0 and (track["value"], track["effective"]) == ("yes", "on"), f"SIEVE_TRACK=yes: exit {rc}, {track}")
rc, text, err = run(env_extra={"SIEVE_TRACK": "yes"})
check(re.search(r"SIEVE_TRACK +on \(given as yes\)", text), "the text shows SIEVE_TRACK=yes as written only")

for failure in failures:
    print("FAIL:", failure)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
