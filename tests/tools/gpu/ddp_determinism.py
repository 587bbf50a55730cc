# SPDX-License-Identifier: Apache-2.0
"""tools/gpu/ddp_resnet18.py asks for deterministic algorithms with warn_only=True before it joins
the process group (an op without a deterministic kernel warns instead of ending the kit's step 5),
as fsdp_pruned.py does. Run on the CPU: CUDA is reported present and init_process_group stops the
script there, so what it set up before is what is checked. Exit 77 without torch."""

import os
import sys

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("SKIP: this python has no torch")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools", "gpu"))
import ddp_resnet18  # noqa: E402


class Stop(Exception):
    pass


def stop(*args, **kwargs):
    raise Stop()


torch.use_deterministic_algorithms(False)
torch.cuda.is_available = lambda: True
dist.init_process_group = stop
sys.argv = ["ddp_resnet18.py", "--out", os.devnull]
try:
    ddp_resnet18.main()
    sys.exit("FAIL: main() went past init_process_group")
except Stop:
    pass
assert torch.are_deterministic_algorithms_enabled(), "deterministic algorithms not enabled"
assert torch.is_deterministic_algorithms_warn_only_enabled(), "deterministic algorithms enabled without warn_only"
assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark, "cuDNN not deterministic"
print("ddp_resnet18.py: deterministic algorithms, warn_only, set before the process group")
