"""Matmul family: quantized matmuls (int8 / int4 x int8 / int4 with dequantization) and
weight-only quantized matmuls (float activations, int8 / int4 weights).

``integer`` holds the shared exact integer GEMM and the decoding of packed scale words.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
