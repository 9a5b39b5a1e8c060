"""Convolution and recurrent family: the npu_conv* / npu_convolution* entry points, deformable
convolution, causal 1-D convolutions for linear-attention models, and the DynamicRNN-style
LSTM / GRU ops that also return their gate intermediates.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
