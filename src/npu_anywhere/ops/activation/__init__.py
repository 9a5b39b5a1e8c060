"""Activation family: SwiGLU, GeGLU, GELU-mul, fast GELU, SiLU, Mish and clipped SwiGLU.

``glu_core`` holds the shared math (SiLU/GELU and derivatives, the GLU split), which the
quantizing SwiGLU ops build on.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
