#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The test command's last word: which suites this host was expected to run, which ran, and how.

A suite is a ctest label. Every test carries its area's label (tests/<area>/ sets it for the whole
directory) and, when it can be skipped, one `needs-<what>` label per thing whose absence skips it
(needs-gpu, needs-root, needs-torch, ...). The caller says what the host has (`--have torch`); what
tools/install-deps.sh installs is had by definition, so a test command on a host that installed torch
fails when the torch suites skipped or were never registered. The run fails when:
- a test carries no label;
- a test was skipped although the host has every thing its needs-labels name (or it names none);
- an expected suite (an `--expect` area, or needs-<what> for each <what> the host has) ran no test;
- a test failed.
Reads, per ctest run, the tests' labels (`ctest --show-only=json-v1`) and their results (the JUnit
file of `ctest --output-junit`). Prints a table of suites: tests, passed, failed, skipped.

    test-report.py --run BUILD_DIR JUNIT_XML [--run ...] [--have WHAT ...] [--expect LABEL ...]
"""

import argparse
import collections
import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

NEEDS = "needs-"


def labels_of(build_dir):
    """{test name: [labels]} of the tests ctest knows in build_dir."""
    shown = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"], capture_output=True,
                           text=True, check=True).stdout
    labels = {}
    for test in json.loads(shown).get("tests", []):
        found = []
        for prop in test.get("properties", []):
            if prop.get("name") == "LABELS":
                found = list(prop.get("value") or [])
        labels[test["name"]] = found
    return labels


def results_of(junit):
    """{test name: "passed" | "failed" | "skipped"} from a ctest JUnit file."""
    results = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        status = case.get("status", "")
        if case.find("failure") is not None or case.find("error") is not None or status == "fail":
            results[case.get("name")] = "failed"
        elif case.find("skipped") is not None or status in ("notrun", "disabled"):
            results[case.get("name")] = "skipped"
        else:
            results[case.get("name")] = "passed"
    return results


def judge(runs, have, expect):
    """(rows, problems): rows are (label, expected, why, counts) for the table; problems are lines."""
    have = set(have)
    counts = collections.defaultdict(collections.Counter)
    problems = []
    for labels, results in runs:
        for name, result in sorted(results.items()):
            test_labels = labels.get(name)
            if test_labels is None:
                problems.append("%s ran but ctest does not list it" % name)
                continue
            if not test_labels:
                problems.append("%s carries no label" % name)
            for label in test_labels:
                counts[label][result] += 1
            if result == "failed":
                problems.append("%s failed" % name)
            elif result == "skipped":
                lacking = [label[len(NEEDS):] for label in test_labels
                           if label.startswith(NEEDS) and label[len(NEEDS):] not in have]
                if not lacking:
                    needs = [label for label in test_labels if label.startswith(NEEDS)]
                    problems.append("%s was skipped on a host that has what it needs (%s)" %
                                    (name, ", ".join(needs) if needs else "it names no needs-label"))
    expected = {label: "always" for label in expect}
    expected.update({NEEDS + what: "host has " + what for what in have})
    rows = []
    for label in sorted(set(counts) | set(expected), key=lambda name: (name.startswith(NEEDS), name)):
        c = counts[label]
        why = expected.get(label)
        if label.startswith(NEEDS) and label[len(NEEDS):] not in have:
            why = "host lacks " + label[len(NEEDS):]
        rows.append((label, label in expected, why or "", c))
        if label in expected and c["passed"] == 0:
            problems.append("suite %s was expected (%s) and no test of it passed" % (label, expected[label]))
    return rows, problems


def print_table(rows, out):
    out.write("%-24s %-8s %-26s %6s %6s %6s %7s\n" % ("suite (label)", "expected", "why", "tests", "passed",
                                                      "failed", "skipped"))
    for label, expected, why, c in rows:
        out.write("%-24s %-8s %-26s %6d %6d %6d %7d\n" % (label, "yes" if expected else "no", why,
                                                          sum(c.values()), c["passed"], c["failed"], c["skipped"]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", nargs=2, action="append", default=[], metavar=("BUILD_DIR", "JUNIT_XML"))
    parser.add_argument("--have", action="append", default=[], metavar="WHAT")
    parser.add_argument("--expect", action="append", default=[], metavar="LABEL")
    args = parser.parse_args(argv)
    if not args.run:
        parser.error("no --run given")
    runs = [(labels_of(build_dir), results_of(junit)) for build_dir, junit in args.run]
    rows, problems = judge(runs, args.have, args.expect)
    print_table(rows, sys.stdout)
    total = collections.Counter()
    for _, results in runs:
        total.update(results.values())
    for line in problems:
        print("test-report: " + line)
    print("test-report: %s" % ("FAILED" if problems else "every expected suite ran"))
    print("test-report: %d passed, %d failed, %d skipped" % (total["passed"], total["failed"], total["skipped"]))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
