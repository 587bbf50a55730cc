"""Runs the kit's steps in order, each in a session of its own with its own time budget, skipping a
step whose minimum no longer fits before the deadline; a step that fails, crashes or runs out of time
does not stop the next. After every step it rewrites the summary, so an interrupted run still leaves
one, copied to OUT as well (a run killed from outside still returns it). Exit status: 0 when every
selected step passed, 1 otherwise.

    schedule.py --kit KIT --work DIR --steps 1-6 --deadline EPOCH --machine machine.json --summary FILE --out OUT
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

# number, name, what it checks, budget (seconds), least time worth starting it with. The budgets add
# up to 25 minutes, the kit's default total.
STEPS = [
    (1, "kernels", "kernel tests, then compute-sanitizer memcheck and racecheck", 300, 60),
    (2, "bandwidth", "gather/scatter bandwidth vs a device-to-device copy", 120, 30),
    (3, "multiprocess", "the proxy's multi-process tests under real NCCL (2 ranks, one GPU)", 240, 60),
    (4, "allreduce", "NCCL all-reduce through the Sieve net plugin vs NCCL_NET=Socket, 2 and 4 ranks", 300, 60),
    (5, "ddp", "DDP ResNet-18 pruned 80 %: dense vs published vs learned masks", 360, 120),
    (6, "fsdp", "FSDP fully_shard, 2 ranks: dense vs Sieve, fp32 and bf16 reduce", 180, 60),
]
GRACE_S = 15  # after a step's deadline, before its processes are killed (it may still be writing)


def parse_steps(text):
    """"1-6", "1,2,5", "3" -> sorted step numbers; SystemExit naming the problem otherwise."""
    known = {s[0] for s in STEPS}
    chosen = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                first, last = (int(p) for p in part.split("-", 1))
                chosen.update(range(first, last + 1))
            else:
                chosen.add(int(part))
        except ValueError:
            raise SystemExit("run.sh: bad step list '%s' (numbers 1-6: '1-6', '1,2,5', '3')" % text)
    unknown = sorted(chosen - known)
    if unknown or not chosen:
        raise SystemExit("run.sh: no step %s (the steps are 1-6)" % ",".join(map(str, unknown)))
    return sorted(chosen)


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


def end_session(session):
    """SIGTERM to every process of the session, then SIGKILL to what is left after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        for pid in session_members(session):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.time() + wait
        while time.time() < end and session_members(session):
            time.sleep(0.2)


def run_step(number, name, budget, args):
    """Runs one step to completion or its budget; returns its result with the scheduler's fields."""
    step_dir = os.path.join(args.work, "step%d-%s" % (number, name))
    os.makedirs(step_dir, exist_ok=True)
    log_path = os.path.join(args.work, "step%d-%s.log" % (number, name))
    started = time.time()
    deadline = started + budget
    script = os.path.join(args.kit, "kit", "step%d_%s.py" % (number, name))
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, script, "--kit", args.kit, "--out", step_dir,
                                    "--deadline", "%.3f" % deadline],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1"))
        try:
            exit_code = process.wait(timeout=budget + GRACE_S)
            timed_out = False
        except subprocess.TimeoutExpired:
            exit_code, timed_out = None, True
        # Whatever the step left behind (ranks of a killed job) goes with it.
        end_session(process.pid)
        if timed_out:
            process.wait()
            log.write(b"\n[kit] step killed at its time limit\n")
    try:
        with open(os.path.join(step_dir, "result.json")) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {"checks": [], "targets": [], "data": {}}
    if timed_out:
        result.update(status="timeout", reason="killed after its %d s budget" % budget)
    elif "status" not in result:
        result.update(status="fail", reason="the step wrote no result (exit %d; see its log)" % exit_code)
    result.update(seconds=round(time.time() - started, 1), budget_s=int(budget), exit_code=exit_code,
                  log=os.path.basename(log_path))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kit", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--steps", default="1-6")
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--summary", required=True)
    parser.add_argument("--out", required=True, help="where the results go; the summary is copied there as it grows")
    args = parser.parse_args()
    args.kit = os.path.abspath(args.kit)
    chosen = parse_steps(args.steps)

    with open(args.machine) as f:
        machine = json.load(f)
    started = time.time()
    summary = {"kit": machine.pop("kit", {}), "machine": machine, "steps_selected": args.steps,
               "budget_s": int(args.deadline - started), "steps": []}

    def save():
        summary["seconds"] = round(time.time() - started, 1)
        failing = [s for s in summary["steps"] if s["status"] != "pass"]
        summary["status"] = "pass" if not failing else "fail"
        with open(args.summary + ".tmp", "w") as f:
            json.dump(summary, f, indent=1)
        os.replace(args.summary + ".tmp", args.summary)
        shutil.copyfile(args.summary, os.path.join(args.out, "summary.json"))

    for number, name, title, budget, minimum in STEPS:
        if number not in chosen:
            continue
        left = args.deadline - time.time()
        print("== step %d %s: %s" % (number, name, title), flush=True)
        if left < minimum:
            result = {"status": "skipped", "reason": "needs at least %d s, %d s left of the total" % (minimum, max(0, left)),
                      "checks": [], "targets": [], "data": {}, "seconds": 0, "budget_s": budget}
        else:
            result = run_step(number, name, min(budget, left), args)
        result = dict({"step": number, "name": name, "title": title}, **result)
        summary["steps"].append(result)
        save()
        print("   %s%s (%.0f s of %d)" % (result["status"], ": " + result["reason"] if result.get("reason") else "",
                                         result["seconds"], result["budget_s"]), flush=True)
    save()
    return 0 if summary["status"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
