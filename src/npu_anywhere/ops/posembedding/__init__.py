"""Position-embedding family: RoPE variants."""

import sys

from ..family import collect
from .apply_rotary_pos_emb import (apply_rotary_pos_emb, apply_rotary_pos_emb_grad,
                                   npu_apply_rotary_pos_emb)
from .interleave_rope import npu_interleave_rope
from .mrope import npu_mrope
from .rotary_mul import npu_rotary_mul, npu_rotary_mul_backward

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
