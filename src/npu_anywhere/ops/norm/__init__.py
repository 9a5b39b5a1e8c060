"""Normalization family: RMSNorm variants (plain, Gemma, fused residual add, add + cast),
LayerNorm (eval), GroupNorm + SiLU / Swish, and the seq-len masked batch normalization.

``rms_core`` holds the shared RMSNorm math (``rms_norm_fp32``, ``add_rms_norm_fp32``) that the
fused-quant RMSNorm ops build on; ``group_core`` the shared GroupNorm math.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
