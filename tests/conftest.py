"""Suite-wide settings: the compile tiering and, under pytest-xdist, the thread share.

The semantic tests exercise the reference (the oracle); the compiled provider's tiering would
otherwise compile whichever specializations a test happens to call often, making the suite's
time depend on test order.  Provider parity is tested explicitly (tests/ops/*/..._providers.py)
with ``compiling_after(0)``.
"""

import os

os.environ.setdefault("NPU_ANYWHERE_COMPILE_AFTER", "never")

# Under pytest-xdist (``make test`` runs one worker per core) each worker gets its share of the
# cores for torch's intra-op threads, so that the workers do not oversubscribe the machine.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
if _WORKERS > 1:
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))
