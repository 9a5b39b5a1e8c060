"""Position-embedding family: RoPE variants."""

from .apply_rotary_pos_emb import (apply_rotary_pos_emb, apply_rotary_pos_emb_grad,
                                   npu_apply_rotary_pos_emb)
from .rotary_mul import npu_rotary_mul, npu_rotary_mul_backward

TORCH_NPU_FUNCTIONS = {
    "npu_rotary_mul": npu_rotary_mul,
    "npu_rotary_mul_backward": npu_rotary_mul_backward,
    "npu_apply_rotary_pos_emb": npu_apply_rotary_pos_emb,
}
CANN_FUNCTIONS = {
    "apply_rotary_pos_emb": apply_rotary_pos_emb,
    "apply_rotary_pos_emb_grad": apply_rotary_pos_emb_grad,
}
