"""Suite-wide settings.

The semantic tests exercise the reference (the oracle); the compiled provider's tiering would
otherwise compile whichever specializations a test happens to call often, making the suite's
time depend on test order.  Provider parity is tested explicitly (tests/ops/*/..._providers.py)
with ``compiling_after(0)``.
"""

import os

os.environ.setdefault("NPU_ANYWHERE_COMPILE_AFTER", "never")
