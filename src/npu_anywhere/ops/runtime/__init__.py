"""torch_npu's runtime helpers: NPU memory (copy_memory_, empty_with_format,
empty_with_swapped_memory, npu_prefetch), the float-status registers and the PMCC
obfuscation engine calls (which, with no engine off the NPU, raise its documented error)."""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
