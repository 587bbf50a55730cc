# SPDX-License-Identifier: Apache-2.0
"""Runs the kit's steps in the order given, each in a session of its own with its own time budget,
skipping a step whose minimum no longer fits before the deadline; a step that fails, crashes or runs
out of time does not stop the next. The NCCL canary (step 0) runs before the first NCCL step, and its
verdict decides what the NCCL steps do. After every step it rewrites the summary and packs it, with
summary.md and every log, into OUT, so a run cut short from outside still returns what it did.
Exit status: 0 when every selected step passed, 1 otherwise.

    schedule.py --kit KIT --work DIR --steps 1-7 [--profile full|quick] [--no-canary]
                --deadline EPOCH --machine machine.json --summary FILE --out OUT
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pack  # noqa: E402

# number, name, what it checks. Budgets (seconds, per profile): (budget, least time worth starting it with).
STEPS = [
    (0, "canary", "NCCL canary: 2 ranks, 1 MiB, through NCCL's Socket transport, then through Sieve"),
    (1, "kernels", "the proxy's kernel tests"),
    (2, "bandwidth", "gather/scatter bandwidth vs a device-to-device copy"),
    (3, "multiprocess", "the proxy's multi-process tests under real NCCL (2 ranks, one GPU)"),
    (4, "allreduce", "NCCL all-reduce through the Sieve net plugin vs NCCL_NET=Socket, 2 and 4 ranks"),
    (5, "ddp", "DDP ResNet-18 pruned 80 %: dense vs published vs learned masks"),
    (6, "fsdp", "FSDP fully_shard, 2 ranks: dense vs Sieve, fp32 and bf16 reduce"),
    (7, "sanitizers", "the kernel tests under compute-sanitizer memcheck and racecheck"),
]
# full: 27 minutes in all (run.sh's default budget); quick: what fits every table in one 9-minute
# call, the sanitizers (last) taking whatever the others left.
BUDGETS = {
    "full": {0: (45, 20), 1: (120, 30), 2: (120, 30), 3: (240, 60), 4: (300, 60), 5: (360, 120), 6: (180, 60),
             7: (240, 60)},
    "quick": {0: (45, 20), 1: (40, 20), 2: (40, 20), 3: (70, 40), 4: (90, 40), 5: (140, 60), 6: (70, 40),
              7: (120, 30)},
}
NCCL_STEPS = {3, 4, 5, 6}
SOCKET_HALVES = {4, 5, 6}  # the NCCL steps that have a Socket half; step 3 runs through Sieve alone
GRACE_S = 15  # after a step's deadline, before its processes are killed (it may still be writing)
CANARY_GRACE_S = 3  # the canary is capped at its 45 s, grace included
DUMP_WAIT_S = 2.0  # after SIGUSR1 (the proxy's state dump), before a timed-out step is killed


def parse_steps(text):
    """"1-7", "4,1,5", "3" -> step numbers in the order given (a range ascending), each once;
    SystemExit naming the problem otherwise."""
    known = {s[0] for s in STEPS}
    chosen = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                first, last = (int(p) for p in part.split("-", 1))
                numbers = list(range(first, last + 1))
            else:
                numbers = [int(part)]
        except ValueError:
            raise SystemExit("run.sh: bad step list '%s' (numbers 0-7: '1-7', '4,1,5', '3')" % text)
        chosen += [n for n in numbers if n not in chosen]
    unknown = [n for n in chosen if n not in known]
    if unknown or not chosen:
        raise SystemExit("run.sh: no step %s (the steps are 0-7)" % ",".join(map(str, unknown)))
    return chosen


def with_canary(chosen, canary=True):
    """The canary goes right before the first NCCL step, unless it was placed already or is off."""
    if not canary or 0 in chosen:
        return chosen if canary else [n for n in chosen if n != 0]
    first = next((i for i, n in enumerate(chosen) if n in NCCL_STEPS), None)
    return chosen if first is None else chosen[:first] + [0] + chosen[first:]


def session_members(session):
    """Pids of every process in a session (from /proc: field 6 of stat is the session id)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and int(fields[3]) == session:
            members.append(int(entry))
    return members


def signal_session(session, sig):
    for pid in session_members(session):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def end_session(session, dump=False):
    """Ends every process of the session: with dump, SIGUSR1 first (the proxy's state dump) and
    DUMP_WAIT_S for it; then SIGTERM, and SIGKILL to what is left after 5 s."""
    if dump and session_members(session):
        signal_session(session, signal.SIGUSR1)
        time.sleep(DUMP_WAIT_S)
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        signal_session(session, sig)
        end = time.time() + wait
        while time.time() < end and session_members(session):
            time.sleep(0.2)


def run_step(number, name, budget, grace, args, env):
    """Runs one step to completion or its budget; returns its result with the scheduler's fields."""
    step_dir = os.path.join(args.work, "step%d-%s" % (number, name))
    os.makedirs(step_dir, exist_ok=True)
    log_path = os.path.join(args.work, "step%d-%s.log" % (number, name))
    started = time.time()
    deadline = started + budget
    script = os.path.join(args.kit, "kit", "step%d_%s.py" % (number, name))
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, script, "--kit", args.kit, "--out", step_dir,
                                    "--deadline", "%.3f" % deadline, "--profile", args.profile],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", **env))
        try:
            exit_code = process.wait(timeout=budget + grace)
            timed_out = False
        except subprocess.TimeoutExpired:
            exit_code, timed_out = None, True
        # Whatever the step left behind (ranks of a killed job) goes with it; at a timeout, after
        # a state dump of whatever still runs.
        end_session(process.pid, dump=timed_out)
        if timed_out:
            process.wait()
            log.write(b"\n[kit] step killed at its time limit (SIGUSR1, 2 s for a state dump, then SIGTERM/SIGKILL)\n")
    try:
        with open(os.path.join(step_dir, "result.json")) as f:
            result = json.load(f)  # what the step wrote as it went, when it did not finish
    except (OSError, ValueError):
        result = {"checks": [], "targets": [], "data": {}}
    if timed_out:
        result.update(status="timeout", reason="killed after its %d s budget" % budget)
    elif result.get("status", "running") == "running":
        result.update(status="fail", reason="the step ended without its result (exit %d; see its log)" % exit_code)
    result.update(seconds=round(time.time() - started, 1), budget_s=int(budget), exit_code=exit_code,
                  log=os.path.basename(log_path))
    return result


def skipped(reason, budget):
    return {"status": "skipped", "reason": reason, "checks": [], "targets": [], "data": {}, "seconds": 0,
            "budget_s": budget}


def nccl_plan(number, machine, canary):
    """(skip reason or None, extra environment) of an NCCL step, from what the machine section found
    and the canary's verdict (None when it did not run)."""
    nccl = machine.get("nccl", {})
    if not nccl.get("version"):
        return ("no NCCL: %s" % (nccl.get("error") or "libnccl.so.2 not found (KIT_NCCL_DIR, the nvidia-nccl "
                                 "wheel of the kit's python, ldconfig)"), {})
    if canary is None:
        return None, {}
    if canary["status"] == "timeout":
        return "the NCCL canary got no answer within its %d s" % canary["budget_s"], {}
    verdict = canary.get("data", {}).get("verdict")
    if verdict == "none" or (verdict is None and canary["status"] != "skipped"):
        return canary.get("data", {}).get("reason") or "the NCCL canary failed: " + canary.get("reason", ""), {}
    if verdict == "socket-only":
        if number not in SOCKET_HALVES:
            return "it runs through the Sieve net plugin alone, and " + canary["data"]["reason"], {}
        return None, {"KIT_NCCL_NETS": "Socket"}
    return None, {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kit", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--steps", default="1-7")
    parser.add_argument("--profile", choices=sorted(BUDGETS), default="full")
    parser.add_argument("--no-canary", action="store_true", help="run the NCCL steps without the canary")
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--summary", required=True)
    parser.add_argument("--out", required=True, help="where the results go; packed there after every step")
    args = parser.parse_args()
    args.kit = os.path.abspath(args.kit)
    chosen = with_canary(parse_steps(args.steps), not args.no_canary)

    with open(args.machine) as f:
        machine = json.load(f)
    started = time.time()
    summary = {"kit": machine.pop("kit", {}), "machine": machine, "steps_selected": args.steps,
               "profile": args.profile, "order": chosen, "budget_s": int(args.deadline - started), "steps": []}

    def save():
        summary["seconds"] = round(time.time() - started, 1)
        failing = [s for s in summary["steps"] if s["status"] != "pass"]
        summary["status"] = "pass" if not failing else "fail"
        with open(args.summary + ".tmp", "w") as f:
            json.dump(summary, f, indent=1)
        os.replace(args.summary + ".tmp", args.summary)
        try:
            pack.pack(args.work, args.summary, args.out, quiet=True)
        except Exception as error:  # a packing problem must not stop the steps; run.sh packs again at the end
            print("packing the results failed: %s" % error, flush=True)

    titles = {number: (name, title) for number, name, title in STEPS}
    canary = None
    for number in chosen:
        name, title = titles[number]
        budget, minimum = BUDGETS[args.profile][number]
        left = args.deadline - time.time()
        print("== step %d %s: %s" % (number, name, title), flush=True)
        # The canary (before any verdict, so canary is None) is skipped only without NCCL.
        reason, env = nccl_plan(number, machine, canary) if number in NCCL_STEPS | {0} else (None, {})
        if reason:
            result = skipped(reason, budget)
        elif left < minimum:
            result = skipped("needs at least %d s, %d s left of the total" % (minimum, max(0, left)), budget)
        elif number == 0:
            limit = min(budget, left)
            result = run_step(0, name, limit - CANARY_GRACE_S, CANARY_GRACE_S, args, env)
            result["budget_s"] = int(limit)
        else:
            if env.get("KIT_NCCL_NETS") == "Socket":
                print("   the Socket half only: the NCCL canary found the Sieve net plugin failing", flush=True)
            result = run_step(number, name, min(budget, left), GRACE_S, args, env)
        if number == 0:
            canary = result
        result = dict({"step": number, "name": name, "title": title}, **result)
        summary["steps"].append(result)
        save()
        print("   %s%s (%.0f s of %d)" % (result["status"], ": " + result["reason"] if result.get("reason") else "",
                                          result["seconds"], result["budget_s"]), flush=True)
    save()
    return 0 if summary["status"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
