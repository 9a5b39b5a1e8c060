"""``python -m benchmarks``: the same runner as ``npu-anywhere bench``."""

import sys

from npu_anywhere.bench import main

sys.exit(main())
