#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""sieve-info's RDMA listing over the fake libibverbs: every port with link layer, speed, GIDs and
the GID a connection uses; SIEVE_IB_HCA's selection; and the problems that make it exit 1
(SIEVE_TRANSPORT=ib with nothing usable, a malformed SIEVE_IB_HCA, an empty SIEVE_IB_GID_INDEX, a
setting only the transport not in use reads); the transport it says the plugin would use, and why.
Usage: sieve_info_rdma_check.py SIEVE_INFO FAKE_VERBS_DIR"""
import json
import os
import subprocess
import sys

sieve_info, fake_dir = sys.argv[1], sys.argv[2]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def run(devices, *args, **variables):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIEVE_")}
    env.update({"LD_LIBRARY_PATH": fake_dir, "FAKE_VERBS_DEVICES": devices, **variables})
    done = subprocess.run([sieve_info, *args], capture_output=True, text=True, timeout=60, env=env)
    return done.returncode, done.stdout, done.stderr


two = "mlx5_0:roce:lo:100;mlx5_1:ib::200"
rc, out, err = run(two, "--json", SIEVE_IB_HCA="^mlx5_1")
rdma = json.loads(out)["rdma"]
check(os.path.dirname(rdma["library"]) == os.path.realpath(fake_dir) or "fake_verbs" in rdma["library"],
      f"verbs came from {rdma['library']}, not the fake")
ports = {p["name"]: p for p in rdma["ports"]}
check(sorted(ports) == ["mlx5_0:1", "mlx5_1:1"], f"ports {sorted(ports)}")
roce, ib = ports.get("mlx5_0:1", {}), ports.get("mlx5_1:1", {})
check(roce.get("link_layer") == "ethernet" and roce.get("speed_mbps") == 100000, f"RoCE port {roce}")
check(ib.get("link_layer") == "infiniband" and ib.get("speed_mbps") == 200000 and ib.get("lid", 0) > 0, f"IB port {ib}")
check(roce.get("selected") is True and ib.get("selected") is False, "SIEVE_IB_HCA=^mlx5_1 must select mlx5_0:1 only")
used = [g for g in roce.get("gids", []) if g["index"] == roce.get("gid_index")]
check(len(used) == 1 and used[0]["type"] == "roce_v2" and used[0]["gid"].startswith("::ffff:")
      and used[0]["netdev"] == "lo", f"RoCE GID used: {used} of {roce.get('gids')}")
check(all(g["type"] == "ib" for g in ib.get("gids", [])) and ib.get("gids"), f"IB GIDs {ib.get('gids')}")

rc, out, err = run(two)
check("RDMA devices (verbs from" in out and "mlx5_0:1" in out and "RoCE v2" in out, f"text output:\n{out}")

rc, out, err = run("", SIEVE_TRANSPORT="ib")
check(rc == 1 and "SIEVE_TRANSPORT=ib" in err and "no active RDMA port" in err,
      f"SIEVE_TRANSPORT=ib without devices: exit {rc}, stderr {err!r}")

rc, out, err = run(two, SIEVE_IB_HCA="mlx5_0:x")
check(rc == 1 and "SIEVE_IB_HCA" in err and "mlx5_0:x" in err, f"bad SIEVE_IB_HCA: exit {rc}, stderr {err!r}")

rc, out, err = run(two, SIEVE_IB_GID_INDEX="9")
check(rc == 1 and "GID index 9 (SIEVE_IB_GID_INDEX" in err and "mlx5_0:1" in err and "mlx5_1:1" not in err,
      f"empty GID index: exit {rc}, stderr {err!r}")

# A GID index chooses among RoCE addresses: the InfiniBand port beside keeps its port GID.
rc, out, err = run(two, "--json", SIEVE_IB_GID_INDEX="1")
ports = {p["name"]: p for p in json.loads(out)["rdma"]["ports"]}
check(rc == 0 and ports["mlx5_0:1"]["gid_index"] == 1 and ports["mlx5_1:1"]["gid_index"] == 0,
      f"SIEVE_IB_GID_INDEX=1 with a RoCE and an IB port: exit {rc}, stderr {err!r}")

# A cluster tuned for NCCL: its NCCL_IB_* decide where SIEVE_IB_* are unset, and sieve-info says which won.
rc, out, err = run(two, "--json", NCCL_IB_HCA="=mlx5_1", NCCL_IB_TIMEOUT="22", SIEVE_IB_RETRY_CNT="6",
                   NCCL_IB_RETRY_CNT="5")
report = json.loads(out)
won = {s["name"]: (s["value"], s["from"], s["nccl_name"]) for s in report.get("ib_settings", [])}
check(won.get("SIEVE_IB_HCA") == ("=mlx5_1", "nccl", "NCCL_IB_HCA"), f"ib_settings {won}")
check(won.get("SIEVE_IB_TIMEOUT") == ("22", "nccl", "NCCL_IB_TIMEOUT"), f"ib_settings {won}")
check(won.get("SIEVE_IB_RETRY_CNT") == ("6", "sieve", "NCCL_IB_RETRY_CNT"), f"ib_settings {won}")
check(won.get("SIEVE_IB_QPS") == ("1", "default", "NCCL_IB_QPS_PER_CONNECTION"), f"ib_settings {won}")
selected = [p["name"] for p in report["rdma"]["ports"] if p["selected"]]
check(selected == ["mlx5_1:1"], f"NCCL_IB_HCA==mlx5_1 selected {selected}")
rc, out, err = run(two, NCCL_IB_TIMEOUT="22")
check("from NCCL_IB_TIMEOUT" in out and "default (NCCL_IB_RETRY_CNT unset)" in out, f"text output:\n{out}")

rc, out, err = run(two, "--json")
report = json.loads(out)
check(report["transport"]["name"] == "ib" and "SIEVE_TRANSPORT=auto" in report["transport"]["why"],
      f"auto with active ports: transport {report['transport']}")
scopes = {entry["name"]: entry["transport"] for entry in report["config"]}
check(scopes.get("SIEVE_NSOCKS") == "tcp" and scopes.get("SIEVE_IB_QPS") == "ib"
      and scopes.get("SIEVE_JOB_TOKEN") == "any", f"config scopes {scopes}")
check(rc == 0 and report["problems"] == [], f"a clean environment: exit {rc}, problems {report['problems']}")

rc, out, err = run(two, SIEVE_NSOCKS="2")
check(rc == 1 and "SIEVE_NSOCKS has no effect: only the TCP transport reads it, and verbs carry the data" in err,
      f"SIEVE_NSOCKS under verbs: exit {rc}, stderr {err!r}")

rc, out, err = run("", SIEVE_IB_QPS="2")
check(rc == 1 and "SIEVE_IB_QPS has no effect" in err and "SIEVE_TRANSPORT=auto: no active RDMA port" in err,
      f"SIEVE_IB_QPS under TCP: exit {rc}, stderr {err!r}")
check("\nTransport\n  tcp (SIEVE_TRANSPORT=auto: no active RDMA port" in out, f"text output:\n{out}")

for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)
