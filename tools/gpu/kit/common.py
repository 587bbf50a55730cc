# SPDX-License-Identifier: Apache-2.0
"""What every step of the GPU kit shares: its arguments, the time it has left, running programs with a
deadline (their whole process group killed when it passes), launching the ranks of a multi-process
job, reading GoogleTest's JSON report, and writing the step's one result file.

A step is a program: `python3 kit/stepN_NAME.py --kit KIT --out STEP_DIR --deadline EPOCH_SECONDS
[--profile full|quick]`. It writes STEP_DIR/result.json as it goes (after every check, target and
measured row: a step killed at its time limit still leaves what it measured) with
    status   "pass", "fail" or "partial" (what ran passed, but some checks could not run); "running"
             until the step finishes
    reason   one line when the status is not "pass"
    checks   [{"name", "ok", "detail"}]: correctness; any check that is not ok fails the step
    targets  [{"name", "met", "detail"}]: performance bars, reported, never a failure
    data     what the tables are made of
The scheduler adds the step's number, name, time and log.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

# What every NCCL job of the kit shares: several "nodes" on one GPU (each rank gets its own
# NCCL_HOSTID, so NCCL sends everything through the network), loopback only, never NCCL's
# multi-node NVLink path.
NCCL_LOOPBACK_ENV = {
    "NCCL_MNNVL_ENABLE": "0",
    "NCCL_SOCKET_IFNAME": "lo",
    "SIEVE_SOCKET_IFNAME": "lo",
}

# The NCCL transports the steps may use: the scheduler sets KIT_NCCL_NETS=Socket when the canary's
# Sieve half failed, so the steps run their Socket halves only.
SIEVE_NET_USABLE = os.environ.get("KIT_NCCL_NETS", "Socket,Sieve") != "Socket"

DUMP_WAIT_S = 2.0  # after SIGUSR1 (the proxy's state dump), before a timed-out process is killed


def _ignore_dump_signal(signum, frame):
    """A step survives the SIGUSR1 its scheduler sends to the whole session at a timeout, so that its
    ranks dump their state first (a Python handler, unlike SIG_IGN, is not inherited across exec)."""


class Step:
    """One step's run: its arguments, its deadline, its checks, and its result file."""

    def __init__(self, description):
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--kit", required=True, help="the kit's directory (bin/, lib/, kit/, python/)")
        parser.add_argument("--out", required=True, help="this step's directory: result.json and files")
        parser.add_argument("--deadline", type=float, required=True, help="when to be done (seconds since the epoch)")
        parser.add_argument("--profile", choices=("full", "quick"), default="full",
                            help="quick: the shorter runs that fit every table in one 9-minute call")
        self.args = parser.parse_args()
        self.quick = self.args.profile == "quick"
        signal.signal(signal.SIGUSR1, _ignore_dump_signal)
        self.kit = os.path.abspath(self.args.kit)
        self.out = os.path.abspath(self.args.out)
        self.deadline = self.args.deadline
        os.makedirs(self.out, exist_ok=True)
        self.checks, self.targets, self.data, self.not_run = [], [], {}, []
        # Whether a step that could run none of its parts (no tool, no time) is partial rather than failed.
        self.partial_when_nothing_ran = False
        self.save()

    def left(self):
        """Seconds left before the deadline."""
        return self.deadline - time.time()

    def bin(self, name):
        return os.path.join(self.kit, "bin", name)

    @property
    def library(self):
        # run.sh --installed: the copy the node's installed package carries (what an operator ships)
        return os.environ.get("KIT_INSTALLED_LIBRARY") or os.path.join(self.kit, "lib", "libnccl-net-sieve.so")

    def path(self, name):
        return os.path.join(self.out, name)

    def check(self, name, ok, detail=""):
        self.checks.append({"name": name, "ok": bool(ok), "detail": detail})
        print("%s: %s%s" % ("ok" if ok else "FAILED", name, " (%s)" % detail if detail else ""), flush=True)
        self.save()
        return ok

    def target(self, name, met, detail=""):
        self.targets.append({"name": name, "met": bool(met), "detail": detail})
        self.save()

    def could_not_run(self, what, why):
        """Records a part that did not run (a tool missing, no time left): the step is then partial."""
        self.not_run.append("%s: %s" % (what, why))
        print("not run: %s: %s" % (what, why), flush=True)
        self.save()

    def save(self, status="running", reason=""):
        """Writes result.json as it stands (atomically: a kill never leaves half a file). Steps call it
        after adding measured rows to data, so a step killed at its limit keeps them."""
        result = {"status": status, "reason": reason, "checks": self.checks, "targets": self.targets,
                  "data": self.data, "not_run": self.not_run}
        with open(self.path("result.json.tmp"), "w") as out:
            json.dump(result, out, indent=1)
        os.replace(self.path("result.json.tmp"), self.path("result.json"))

    def finish(self):
        """Writes result.json and exits: 0 when the step passed, 1 otherwise."""
        failed = [c["name"] for c in self.checks if not c["ok"]]
        if failed:
            status, reason = "fail", "; ".join(failed)
        elif not self.checks and self.not_run and self.partial_when_nothing_ran:
            status, reason = "partial", "not run: " + "; ".join(self.not_run)
        elif not self.checks:
            status, reason = "fail", "nothing was checked" + (" (%s)" % "; ".join(self.not_run) if self.not_run else "")
        elif self.not_run:
            status, reason = "partial", "not run: " + "; ".join(self.not_run)
        else:
            status, reason = "pass", ""
        self.save(status, reason)
        print("step result: %s%s" % (status, ": " + reason if reason else ""), flush=True)
        sys.exit(0 if status == "pass" else 1)


def _own_group():
    """Popen arguments that put the child in a process group of its own but keep it in the step's
    session, so the scheduler, which ends a step by its session, still reaches it."""
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}


def _kill_group(process, dump=True):
    """At a timeout: SIGUSR1 to the whole group (the proxy logs its state: which collective each
    rank waits in), DUMP_WAIT_S for the dump, then SIGTERM and SIGKILL."""
    if dump:
        try:
            os.killpg(process.pid, signal.SIGUSR1)
            process.wait(timeout=DUMP_WAIT_S)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def run(argv, timeout, log_path, env=None, cwd=None):
    """Runs argv with its output to log_path (appended) in a process group of its own; kills the whole
    group when timeout seconds pass. Returns the exit status, or None when it timed out."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    with open(log_path, "ab") as log:
        log.write(("$ %s\n" % " ".join(argv)).encode())
        log.flush()
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
                                   **_own_group())
        try:
            return process.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            _kill_group(process)
            log.write(("\n[kit] killed after %.0f s (SIGUSR1, %.0f s for a state dump, then SIGTERM/SIGKILL)\n"
                       % (timeout, DUMP_WAIT_S)).encode())
            return None


def free_port():
    """A TCP port free on the loopback now (for torch.distributed's store)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(argv_of_rank, nranks, env_of_rank, timeout, log_prefix):
    """Starts nranks processes (argv_of_rank(r), environment changes env_of_rank(r)), each logging to
    LOG_PREFIX-r.log, and waits for all of them until timeout; every rank still running then is killed.
    Returns each rank's exit status (None: killed at the timeout) and prints every rank's log."""
    processes, logs = [], []
    for r in range(nranks):
        env = dict(os.environ)
        for name, value in env_of_rank(r).items():  # None: unset
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        log_path = "%s-%d.log" % (log_prefix, r)
        logs.append(log_path)
        with open(log_path, "wb") as log:
            log.write(("$ %s\n" % " ".join(argv_of_rank(r))).encode())
            log.flush()
            processes.append(subprocess.Popen(argv_of_rank(r), stdout=log, stderr=subprocess.STDOUT, env=env,
                                              **_own_group()))
    end = time.time() + max(1.0, timeout)
    statuses = []
    for process in processes:
        try:
            statuses.append(process.wait(timeout=max(0.1, end - time.time())))
        except subprocess.TimeoutExpired:
            statuses.append(None)
    # Every rank left gets SIGUSR1 at once (their dumps describe the same moment), then the kill.
    late = [p for p, status in zip(processes, statuses) if status is None]
    for process in late:
        try:
            os.killpg(process.pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    if late:
        time.sleep(DUMP_WAIT_S)
    for process in late:
        _kill_group(process, dump=False)
    for r, log_path in enumerate(logs):
        with open(log_path, errors="replace") as log:
            text = log.read()
        ended = "killed at the time limit" if statuses[r] is None else "exit %d" % statuses[r]
        print("--- rank %d of %d (%s): %s ---\n%s" % (r, nranks, os.path.basename(log_path), ended, text[-20000:]),
              flush=True)
    return statuses


def statuses_text(statuses):
    return ", ".join("rank %d: %s" % (r, "timed out" if s is None else "exit %d" % s) for r, s in enumerate(statuses))


def gtest_report(path):
    """(passed, failed, skipped) test names from a --gtest_output=json report, or None if absent."""
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return None
    passed, failed, skipped = [], [], []
    for suite in report.get("testsuites", []):
        for test in suite.get("testsuite", []):
            name = "%s.%s" % (suite.get("name"), test.get("name"))
            if test.get("failures"):
                failed.append(name)
            elif test.get("result") == "SKIPPED" or test.get("status") == "NOTRUN":
                skipped.append(name)
            else:
                passed.append(name)
    return passed, failed, skipped


def check_gtest(step, label, status, report_path):
    """The checks of one GoogleTest run on a GPU machine: it finished, every test passed, and none was
    skipped (a test skips only where it sees no GPU, which on a GPU machine is itself a failure)."""
    if status is None:
        return step.check(label + " finished in time", False, "killed at its time limit")
    report = gtest_report(report_path)
    if report is None:
        return step.check(label + " wrote its report", False, "exit %d, no JSON report" % status)
    passed, failed, skipped = report
    step.data[label] = {"passed": len(passed), "failed": failed, "skipped": skipped}
    ok = step.check(label + ": every test passed", status == 0 and not failed,
                    "%d passed, %d failed%s" % (len(passed), len(failed), ": " + ", ".join(failed) if failed else ""))
    return step.check(label + ": no test skipped", not skipped,
                      "skipped: " + ", ".join(skipped) if skipped else "") and ok


def json_lines(path):
    """Every line of a file that parses as a JSON object."""
    rows = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


def torch_rank_env(tag, rank, nranks, port, library):
    """The environment of one rank of a torch.distributed job on this GPU: its own NCCL "host" (all
    traffic through the Sieve net plugin, never NCCL's socket fallback; through NCCL's Socket
    transport when the canary found the plugin failing), NCCL's INIT, NET and ENV logging,
    deterministic cuBLAS, and unbuffered output so a killed rank's log still holds its last lines."""
    env = dict(NCCL_LOOPBACK_ENV)
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(nranks), "LOCAL_RANK": str(rank), "LOCAL_DEVICE": "0",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "NCCL_HOSTID": "sieve-kit-%s-%d" % (tag, rank), "NCCL_NET_PLUGIN": library, "NCCL_NET": "Sieve",
        "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
    })
    if not SIEVE_NET_USABLE:
        env.update(NCCL_NET="Socket", NCCL_NET_PLUGIN=None)
    return env


def nccl_net_label():
    """How the torch steps' NCCL traffic goes, for their tables."""
    if SIEVE_NET_USABLE:
        return "the Sieve net plugin"
    return "NCCL's Socket transport (the canary found the Sieve net plugin failing)"


def first_nccl_warning(log_paths):
    """The first "NCCL WARN" line of the logs (what NCCL itself said went wrong), or None."""
    for path in log_paths:
        try:
            with open(path, errors="replace") as log:
                for line in log:
                    if "NCCL WARN" in line:
                        return line.split("NCCL WARN", 1)[1].strip()
        except OSError:
            pass
    return None


def run_torch_ranks(step, name, host_tag, script, args, extra_env, timeout, nranks=2):
    """Runs `nranks` ranks of a torch.distributed script on this GPU (torch_rank_env with host_tag, plus
    extra_env, where the value "LIB" stands for the kit's library), each given --out with a JSON file
    of its own (name-R.json; logs under name). Returns (exit statuses, each rank's parsed JSON or None
    where it wrote none)."""
    port = free_port()
    outputs = [step.path("%s-%d.json" % (name, r)) for r in range(nranks)]

    def env_of_rank(r):
        env = torch_rank_env(host_tag, r, nranks, port, step.library)
        env.update({k: step.library if v == "LIB" else v for k, v in extra_env.items()})
        return env

    statuses = run_ranks(lambda r: [sys.executable, script] + args + ["--out", outputs[r]], nranks, env_of_rank,
                         timeout, step.path(name))

    def parsed(path):
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None
    return statuses, [parsed(p) for p in outputs]


def losses_compared(reference, other):
    """Bit-for-bit comparison of two loss curves (JSON floats round-trip exactly)."""
    diffs = [i for i, (a, b) in enumerate(zip(reference, other)) if a != b]
    same_length = len(reference) == len(other)
    return {
        "bit_identical": same_length and not diffs,
        "steps_compared": min(len(reference), len(other)),
        "first_different_step": diffs[0] if diffs else None,
        "max_abs_difference": max((abs(a - b) for a, b in zip(reference, other)), default=0.0),
    }
