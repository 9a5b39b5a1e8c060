# seed 004, npu_dequant_swiglu_quant, 调用示例 (单算子模式调用).  The seed wraps the body in a
# torch_npu.testing TestCase (class TestNPUDequantSwigluQuant / run_tests), which the shim does
# not provide: the scaffolding lines (the torch_npu.testing imports, the class line,
# run_tests) are dropped and the test body runs at module level; every other line is as in the
# seed, indentation restored.
import os
import shutil
import unittest
import torch
import torch_npu

tokens_num = 4608
hidden_size = 2048
x = torch.randint(-10, 10, (tokens_num, hidden_size), dtype=torch.int32)
weight_scale = torch.randn((1, hidden_size), dtype=torch.float32)
activation_scale = torch.randn((tokens_num, 1), dtype=torch.float32)
quant_scale = torch.randn((1, hidden_size // 2), dtype=torch.float32)
group_index = torch.tensor([tokens_num], dtype=torch.int64)
bias = None
y, scale = torch_npu.npu_dequant_swiglu_quant(
    x.npu(),
    weight_scale=weight_scale.npu(),
    activation_scale=activation_scale.npu(),
    bias=None,
    quant_scale=quant_scale.npu(),
    quant_offset=None,
    group_index=group_index.npu(),
    activate_left=True,
    quant_mode=1,
    swiglu_mode=1,
    clamp_limit=7.0,
    glu_alpha=1.702,
    glu_bias=1.0
)

# --- added by npu_anywhere tests: check the numbers ---
# d = x * weight_scale * activation_scale;  swiglu_mode=1: g = clamp(d[:, 0::2], max=7),
# l = clamp(d[:, 1::2], -7, 7), act = g * sigmoid(1.702 g) * (l + 1);  t = act * quant_scale;
# scale = max|t| / 127;  y = rint(t * 127 / max|t|), saturated to int8
d = x.double() * weight_scale.double() * activation_scale.double()
g = d[:, 0::2].clamp(max=7.0)
lin = d[:, 1::2].clamp(-7.0, 7.0)
act = g * torch.sigmoid(1.702 * g) * (lin + 1.0)
t = act * quant_scale.double()
mx = t.abs().amax(-1)
want = torch.round(t * (127 / mx)[:, None]).clamp(-128, 127)
assert y.dtype == torch.int8 and y.shape == (tokens_num, hidden_size // 2)
assert scale.dtype == torch.float32 and scale.shape == (tokens_num,)
diff = (y.cpu().double() - want).abs()
assert diff.max().item() <= 1 and (diff > 0).double().mean().item() < 1e-3
assert torch.allclose(scale.cpu().double(), mx / 127, rtol=1e-5, atol=0)
print("EXAMPLE OK")
