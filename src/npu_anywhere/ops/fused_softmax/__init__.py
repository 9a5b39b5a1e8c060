"""Fused softmax family: scaled masked softmax and the axpy + softmax + dropout fusion.

``_common`` holds the shared pieces (dtype rules, the float32 softmax and its gradient).
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
