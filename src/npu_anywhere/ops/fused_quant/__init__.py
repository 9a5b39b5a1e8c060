"""Fused quantizing ops: RMSNorm + quantize (static and dynamic) and SwiGLU + quantize.

Built on the shared cores: ``ops/norm/rms_core.py`` (the RMSNorm math and its precision
order), ``ops/activation/glu_core.py`` (SwiGLU) and ``ops/quant/core.py`` (rounding, saturating
casts, dst-type parsing).
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
