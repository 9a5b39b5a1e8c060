"""Sampling family: top-k / top-p logit filtering (``npu_top_k_top_p``), the fused
top-k / top-p / min-p filter with its token choice (``npu_top_k_top_p_sample``) and the
in-place exponential fill (``npu_sim_exponential_``).
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
