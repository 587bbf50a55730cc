# SPDX-License-Identifier: Apache-2.0
"""How every Python test script of Sieve starts and ends, so that none can pass without running.

ctest sees a script as one test: exit 0 passed, 77 skipped (SKIP_RETURN_CODE), anything else failed.
So a script either runs all of its tests or is skipped as a whole, for one thing the machine lacks,
said in one line (`skip_script`); the test command (tools/test.sh, tools/test-report.py) then fails
the run when the machine does have that thing. A unittest skip inside a script that ran would be
invisible to ctest: `main` turns it into a failure. Only the import of what may be missing goes
inside the skip: Sieve's own modules and the PyTorch internals they use are imported outside it, so
a bug there, or a PyTorch that moved a module, is a failure and never reads as "skipped".
"""

import sys
import unittest

SKIPPED = 77


def skip_script(reason):
    """Ends the script as skipped (ctest's SKIP_RETURN_CODE), saying what the machine lacks."""
    print("SKIPPED: %s" % reason, flush=True)
    sys.exit(SKIPPED)


def require_torch(gloo=False):
    """Returns the torch module, or skips the script when this Python has none (or, with gloo, when
    its torch.distributed cannot use Gloo)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as error:
        skip_script("needs torch (tools/install-deps.sh puts PyTorch 2.11 into /opt/sieve/venv): %s" % error)
    if gloo and not (dist.is_available() and dist.is_gloo_available()):
        skip_script("needs torch.distributed with Gloo")
    return torch


def main(argv=None):
    """Runs the calling script's unittest cases; exits 0 only when at least one test ran, none failed
    and none was skipped."""
    program = unittest.main(module="__main__", argv=argv, exit=False)
    result = program.result
    if result.skipped:
        for test, reason in result.skipped:
            print("FAILED: %s was skipped inside a script that ran (%s); a script skips as a whole or not at all"
                  % (test.id(), reason), flush=True)
        sys.exit(1)
    if result.testsRun == 0:
        print("FAILED: no test ran", flush=True)
        sys.exit(1)
    sys.exit(0 if result.wasSuccessful() else 1)
